#!/usr/bin/env python3
"""Cache misses through an encrypted upstream: kudurru against Unbound and dnsdist, in one run.

One command (from the repository root):

    python3 benches/peers/upstream_tls.py            # ~3.5 minutes (2 rounds)
    python3 benches/peers/upstream_tls.py --quick    # ~1.5 minutes (1 round)

The upstream: one kudurru process (`--cores 1`, pinned to CPU 1) serving a wildcard zone,
`*.miss.bench.example. A 192.0.2.1`, authoritatively over plain DNS, DoT, DoH (HTTP/2), DoQ and
DoH3, with a certificate for `upstream.bench.example` from a CA made here (openssl). Every system
under test asks this same process, over the same certificate and trust anchor, so the rows differ
only in the forwarder. It answers a wildcard from its zone (no upstream of its own, no cache
work) for a few µs of CPU per query, which is well under what a forwarder spends on the miss;
its CPU per answer is reported beside every row so that this stays checkable. It shares CPU 1
with the load generator and never runs on CPU 0, the measured core.

Misses are guaranteed: kudurru-bench sends only fresh names (`--miss-ratio 1`: a random 16-hex
label under miss.bench.example. per query, never asked before), over UDP, from CPU 1.

Systems under test, one at a time, each pinned to CPU 0 with one worker:
  kudurru-tcp    `--upstream tcp://…` (plain TCP, pipelined: the reference without TLS)
  kudurru-tls    `--upstream tls://…#upstream.bench.example`, the CA through upstream.tls.caFile
  kudurru-https  `https://…/dns-query#upstream.bench.example` (DoH, HTTP/2)
  kudurru-quic   `quic://…#upstream.bench.example` (DoQ)
  kudurru-h3     `h3://…/dns-query#upstream.bench.example` (DoH3)
  unbound-tls    `forward-zone "."`, `forward-tls-upstream: yes`, `tls-cert-bundle` the CA,
                 `num-threads: 1`, `max-reuse-tcp-queries` raised so that its connections are not
                 closed after 200 queries (its default) and re-handshaken during the run
  dnsdist-tls    `newServer{tls="openssl", subjectName=…, caStore=…, maxInFlight=1000}`: queries
                 received over UDP go to the DoT backend through its TCP workers; maxInFlight lets
                 it pipeline them on a few connections (without it dnsdist 1.7 holds one
                 connection per query in flight, ~1,800 at 3k q/s, and loses queries); all its
                 threads on CPU 0

Workloads, per system:
  rate  open loop at --rate q/s for --duration s: server CPU (utime+stime of all its threads,
        /proc/PID/stat) per NOERROR answer, latency p50/p99 (kudurru-bench's service latency)
  max   closed loop, --concurrency queries outstanding over 4 sockets: answered q/s and CPU per answer at the
        system's capacity on its one core. The CPU 0 and CPU 1 busy columns say how close to it:
        on a shared machine the other sessions' work keeps a share of both cores, so a row at
        70-80% of CPU 0 with CPU 1 not full is as far as that run could push

A row where the system answered under 99% NOERROR, or where the upstream's query counter
(kudurru_dns_queries_total, by transport, in the JSON) moved by less than the answers, is shown
but not compared (a kudurru build whose upstream client for a protocol is still a stub answers
SERVFAIL: its row says so). TCP segments per answer (nstat TcpOutSegs, the whole host) show how
well each system gathers its writes. Rounds
alternate the order of the systems; medians are reported. Needs: unbound, dnsdist, openssl,
taskset, dig; a release build (built here unless --no-build, into $CARGO_TARGET_DIR or target/).
The run renices itself and everything it starts, and their scheduler autogroups, to --nice (-15
by default) when it may, so that other work on a shared machine takes little from it.
Traffic stays on 127.0.0.1. Prints Markdown for docs/benchmarks.md and writes a JSON report.
"""

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import CLIENT_CPU, ROOT, SERVER_CPU, cpu_seconds, log, machine  # noqa: E402
from zones import Api, BenchError, Proc, primary_spec, query, wait_for, zone_object  # noqa: E402

