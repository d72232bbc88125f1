"""HTTP/2 clients for kudurru's end-to-end tests of DNS over HTTPS (RFC 8484 on RFC 9113).

Run with the venv python that `.ci/test-deps` creates (h2, httpx2, dnspython). One JSON object,
the argument, describes the session; one JSON object on stdout reports it.

    {"mode": "frames" | "requests" | "dnspython",
     "host": "127.0.0.1", "port": 443, "ca": "cert.pem", "server_name": "localhost",
     "timeout": 5, ...}

frames:    TLS with ALPN h2, the connection preface and an empty SETTINGS, then "send" (hex:
           raw frames the test built) as one write. Reads frames until the server closes or
           `timeout` passes. Result: {"frames": [{"type", "flags", "stream", "payload": hex}],
           "closed": bool}.
requests:  the h2 library as the client: "settings" ({name: value} of h2.settings.SettingCodes,
           e.g. {"INITIAL_WINDOW_SIZE": 16}), then every request of "requests" ({"method",
           "path", "headers": [[name, value]], "body": hex}) opened at once on one connection.
           Received DATA is acknowledged (WINDOW_UPDATE) as the h2 library does. Result per
           request: {"status", "headers": {name: value}, "body": hex} or {"reset": code}; plus
           "data_frames": the DATA frames received, "goaway": code or null.
dnspython: dnspython's DNS-over-HTTPS client (httpx2 with HTTP/2): {"name", "type", "post"}.
           Result: {"id", "rcode", "answer": [text], "http_version"} or {"error": text}.
"""

import json
import socket
import ssl
import sys
import time


def tls(cfg):
    context = ssl.create_default_context(cafile=cfg["ca"])
    context.set_alpn_protocols(["h2"])
    raw = socket.create_connection((cfg["host"], cfg["port"]), timeout=cfg.get("timeout", 5))
    sock = context.wrap_socket(raw, server_hostname=cfg.get("server_name", "localhost"))
    if sock.selected_alpn_protocol() != "h2":
        raise RuntimeError(f"ALPN chose {sock.selected_alpn_protocol()!r}")
    return sock


def read_frames(sock, deadline):
    """Reads frames until the server closes or the deadline passes."""
    buffer, frames, closed = b"", [], False
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except (ConnectionError, ssl.SSLError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        whole, buffer = split_frames(buffer + chunk)
        frames += [dict(frame, payload=frame["payload"].hex()) for frame in whole]
    return frames, closed


def split_frames(buffer):
    """The whole frames at the start of `buffer` ({"type", "flags", "stream", "payload"}), and
    the bytes after them."""
    frames = []
    while len(buffer) >= 9:
        length = int.from_bytes(buffer[:3], "big")
        if len(buffer) < 9 + length:
            break
        frames.append({
            "type": buffer[3], "flags": buffer[4],
            "stream": int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF,
            "payload": buffer[9:9 + length],
        })
        buffer = buffer[9 + length:]
    return frames, buffer


def frames_mode(cfg):
    sock = tls(cfg)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
    sock.sendall(preface + bytes.fromhex(cfg.get("send", "")))
    frames, closed = read_frames(sock, time.monotonic() + cfg.get("timeout", 5))
    return {"frames": frames, "closed": closed}


def requests_mode(cfg):
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings

    sock = tls(cfg)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    settings = {getattr(h2.settings.SettingCodes, k): v for k, v in cfg.get("settings", {}).items()}
    if settings:
        conn.update_settings(settings)
    results, streams = {}, []
    for request in cfg["requests"]:
        stream = conn.get_next_available_stream_id()
        streams.append(stream)
        body = bytes.fromhex(request.get("body", ""))
        headers = [(":method", request["method"]), (":scheme", "https"),
                   (":authority", cfg.get("server_name", "localhost")), (":path", request["path"])]
        headers += [tuple(h) for h in request.get("headers", [])]
        conn.send_headers(stream, headers, end_stream=not body)
        if body:
            conn.send_data(stream, body, end_stream=True)
        results[stream] = {"headers": {}, "body": b""}
    sock.sendall(conn.data_to_send())
    deadline = time.monotonic() + cfg.get("timeout", 5)
    done, data_frames, goaway = set(), 0, None
    while len(done) < len(streams) and goaway is None and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        for event in conn.receive_data(chunk):
            if isinstance(event, h2.events.ResponseReceived):
                for name, value in event.headers:
                    if name == ":status":
                        results[event.stream_id]["status"] = int(value)
                    else:
                        results[event.stream_id]["headers"][name] = value
            elif isinstance(event, h2.events.DataReceived):
                data_frames += 1
                results[event.stream_id]["body"] += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                done.add(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                results[event.stream_id] = {"reset": int(event.error_code)}
                done.add(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                goaway = int(event.error_code)
        sock.sendall(conn.data_to_send())
    out = []
    for stream in streams:
        r = results[stream]
        if "reset" in r:
            out.append(r)
        elif stream in done:
            out.append({"status": r.get("status"), "headers": r["headers"], "body": r["body"].hex()})
        else:
            out.append({"timeout": True})
    return {"results": out, "data_frames": data_frames, "goaway": goaway}


def dnspython_mode(cfg):
    import dns.message
    import dns.query

    query = dns.message.make_query(cfg["name"], cfg.get("type", "A"))
    url = f"https://{cfg.get('server_name', 'localhost')}:{cfg['port']}/dns-query"
    try:
        answer = dns.query.https(query, url, post=cfg.get("post", True), verify=cfg["ca"],
                                 bootstrap_address=cfg["host"], timeout=cfg.get("timeout", 5),
                                 http_version=dns.query.HTTPVersion.H2)
    except Exception as e:  # reported, not raised: the test asserts on it
        return {"error": f"{type(e).__name__}: {e}"}
    return {"id_matches": answer.id == query.id, "rcode": answer.rcode(),
            "answer": [rrset.to_text() for rrset in answer.answer]}


def main():
    cfg = json.loads(sys.argv[1])
    mode = {"frames": frames_mode, "requests": requests_mode, "dnspython": dnspython_mode}[cfg["mode"]]
    try:
        print(json.dumps(mode(cfg)))
    except (OSError, ssl.SSLError, RuntimeError) as e:
        print(json.dumps({"connect_error": f"{type(e).__name__}: {e}"}))


if __name__ == "__main__":
    main()
