#!/usr/bin/env python3
"""Two kudurru builds (and the echo ceiling) side by side: server CPU per answered query.

    python3 benches/peers/ab.py --binaries OLD/kudurru,NEW/kudurru --rate 40000

For a change to the data plane or to the vendored glommio: build the binary before and after
(copy each `target/release/kudurru` aside), then run this. Each round starts every server in
turn (`kudurru serve --cores 1` pinned to CPU 0, or `ceiling`: `kudurru-echo --mode echo`),
warms the cache, and drives UDP cache hits with dnsperf at the same offered rate from CPU 1;
the server's utime+stime over the run, divided by the answers, is its CPU per answer. Rounds
alternate the servers so drift on a shared machine lands on all of them. Prints each round and
the medians, with each median's ratio to the first server's.

Needs: dnsperf, taskset, a release build of kudurru-echo (the ceiling and the upstream).
Traffic stays on 127.0.0.1.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import CLIENT_CPU, SERVER_CPU, TARGET, cpu_seconds, write_names  # noqa: E402

PORT, UPSTREAM_PORT, OPS_PORT = 47451, 47450, 47452


def server_argv(binary):
    if binary == "ceiling":
        return [os.path.join(TARGET, "kudurru-echo"), "--mode", "echo", "--listen", f"127.0.0.1:{PORT}"]
    return [binary, "serve", "--cores", "1", "--cpus", SERVER_CPU, "--listen", f"127.0.0.1:{PORT}",
            "--upstream", f"udp://127.0.0.1:{UPSTREAM_PORT}", "--ops-address", f"127.0.0.1:{OPS_PORT}"]


def dnsperf(names, seconds, rate, cpu=None):
    argv = ["dnsperf", "-s", "127.0.0.1", "-p", str(PORT), "-d", names, "-l", str(seconds), "-c", "8",
            "-Q", str(rate)]
    if cpu is not None:
        argv = ["taskset", "-c", cpu] + argv
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def one_run(binary, names, seconds, rate):
    proc = subprocess.Popen(["taskset", "-c", SERVER_CPU] + server_argv(binary),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        dnsperf(names, 2, 20000)  # warm: every name once
        before = cpu_seconds(proc.pid)
        out = dnsperf(names, seconds, rate, cpu=CLIENT_CPU)
        cpu = cpu_seconds(proc.pid) - before
    finally:
        proc.terminate()
        proc.wait()
    answered = int(re.search(r"Queries completed:\s+(\d+)", out).group(1))
    lost = int(re.search(r"Queries lost:\s+(\d+)", out).group(1))
    return {"us_per_answer": cpu / max(answered, 1) * 1e6, "qps": answered / seconds, "lost": lost}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binaries", required=True, help="comma-separated kudurru binaries; 'ceiling' for the echo ceiling")
    ap.add_argument("--rate", type=int, default=40000, help="offered QPS (dnsperf -Q)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=6, help="seconds per measured run")
    args = ap.parse_args()
    binaries = ["ceiling"] + [b for b in args.binaries.split(",") if b != "ceiling"]
    workdir = os.path.join(os.path.dirname(TARGET), "bench-ab")
    os.makedirs(workdir, exist_ok=True)
    names = os.path.join(workdir, "hits.txt")
    write_names(names, [f"n{i}.example.com" for i in range(1000)])
    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-echo"), "--mode",
                                 "answer", "--listen", f"127.0.0.1:{UPSTREAM_PORT}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {b: [] for b in binaries}
    try:
        for r in range(args.rounds):
            for b in binaries:
                res = one_run(b, names, args.duration, args.rate)
                results[b].append(res)
                print(f"round {r + 1} {b}: {res['us_per_answer']:.2f} us/answer, {res['qps']:.0f} q/s, "
                      f"lost {res['lost']}", flush=True)
                time.sleep(0.5)
    finally:
        upstream.terminate()
        upstream.wait()
    base = statistics.median(x["us_per_answer"] for x in results[binaries[0]])
    print(f"\nUDP cache hits at {args.rate} q/s, {args.rounds} alternating rounds of {args.duration} s, medians:\n")
    print("| server | CPU µs/answer (median) | rounds | vs ceiling |")
    print("|---|---|---|---|")
    for b in binaries:
        xs = [x["us_per_answer"] for x in results[b]]
        med = statistics.median(xs)
        print(f"| {b} | {med:.2f} | {' '.join(f'{x:.2f}' for x in xs)} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()
