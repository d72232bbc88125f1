#!/usr/bin/env python3
"""The dashboard's server side: what a session cookie and the embedded assets cost the API.

    python3 benches/peers/dashboard_server.py --binary target/release/kudurru [--duration 10]

Starts the binary (`serve --cores 1`, pinned to CPU 0), creates an operator token, signs in
once for a session cookie, then runs wrk from CPU 1 (8 connections, --duration seconds) on:
`GET /api/v1/session` with the bearer token, the same with the cookie, `GET /` gzipped, and
`GET /` revalidated with its ETag (304). Reported per case: requests per second, p50 and p99
latency, and the server's CPU per request (utime+stime over the run). Traffic stays on
127.0.0.1; every run ends after --duration. Needs wrk and taskset.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.request

SERVER_CPU, CLIENT_CPU = "0", "1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Ports the kernel finds free now (another bench may hold fixed ones).
API_PORT, OPS_PORT, DNS_PORT = free_port(), free_port(), free_port()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{OPS_PORT}/healthz/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the server did not become ready")


def wrk(path, headers, duration):
    args = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", "-c8", f"-d{duration}s", "--latency"]
    for h in headers:
        args += ["-H", h]
    out = subprocess.run(args + [f"http://127.0.0.1:{API_PORT}{path}"], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    return rps, total, lat.get("50"), lat.get("99"), int(non2xx.group(1)) if non2xx else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--duration", type=int, default=10)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as data:
        token = subprocess.run([a.binary, "token", "create", "--role", "operator", "--data-dir", data],
                               capture_output=True, text=True, check=True).stdout.strip()
        server = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, a.binary, "serve", "--cores", "1", "--data-dir", data,
             "--listen", f"127.0.0.1:{DNS_PORT}", "--api-address", f"127.0.0.1:{API_PORT}",
             "--ops-address", f"127.0.0.1:{OPS_PORT}", "--upstream", "udp://127.0.0.1:9"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready()
            req = urllib.request.Request(f"http://127.0.0.1:{API_PORT}/api/v1/session", method="POST",
                                         data=json.dumps({"token": token}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req) as r:
                cookie = r.headers["Set-Cookie"].split(";")[0]
            with urllib.request.urlopen(f"http://127.0.0.1:{API_PORT}/") as r:
                etag = r.headers["ETag"]
            cases = [
                ("GET /api/v1/session, bearer", "/api/v1/session", [f"Authorization: Bearer {token}"]),
                ("GET /api/v1/session, cookie", "/api/v1/session", [f"Cookie: {cookie}"]),
                ("GET /, gzip", "/", ["Accept-Encoding: gzip"]),
                ("GET /, If-None-Match (304)", "/", ["Accept-Encoding: gzip", f"If-None-Match: {etag}"]),
            ]
            print("| case | requests/s | p50 | p99 | server CPU per request | non-2xx/3xx |")
            print("|---|---:|---:|---:|---:|---:|")
            for name, path, headers in cases:
                before = cpu_seconds(server.pid)
                rps, total, p50, p99, bad = wrk(path, headers, a.duration)
                used = cpu_seconds(server.pid) - before
                print(f"| {name} | {rps:.0f} | {p50} | {p99} | {used / max(total, 1) * 1e6:.0f} µs | {bad} |")
        finally:
            server.terminate()
            server.wait(timeout=20)


if __name__ == "__main__":
    main()
