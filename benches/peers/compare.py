#!/usr/bin/env python3
"""Compare kudurru with Unbound, dnsdist and the batched echo ceiling, in one run.

One command (from the repository root):

    python3 benches/peers/compare.py            # full run, ~6 minutes
    python3 benches/peers/compare.py --quick    # shorter runs, ~2 minutes

Every server under test is pinned to CPU 0; dnsperf and the benchmark upstream (kudurru-echo in
answer mode) are pinned to CPU 1. For each server and workload it reports dnsperf's QPS and
latency and the server's CPU time per answered query (utime+stime from /proc/PID/stat over the
measured run, divided by answers). All servers get the same offered rate (dnsperf -Q), so when
the generator is the limit they are compared on CPU per query. Ratios are against the echo
ceiling measured in the same run: kudurru-echo with batched UDP and, for tcp-hit, one `epoll`
thread that answers every whole frame of a read with one write.

Workloads:
  udp-hit   1000 names, warmed, then asked over and over (cache hits)
  tcp-hit   the same over TCP (dnsperf -m tcp, persistent connections)
  udp-miss  unique random names, each asked once (every query goes upstream)
  latency   udp-hit at a moderate rate with per-query latency (dnsperf -v) for percentiles
  tcp-max   tcp-hit with no rate limit (closed loop, 512 queries outstanding): each server's
            capacity on its one core, where CPU per answer is 1/QPS
  miss-max  udp-miss with no rate limit, likewise

At a fixed offered rate below a server's capacity, its CPU per answer includes the cost of
waking for nearly every query; a saturated server batches (several queries per read, several
answers per write) and its CPU per answer drops. The fixed-rate rows compare the servers at the
same load; the -max rows compare their capacity. Both are reported because on TCP and on misses
the peers saturate at or near the fixed rates.

Also measured: kudurru's RSS and bytes per cached entry with 1M cached names, and, with
--cores 2, hit rate and upstream queries per distinct name for a Zipf-distributed mixed workload.

Needs: dnsperf, unbound, dnsdist (Debian packages), a release build (built here). Traffic stays
on 127.0.0.1. Writes a JSON report (--json) and prints Markdown tables for docs/benchmarks.md.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.path.join(ROOT, "target", "release")
UPSTREAM_PORT = 27400
PORTS = {"ceiling": 27401, "kudurru": 27402, "unbound": 27403, "dnsdist": 27404, "glommio-floor": 27405}
OPS_PORT = 27481
SERVER_CPU = "0"
CLIENT_CPU = "1"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cpu_seconds(pid):
    """utime+stime of a process and all its threads, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def port_free(port):
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        s = socket.socket(socket.AF_INET, kind)
        # Connections of the previous run in TIME_WAIT do not hold the port (the servers bind
        # with SO_REUSEADDR too); a listener does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def wait_answering(port, tcp=False, timeout=20):
    deadline = time.time() + timeout
    args = ["dig", "@127.0.0.1", "-p", str(port), "+time=1", "+tries=1", "localhost", "A"]
    if tcp:
        args.append("+tcp")
    while time.time() < deadline:
        out = subprocess.run(args, capture_output=True, text=True).stdout
        if "status:" in out:
            return
        time.sleep(0.2)
    raise RuntimeError(f"server on port {port} did not answer")


class Server:
    def __init__(self, name, argv, port, workdir, tcp=True):
        self.name, self.argv, self.port, self.tcp = name, argv, port, tcp
        self.log = open(os.path.join(workdir, f"{name}.log"), "w")
        self.proc = None

    def __enter__(self):
        if not port_free(self.port):
            raise RuntimeError(f"port {self.port} is in use; stop whatever holds it")
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU] + self.argv, stdout=self.log, stderr=self.log)
        wait_answering(self.port)
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def dnsperf(port, datafile, duration, rate, mode="udp", runs=None, verbose=False, clients=8, outstanding=512):
    argv = ["taskset", "-c", CLIENT_CPU, "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", datafile,
            "-l", str(duration), "-c", str(clients), "-q", str(outstanding), "-t", "2", "-m", mode]
    if rate:
        argv += ["-Q", str(rate)]
    if runs:
        argv += ["-n", str(runs)]
    if verbose:
        argv.append("-v")
    out = subprocess.run(argv, capture_output=True, text=True)
    return out.stdout


