"""Queries in flight on every transport at once, for kudurru's shutdown drain test.

Run with the venv python that `.ci/test-deps` creates (aioquic, h2). One JSON object, the
argument, describes the session:

    {"host": "127.0.0.1", "ca": "cert.pem", "timeout": 10,
     "ports": {"udp": p, "tcp": p, "dot": p, "doh": p, "doq": p, "h3": p},
     "queries": {"udp": [hex, ...], "tcp": [...], "dot": [...], "h2": [...], "http1": [hex],
                 "doq": [...], "h3": [...]}}

Every connection is opened, then every query sent; `{"sent": true}` is printed once they are all
on the wire (the test sends SIGTERM then). "tcp_idle", "h2_idle", "http1_idle", "doq_idle" and
"h3_idle" are connections that send no query. Then the client reads until each server closes, and
prints one JSON object: per transport {"answers": [hex, ...]} (in arrival order) and how the
connection ended:
  tcp, dot: "eof": true when the server closed after the answers.
  h2:       "goaway": {"last_stream": id, "code": code} or null, "streams": [ids sent], "eof".
  http1:    "connection": the last response's Connection header, "eof".
  doq, h3:  "terminated": {"code", "reason"} (CONNECTION_CLOSE), and for h3 "goaway": the stream
            id of the GOAWAY frame on the server's control stream, or null.
"""

import asyncio
import base64
import json
import os
import socket
import ssl
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
from aioquic.asyncio import connect  # noqa: E402
from aioquic.h3.connection import H3_ALPN, H3Connection  # noqa: E402
from aioquic.quic.events import StreamDataReceived  # noqa: E402
from h2_client import split_frames  # noqa: E402
from quic_client import Client, configuration, send_doq, send_h3  # noqa: E402


def tls_context(cfg, alpn):
    context = ssl.create_default_context(cafile=cfg["ca"])
    context.set_alpn_protocols([alpn])
    return context


