#!/usr/bin/env python3
"""Soak: kudurru under steady mixed load for an hour, with a flapping upstream.

One command (from the repository root):

    python3 benches/peers/soak.py              # 1 hour (plus ~1 minute to build, probe, warm)
    python3 benches/peers/soak.py --quick      # 5 minutes, flapping every minute: checks the script

What it does (issue 32's soak):
- kudurru (`--cores 1`, pinned to CPU 0) listens on UDP, TCP, DoT, DoH, DoQ and DoH3 and forwards
  to kudurru-echo in answer mode (pinned to CPU 1), which this script stops (SIGSTOP) for
  --outage seconds every --flap seconds, then resumes: the upstream goes silent and comes back.
- Capacity is measured first, per transport, closed loop for a few seconds (kudurru-bench,
  1000 names, cache hits); the mix's capacity is the harmonic mean weighted by the mix's
  shares (UDP 50 %, the five others 10 % each), and the soak offers --load (80 %) of it, open
  loop, with a 10 % share of fresh names (cache misses that go upstream).
- Load runs in segments of --segment seconds, one kudurru-bench per transport per segment (on
  CPU 1), so losses can be placed in time. A query counts as lost when kudurru-bench got no
  answer within its 5 s timeout (SERVFAIL is an answer). Lost queries are allowed only in
  segments that overlap an upstream outage (plus the upstream timeout after it).
- kudurru's RSS, open file descriptors and CPU are sampled every --sample seconds.

Pass criteria (the exit status says; the report states each):
- no query lost in a segment that does not overlap an outage window;
- flat memory after warm-up: RSS at the end at most 10 % (and at most 32 MiB) above the
  highest RSS seen in the first 20 % of the run (`cache.maxEntries` is set to 100,000 so that
  the cache is full within the warm-up; after that, misses evict);
- flat descriptors: open fds at the end within 16 of the first sample after warm-up.

Traffic stays on 127.0.0.1. Needs a release build (built here unless --no-build). Writes a JSON
report and the samples as CSV into the work directory and prints Markdown for
docs/benchmarks.md.
"""

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (CLIENT_CPU, ROOT, SERVER_CPU, TARGET, Server, cpu_seconds, log, machine,  # noqa: E402
                     rss_bytes, write_names)

UPSTREAM_PORT = 27600
PORTS = {"udp": 27610, "tcp": 27611, "tls": 27612, "https": 27613, "quic": 27614, "h3": 27615}
OPS_PORT = 27681
MIX = {"udp": 0.5, "tcp": 0.1, "tls": 0.1, "https": 0.1, "quic": 0.1, "h3": 0.1}
MISS_RATIO = 0.1
BENCH_TIMEOUT_S = 5
# kudurru's own upstream timeout and retries bound how long after an outage a miss may still
# fail: attempts at 0, 1.5 and 3.0 s, SERVFAIL at 4.0 s (docs/operations.md).
UPSTREAM_GRACE_S = 5


def target_url(scheme):
    port = PORTS[scheme]
    if scheme in ("https", "h3"):
        return f"{scheme}://127.0.0.1:{port}/dns-query"
    return f"{scheme}://127.0.0.1:{port}"


def bench(scheme, names, seconds, rate=None, miss_ratio=0.0, json_path=None):
    """Runs kudurru-bench on CPU 1 and returns its JSON report."""
    argv = ["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-bench"), target_url(scheme),
            "--queries", names, "--duration", f"{seconds}s", "--timeout", f"{BENCH_TIMEOUT_S}s",
            "--json", json_path or "-", "--miss-ratio", str(miss_ratio), "--suffix", "soak.bench.example."]
    if scheme not in ("udp", "tcp"):
        argv.append("--insecure")
    if rate is None:
        argv += ["--concurrency", "200"]
    else:
        argv += ["--rate", str(max(rate, 1.0))]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"kudurru-bench {scheme} failed: {out.stderr.strip()[-500:]}")
    if json_path:
        with open(json_path) as f:
            return json.load(f)
    return json.loads(out.stdout)


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Flapper(threading.Thread):
    """Stops the upstream for `outage` seconds every `every` seconds; records the windows."""

    def __init__(self, pid, every, outage, stop):
        super().__init__(daemon=True)
        self.pid, self.every, self.outage, self.stop = pid, every, outage, stop
        self.windows = []

    def run(self):
        while not self.stop.wait(self.every):
            start = time.time()
            os.kill(self.pid, signal.SIGSTOP)
            self.stop.wait(self.outage)
            os.kill(self.pid, signal.SIGCONT)
            self.windows.append((start, time.time()))