def parse_dnsperf(out):
    def grab(pattern, cast=float, default=0):
        m = re.search(pattern, out)
        return cast(m.group(1)) if m else default
    return {
        "sent": grab(r"Queries sent:\s+(\d+)", int),
        "completed": grab(r"Queries completed:\s+(\d+)", int),
        "lost": grab(r"Queries lost:\s+(\d+)", int),
        "qps": grab(r"Queries per second:\s+([\d.]+)"),
        "avg_latency_ms": grab(r"Average Latency \(s\):\s+([\d.]+)") * 1000,
        "max_latency_ms": grab(r"Average Latency \(s\):.*max ([\d.]+)") * 1000,
        "noerror": grab(r"NOERROR (\d+)", int),
    }


def percentiles(verbose_out):
    lat = sorted(float(m.group(1)) for m in re.finditer(r"^> \S+ .* ([\d.]+)$", verbose_out, re.M))
    if not lat:
        return {}
    def p(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000
    return {"n": len(lat), "p50_ms": p(0.50), "p90_ms": p(0.90), "p99_ms": p(0.99), "p999_ms": p(0.999), "max_ms": lat[-1] * 1000}


def measure(server, datafile, duration, rate, mode="udp", runs=None, clients=8, outstanding=512):
    before = cpu_seconds(server.proc.pid)
    out = dnsperf(server.port, datafile, duration, rate, mode=mode, runs=runs, clients=clients,
                  outstanding=outstanding)
    cpu = cpu_seconds(server.proc.pid) - before
    r = parse_dnsperf(out)
    r["server_cpu_s"] = cpu
    r["cpu_us_per_answer"] = cpu / r["completed"] * 1e6 if r["completed"] else None
    r["server_cpu_share"] = cpu / duration
    return r


def write_names(path, names):
    with open(path, "w") as f:
        for n in names:
            f.write(f"{n} A\n")


def configs(workdir):
    unbound_conf = os.path.join(workdir, "unbound.conf")
    with open(unbound_conf, "w") as f:
        f.write(f"""server:
    interface: 127.0.0.1@{PORTS['unbound']}
    port: {PORTS['unbound']}
    num-threads: 1
    so-reuseport: yes
    access-control: 127.0.0.0/8 allow
    do-daemonize: no
    chroot: ""
    username: ""
    pidfile: ""
    logfile: ""
    use-syslog: no
    verbosity: 0
    module-config: "iterator"
    do-not-query-localhost: no
    qname-minimisation: no
    prefetch: no
    msg-cache-size: 512m
    rrset-cache-size: 1g
    num-queries-per-thread: 4096
    outgoing-range: 8192
    so-rcvbuf: 8m
    so-sndbuf: 8m
forward-zone:
    name: "."
    forward-addr: 127.0.0.1@{UPSTREAM_PORT}
""")
    dnsdist_conf = os.path.join(workdir, "dnsdist.conf")
    with open(dnsdist_conf, "w") as f:
        f.write(f"""setSecurityPollSuffix("")
setLocal("127.0.0.1:{PORTS['dnsdist']}")
newServer{{address="127.0.0.1:{UPSTREAM_PORT}", name="up", healthCheckMode="lazy"}}
pc = newPacketCache(2000000, {{maxTTL=86400, minTTL=0}})
getPool(""):setCache(pc)
""")
    return unbound_conf, dnsdist_conf


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    ap.add_argument("--hit-rate", type=int, default=120000, help="offered QPS for cache-hit runs")
    ap.add_argument("--tcp-rate", type=int, default=60000, help="offered QPS for TCP cache-hit runs")
    ap.add_argument("--miss-rate", type=int, default=25000, help="offered QPS for cache-miss runs")
    ap.add_argument("--json", default=os.path.join(ROOT, "target", "bench-compare.json"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-mixed", action="store_true")
    ap.add_argument("--servers", default="ceiling,kudurru,unbound,dnsdist", help="comma-separated subset")
    ap.add_argument("--workloads", default="udp-hit,latency,tcp-hit,udp-miss,tcp-max,miss-max", help="comma-separated subset")
    args = ap.parse_args()
    if args.quick:
        args.duration = 4
    for tool in ("dnsperf", "unbound", "dnsdist", "taskset", "dig"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install dnsperf unbound dnsdist util-linux dnsutils")
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kudurru-control", "-p", "kudurru-bench"], cwd=ROOT, check=True)
    kudurru = os.path.join(TARGET, "kudurru")
    echo = os.path.join(TARGET, "kudurru-echo")
    workdir = tempfile.mkdtemp(prefix="kudurru-bench-")
    rng = random.Random(42)
    hits = os.path.join(workdir, "hits.txt")
    write_names(hits, [f"h{i}.bench.example." for i in range(1000)])
    misses = os.path.join(workdir, "misses.txt")
    miss_count = args.miss_rate * args.duration * 2
    write_names(misses, [f"m{rng.getrandbits(48):x}.miss.example." for _ in range(miss_count)])
    # Enough fresh names for a saturated miss run (no server here answers 150k misses/s on a core).
    misses_max = os.path.join(workdir, "misses-max.txt")
    write_names(misses_max, [f"x{rng.getrandbits(48):x}.max.example." for _ in range(150_000 * args.duration)])
    unbound_conf, dnsdist_conf = configs(workdir)
    report = {"machine": machine(), "offered": vars(args), "results": {}}

    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, echo, "--mode", "answer", "--tcp", "--listen", f"127.0.0.1:{UPSTREAM_PORT}"],
                                stderr=subprocess.DEVNULL)
    try:
        servers = [
            ("ceiling", [echo, "--mode", "echo", "--tcp", "--listen", f"127.0.0.1:{PORTS['ceiling']}"]),
            ("kudurru", [kudurru, "serve", "--cores", "1", "--cpus", SERVER_CPU, "--listen", f"127.0.0.1:{PORTS['kudurru']}",
                         "--upstream", f"udp://127.0.0.1:{UPSTREAM_PORT}", "--ops-address", f"127.0.0.1:{OPS_PORT}",
                         "--log-level", "warn"]),
            ("unbound", ["unbound", "-d", "-c", unbound_conf]),
            ("dnsdist", ["dnsdist", "--supervised", "--disable-syslog", "-C", dnsdist_conf]),
        ]
        wanted = args.servers.split(",")
        workloads = args.workloads.split(",")
        for name, argv in servers:
            if name not in wanted:
                continue
            log(f"== {name}")
            with Server(name, argv, PORTS[name], workdir) as server:
                res = {}
                dnsperf(server.port, hits, 5, 20000, runs=1)  # warm the cache: every name once
                if "udp-hit" in workloads:
                    res["udp-hit"] = measure(server, hits, args.duration, args.hit_rate)
                if "latency" in workloads:
                    res["latency"] = percentiles(dnsperf(server.port, hits, 3, 20000, verbose=True))
                if "tcp-hit" in workloads:
                    dnsperf(server.port, hits, 5, 20000, mode="tcp", runs=1)  # dnsdist caches TCP apart
                    res["tcp-hit"] = measure(server, hits, args.duration, args.tcp_rate, mode="tcp")
                if name != "ceiling" and "udp-miss" in workloads:
                    res["udp-miss"] = measure(server, misses, args.duration, args.miss_rate, runs=1)
                if name != "ceiling" and "tcp-max" in workloads:
                    res["tcp-max"] = measure(server, hits, args.duration, None, mode="tcp")
                if name != "ceiling" and "miss-max" in workloads:
                    res["miss-max"] = measure(server, misses_max, args.duration, None, runs=1)
                report["results"][name] = res
                log(json.dumps(res))
        if not args.skip_memory:
            report["memory"] = memory_run(kudurru, workdir, rng)
        if not args.skip_mixed:
            report["mixed_two_cores"] = mixed_run(kudurru, workdir, rng, args)
    finally:
        upstream.send_signal(signal.SIGTERM)
        upstream.wait()
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(markdown(report))
    log(f"JSON report: {args.json}; logs in {workdir}")


def metrics(port=OPS_PORT):
    import urllib.request
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values = {}
    for line in body.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        series, value = line.rsplit(" ", 1)
        name = series.split("{", 1)[0]
        values[name] = values.get(name, 0) + float(value)
    return values


def memory_run(kudurru, workdir, rng):
    """RSS with 1M cached names, one core."""
    log("== memory: 1M cached names")
    names = os.path.join(workdir, "million.txt")
    write_names(names, [f"r{i:x}{rng.getrandbits(24):x}.mem.example." for i in range(1_000_000)])
    argv = [kudurru, "serve", "--cores", "1", "--cpus", SERVER_CPU, "--listen", f"127.0.0.1:{PORTS['kudurru']}",
            "--upstream", f"udp://127.0.0.1:{UPSTREAM_PORT}", "--ops-address", f"127.0.0.1:{OPS_PORT}", "--log-level", "warn"]
    env = dict(os.environ, KUDURRU_CACHE__MAXENTRIES="1100000")
    log_file = open(os.path.join(workdir, "memory.log"), "w")
    proc = subprocess.Popen(["taskset", "-c", SERVER_CPU] + argv, stdout=log_file, stderr=log_file, env=env)
    try:
        wait_answering(PORTS["kudurru"])
        base = rss_bytes(proc.pid)
        out = parse_dnsperf(dnsperf(PORTS["kudurru"], names, 120, 40000, runs=1))
        time.sleep(1.5)  # cache counters are copied once a second
        m = metrics()
        entries = int(m.get("kudurru_cache_entries", 0))
        rss = rss_bytes(proc.pid)
        return {"queries": out["completed"], "entries": entries, "rss_idle_bytes": base, "rss_bytes": rss,
                "bytes_per_entry": (rss - base) / entries if entries else None}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        log_file.close()


def mixed_run(kudurru, workdir, rng, args):
    """--cores 2, Zipf-distributed names: hit rate and upstream queries per distinct name."""
    log("== mixed workload on two cores")
    universe = [f"z{i}.mixed.example." for i in range(50_000)]
    weights = [1.0 / (i + 1) for i in range(len(universe))]
    queries = rng.choices(universe, weights=weights, k=400_000)
    path = os.path.join(workdir, "mixed.txt")
    write_names(path, queries)
    distinct = len(set(queries))
    argv = [kudurru, "serve", "--cores", "2", "--listen", f"127.0.0.1:{PORTS['kudurru']}",
            "--upstream", f"udp://127.0.0.1:{UPSTREAM_PORT}", "--ops-address", f"127.0.0.1:{OPS_PORT}", "--log-level", "warn"]
    log_file = open(os.path.join(workdir, "mixed.log"), "w")
    proc = subprocess.Popen(argv, stdout=log_file, stderr=log_file)
    try:
        wait_answering(PORTS["kudurru"])
        out = parse_dnsperf(dnsperf(PORTS["kudurru"], path, 60, 40000, runs=1, clients=32))
        time.sleep(1.5)
        m = metrics()
        hits, misses = m.get("kudurru_cache_hits_total", 0), m.get("kudurru_cache_misses_total", 0)
        upstream = m.get("kudurru_upstream_queries_total", 0)
        return {"queries": out["completed"], "distinct_names": distinct, "hit_rate": hits / (hits + misses) if hits + misses else None,
                "upstream_queries": upstream, "upstream_per_distinct_name": upstream / distinct,
                "cross_core_lookups": m.get("kudurru_cross_core_lookups_total", 0), "coalesced": m.get("kudurru_coalesced_queries_total", 0)}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        log_file.close()


def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {}
    for tool, flag in (("unbound", "-V"), ("dnsdist", "--version"), ("dnsperf", "-h")):
        out = subprocess.run([tool, flag], capture_output=True, text=True)
        text = (out.stdout + out.stderr).splitlines()
        versions[tool] = next((l.strip() for l in text if "ersion" in l or tool in l.lower()), "")
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": os.uname().release, "versions": versions,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(report):
    res = report["results"]
    ceilings = {w: res.get("ceiling", {}).get(w, {}).get("cpu_us_per_answer") for w in ("udp-hit", "tcp-hit")}
    lines = [f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, kernel {report['machine']['kernel']}, "
             f"{report['machine']['date']}.", ""]
    for workload, title in (("udp-hit", "UDP cache hits"), ("tcp-hit", "TCP cache hits (persistent connections)"),
                            ("udp-miss", "UDP cache misses (every query goes upstream)"),
                            ("tcp-max", "TCP cache hits at full load (no rate limit: capacity of one core)"),
                            ("miss-max", "UDP cache misses at full load (no rate limit: capacity of one core)")):
        lines += [f"### {title}", "", "| server | offered QPS | answered QPS | lost | avg latency ms | server CPU µs/answer | vs ceiling | vs kudurru |",
                  "|---|---|---|---|---|---|---|---|"]
        base = res.get("kudurru", {}).get(workload, {}).get("cpu_us_per_answer")
        for name in ("ceiling", "kudurru", "unbound", "dnsdist"):
            r = res.get(name, {}).get(workload)
            if not r:
                continue
            cpu = r["cpu_us_per_answer"]
            offered = {"udp-hit": report["offered"]["hit_rate"], "tcp-hit": report["offered"]["tcp_rate"],
                       "udp-miss": report["offered"]["miss_rate"]}.get(workload, "max")
            ceiling = ceilings.get(workload)
            vs_ceiling = f"{cpu / ceiling:.2f}x" if cpu and ceiling else "–"
            vs_kudurru = f"{cpu / base:.2f}x" if cpu and base else "–"
            lines.append(f"| {name} | {offered} | {r['qps']:.0f} | {r['lost']} | {r['avg_latency_ms']:.3f} | "
                         f"{cpu:.2f} | {vs_ceiling} | {vs_kudurru} |" if cpu else f"| {name} | {offered} | {r['qps']:.0f} | {r['lost']} | – | – | – | – |")
        lines.append("")
    lines += ["### Latency, UDP cache hits at 20k QPS (dnsperf -v)", "", "| server | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms |", "|---|---|---|---|---|---|"]
    for name in ("ceiling", "kudurru", "unbound", "dnsdist"):
        p = res.get(name, {}).get("latency")
        if p:
            lines.append(f"| {name} | {p['p50_ms']:.3f} | {p['p90_ms']:.3f} | {p['p99_ms']:.3f} | {p['p999_ms']:.3f} | {p['max_ms']:.3f} |")
    if report.get("memory"):
        m = report["memory"]
        lines += ["", f"Memory: {m['entries']} cached answers, RSS {m['rss_bytes'] / 2**20:.0f} MiB "
                  f"(idle {m['rss_idle_bytes'] / 2**20:.0f} MiB), {m['bytes_per_entry']:.0f} bytes per cached entry."]
    if report.get("mixed_two_cores"):
        m = report["mixed_two_cores"]
        lines += ["", f"Mixed workload, --cores 2: {m['queries']} Zipf-distributed queries over {m['distinct_names']} distinct names: "
                  f"hit rate {m['hit_rate']:.3f}, {m['upstream_queries']:.0f} upstream queries "
                  f"({m['upstream_per_distinct_name']:.3f} per distinct name), {m['cross_core_lookups']:.0f} cross-core lookups."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
