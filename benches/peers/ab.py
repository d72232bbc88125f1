#!/usr/bin/env python3
"""Servers side by side in alternating rounds: server CPU per answered query.

    python3 benches/peers/ab.py --binaries OLD/kudurru,NEW/kudurru --rate 40000
    python3 benches/peers/ab.py --binaries target/release/kudurru,dnsdist,unbound --workload tcp-hit --rate 40000
    python3 benches/peers/ab.py --binaries target/release/kudurru,unbound --workload miss --rate 15000
    python3 benches/peers/ab.py --binaries target/release/kudurru,unbound --workload miss --rate 5000 --upstream-tcp
    python3 benches/peers/ab.py --binaries target/release/kudurru --workload tcp-hit --outstanding 1

For a change to the data plane or to the vendored glommio: build the binary before and after
(copy each `target/release/kudurru` aside), then run this. A server is a kudurru binary
(`serve --cores 1`), `ceiling` (`kudurru-echo --mode echo --tcp`: batched UDP, and TCP with
one `epoll` thread that answers every whole frame of a read with one write), `glommio-floor`
(`kudurru-echo --mode echo --glommio`: UDP echoed from a glommio executor that sleeps as a kudurru
listener does at light load, the least a server on glommio pays per wake-up; UDP `hit` runs only),
`unbound` or `dnsdist`
(configured as in compare.py: caching forwarders to the same upstream). Each round starts every
server in turn pinned to CPU 0, warms its cache and drives the workload with dnsperf at the same
offered rate from CPU 1, next to the `kudurru-echo --mode answer` upstream:

  hit      UDP cache hits on 1000 names (the default; the ceiling is added first)
  tcp-hit  the same over TCP (dnsperf -m tcp, 8 persistent connections; the ceiling is added
           first); also reports the TCP segments the host sent per answer (nstat TcpOutSegs,
           both directions on loopback)
  miss     a fresh file of unique names every round, each asked once (every query goes upstream)

With --outstanding N, dnsperf instead keeps N queries outstanding on one connection (`-c 1 -q
N`, no rate): with 1, every answer waits for the server to wake up, so the CPU per answer is the
cost of one wake-up, one read and one write (the per-wake cost that partial loads pay).

The server's utime+stime over the run, divided by the answers, is its CPU per answer. Rounds
alternate the order of the servers so drift on a shared machine lands on all of them. Prints each
round and the medians, with each median's ratio to the first server's.

Needs: dnsperf, taskset, nstat (iproute2) for tcp-hit, unbound/dnsdist when named, a release
build of kudurru-echo. Traffic stays on 127.0.0.1.
"""

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (CLIENT_CPU, OPS_PORT, PORTS, TARGET, UPSTREAM_PORT, Server, configs,  # noqa: E402
                     dnsperf, measure, write_names)


def server_argv(server, unbound_conf, dnsdist_conf, upstream_scheme="udp"):
    """The command line and port of a server named on --binaries."""
    if server == "ceiling":
        port = PORTS["ceiling"]
        return [os.path.join(TARGET, "kudurru-echo"), "--mode", "echo", "--tcp", "--listen", f"127.0.0.1:{port}"], port
    if server == "glommio-floor":
        port = PORTS["glommio-floor"]
        return [os.path.join(TARGET, "kudurru-echo"), "--mode", "echo", "--glommio", "--listen",
                f"127.0.0.1:{port}"], port
    if server == "unbound":
        return ["unbound", "-d", "-c", unbound_conf], PORTS["unbound"]
    if server == "dnsdist":
        return ["dnsdist", "--supervised", "--disable-syslog", "-C", dnsdist_conf], PORTS["dnsdist"]
    port = PORTS["kudurru"]
    return [server, "serve", "--cores", "1", "--cpus", "0", "--listen", f"127.0.0.1:{port}", "--upstream",
            f"{upstream_scheme}://127.0.0.1:{UPSTREAM_PORT}", "--ops-address", f"127.0.0.1:{OPS_PORT}",
            "--log-level", "warn"], port


def upstream_over_tcp(unbound_conf, dnsdist_conf):
    """The peers' configurations, rewritten to ask the upstream over TCP only."""
    with open(unbound_conf) as f:
        text = f.read()
    with open(unbound_conf, "w") as f:
        f.write(text.replace("forward-zone:\n", "forward-zone:\n    forward-tcp-upstream: yes\n"))
    with open(dnsdist_conf) as f:
        text = f.read()
    with open(dnsdist_conf, "w") as f:
        f.write(text.replace('healthCheckMode="lazy"', 'healthCheckMode="lazy", tcpOnly=true'))
    return unbound_conf, dnsdist_conf


def tcp_segments_sent():
    out = subprocess.run(["nstat", "-az", "TcpOutSegs"], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"TcpOutSegs\s+(\d+)", out).group(1))


