"""QUIC clients for kudurru's end-to-end tests: DNS over QUIC (RFC 9250) and DNS over HTTP/3.

Run with the venv python that `.ci/test-deps` creates (aioquic, dnspython). One JSON object, the
argument or else stdin, describes the session; one JSON object on stdout reports it.

    {"mode": "doq" | "h3" | "dnspython-doq" | "dnspython-h3" | "stall",
     "host": "127.0.0.1", "port": 853, "ca": "cert.pem", "server_name": "localhost",
     "requests": [...], "concurrent": false, "timeout": 5}

doq: each request is {"data": hex} written raw to a new bidirectional stream, then FIN.
     Result per request: {"data": hex} (everything the server sent, FIN seen) or {"reset": code}
     or {"timeout": true}; a connection the server closes ends every pending request with
     {"closed": code, "reason": text}.
h3:  each request is {"method", "path", "headers": [[name, value]], "body": hex}. Result:
     {"status": int, "headers": {name: value}, "body": hex} or {"reset": code} or
     {"timeout": true} or {"closed": ...}.
dnspython-doq / dnspython-h3: each request is {"name", "type", "pad"?, "method"?}; dnspython
     sends it, a connection each (from the spec's "source" address, if given). Result: {"id",
     "rcode", "answer": [text], "size": wire bytes} or {"error": text}.
stall: sends the client's first flight of a QUIC handshake and nothing after; reports
     {"sent": datagrams} once the datagrams are out, then stays silent for `timeout` seconds.
hold: opens `connections` DoQ connections from the spec's "source" address, prints
     {"ready": established} once they are up, then sends a PING on each every `ping` seconds
     for `hold` seconds and never a query. Reports {"established", "refused", "closed":
     [reason, ...]} (the connections the server closed, with its reason phrase).

The report also carries "terminated": {"code", "reason"} when the server closed the connection,
and is {"connect_error": text} alone when the connection was never established.
"""

import asyncio
import json
import socket
import ssl
import sys
import time

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived, StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending = {}
        self.h3 = None
        self.terminated = None

    def open(self):
        stream_id = self._quic.get_next_available_stream_id()
        future = asyncio.get_running_loop().create_future()
        self.pending[stream_id] = {"future": future, "data": bytearray(), "headers": None}
        return stream_id, future

    def finish(self, stream_id, result):
        entry = self.pending.get(stream_id)
        if entry and not entry["future"].done():
            entry["future"].set_result(result)

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.terminated = {"code": event.error_code, "reason": event.reason_phrase}
            for stream_id in list(self.pending):
                self.finish(stream_id, {"closed": event.error_code, "reason": event.reason_phrase})
            return
        if isinstance(event, StreamReset):
            self.finish(event.stream_id, {"reset": event.error_code})
            return
        if self.h3 is not None:
            for h3_event in self.h3.handle_event(event):
                entry = self.pending.get(h3_event.stream_id)
                if entry is None:
                    continue
                if isinstance(h3_event, HeadersReceived):
                    entry["headers"] = {k.decode(): v.decode() for k, v in h3_event.headers}
                elif isinstance(h3_event, DataReceived):
                    entry["data"] += h3_event.data
                if h3_event.stream_ended:
                    headers = entry["headers"] or {}
                    self.finish(h3_event.stream_id, {
                        "status": int(headers.get(":status", "0")),
                        "headers": headers,
                        "body": entry["data"].hex(),
                    })
            return
        if isinstance(event, StreamDataReceived):
            entry = self.pending.get(event.stream_id)
            if entry is not None:
                entry["data"] += event.data
                if event.end_stream:
                    self.finish(event.stream_id, {"data": entry["data"].hex()})


def configuration(spec, alpn):
    config = QuicConfiguration(is_client=True, alpn_protocols=alpn)
    config.load_verify_locations(spec["ca"])
    config.server_name = spec.get("server_name", "localhost")
    config.idle_timeout = spec.get("idle", 30.0)
    return config


async def send_doq(client, request):
    """One stream; with "split": [n, ...] its bytes go in packets of their own, cut at those
    offsets, 50 ms apart (the FIN with the last part, or alone when the last cut is the end)."""
    stream_id, future = client.open()
    data = bytes.fromhex(request["data"])
    start = 0
    for cut in request.get("split", []):
        client._quic.send_stream_data(stream_id, data[start:cut], end_stream=False)
        client.transmit()
        await asyncio.sleep(0.05)
        start = cut
    client._quic.send_stream_data(stream_id, data[start:], end_stream=True)
    client.transmit()
    return await future


async def send_h3(client, request):
    stream_id, future = client.open()
    headers = [
        (b":method", request.get("method", "GET").encode()),
        (b":scheme", b"https"),
        (b":authority", b"localhost"),
        (b":path", request["path"].encode()),
    ] + [(k.encode(), v.encode()) for k, v in request.get("headers", [])]
    body = bytes.fromhex(request.get("body", ""))
    client.h3.send_headers(stream_id, headers, end_stream=not body)
    if body:
        client.h3.send_data(stream_id, body, end_stream=True)
    client.transmit()
    return await future