TARGET = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"), "release")
TLS_NAME = "upstream.bench.example"
APEX = "miss.bench.example."
ANSWER = "192.0.2.1"
# The upstream's listeners (all on one kudurru process on CPU 1).
UP = {"dns": 27700, "tls": 27701, "https": 27702, "quic": 27703, "h3": 27704}
UP_OPS, UP_API = 27780, 27790
DEAD = 27799  # the upstream's own upstream: nothing listens, every answer comes from its zone
PORTS = {"kudurru": 27710, "unbound": 27711, "dnsdist": 27712}
SUT_OPS = 27781
# The upstream is not to be the limit: it admits any number of connections from a client (its
# default refuses past 64 per client prefix; dnsdist without maxInFlight opens one per query in
# flight) and takes up to 1024 queries in flight on one connection (TCP and DoT pipelining, DoH,
# DoQ and DoH3 concurrent streams; its default of 64 held the QUIC rows, one connection per core,
# to ~30k q/s with CPU 0 half idle: --upstream-pipelined 64 shows that).
UPSTREAM_ENV = {"KUDURRU_TCP__MAXCONNECTIONSPERCLIENT": "8192", "KUDURRU_TCP__MAXCONNECTIONSPERCORE": "16384",
                "KUDURRU_QUIC__MAXCONNECTIONSPERCLIENT": "8192"}
KUDURRU_ROWS = {
    "kudurru-tcp": f"tcp://127.0.0.1:{UP['dns']}",
    "kudurru-tls": f"tls://127.0.0.1:{UP['tls']}#{TLS_NAME}",
    "kudurru-https": f"https://127.0.0.1:{UP['https']}/dns-query#{TLS_NAME}",
    "kudurru-quic": f"quic://127.0.0.1:{UP['quic']}#{TLS_NAME}",
    "kudurru-h3": f"h3://127.0.0.1:{UP['h3']}/dns-query#{TLS_NAME}",
}
SYSTEMS = list(KUDURRU_ROWS) + ["unbound-tls", "dnsdist-tls"]
# The row every other is compared with, and the row the issue's target is about.
BASELINE, TARGET_ROW = "unbound-tls", "kudurru-tls"


def make_certs(workdir):
    """A CA and a leaf for TLS_NAME (and 127.0.0.1) signed by it; (ca, cert, key) paths."""
    ca_key, ca = os.path.join(workdir, "ca.key"), os.path.join(workdir, "ca.pem")
    key, csr, cert = (os.path.join(workdir, n) for n in ("up.key", "up.csr", "up.pem"))
    ext = os.path.join(workdir, "up.ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName=DNS:{TLS_NAME},IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    run = lambda *argv: subprocess.run(["openssl", *argv], check=True, capture_output=True)  # noqa: E731
    run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", ca_key)
    run("req", "-x509", "-new", "-key", ca_key, "-sha256", "-days", "2", "-subj", "/CN=kudurru bench CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-out", ca)
    run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key + ".sec1")
    run("pkcs8", "-topk8", "-nocrypt", "-in", key + ".sec1", "-out", key)
    run("req", "-new", "-key", key, "-subj", f"/CN={TLS_NAME}", "-out", csr)
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2", "-sha256",
        "-extfile", ext, "-out", cert)
    for path in (key, ca_key):
        os.chmod(path, 0o644)  # dnsdist and Unbound may drop privileges before reading
    return ca, cert, key


def write_zone(path):
    with open(path, "w") as f:
        f.write("\n".join([f"$ORIGIN {APEX}", "$TTL 3600",
                           f"@ IN SOA ns1.{APEX} hostmaster.{APEX} 1 3600 600 604800 300",
                           f"@ IN NS ns1.{APEX}", "ns1 IN A 192.0.2.53", f"* IN A {ANSWER}"]) + "\n")


