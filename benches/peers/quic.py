#!/usr/bin/env python3
"""DNS over QUIC and DNS over HTTP/3 against kudurru's own DoH (HTTP/2), cache hits, in one run.

One command (from the repository root):

    python3 benches/peers/quic.py            # ~6 minutes (3 rounds)
    python3 benches/peers/quic.py --quick    # ~1.5 minutes (one round)

kudurru runs `--cores 1` pinned to CPU 0 with DoH, DoQ and DoH3 listeners (one certificate);
kudurru-bench and the benchmark upstream (kudurru-echo) run on CPU 1. Each transport gets the
same load from kudurru-bench over persistent connections (4 connections, up to 100 streams
each, POST): at --rate, where the server keeps up and its CPU time per answered query is the
comparison, at each of --high-rates (`-high`, `-higher`: the same offered rate for every
transport at high load, up to near what the slowest generator sustains), and closed loop with
400 outstanding (`-max`), where the generator or the server core saturates. The `max` rows run
at different rates (kudurru-bench's HTTP/2 client sustains ~1M q/s, its QUIC clients 350-460k),
and CPU per answer falls with load, so the same-rate rows are the like-for-like comparison.
Rounds alternate between the transports (--rounds); medians are reported.
Neither dnsperf 2.10 nor Debian's dnsdist 1.7 speaks DoQ or DoH3, so the baseline is kudurru's
own DoH. The issue's target: DoQ and DoH3 CPU per answer within 2x of DoH's.

Needs: a release build (built here). Traffic stays on 127.0.0.1. Prints Markdown for
docs/benchmarks.md and writes a JSON report (--json).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import CLIENT_CPU, ROOT, SERVER_CPU, TARGET, Server, cpu_seconds, log, machine, write_names  # noqa: E402

UPSTREAM_PORT = 27600
UDP_PORT = 27610
PORTS = {"https": 27611, "quic": 27612, "h3": 27613}
OPS_PORT = 27681
TRANSPORTS = ("https", "quic", "h3")
NAMES = {"https": "DoH (HTTP/2)", "quic": "DoQ", "h3": "DoH3"}
# Row suffixes of the --high-rates runs, in order.
HIGH = ("-high", "-higher")


def bench(scheme, datafile, duration, rate):
    """kudurru-bench against one listener; open loop at `rate`, else closed loop (400)."""
    path = "" if scheme == "quic" else "/dns-query"
    argv = ["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-bench"),
            f"{scheme}://127.0.0.1:{PORTS[scheme]}{path}#localhost", "--insecure", "--queries", datafile,
            "--duration", f"{duration}s", "--connections", "4", "--streams", "100", "--json", "-"]
    argv += ["--rate", str(rate)] if rate else ["--concurrency", "400"]
    out = subprocess.run(argv, capture_output=True, text=True)
    try:
        r = json.loads(out.stdout)
    except json.JSONDecodeError:
        log(out.stderr)
        return {"sent": 0, "completed": 0, "lost": 0, "qps": 0, "p50_ms": 0, "p99_ms": 0}
    lat = r["latency"]
    return {"sent": r["sent"], "completed": r["answered"], "lost": r["sent"] - r["answered"],
            "qps": r["qps"], "p50_ms": lat["p50_us"] / 1000, "p99_ms": lat["p99_us"] / 1000}


def measure(server, scheme, datafile, duration, rate):
    before = cpu_seconds(server.proc.pid)
    r = bench(scheme, datafile, duration, rate)
    cpu = cpu_seconds(server.proc.pid) - before
    r["server_cpu_s"] = cpu
    r["cpu_us_per_answer"] = cpu / r["completed"] * 1e6 if r["completed"] else None
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs, one round")
    ap.add_argument("--duration", type=int, default=6, help="seconds per measured run")
    ap.add_argument("--rate", type=int, default=20000, help="offered QPS of the --rate runs")
    ap.add_argument("--high-rates", default="150000,300000",
                    help="offered QPS of the -high and -higher runs, comma-separated (empty: skip)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--json", default=os.path.join(ROOT, "target", "bench-quic.json"))
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.rounds = 4, 1
    high = [int(r) for r in args.high_rates.split(",") if r.strip()][:len(HIGH)]
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kudurru-control", "-p", "kudurru-bench"],
                       cwd=ROOT, check=True)
    workdir = tempfile.mkdtemp(prefix="kudurru-bench-quic-")
    cert, key = os.path.join(workdir, "c.pem"), os.path.join(workdir, "k.pem")
    subprocess.run([os.path.join(TARGET, "kudurru"), "cert", "generate", "--cert", cert, "--key", key],
                   check=True, stdout=subprocess.DEVNULL)
    hits = os.path.join(workdir, "hits.txt")
    write_names(hits, [f"h{i}.bench.example." for i in range(1000)])
    argv = [os.path.join(TARGET, "kudurru"), "serve", "--cores", "1", "--cpus", SERVER_CPU,
            "--listen", f"127.0.0.1:{UDP_PORT}",
            "--listen", f"https://127.0.0.1:{PORTS['https']}/dns-query",
            "--listen", f"quic://127.0.0.1:{PORTS['quic']}",
            "--listen", f"h3://127.0.0.1:{PORTS['h3']}/dns-query",
            "--tls-cert", cert, "--tls-key", key, "--upstream", f"udp://127.0.0.1:{UPSTREAM_PORT}",
            "--ops-address", f"127.0.0.1:{OPS_PORT}", "--api-address", "", "--log-level", "warn"]
    report = {"machine": machine(), "offered": vars(args), "rounds": []}
    echo = os.path.join(TARGET, "kudurru-echo")
    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, echo, "--mode", "answer", "--listen",
                                 f"127.0.0.1:{UPSTREAM_PORT}"], stderr=subprocess.DEVNULL)
    try:
        with Server("kudurru", argv, UDP_PORT, workdir) as server:
            # The cache is shared by every transport: one warm-up fills it.
            bench("https", hits, 3, 5000)
            for round_no in range(args.rounds):
                log(f"== round {round_no + 1}")
                results = {}
                for scheme in TRANSPORTS:
                    results[scheme] = measure(server, scheme, hits, args.duration, args.rate)
                    for suffix, rate in zip(HIGH, high):
                        results[scheme + suffix] = measure(server, scheme, hits, args.duration, rate)
                    results[scheme + "-max"] = measure(server, scheme, hits, args.duration, None)
                log(json.dumps(results))
                report["rounds"].append(results)
    finally:
        upstream.send_signal(signal.SIGTERM)
        upstream.wait()
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(markdown(report))
    log(f"JSON report: {args.json}; logs in {workdir}")


def median_of(report, workload, key):
    values = [r[workload][key] for r in report["rounds"] if r[workload].get(key) is not None]
    return statistics.median(values) if values else None


def markdown(report):
    o = report["offered"]
    lines = [f"kudurru `--cores 1`; kudurru-bench POST, 4 connections × up to 100 streams, cache hits; "
             f"{o['rate']} q/s offered, {o.get('high_rates') or '—'} q/s (`high`, `higher`), and closed loop with 400 outstanding (`max`) for {o['duration']} s per run, "
             f"median of {len(report['rounds'])} alternating rounds.", "",
             "| workload | transport | QPS | p50 ms | p99 ms | lost | server CPU µs/answer | CPU per answer / DoH's |",
             "|---|---|---|---|---|---|---|---|"]
    for offered in ("", *HIGH, "-max"):
        if not any(("https" + offered) in r for r in report["rounds"]):
            continue
        base = median_of(report, "https" + offered, "cpu_us_per_answer")
        for scheme in TRANSPORTS:
            w = scheme + offered
            qps = median_of(report, w, "qps") or 0
            cpu = median_of(report, w, "cpu_us_per_answer")
            sent = median_of(report, w, "sent") or 0
            lost = median_of(report, w, "lost") or 0
            ratio = f"{cpu / base:.2f}x" if cpu and base else "—"
            lost_text = f"{lost:,.0f} ({lost / sent:.1%})" if sent else "—"
            lines.append(f"| {offered.lstrip('-') or 'rate'} | {NAMES[scheme]} | {qps:,.0f} | "
                         f"{median_of(report, w, 'p50_ms') or 0:.3f} | {median_of(report, w, 'p99_ms') or 0:.3f} | "
                         f"{lost_text} | {f'{cpu:.1f}' if cpu else '—'} | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
