#!/usr/bin/env python3
"""The rate limiter's cost on cache hits, and its memory under a random-source flood.

One command (from the repository root):

    python3 benches/peers/ratelimit.py            # ~2 minutes
    python3 benches/peers/ratelimit.py --quick    # ~1 minute

1. Cache hits with the limiter off and on (qps and burst far above what the client sends, so
   nothing is limited and every query pays the full bucket lookup), in alternating rounds in one
   run: off, on, off, on, ... Reported: answered QPS at saturation (dnsperf without -Q) and
   server CPU per answer, and the ratio on/off. kudurru runs on CPU 0, dnsperf and the upstream
   (kudurru-echo in answer mode) on CPU 1.
2. A random-source flood: single queries from distinct source addresses across 127.0.0.0/8
   (ratelimit.ipv4Prefix 32, so every address is a new client), far more clients than the
   table holds. Reported: RSS before and after, with the limiter off and on, and the limiter's
   bucket and eviction counters.

Needs dnsperf and taskset. Traffic stays on 127.0.0.0/8.
"""

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (CLIENT_CPU, OPS_PORT, ROOT, SERVER_CPU, TARGET, UPSTREAM_PORT, cpu_seconds,  # noqa: E402
                     dnsperf, log, machine, metrics, parse_dnsperf, rss_bytes, wait_answering, write_names)

PORT = 27402

OFF = {"KUDURRU_RATELIMIT__QPS": "0"}
ON = {"KUDURRU_RATELIMIT__QPS": "1000000", "KUDURRU_RATELIMIT__BURST": "1000000"}


class Kudurru:
    def __init__(self, env, workdir, name):
        self.env = dict(os.environ, **env)
        self.log = open(os.path.join(workdir, f"{name}.log"), "w")

    def __enter__(self):
        argv = [os.path.join(TARGET, "kudurru"), "serve", "--cores", "1", "--cpus", SERVER_CPU,
                "--listen", f"127.0.0.1:{PORT}", "--upstream", f"udp://127.0.0.1:{UPSTREAM_PORT}",
                "--ops-address", f"127.0.0.1:{OPS_PORT}", "--log-level", "warn"]
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU] + argv, stdout=self.log, stderr=self.log,
                                     env=self.env)
        wait_answering(PORT)
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(15)
        self.log.close()


def hit_rounds(args, workdir, hits):
    results = {"off": [], "on": []}
    for round_ in range(args.rounds):
        for label, env in (("off", OFF), ("on", ON)):
            with Kudurru(env, workdir, f"hits-{label}-{round_}") as k:
                dnsperf(PORT, hits, 5, 20000, runs=1)  # warm: every name once
                before = cpu_seconds(k.proc.pid)
                r = parse_dnsperf(dnsperf(PORT, hits, args.duration, None))
                cpu = cpu_seconds(k.proc.pid) - before
                r["cpu_us_per_answer"] = cpu / r["completed"] * 1e6 if r["completed"] else None
                limited = metrics().get("kudurru_ratelimit_dropped_total", 0) + metrics().get(
                    "kudurru_ratelimit_slipped_total", 0)
                r["limited"] = limited
                results[label].append(r)
                log(f"round {round_} {label}: {r['qps']:.0f} qps, {r['cpu_us_per_answer']:.2f} µs/answer, "
                    f"limited {limited:.0f}")
    summary = {}
    for label in ("off", "on"):
        runs = results[label]
        summary[label] = {
            "qps_mean": sum(r["qps"] for r in runs) / len(runs),
            "cpu_us_per_answer_mean": sum(r["cpu_us_per_answer"] for r in runs) / len(runs),
            "limited": sum(r["limited"] for r in runs),
            "runs": runs,
        }
    summary["qps_ratio_on_off"] = summary["on"]["qps_mean"] / summary["off"]["qps_mean"]
    summary["cpu_ratio_on_off"] = summary["on"]["cpu_us_per_answer_mean"] / summary["off"]["cpu_us_per_answer_mean"]
    return summary