async def read_until_eof(reader, deadline):
    data = bytearray()
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), max(0.01, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            return bytes(data), False
        except (ConnectionError, ssl.SSLError):
            return bytes(data), True
        if not chunk:
            return bytes(data), True
        data += chunk


async def stream_dns(cfg, port, queries, tls, sent):
    """TCP or DoT: every query framed on one connection; the answers, then EOF."""
    context = tls_context(cfg, "dot") if tls else None
    reader, writer = await asyncio.open_connection(
        cfg["host"], port, ssl=context, server_hostname="localhost" if tls else None)
    writer.write(b"".join(len(q).to_bytes(2, "big") + q for q in queries))
    await writer.drain()
    await sent
    data, eof = await read_until_eof(reader, time.monotonic() + cfg["timeout"])
    answers = []
    while len(data) >= 2:
        n = int.from_bytes(data[:2], "big")
        answers.append(data[2:2 + n].hex())
        data = data[2 + n:]
    writer.close()
    return {"answers": answers, "eof": eof}


async def udp(cfg, port, queries, sent):
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sock.connect((cfg["host"], port))
    for q in queries:
        sock.send(q)
    await sent
    answers = []
    deadline = time.monotonic() + cfg["timeout"]
    while len(answers) < len(queries) and time.monotonic() < deadline:
        try:
            answers.append((await asyncio.wait_for(loop.sock_recv(sock, 65535), deadline - time.monotonic())).hex())
        except (asyncio.TimeoutError, ConnectionError):
            break
    sock.close()
    return {"answers": answers}


async def doh_h2(cfg, port, queries, sent):
    reader, writer = await asyncio.open_connection(
        cfg["host"], port, ssl=tls_context(cfg, "h2"), server_hostname="localhost")
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    streams = []
    for q in queries:
        stream = conn.get_next_available_stream_id()
        dns = base64.urlsafe_b64encode(q).rstrip(b"=").decode()
        conn.send_headers(stream, [(":method", "GET"), (":scheme", "https"), (":authority", "localhost"),
                                   (":path", f"/dns-query?dns={dns}"), ("accept", "application/dns-message")],
                          end_stream=True)
        streams.append(stream)
    writer.write(conn.data_to_send())
    await writer.drain()
    await sent
    # Frames are read by hand: the h2 library takes any GOAWAY as the end of the connection and
    # refuses the responses that still come on the streams below it.
    bodies, answers, goaway, eof, buffer = {}, [], None, False, b""
    deadline = time.monotonic() + cfg["timeout"]
    while time.monotonic() < deadline:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), deadline - time.monotonic())
        except asyncio.TimeoutError:
            break
        except (ConnectionError, ssl.SSLError):
            eof = True
            break
        if not chunk:
            eof = True
            break
        frames, buffer = split_frames(buffer + chunk)
        for frame in frames:
            kind, flags, stream, payload = frame["type"], frame["flags"], frame["stream"], frame["payload"]
            if kind == 0x4 and not flags & 0x1:  # SETTINGS: acknowledge
                writer.write(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
            elif kind == 0x0:  # DATA
                bodies.setdefault(stream, bytearray()).extend(payload)
            elif kind == 0x7:  # GOAWAY
                goaway = {"last_stream": int.from_bytes(payload[:4], "big") & 0x7FFFFFFF,
                          "code": int.from_bytes(payload[4:8], "big")}
            if kind in (0x0, 0x1) and flags & 0x1:  # END_STREAM
                answers.append(bytes(bodies.get(stream, b"")).hex())
    writer.close()
    return {"answers": answers, "goaway": goaway, "streams": streams, "eof": eof}


async def doh_http1(cfg, port, queries, sent):
    reader, writer = await asyncio.open_connection(
        cfg["host"], port, ssl=tls_context(cfg, "http/1.1"), server_hostname="localhost")
    for q in queries[:1]:
        dns = base64.urlsafe_b64encode(q).rstrip(b"=").decode()
        writer.write(f"GET /dns-query?dns={dns} HTTP/1.1\r\nHost: localhost\r\n"
                     "Accept: application/dns-message\r\n\r\n".encode())
        await writer.drain()
    await sent
    data, eof = await read_until_eof(reader, time.monotonic() + cfg["timeout"])
    head, _, body = data.partition(b"\r\n\r\n")
    connection = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"connection":
            connection = value.strip().decode()
    writer.close()
    return {"answers": [body.hex()] if body else [], "connection": connection, "eof": eof}


class H3Client(Client):
    """Records what arrives on the server's control stream (the first server-initiated
    unidirectional stream), for its GOAWAY."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.control = bytearray()

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
            self.control += event.data
        super().quic_event_received(event)


def varint(data, at):
    first = data[at]
    length = 1 << (first >> 6)
    value = first & 0x3F
    for b in data[at + 1:at + length]:
        value = (value << 8) | b
    return value, at + length


def goaway_of(control):
    """The stream id of the last GOAWAY frame on a server control stream, or None."""
    data, at, found = bytes(control), 0, None
    try:
        _, at = varint(data, at)  # the stream type
        while at < len(data):
            kind, at = varint(data, at)
            length, at = varint(data, at)
            if kind == 0x7:
                found, _ = varint(data, at)
            at += length
    except IndexError:
        pass
    return found


async def quic(cfg, port, queries, h3, sent):
    config = configuration({"ca": cfg["ca"]}, H3_ALPN if h3 else ["doq"])
    async with connect(cfg["host"], port, configuration=config,
                       create_protocol=H3Client if h3 else Client, wait_connected=True) as client:
        if h3:
            client.h3 = H3Connection(client._quic)
        tasks = []
        for q in queries:
            if h3:
                dns = base64.urlsafe_b64encode(q).rstrip(b"=").decode()
                request = {"method": "GET", "path": f"/dns-query?dns={dns}"}
                tasks.append(asyncio.ensure_future(send_h3(client, request)))
            else:
                framed = (len(q).to_bytes(2, "big") + q).hex()
                tasks.append(asyncio.ensure_future(send_doq(client, {"data": framed})))
        await asyncio.sleep(0)
        await sent
        done = await asyncio.wait_for(asyncio.gather(*tasks), cfg["timeout"])
        deadline = time.monotonic() + cfg["timeout"]
        while client.terminated is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        answers = []
        for result in done:
            if "body" in result:
                answers.append(result["body"])
            elif "data" in result:
                answers.append(result["data"][4:])  # the two-byte length, as hex
        report = {"answers": answers, "results": done, "terminated": client.terminated}
        if h3:
            report["goaway"] = goaway_of(client.control)
        return report


async def main(cfg):
    ports, queries = cfg["ports"], {k: [bytes.fromhex(q) for q in v] for k, v in cfg["queries"].items()}
    loop = asyncio.get_running_loop()
    released = loop.create_future()
    readies = []

    class Gate:
        """Awaited by a client once its queries are written: marks it ready, then waits for
        the release (after the test was told)."""

        def __await__(self):
            ready = loop.create_future()
            readies.append(ready)
            ready.set_result(True)
            return released.__await__()

    sent = Gate()
    clients = {
        "udp": udp(cfg, ports["udp"], queries["udp"], sent),
        "tcp": stream_dns(cfg, ports["tcp"], queries["tcp"], False, sent),
        "dot": stream_dns(cfg, ports["dot"], queries["dot"], True, sent),
        "h2": doh_h2(cfg, ports["doh"], queries["h2"], sent),
        # Connections with nothing in flight: closed at once by the drain.
        "tcp_idle": stream_dns(cfg, ports["tcp"], [], False, sent),
        "h2_idle": doh_h2(cfg, ports["doh"], [], sent),
        "http1_idle": doh_http1(cfg, ports["doh"], [], sent),
        "doq_idle": quic(cfg, ports["doq"], [], False, sent),
        "h3_idle": quic(cfg, ports["h3"], [], True, sent),
        "http1": doh_http1(cfg, ports["doh"], queries["http1"], sent),
        "doq": quic(cfg, ports["doq"], queries["doq"], False, sent),
        "h3": quic(cfg, ports["h3"], queries["h3"], True, sent),
    }
    tasks = {name: asyncio.ensure_future(c) for name, c in clients.items()}
    # Every client has connected and written its queries once it waits at the gate (or failed).
    deadline = time.monotonic() + cfg["timeout"]
    while len(readies) + sum(t.done() for t in tasks.values()) < len(tasks) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    # A moment more lets the last packets leave and reach the server.
    await asyncio.sleep(0.2)
    print(json.dumps({"sent": True, "ready": len(readies)}), flush=True)
    released.set_result(True)
    report = {}
    for name, task in tasks.items():
        try:
            report[name] = await task
        except Exception as e:  # the test asserts on the text
            report[name] = {"error": f"{type(e).__name__}: {e}"}
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))), flush=True)