class Sampler(threading.Thread):
    def __init__(self, pid, every, stop):
        super().__init__(daemon=True)
        self.pid, self.every, self.stop = pid, every, stop
        self.samples = []

    def take(self):
        self.samples.append({"time": time.time(), "rss": rss_bytes(self.pid), "fds": open_fds(self.pid),
                             "cpu": cpu_seconds(self.pid)})

    def run(self):
        self.take()
        while not self.stop.wait(self.every):
            self.take()


def overlaps(segment, windows):
    start, end = segment
    return any(w_start < end and start < w_end + UPSTREAM_GRACE_S for w_start, w_end in windows)


def verdict(report):
    samples = report["samples"]
    t0 = samples[0]["time"]
    span = samples[-1]["time"] - t0
    warm = [s for s in samples if s["time"] - t0 <= 0.2 * span]
    after = [s for s in samples if s["time"] - t0 > 0.2 * span]
    rss_warm = max(s["rss"] for s in warm)
    rss_end = samples[-1]["rss"]
    rss_bound = min(rss_warm * 1.10, rss_warm + 32 * 2**20)
    fds_start = after[0]["fds"] if after else samples[0]["fds"]
    fds_end = samples[-1]["fds"]
    lost_outside = sum(seg["lost"] for seg in report["segments"] if not seg["outage"])
    checks = {
        "no query lost outside outages": (lost_outside == 0, f"{lost_outside} lost outside outage windows"),
        "RSS flat after warm-up": (rss_end <= rss_bound,
                                   f"end {rss_end / 2**20:.1f} MiB, warm-up peak {rss_warm / 2**20:.1f} MiB, "
                                   f"bound {rss_bound / 2**20:.1f} MiB"),
        "fds flat after warm-up": (abs(fds_end - fds_start) <= 16, f"{fds_start} → {fds_end} (bound ±16)"),
    }
    return checks