def flood(count, rng):
    """One query each from `count` distinct 127.x.y.z sources; returns seconds taken."""
    name = b"\x09localhost\x00"
    started = time.time()
    for i in range(count):
        addr = f"127.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((addr, 0))
            s.sendto((i & 0xffff).to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + name + b"\x00\x01\x00\x01",
                     ("127.0.0.1", PORT))
        finally:
            s.close()
    return time.time() - started


def flood_runs(args, workdir):
    out = {}
    for label, env in (("off", OFF), ("on", dict(ON, KUDURRU_RATELIMIT__QPS="10", KUDURRU_RATELIMIT__BURST="20",
                                                  KUDURRU_RATELIMIT__IPV4PREFIX="32"))):
        with Kudurru(env, workdir, f"flood-{label}") as k:
            time.sleep(0.5)
            before = rss_bytes(k.proc.pid)
            seconds = flood(args.flood, random.Random(7))
            time.sleep(1.5)  # counters are copied once a second
            m = metrics()
            out[label] = {
                "sources": args.flood,
                "seconds": seconds,
                "rss_before_bytes": before,
                "rss_after_bytes": rss_bytes(k.proc.pid),
                "buckets": m.get("kudurru_ratelimit_buckets", 0),
                "capacity": m.get("kudurru_ratelimit_buckets_capacity", 0),
                "evictions": m.get("kudurru_ratelimit_evictions_total", 0),
                "queries": m.get("kudurru_dns_queries_total", 0),
            }
            log(f"flood {label}: {json.dumps(out[label])}")
    return out


def markdown(report):
    h = report["hits"]
    lines = [f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, kernel "
             f"{report['machine']['kernel']}, {report['machine']['date']}.", "",
             "| limiter | rounds | answered QPS (mean) | server CPU µs/answer (mean) | limited queries |",
             "|---|---|---|---|---|"]
    for label in ("off", "on"):
        s = h[label]
        lines.append(f"| {label} | {len(s['runs'])} | {s['qps_mean']:.0f} | {s['cpu_us_per_answer_mean']:.3f} | "
                     f"{s['limited']:.0f} |")
    lines += ["", f"Ratio on/off: QPS {h['qps_ratio_on_off']:.3f}, CPU per answer {h['cpu_ratio_on_off']:.3f}.", ""]
    f = report.get("flood")
    if f:
        lines += ["| limiter | distinct sources | RSS before MiB | RSS after MiB | buckets in use / capacity | evictions |",
                  "|---|---|---|---|---|---|"]
        for label in ("off", "on"):
            r = f[label]
            lines.append(f"| {label} | {r['sources']} | {r['rss_before_bytes'] / 2**20:.1f} | "
                         f"{r['rss_after_bytes'] / 2**20:.1f} | {r['buckets']:.0f} / {r['capacity']:.0f} | "
                         f"{r['evictions']:.0f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--flood", type=int, default=200_000, help="distinct flood sources")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--json", default=os.path.join(ROOT, "target", "bench-ratelimit.json"))
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.duration, args.flood = 2, 4, 100_000
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kudurru-control", "-p", "kudurru-bench"],
                       cwd=ROOT, check=True)
    workdir = tempfile.mkdtemp(prefix="kudurru-ratelimit-")
    hits = os.path.join(workdir, "hits.txt")
    write_names(hits, [f"h{i}.bench.example." for i in range(1000)])
    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-echo"), "--mode", "answer",
                                 "--listen", f"127.0.0.1:{UPSTREAM_PORT}"], stderr=subprocess.DEVNULL)
    try:
        report = {"machine": machine(), "args": vars(args), "hits": hit_rounds(args, workdir, hits),
                  "flood": flood_runs(args, workdir)}
    finally:
        upstream.send_signal(signal.SIGTERM)
        upstream.wait()
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(markdown(report))
    log(f"JSON report: {args.json}; logs in {workdir}")


if __name__ == "__main__":
    main()
