#!/usr/bin/env python3
"""The dashboard's weight, first render and polling cost, measured in Debian's Chromium.

    ~/.cache/kudurru/venv/bin/python benches/peers/dashboard.py --binary target/release/kudurru [--seconds 60]

Starts the binary (`serve --cores 1`, the query log on, an upstream that never answers: the
dashboard is measured, not DNS), creates an admin token, and signs in through the API. Then:

- per page, in a fresh browser context (empty cache): the bytes of every response the page
  loads (the shell, its modules, the API answers), uncompressed and as sent (gzip when the
  server compresses), and the time to first contentful paint and to the page's data being
  drawn (the `kudurru:rendered` performance mark), on loopback;
- the server's CPU (utime+stime of its process) over --seconds with no dashboard open, then
  over --seconds with one browser on the overview (it polls every 5 s), as a share of a core.

Needs: playwright and chromium (.ci/test-deps). Traffic stays on 127.0.0.1.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from playwright.sync_api import sync_playwright

PAGES = ["overview", "querylog", "blocklists", "clientgroups", "policies", "zones", "settings", "tools", "audit", "tokens"]
API_PORT, OPS_PORT, DNS_PORT = 18280, 18281, 18253


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(port, timeout=30):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="kudurru-dash-bench-")
    env = dict(os.environ, KUDURRU_QUERYLOG__ENABLED="true")
    env.pop("KUDURRU_SETTINGS_FILE", None)
    server = subprocess.Popen([args.binary, "serve", "--cores", "1", "--listen", f"127.0.0.1:{DNS_PORT}",
                               "--ops-address", f"127.0.0.1:{OPS_PORT}", "--api-address", f"127.0.0.1:{API_PORT}",
                               "--data-dir", data, "--upstream", "udp://127.0.0.1:9", "--log-level", "warn"],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        wait_ready(OPS_PORT)
        token = subprocess.run([args.binary, "token", "create", "--role", "admin", "--data-dir", data],
                               capture_output=True, text=True, check=True, env=env).stdout.strip()
        url = f"http://127.0.0.1:{API_PORT}/"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"])
            signed = browser.new_context()
            r = signed.request.post(url + "api/v1/session", data=json.dumps({"token": token}),
                                    headers={"Content-Type": "application/json"})
            assert r.status == 200, r.status
            state = signed.storage_state()
            rows = []
            for name in PAGES:
                ctx = browser.new_context(storage_state=state, viewport={"width": 1280, "height": 800})
                page = ctx.new_page()
                seen = []
                page.on("requestfinished", lambda req: seen.append(req))
                page.goto(url + "#/" + name)
                page.wait_for_selector(f"body[data-page='{name}']")
                page.wait_for_load_state("networkidle") if name != "overview" else page.wait_for_timeout(1000)
                raw = sent = 0
                for req in seen:
                    resp = req.response()
                    if resp is None:
                        continue
                    try:
                        raw += len(resp.body())
                    except Exception:  # a streamed body (the tail) has none to read
                        pass
                    sent += req.sizes()["responseBodySize"]
                timing = page.evaluate("""() => ({
                    fcp: (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime,
                    rendered: (performance.getEntriesByName('kudurru:rendered')[0] || {}).startTime })""")
                rows.append((name, len(seen), raw, sent, timing["fcp"], timing["rendered"]))
                ctx.close()
            print("| page | requests | bytes uncompressed | bytes sent (gzip where the server compresses) | first contentful paint | data drawn |")
            print("|---|---:|---:|---:|---:|---:|")
            for name, n, raw, sent, fcp, rendered in rows:
                print(f"| {name} | {n} | {raw} | {sent} | {fcp or 0:.0f} ms | {rendered or 0:.0f} ms |")
            pid = server.pid
            t0 = cpu_seconds(pid)
            time.sleep(args.seconds)
            idle = cpu_seconds(pid) - t0
            ctx = browser.new_context(storage_state=state)
            page = ctx.new_page()
            page.goto(url + "#/overview")
            page.wait_for_selector("body[data-page='overview']")
            t0 = cpu_seconds(pid)
            time.sleep(args.seconds)
            polls = int(page.evaluate("document.body.dataset.polls || '0'"))
            busy = cpu_seconds(pid) - t0
            ctx.close()
            browser.close()
        print(f"server CPU over {args.seconds:.0f} s: no dashboard {idle:.3f} s ({100 * idle / args.seconds:.2f} % of a core), "
              f"overview open {busy:.3f} s ({100 * busy / args.seconds:.2f} % of a core, {polls} polls): "
              f"extra {100 * (busy - idle) / args.seconds:.2f} % of a core")
    finally:
        server.terminate()
        server.wait(15)


if __name__ == "__main__":
    sys.exit(main())