def prioritise(pid, nice):
    """Renices process `pid` and its scheduler autogroup (one per session: the servers here are
    started in sessions of their own, and with autogroups on, a process's niceness only counts
    against the processes of its own session)."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
        if os.path.exists(f"/proc/{pid}/autogroup"):
            with open(f"/proc/{pid}/autogroup", "w") as f:
                f.write(str(nice))
    except OSError as e:
        log(f"cannot renice process {pid} to {nice} ({e}): other work on the machine competes with it")


def start_upstream(workdir, cert, key, nice, pipelined):
    """The kudurru upstream on CPU 1 serving the wildcard zone on every transport; its Proc."""
    binary = os.path.join(TARGET, "kudurru")
    data = os.path.join(workdir, "upstream-data")
    zonedir = os.path.join(workdir, "zones")
    os.makedirs(zonedir, exist_ok=True)
    write_zone(os.path.join(zonedir, "miss.zone"))
    token = subprocess.run([binary, "token", "create", "--role", "operator", "--data-dir", data],
                           check=True, capture_output=True, text=True).stdout.strip()
    argv = [binary, "serve", "--cores", "1", "--cpus", CLIENT_CPU,
            "--listen", f"127.0.0.1:{UP['dns']}", "--listen", f"tls://127.0.0.1:{UP['tls']}",
            "--listen", f"https://127.0.0.1:{UP['https']}/dns-query", "--listen", f"quic://127.0.0.1:{UP['quic']}",
            "--listen", f"h3://127.0.0.1:{UP['h3']}/dns-query", "--tls-cert", cert, "--tls-key", key,
            "--upstream", f"udp://127.0.0.1:{DEAD}", "--ops-address", f"127.0.0.1:{UP_OPS}",
            "--api-address", f"127.0.0.1:{UP_API}", "--data-dir", data, "--log-level", "warn"]
    proc = Proc("upstream", argv, UP["dns"], workdir, env=UPSTREAM_ENV | {"KUDURRU_ZONES__FILEDIR": zonedir, "KUDURRU_TCP__MAXPIPELINED": str(pipelined)}, cpus=CLIENT_CPU)
    proc.start()
    prioritise(proc.pid, nice)
    wait_for(proc, lambda: query(UP["dns"], "localhost.", 1, 0.2) is not None, "an answer", 60)
    Api(UP_API, token).expect((200, 201), "POST", "/api/v1/zones",
                              zone_object("miss", primary_spec(APEX, os.path.join(zonedir, "miss.zone"))))
    probe = f"probe.{APEX}"
    wait_for(proc, lambda: (query(UP["dns"], probe, 1, 0.2) or {}).get("aa"), "the wildcard zone", 60)
    return proc


def sut_argv(system, workdir, ca):
    """(argv, env, port) of a system under test."""
    if system in KUDURRU_ROWS:
        argv = [os.path.join(TARGET, "kudurru"), "serve", "--cores", "1", "--cpus", SERVER_CPU,
                "--listen", f"127.0.0.1:{PORTS['kudurru']}", "--upstream", KUDURRU_ROWS[system],
                "--ops-address", f"127.0.0.1:{SUT_OPS}", "--api-address", "", "--log-level", "warn"]
        return argv, {"KUDURRU_UPSTREAM__TLS__CAFILE": ca}, PORTS["kudurru"]
    if system == "unbound-tls":
        conf = os.path.join(workdir, "unbound.conf")
        with open(conf, "w") as f:
            f.write(f"""server:
    interface: 127.0.0.1@{PORTS['unbound']}
    port: {PORTS['unbound']}
    num-threads: 1
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
    outgoing-num-tcp: 16
    max-reuse-tcp-queries: 1000000
    tcp-reuse-timeout: 60000
    so-rcvbuf: 8m
    so-sndbuf: 8m
    tls-cert-bundle: {ca}
forward-zone:
    name: "."
    forward-tls-upstream: yes
    forward-addr: 127.0.0.1@{UP['tls']}#{TLS_NAME}
""")
        return ["unbound", "-d", "-c", conf], None, PORTS["unbound"]
    if system == "dnsdist-tls":
        conf = os.path.join(workdir, "dnsdist.conf")
        with open(conf, "w") as f:
            f.write(f"""setSecurityPollSuffix("")
setLocal("127.0.0.1:{PORTS['dnsdist']}")
newServer{{address="127.0.0.1:{UP['tls']}", name="up", tls="openssl", subjectName="{TLS_NAME}",
          caStore="{ca}", validateCertificates=true, healthCheckMode="lazy",
          checkName="health.{APEX}", maxInFlight=1000}}
