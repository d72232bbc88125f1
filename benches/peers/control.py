#!/usr/bin/env python3
"""The control plane under concurrency: kudurru builds side by side on the HTTP API.

    python3 benches/peers/control.py --binaries OLD/kudurru,NEW/kudurru [--rounds 3]

Each round starts every binary in turn (`serve --cores 1`, the server pinned to CPU 0), creates
a viewer token, opens 200 half-open connections to the API port (a request head without its
final blank line; one that the server closes is opened again at once, and the closes are
counted), then runs wrk from CPU 1: 64 connections on `GET /api/v1/settings` for --duration
seconds. Reported per binary (median over rounds): requests per second, p50 and p99 latency,
the server's CPU per request (utime+stime over the run), non-2xx answers and socket errors, and
how many half-open connections the server closed. Rounds alternate the order of the binaries.

Needs: wrk, taskset. Traffic stays on 127.0.0.1. Bounded: every run ends after --duration.
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SERVER_CPU, CLIENT_CPU = "0", "1"
API_PORT, OPS_PORT, DNS_PORT = 18180, 18181, 18153


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(port, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"GET /healthz/ready HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"server on {port} did not become ready")


class HalfOpen:
    """`count` connections that never finish their request head, kept open until stopped."""

    HEAD = b"GET /api/v1/settings HTTP/1.1\r\nHost: b\r\n"

    def __init__(self, count):
        self.count, self.closed, self.stop = count, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open(self):
        s = socket.create_connection(("127.0.0.1", API_PORT), timeout=2)
        s.sendall(self.HEAD)
        s.setblocking(False)
        return s

    def run(self):
        conns = [self.open() for _ in range(self.count)]
        while not self.stop.wait(0.05):
            for i, s in enumerate(conns):
                try:
                    if s.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                self.closed += 1
                s.close()
                conns[i] = self.open()
        for s in conns:
            s.close()

    def __enter__(self):
        self.thread.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def parse_wrk(text):
    def latency(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        if not m:
            return float("nan")
        value, unit = float(m.group(1)), m.group(2)
        return value * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    total = int(re.search(r"(\d+) requests in", text).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "rps": rps,
        "requests": total,
        "p50_ms": latency(50),
        "p99_ms": latency(99),
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(g) for g in errors.groups()) if errors else 0,
    }


def run_one(binary, duration, connections, idle):
    with tempfile.TemporaryDirectory() as data:
        token = subprocess.run([binary, "token", "create", "--role", "viewer", "--data-dir", data],
                               check=True, capture_output=True, text=True).stdout.strip()
        argv = ["taskset", "-c", SERVER_CPU, binary, "serve", "--cores", "1",
                "--listen", f"127.0.0.1:{DNS_PORT}", "--upstream", "udp://127.0.0.1:9",
                "--ops-address", f"127.0.0.1:{OPS_PORT}", "--api-address", f"127.0.0.1:{API_PORT}",
                "--data-dir", data, "--log-level", "error"]
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(OPS_PORT)
            with HalfOpen(idle) as half:
                cpu0 = cpu_seconds(server.pid)
                out = subprocess.run(
                    ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", f"-c{connections}", f"-d{duration}s",
                     "--latency", "-H", f"Authorization: Bearer {token}",
                     f"http://127.0.0.1:{API_PORT}/api/v1/settings"],
                    check=True, capture_output=True, text=True).stdout
                cpu = cpu_seconds(server.pid) - cpu0
            result = parse_wrk(out)
            result["cpu_us_per_request"] = cpu / max(result["requests"], 1) * 1e6
            result["half_open_closed"] = half.closed
            return result
        finally:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binaries", required=True, help="comma-separated kudurru binaries")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5, help="seconds per run (under the 10 s header timeout)")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--idle", type=int, default=200)
    args = ap.parse_args()
    binaries = args.binaries.split(",")
    results = {b: [] for b in binaries}
    for r in range(args.rounds):
        order = binaries if r % 2 == 0 else list(reversed(binaries))
        for b in order:
            res = run_one(b, args.duration, args.connections, args.idle)
            results[b].append(res)
            print(f"round {r + 1} {b}: {res}", flush=True)
    keys = ["rps", "p50_ms", "p99_ms", "cpu_us_per_request", "non2xx", "socket_errors", "half_open_closed"]
    print("\nmedians (ratio to the first binary)")
    print("| binary | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    base = {k: statistics.median(x[k] for x in results[binaries[0]]) for k in keys}
    for b in binaries:
        cells = []
        for k in keys:
            m = statistics.median(x[k] for x in results[b])
            ratio = f" ({m / base[k]:.2f}x)" if base[k] and k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_request") else ""
            cells.append(f"{m:.3g}{ratio}")
        print(f"| {b} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
