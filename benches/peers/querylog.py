#!/usr/bin/env python3
"""The query log's cost on the query path: UDP cache hits with the query log off and on, side
by side in alternating rounds, at the same offered rate and at capacity; Unbound with and
without its own query logging on the same workload.

    python3 benches/peers/querylog.py --binary /work/bin/kudurru-ql --rate 40000
    python3 benches/peers/querylog.py --binary B --baseline /work/bin/kudurru-main   # off vs main too
    python3 benches/peers/querylog.py --binary B --servers kudurru-off,kudurru-on,kudurru-drain

Servers (each pinned to CPU 0, dnsperf and the `kudurru-echo --mode answer` upstream on CPU 1,
as in ab.py and compare.py):

  kudurru-off     the binary with querylog.enabled=false (no sender: one branch per
                  terminal point)
  kudurru-on      the same binary with the query log on, as shipped: the redb sink,
                  <data dir>/querylog.db in a fresh directory per run (--on-env / --on-args
                  add settings)
  kudurru-drain   records produced, the control thread decodes and summarizes them and
                  drops them (KUDURRU_BENCH_QUERYLOG=summarize: what every sink does first)
  kudurru-discard the cores' cost alone: records produced, batches dropped unread
                  (KUDURRU_BENCH_QUERYLOG=discard)
  kudurru-main    with --baseline: another binary (one without the query log), as it runs
  unbound         configured as compare.py (a caching forwarder to the same upstream)
  unbound-logq    the same with `log-queries: yes` and `log-replies: yes` (to its log file)
  unbound-dnstap  the same with dnstap client query and response messages to fstrm_capture
                  (on CPU 1, writing a file)

Every process of a server runs on CPU 0 (its cores, its control thread, a writer, Unbound's
dnstap thread), so its utime+stime divided by the answers is the whole cost of an answer,
logging included. Loads: `rate` (dnsperf -Q --rate) and `capacity` (no rate limit: as fast as
one CPU answers). Prints each run, then per load the medians with each variant's ratio to its
own plain server (kudurru-* / kudurru-off; unbound-* / unbound), and for kudurru-on and
kudurru-drain the records the cores wrote and dropped (kudurru_querylog_records_total,
kudurru_querylog_dropped_total). kudurru-on's database size after each run is printed too.

kudurru-drain and kudurru-discard need a binary built with the benchmark hooks, which a
default build does not have (it ignores KUDURRU_BENCH_QUERYLOG):

    cargo build --release -p kudurru-control --bin kudurru --features bench-hooks

A run of either whose cores wrote no record stops with that message.

Needs: dnsperf, taskset, unbound, fstrm_capture (fstrm-bin) for unbound-dnstap, a release build
of kudurru-echo (benches/). Traffic stays on 127.0.0.1.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab import server_argv  # noqa: E402
from compare import (CLIENT_CPU, OPS_PORT, TARGET, UPSTREAM_PORT, Server, configs, dnsperf,  # noqa: E402
                     measure, write_names)

LOADS = ("rate", "capacity")


def unbound_variant(conf, workdir, kind):
    """Unbound's configuration for `kind` (logq, dnstap), written beside `conf`."""
    with open(conf) as f:
        text = f.read()
    if kind == "logq":
        text = text.replace("server:\n", "server:\n    log-queries: yes\n    log-replies: yes\n", 1)
    elif kind == "dnstap":
        sock = os.path.join(workdir, "dnstap.sock")
        text += f"""dnstap:
    dnstap-enable: yes
    dnstap-socket-path: "{sock}"
    dnstap-send-identity: no
    dnstap-send-version: no
    dnstap-log-client-query-messages: yes
    dnstap-log-client-response-messages: yes
"""
    path = os.path.join(workdir, f"unbound-{kind}.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


def metric(name):
    """A counter from kudurru's /metrics (0 when absent)."""
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{OPS_PORT}/metrics", timeout=2).read().decode()
    except OSError:
        return 0
    m = re.search(rf"^{name} (\d+)", body, re.M)
    return int(m.group(1)) if m else 0


class Collector:
    """fstrm_capture on CPU 1 reading Unbound's dnstap socket into a file, while it runs."""

    def __init__(self, workdir):
        self.sock = os.path.join(workdir, "dnstap.sock")
        self.out = os.path.join(workdir, "dnstap.fstrm")
        self.proc = None

    def __enter__(self):
        for path in (self.sock, self.out):
            if os.path.exists(path):
                os.unlink(path)
        self.proc = subprocess.Popen(["taskset", "-c", CLIENT_CPU, "fstrm_capture", "-t", "protobuf:dnstap.Dnstap",
                                      "-u", self.sock, "-w", self.out],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(50):
            if os.path.exists(self.sock):
                break
            time.sleep(0.1)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()


def one_run(server, argv, port, load, args, workdir, hits):
    collector = Collector(workdir) if server == "unbound-dnstap" else None
    if collector:
        collector.__enter__()
    try:
        with Server(server, argv, port, workdir) as srv:
            dnsperf(port, hits, 5, 20000, runs=1)  # warm: every name once
            records = metric("kudurru_querylog_records_total")
            dropped = metric("kudurru_querylog_dropped_total")
            res = measure(srv, hits, args.duration, args.rate if load == "rate" else None)
            time.sleep(0.3)  # the last partial batch is handed over within 100 ms
            res["records"] = metric("kudurru_querylog_records_total") - records
            res["dropped"] = metric("kudurru_querylog_dropped_total") - dropped
            if server in ("kudurru-drain", "kudurru-discard") and res["records"] == 0:
                sys.exit(f"{server}: the cores wrote no query-log record: the binary has no benchmark hook; "
                         "build it with `cargo build --release -p kudurru-control --bin kudurru --features bench-hooks`")
    finally:
        if collector:
            collector.__exit__()
    if collector and os.path.exists(collector.out):
        res["dnstap_bytes"] = os.path.getsize(collector.out)
    if "--data-dir" in argv:
        db = os.path.join(argv[argv.index("--data-dir") + 1], "querylog.db")
        if os.path.exists(db):
            res["db_bytes"] = os.path.getsize(db)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True, help="the kudurru binary measured off and on")
    ap.add_argument("--baseline", help="another kudurru binary measured with the query log off (kudurru-main)")
    ap.add_argument("--on-env", default="", help="NAME=VALUE pairs (comma-separated) for kudurru-on")
    ap.add_argument("--on-args", default="", help="extra serve arguments (comma-separated) for kudurru-on")
    ap.add_argument("--rate", type=int, default=40000, help="offered QPS of the `rate` load (dnsperf -Q)")
    ap.add_argument("--loads", default=",".join(LOADS), help="comma-separated subset of rate,capacity")
    ap.add_argument("--servers", default="kudurru-off,kudurru-on,kudurru-drain,unbound,unbound-logq,unbound-dnstap",
                    help="comma-separated subset (kudurru-main is added with --baseline)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=6, help="seconds per measured run")
    args = ap.parse_args()
    servers = [s for s in args.servers.split(",") if s]
    if args.baseline and "kudurru-main" not in servers:
        servers.insert(0, "kudurru-main")
    loads = [x for x in args.loads.split(",") if x]
    workdir = tempfile.mkdtemp(prefix="kudurru-querylog-")
    hits = os.path.join(workdir, "hits.txt")
    write_names(hits, [f"h{i}.bench.example." for i in range(1000)])
    unbound_conf, dnsdist_conf = configs(workdir)
    on_env = [e for e in args.on_env.split(",") if e]
    on_args = [a for a in args.on_args.split(",") if a]

    def command(server):
        if server.startswith("unbound"):
            kind = server.partition("-")[2]
            conf = unbound_variant(unbound_conf, workdir, kind) if kind else unbound_conf
            return server_argv("unbound", conf, dnsdist_conf)
        binary = args.baseline if server == "kudurru-main" else args.binary
        argv, port = server_argv(binary, unbound_conf, dnsdist_conf)
        data = os.path.join(workdir, f"data-{server}")
        shutil.rmtree(data, ignore_errors=True)
        os.makedirs(data)
        argv = argv + ["--data-dir", data]
        env = {
            "kudurru-off": ["KUDURRU_QUERYLOG__ENABLED=false"],
            "kudurru-on": ["KUDURRU_QUERYLOG__ENABLED=true"] + on_env,
            "kudurru-drain": ["KUDURRU_QUERYLOG__ENABLED=false", "KUDURRU_BENCH_QUERYLOG=summarize"],
            "kudurru-discard": ["KUDURRU_QUERYLOG__ENABLED=false", "KUDURRU_BENCH_QUERYLOG=discard"],
        }.get(server, [])
        if server == "kudurru-on":
            argv = argv + on_args
        return ["env"] + env + argv, port

    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-echo"), "--mode",
                                 "answer", "--tcp", "--listen", f"127.0.0.1:{UPSTREAM_PORT}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {(load, s): [] for load in loads for s in servers}
    try:
        for r in range(args.rounds):
            for load in loads:
                for s in (servers if r % 2 == 0 else servers[::-1]):
                    argv, port = command(s)
                    res = one_run(s, argv, port, load, args, workdir, hits)
                    results[(load, s)].append(res)
                    extra = ""
                    if s in ("kudurru-on", "kudurru-drain", "kudurru-discard"):
                        extra = f", records {res['records']} dropped {res['dropped']}"
                    if "db_bytes" in res:
                        extra += f", querylog.db {res['db_bytes']} bytes"
                    if "dnstap_bytes" in res:
                        extra = f", dnstap {res['dnstap_bytes']} bytes"
                    print(f"round {r + 1} {load} {s}: {res['cpu_us_per_answer'] or 0:.2f} us/answer, "
                          f"{res['qps']:.0f} q/s, lost {res['lost']}{extra}", flush=True)
    finally:
        upstream.terminate()
        upstream.wait()
        shutil.rmtree(workdir, ignore_errors=True)

    def base_of(s):
        if s.startswith("unbound"):
            return "unbound"
        return "kudurru-off"

    for load in loads:
        what = f"{args.rate} q/s offered" if load == "rate" else "capacity (no rate limit)"
        print(f"\nUDP cache hits, {what}, {args.rounds} alternating rounds of {args.duration} s, medians:\n")
        print("| server | CPU µs/answer (median) | rounds | answered q/s (median) | vs plain |")
        print("|---|---|---|---|---|")
        for s in servers:
            xs = [x["cpu_us_per_answer"] or 0 for x in results[(load, s)]]
            med = statistics.median(xs)
            qps = statistics.median(x["qps"] for x in results[(load, s)])
            base_runs = results.get((load, base_of(s)))
            base = statistics.median(x["cpu_us_per_answer"] or 0 for x in base_runs) if base_runs else 0
            note = ""
            if s in ("kudurru-on", "kudurru-drain", "kudurru-discard"):
                recs = sum(x["records"] for x in results[(load, s)])
                drops = sum(x["dropped"] for x in results[(load, s)])
                note = f" ({recs} records, {drops} dropped)"
            print(f"| {s}{note} | {med:.2f} | {' '.join(f'{x:.2f}' for x in xs)} | {qps:.0f} | "
                  f"{med / base if base else 0:.3f}x |")


if __name__ == "__main__":
    main()