def markdown(report, checks):
    o = report["offered"]
    lines = [f"Soak, {report['machine']}: {o['duration']} s at {o['load']:.0%} of the mix's measured capacity "
             f"({report['capacity_mix']:.0f} q/s → offered {report['offered_qps']:.0f} q/s), "
             f"{MISS_RATIO:.0%} fresh names, upstream stopped {o['outage']} s every {o['flap']} s "
             f"({len(report['outages'])} outages).", "",
             "| transport | capacity q/s (closed loop) | offered q/s | sent | answered | lost |",
             "|---|---:|---:|---:|---:|---:|"]
    for scheme in MIX:
        sent = sum(seg["per"][scheme]["sent"] for seg in report["segments"])
        answered = sum(seg["per"][scheme]["answered"] for seg in report["segments"])
        lines.append(f"| {scheme} | {report['capacity'][scheme]:.0f} | {report['offered_qps'] * MIX[scheme]:.0f} "
                     f"| {sent} | {answered} | {sent - answered} |")
    lost_in = sum(seg["lost"] for seg in report["segments"] if seg["outage"])
    lines += ["", f"Lost in segments overlapping an outage: {lost_in}.", "",
              "| check | result | figures |", "|---|---|---|"]
    for name, (ok, text) in checks.items():
        lines.append(f"| {name} | {'pass' if ok else 'FAIL'} | {text} |")
    s = report["samples"]
    lines += ["", f"RSS {s[0]['rss'] / 2**20:.1f} → {s[-1]['rss'] / 2**20:.1f} MiB, fds {s[0]['fds']} → "
              f"{s[-1]['fds']}, kudurru CPU {s[-1]['cpu'] - s[0]['cpu']:.0f} s over the run "
              f"({len(s)} samples every {o['sample']} s)."]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=3600, help="seconds of load")
    ap.add_argument("--flap", type=int, default=300, help="seconds between upstream outages")
    ap.add_argument("--outage", type=int, default=20, help="seconds each outage lasts")
    ap.add_argument("--segment", type=int, default=60, help="seconds per load segment")
    ap.add_argument("--sample", type=int, default=10, help="seconds between RSS/fd samples")
    ap.add_argument("--load", type=float, default=0.8, help="share of the measured capacity to offer")
    ap.add_argument("--quick", action="store_true", help="5 minutes, an outage every minute")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.quick:
        args.duration, args.flap, args.outage, args.segment = 300, 60, 10, 30
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kudurru-control", "-p", "kudurru-bench"],
                       cwd=ROOT, check=True)
    workdir = tempfile.mkdtemp(prefix="kudurru-soak-")
    args.json = args.json or os.path.join(workdir, "soak.json")
    cert, key = os.path.join(workdir, "c.pem"), os.path.join(workdir, "k.pem")
    subprocess.run([os.path.join(TARGET, "kudurru"), "cert", "generate", "--cert", cert, "--key", key],
                   check=True, stdout=subprocess.DEVNULL)
    names = os.path.join(workdir, "names.txt")
    write_names(names, [f"s{i}.soak.bench.example." for i in range(1000)])
    argv = [os.path.join(TARGET, "kudurru"), "serve", "--cores", "1", "--cpus", SERVER_CPU,
            "--tls-cert", cert, "--tls-key", key, "--upstream", f"udp://127.0.0.1:{UPSTREAM_PORT}",
            "--ops-address", f"127.0.0.1:{OPS_PORT}", "--api-address", "", "--log-level", "warn",
            "--data-dir", os.path.join(workdir, "data")]
    for scheme in MIX:
        argv += ["--listen", target_url(scheme) if scheme != "udp" else f"127.0.0.1:{PORTS['udp']}"]
    os.environ.update({"KUDURRU_CACHE__MAXENTRIES": "100000", "KUDURRU_RATELIMIT__QPS": "0"})
    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-echo"), "--mode",
                                 "answer", "--tcp", "--listen", f"127.0.0.1:{UPSTREAM_PORT}"],
                                stderr=subprocess.DEVNULL)
    report = {"machine": machine(), "offered": vars(args), "segments": []}
    stop = threading.Event()
    try:
        with Server("kudurru", argv, PORTS["udp"], workdir) as server:
            pid = server.proc.pid
            bench("udp", names, 2)  # warm the cache
            capacity = {}
            for scheme in MIX:
                r = bench(scheme, names, 4)
                capacity[scheme] = r["qps"]
                log(f"capacity {scheme}: {capacity[scheme]:.0f} q/s")
            mix = 1.0 / sum(share / capacity[s] for s, share in MIX.items())
            offered = mix * args.load
            report.update(capacity=capacity, capacity_mix=mix, offered_qps=offered)
            log(f"mix capacity {mix:.0f} q/s; offering {offered:.0f} q/s for {args.duration} s")
            sampler = Sampler(pid, args.sample, stop)
            flapper = Flapper(upstream.pid, args.flap, args.outage, stop)
            sampler.start()
            flapper.start()
            start = time.time()
            while time.time() - start < args.duration:
                seconds = int(min(args.segment, args.duration - (time.time() - start))) or 1
                seg_start = time.time()
                results = {}
                threads = []
                for scheme, share in MIX.items():
                    path = os.path.join(workdir, f"seg-{scheme}.json")

                    def one(scheme=scheme, share=share, path=path):
                        results[scheme] = bench(scheme, names, seconds, offered * share, MISS_RATIO, path)
                    t = threading.Thread(target=one)
                    t.start()
                    threads.append(t)
                for t in threads:
                    t.join()
                seg_end = time.time()
                per = {s: {"sent": r["sent"], "answered": r["answered"]} for s, r in results.items()}
                lost = sum(p["sent"] - p["answered"] for p in per.values())
                segment = {"start": seg_start - start, "end": seg_end - start, "per": per, "lost": lost,
                           "outage": overlaps((seg_start, seg_end), flapper.windows)}
                report["segments"].append(segment)
                log(f"t={segment['end']:.0f}s lost={lost} outage={segment['outage']} "
                    f"rss={rss_bytes(pid) / 2**20:.1f}MiB fds={open_fds(pid)}")
            stop.set()
            sampler.take()
            report["outages"] = [(a - start, b - start) for a, b in flapper.windows]
            report["samples"] = sampler.samples
    finally:
        stop.set()
        try:
            os.kill(upstream.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        upstream.send_signal(signal.SIGTERM)
        upstream.wait()
    with open(os.path.join(workdir, "samples.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["time", "rss", "fds", "cpu"])
        w.writeheader()
        w.writerows(report["samples"])
    checks = verdict(report)
    report["checks"] = {k: {"pass": ok, "figures": text} for k, (ok, text) in checks.items()}
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(markdown(report, checks))
    log(f"JSON report: {args.json}; samples: {workdir}/samples.csv; logs in {workdir}")
    sys.exit(0 if all(ok for ok, _ in checks.values()) else 1)


if __name__ == "__main__":
    main()