def one_run(server, args, workdir, hits, rng, confs):
    argv, port = server_argv(server, *confs, upstream_scheme="tcp" if args.upstream_tcp else "udp")
    tcp = args.workload == "tcp-hit"
    with Server(os.path.basename(server), argv, port, workdir) as srv:
        if args.workload == "miss":
            data = os.path.join(workdir, "misses.txt")
            count = args.rate * (args.duration + 1)
            write_names(data, [f"m{rng.getrandbits(48):x}.miss.example." for _ in range(count)])
            res = measure(srv, data, args.duration, args.rate, runs=1)
        else:
            dnsperf(port, hits, 5, 20000, runs=1)  # warm: every name once
            if tcp:
                dnsperf(port, hits, 5, 20000, mode="tcp", runs=1)  # and the TCP connections' path
            segments = tcp_segments_sent() if tcp else 0
            if args.outstanding:
                res = measure(srv, hits, args.duration, None, mode="tcp" if tcp else "udp", clients=1,
                              outstanding=args.outstanding)
            else:
                res = measure(srv, hits, args.duration, args.rate, mode="tcp" if tcp else "udp")
            if tcp:
                res["segments_per_answer"] = (tcp_segments_sent() - segments) / max(res["completed"], 1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binaries", required=True,
                    help="comma-separated servers: kudurru binaries, 'ceiling', 'glommio-floor', 'unbound', 'dnsdist'")
    ap.add_argument("--workload", choices=["hit", "tcp-hit", "miss"], default="hit")
    ap.add_argument("--rate", type=int, default=40000, help="offered QPS (dnsperf -Q)")
    ap.add_argument("--outstanding", type=int, default=0,
                    help="closed loop with this many queries outstanding on one connection instead of --rate "
                         "(hit and tcp-hit)")
    ap.add_argument("--upstream-tcp", action="store_true",
                    help="every server asks the upstream over TCP (kudurru tcp://, Unbound "
                         "forward-tcp-upstream, dnsdist tcpOnly)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=6, help="seconds per measured run")
    args = ap.parse_args()
    servers = [b for b in args.binaries.split(",") if b]
    if args.workload in ("hit", "tcp-hit") and "ceiling" not in servers:
        servers.insert(0, "ceiling")
    if args.outstanding and args.workload == "miss":
        sys.exit("ab.py: --outstanding is for hit and tcp-hit")
    if args.workload == "miss" and ("ceiling" in servers or "glommio-floor" in servers):
        sys.exit("ab.py: the echo servers resolve nothing; leave them out of miss runs")
    if args.workload == "tcp-hit" and "glommio-floor" in servers:
        sys.exit("ab.py: glommio-floor answers UDP only")
    workdir = tempfile.mkdtemp(prefix="kudurru-ab-")
    hits = os.path.join(workdir, "hits.txt")
    write_names(hits, [f"h{i}.bench.example." for i in range(1000)])
    confs = configs(workdir)
    if args.upstream_tcp:
        confs = upstream_over_tcp(*confs)
    rng = random.Random()
    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-echo"), "--mode",
                                 "answer", "--tcp", "--listen", f"127.0.0.1:{UPSTREAM_PORT}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {s: [] for s in servers}
    try:
        for r in range(args.rounds):
            for s in (servers if r % 2 == 0 else servers[::-1]):
                res = one_run(s, args, workdir, hits, rng, confs)
                results[s].append(res)
                extra = f", {res['segments_per_answer']:.2f} segments/answer" if "segments_per_answer" in res else ""
                print(f"round {r + 1} {s}: {res['cpu_us_per_answer'] or 0:.2f} us/answer, {res['qps']:.0f} q/s, "
                      f"lost {res['lost']}{extra}", flush=True)
    finally:
        upstream.terminate()
        upstream.wait()
    shutil.rmtree(workdir, ignore_errors=True)
    base = statistics.median(x["cpu_us_per_answer"] or 0 for x in results[servers[0]])
    load = f"{args.outstanding} outstanding" if args.outstanding else f"{args.rate} q/s"
    print(f"\n{args.workload} at {load}, {args.rounds} alternating rounds of {args.duration} s, medians:\n")
    print(f"| server | CPU µs/answer (median) | rounds | answered q/s (median) | vs {servers[0]} |")
    print("|---|---|---|---|---|")
    for s in servers:
        xs = [x["cpu_us_per_answer"] or 0 for x in results[s]]
        med = statistics.median(xs)
        qps = statistics.median(x["qps"] for x in results[s])
        print(f"| {s} | {med:.2f} | {' '.join(f'{x:.2f}' for x in xs)} | {qps:.0f} | "
              f"{med / base if base else 0:.2f}x |")


if __name__ == "__main__":
    main()