pc = newPacketCache(2000000, {{maxTTL=86400, minTTL=0}})
getPool(""):setCache(pc)
""")
        return ["dnsdist", "--supervised", "--disable-syslog", "-C", conf], None, PORTS["dnsdist"]
    raise BenchError(f"unknown system {system}")


def bench(port, workdir, duration, rate, concurrency):
    """kudurru-bench over UDP, fresh names only; its JSON report."""
    out = os.path.join(workdir, "bench.json")
    argv = ["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-bench"), f"udp://127.0.0.1:{port}",
            "--suffix", APEX, "--miss-ratio", "1", "--duration", f"{duration}s", "--connections", "4",
            "--timeout", "2s", "--json", out]
    argv += ["--rate", str(rate)] if rate else ["--concurrency", str(concurrency)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def measure(proc, upstream, port, workdir, duration, rate=None, concurrency=None):
    asked0, segments0 = upstream_queries(), tcp_segments_sent()
    cpu0, up0 = cpu_seconds(proc.pid), cpu_seconds(upstream.pid)
    gen0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rep = bench(port, workdir, duration, rate, concurrency)
    wall = time.perf_counter() - t0
    cpu, up = cpu_seconds(proc.pid) - cpu0, cpu_seconds(upstream.pid) - up0
    gen1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    gen = gen1.ru_utime + gen1.ru_stime - gen0.ru_utime - gen0.ru_stime
    connections = upstream_connections()
    segments = tcp_segments_sent() - segments0
    asked = {t: n - asked0.get(t, 0) for t, n in upstream_queries().items() if n - asked0.get(t, 0)}
    noerror = rep["rcodes"].get("NOERROR", 0)
    return {"sent": rep["sent"], "answered": rep["answered"], "noerror": noerror,
            "servfail": rep["rcodes"].get("SERVFAIL", 0), "timeouts": rep["timeouts"], "qps": rep["qps"],
            "noerror_qps": noerror / rep["duration_s"] if rep["duration_s"] else 0,
            "p50_us": rep["service_latency"]["p50_us"], "p99_us": rep["service_latency"]["p99_us"],
            "server_cpu_s": cpu, "cpu_share": cpu / wall, "cpu1_share": (up + gen) / wall,
            "cpu_us_per_answer": cpu / noerror * 1e6 if noerror else None,
            "upstream_cpu_us_per_answer": up / noerror * 1e6 if noerror else None,
            "upstream_connections": connections, "upstream_queries": asked,
            "tcp_segments_per_answer": segments / noerror if noerror else None}


def tcp_segments_sent():
    """TCP segments the host has sent (nstat TcpOutSegs; on loopback both directions, and
    whatever else runs on the machine: a rough figure)."""
    out = subprocess.run(["nstat", "-az", "TcpOutSegs"], capture_output=True, text=True).stdout
    m = re.search(r"TcpOutSegs\s+(\d+)", out)
    return int(m.group(1)) if m else 0


def upstream_queries():
    """Queries the upstream received, by transport (its kudurru_dns_queries_total): each answer
    of a system under test must have cost one, or the row measured something else."""
    counts = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{UP_OPS}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            m = re.match(r'kudurru_dns_queries_total\{transport="([^"]+)",core="\d+"\} (\d+)', line)
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + int(m.group(2))
    return counts


def upstream_connections():
    """TCP connections open to the upstream's DNS, DoT and DoH ports, and UDP sockets connected
    to its QUIC ports (one per DoQ or DoH3 connection), from the systems under test."""
    match = " or ".join(f"dport = :{port}" for port in UP.values())
    out = subprocess.run(["ss", "-Htun", "state", "connected", f"( {match} )"], capture_output=True, text=True).stdout
    return len([line for line in out.splitlines() if line.strip()])


def one_system(system, args, workdir, ca, upstream):
    argv, env, port = sut_argv(system, workdir, ca)
    proc = Proc(system, argv, port, workdir, env=env, cpus=SERVER_CPU)
    proc.start()
    prioritise(proc.pid, args.nice)
    try:
        wait_for(proc, lambda: query(port, "localhost.", 1, 0.3) is not None
                 or query(port, f"warm.{APEX}", 1, 0.3) is not None, "an answer", 30)
        # A few misses first: connections to the upstream open and handshake before the
        # measured runs (each system keeps them; the runs measure the steady state).
        bench(port, workdir, 1, 2000, None)
        res = {"rate": measure(proc, upstream, port, workdir, args.duration, rate=args.rate),
               "max": measure(proc, upstream, port, workdir, args.duration, concurrency=args.concurrency)}
    finally:
        proc.stop()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs, one round")
    ap.add_argument("--duration", type=int, default=6, help="seconds per measured run")
    ap.add_argument("--rate", type=int, default=10000, help="offered misses per second in the `rate` runs")
    ap.add_argument("--concurrency", type=int, default=400, help="outstanding queries in the `max` runs")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    ap.add_argument("--json", default=os.path.join(os.path.dirname(TARGET), "bench-upstream-tls.json"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--upstream-pipelined", type=int, default=1024,
                    help="queries in flight per connection the upstream takes (its tcp.maxPipelined)")
    ap.add_argument("--nice", type=int, default=-15,
                    help="niceness of the run and everything it starts (negative needs root: on a shared "
                         "machine, niced builds then take little from the measured processes)")
    args = ap.parse_args()
    prioritise(os.getpid(), args.nice)
    if args.quick:
        args.duration, args.rounds = 4, 1
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        sys.exit(f"unknown systems {unknown}; known: {SYSTEMS}")
    for tool in ("unbound", "dnsdist", "openssl", "taskset", "dig"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install unbound dnsdist openssl util-linux dnsutils")
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kudurru-control", "-p", "kudurru-bench"],
                       cwd=ROOT, check=True)
    workdir = tempfile.mkdtemp(prefix="kudurru-bench-upstream-tls-")
    ca, cert, key = make_certs(workdir)
    report = {"machine": machine(), "offered": vars(args), "systems": systems, "rounds": []}
    upstream = start_upstream(workdir, cert, key, args.nice, args.upstream_pipelined)
    try:
        for r in range(args.rounds):
            results = {}
            for system in (systems if r % 2 == 0 else systems[::-1]):
                log(f"== round {r + 1}: {system}")
                try:
                    results[system] = one_system(system, args, workdir, ca, upstream)
                except (BenchError, subprocess.CalledProcessError) as e:
                    log(f"{system}: {e}")
                    results[system] = {"error": str(e)}
                log(json.dumps(results[system]))
            report["rounds"].append(results)
    finally:
        upstream.stop()
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(markdown(report))
    log(f"JSON report: {args.json}; logs in {workdir}")


def median_of(report, system, workload, key):
    values = [r[system][workload][key] for r in report["rounds"]
              if workload in r.get(system, {}) and r[system][workload].get(key) is not None]
    return statistics.median(values) if values else None


def valid(report, system, workload):
    """Counted when at least 99% of what was sent came back NOERROR, and every answer was asked
    of the upstream (its query counter moved by at least as much)."""
    sent = median_of(report, system, workload, "sent") or 0
    noerror = median_of(report, system, workload, "noerror") or 0
    asked = [sum(r[system][workload]["upstream_queries"].values()) >= r[system][workload]["noerror"]
             for r in report["rounds"] if workload in r.get(system, {})]
    return sent > 0 and noerror / sent >= 0.99 and all(asked)


def markdown(report):
    o = report["offered"]
    lines = [f"`rate`: {o['rate']} fresh names/s offered over UDP for {o['duration']} s; `max`: closed loop, "
             f"{o['concurrency']} outstanding. Median of {len(report['rounds'])} alternating round(s). CPU is the "
             "system's (CPU 0) per NOERROR answer; `up µs` is the upstream's (CPU 1) per answer; CPU 1 busy is "
             "the upstream's and the generator's CPU time over the run's; TCP segs/answer: nstat TcpOutSegs (the whole "
             "host, both directions on loopback) per answer. A row under "
             "99% NOERROR is shown, not compared.", "",
             "| system | load | answered q/s | NOERROR | p50 ms | p99 ms | CPU µs/answer | CPU 0 busy | CPU 1 busy | up µs | TCP segs/answer "
             f"| vs {BASELINE} CPU | vs {TARGET_ROW} CPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for workload in ("rate", "max"):
        for system in report["systems"]:
            errors = [r[system]["error"] for r in report["rounds"] if "error" in r.get(system, {})]
            if errors and median_of(report, system, workload, "sent") is None:
                lines.append(f"| {system} | {workload} | failed: {errors[0][:80]} | | | | | | | | | | |")
                continue
            g = lambda key: median_of(report, system, workload, key)  # noqa: E731
            sent, noerror = g("sent") or 0, g("noerror") or 0
            cpu = g("cpu_us_per_answer")
            ratios = []
            for base in (BASELINE, TARGET_ROW):
                base_cpu = median_of(report, base, workload, "cpu_us_per_answer")
                ok = cpu and base_cpu and valid(report, system, workload) and valid(report, base, workload)
                ratios.append(f"{cpu / base_cpu:.2f}x" if ok else "—")
            share = f"{noerror / sent:.1%}" if sent else "—"
            if sent and noerror / sent < 0.99 and (g("servfail") or 0) > sent / 2:
                share += " (SERVFAIL)"
            fmt = lambda v, scale=1, spec=".2f": "—" if v is None else format(v * scale, spec)  # noqa: E731
            lines.append(f"| {system} | {workload} | {g('noerror_qps') or 0:,.0f} | {share} | "
                         f"{fmt(g('p50_us'), 1e-3, '.3f')} | {fmt(g('p99_us'), 1e-3, '.3f')} | {fmt(cpu, 1, '.1f')} | "
                         f"{fmt(g('cpu_share'), 100, '.0f')}% | {fmt(g('cpu1_share'), 100, '.0f')}% | {fmt(g('upstream_cpu_us_per_answer'), 1, '.1f')} | "
                         f"{fmt(g('tcp_segments_per_answer'), 1, '.2f')} | "
                         f"{ratios[0]} | {ratios[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