async def session(spec):
    h3 = spec["mode"] == "h3"
    config = configuration(spec, H3_ALPN if h3 else ["doq"])
    timeout = spec.get("timeout", 5)
    report = {"results": []}
    async with connect(spec["host"], spec["port"], configuration=config,
                       create_protocol=Client, wait_connected=True) as client:
        if h3:
            client.h3 = H3Connection(client._quic)
        send = send_h3 if h3 else send_doq

        async def one(request):
            try:
                return await asyncio.wait_for(send(client, request), timeout)
            except asyncio.TimeoutError:
                return {"timeout": True}

        if spec.get("concurrent"):
            report["results"] = list(await asyncio.gather(*(one(r) for r in spec["requests"])))
        else:
            for request in spec["requests"]:
                report["results"].append(await one(request))
        if spec.get("wait_close"):
            deadline = time.monotonic() + spec["wait_close"]
            while client.terminated is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        report["terminated"] = client.terminated
    return report


def with_dnspython(spec):
    import dns.message
    import dns.query
    import dns.rcode

    report = {"results": []}
    for request in spec["requests"]:
        query = dns.message.make_query(
            request["name"], request.get("type", "A"),
            use_edns=0 if request.get("pad") else None, pad=request.get("pad", 0))
        try:
            if spec["mode"] == "dnspython-doq":
                response = dns.query.quic(query, spec["host"], port=spec["port"], timeout=spec.get("timeout", 5),
                                          source=spec.get("source"),
                                          verify=spec["ca"], server_hostname=spec.get("server_name", "localhost"))
            else:
                url = f"https://{spec.get('server_name', 'localhost')}:{spec['port']}{spec.get('path', '/dns-query')}"
                response = dns.query.https(
                    query, url, timeout=spec.get("timeout", 5), verify=spec["ca"], source=spec.get("source"),
                    http_version=dns.query.HTTPVersion.HTTP_3, post=request.get("method", "POST") == "POST",
                    bootstrap_address=spec["host"])
            report["results"].append({
                "id": response.id,
                "rcode": dns.rcode.to_text(response.rcode()),
                "answer": [rrset.to_text() for rrset in response.answer],
                "size": len(response.to_wire()) if not request.get("pad") else None,
            })
        except Exception as e:  # the test asserts on the text
            report["results"].append({"error": f"{type(e).__name__}: {e}"})
    return report


def stall(spec):
    config = configuration(spec, ["doq"])
    quic = QuicConnection(configuration=config)
    quic.connect((spec["host"], spec["port"]), now=time.time())
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = 0
    for data, addr in quic.datagrams_to_send(now=time.time()):
        sock.sendto(data, addr)
        sent += 1
    print(json.dumps({"sent": sent}), flush=True)
    time.sleep(spec.get("timeout", 5))
    sock.close()
    return None


async def hold(spec):
    config = configuration(spec, ["doq"])
    loop = asyncio.get_running_loop()

    async def one():
        _, client = await loop.create_datagram_endpoint(
            lambda: Client(QuicConnection(configuration=config)),
            local_addr=(spec.get("source", "127.0.0.1"), 0))
        client.connect((spec["host"], spec["port"]))
        try:
            await asyncio.wait_for(client.wait_connected(), spec.get("timeout", 5))
            return client
        except (ConnectionError, asyncio.TimeoutError):
            client.close()
            return None

    # All at once, as a flood would: none waits for another's refusal.
    opened = await asyncio.gather(*(one() for _ in range(spec["connections"])))
    clients = [c for c in opened if c is not None]
    refused = len(opened) - len(clients)
    print(json.dumps({"ready": len(clients)}), flush=True)
    deadline = time.monotonic() + spec["hold"]
    uid = 0
    while time.monotonic() < deadline:
        for client in clients:
            if client.terminated is None:
                uid += 1
                client._quic.send_ping(uid)
                client.transmit()
        await asyncio.sleep(spec.get("ping", 0.3))
    closed = [c.terminated["reason"] for c in clients if c.terminated is not None]
    for client in clients:
        client.close()
    return {"established": len(clients), "refused": refused, "closed": closed}


def main():
    spec = json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.load(sys.stdin)
    if spec["mode"] == "stall":
        stall(spec)
        return
    if spec["mode"] == "hold":
        print(json.dumps(asyncio.run(hold(spec))))
        return
    if spec["mode"].startswith("dnspython-"):
        report = with_dnspython(spec)
    else:
        try:
            report = asyncio.run(session(spec))
        except ConnectionError as e:
            report = {"connect_error": f"{type(e).__name__}: {e}"}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
