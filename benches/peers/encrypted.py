#!/usr/bin/env python3
"""DNS over TLS and DNS over HTTPS: kudurru against dnsdist, cache hits, in one run.

One command (from the repository root):

    python3 benches/peers/encrypted.py            # ~4 minutes
    python3 benches/peers/encrypted.py --quick    # ~2 minutes

Both servers are pinned to CPU 0 (kudurru `--cores 1`; dnsdist with all its threads), the load
generator and the benchmark upstream (kudurru-echo in answer mode) to CPU 1. Each server gets
the same certificate (`kudurru cert generate`) and the same offered rate over persistent
connections. Generators: dnsperf `-m dot` for DNS over TLS; for DNS over HTTPS (HTTP/2, GET and
POST) h2load from nghttp2 (one name, 4 connections x 100 streams) and kudurru-bench's
`https://` target (1000 names, 4 connections x 100 streams); dnsperf 2.10's own DoH loses
~97% of its queries against either server (docs/benchmarks.md) and is not used. Per run it
reports QPS, latency, and the server's CPU time per answered query (utime+stime of all its
threads over the run). Each workload runs twice: at --rate, where both servers keep up and CPU
per answer is the comparison, and unthrottled (`-max`), where the QPS one server core sustains
is (or, when the generator is the limit, CPU per answer again). Rounds alternate between the
servers (--rounds) and the median is reported.

Needs: dnsperf, dnsdist (Debian's is built with DoT and DoH) and nghttp2-client (h2load), a
release build (built here). Traffic stays on 127.0.0.1. Prints Markdown for
docs/benchmarks.md and writes a JSON report (--json).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import CLIENT_CPU, ROOT, SERVER_CPU, TARGET, Server, cpu_seconds, log, machine, parse_dnsperf, write_names  # noqa: E402

UPSTREAM_PORT = 27500
PORTS = {
    "kudurru": {"udp": 27510, "dot": 27511, "doh": 27512},
    "dnsdist": {"udp": 27520, "dot": 27521, "doh": 27522},
}
OPS_PORT = 27581
# (transport, HTTP method, offered): "rate" offers --rate q/s (compare CPU per answer), "max"
# lets the generator send as fast as its 400 outstanding queries allow (compare QPS). DoT is
# dnsperf's, DoH h2load's (one name, so each HTTP/2 request is a few indexed HPACK fields).
WORKLOADS = [(mode, method, offered) for mode, method in (("dot", None), ("doh", "GET"), ("doh", "POST"))
             for offered in ("rate", "max")]
# The same DoH workloads driven by kudurru-bench (`https://` target) over 1000 names.
BENCH_WORKLOADS = [("doh", method, offered) for method in ("GET", "POST") for offered in ("rate", "max")]
# The query h2load sends: h0.bench.example. A, ID 0 (RFC 8484 §4.1), as POST body and GET path.
H2LOAD_QUERY = bytes.fromhex("000001000001000000000000") + b"".join(
    bytes([len(label)]) + label.encode() for label in "h0.bench.example".split(".")) + bytes.fromhex("0000010001")


def dnsperf(port, datafile, duration, rate, mode, method=None, runs=None, clients=4):
    argv = ["taskset", "-c", CLIENT_CPU, "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", datafile,
            "-l", str(duration), "-c", str(clients), "-q", "100", "-t", "2", "-m", mode]
    if mode == "doh":
        argv += ["-O", f"doh-uri=https://127.0.0.1:{port}/dns-query", "-O", f"doh-method={method}"]
    if rate:
        argv += ["-Q", str(rate)]
    if runs:
        argv += ["-n", str(runs)]
    return subprocess.run(argv, capture_output=True, text=True).stdout


def bench(port, datafile, duration, rate, method):
    """kudurru-bench over DoH (HTTP/2): 4 connections, up to 100 streams each; open loop at
    `rate`, or closed loop with 400 outstanding when `rate` is None. Returns dnsperf-like keys."""
    argv = ["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-bench"),
            f"https://127.0.0.1:{port}/dns-query#localhost", "--insecure", "--queries", datafile,
            "--method", method.lower(), "--duration", f"{duration}s", "--connections", "4",
            "--streams", "100", "--json", "-"]
    argv += ["--rate", str(rate)] if rate else ["--concurrency", "400"]
    out = subprocess.run(argv, capture_output=True, text=True)
    try:
        r = json.loads(out.stdout)
    except json.JSONDecodeError:
        log(out.stderr)
        return {"sent": 0, "completed": 0, "lost": 0, "qps": 0, "avg_latency_ms": 0}
    return {"sent": r["sent"], "completed": r["answered"], "lost": r["sent"] - r["answered"],
            "qps": r["qps"], "avg_latency_ms": r["service_latency"]["mean_us"] / 1000,
            "noerror": r["rcodes"].get("NOERROR", 0)}


def h2load(port, workdir, duration, rate, method):
    """h2load (nghttp2) over DoH: 4 connections, up to 100 streams each, one name; at `rate`
    q/s in all (`--rps` per connection), or as fast as it can. Returns dnsperf-like keys."""
    import base64
    import re
    body = os.path.join(workdir, "h2load-query.bin")
    with open(body, "wb") as f:
        f.write(H2LOAD_QUERY)
    url = f"https://127.0.0.1:{port}/dns-query"
    argv = ["taskset", "-c", CLIENT_CPU, "h2load", "-c", "4", "-m", "100", "-t", "1", "-D", str(duration)]
    if method == "GET":
        url += "?dns=" + base64.urlsafe_b64encode(H2LOAD_QUERY).decode().rstrip("=")
    else:
        argv += ["-d", body, "-H", "content-type: application/dns-message"]
    if rate:
        argv += ["--rps", str(rate // 4)]
    out = subprocess.run(argv + [url], capture_output=True, text=True).stdout
    done = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded", out)
    finished = re.search(r"finished in ([\d.]+)(m?s),", out)
    latency = re.search(r"time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)", out)
    ok = re.search(r"status codes: (\d+) 2xx", out)
    if not (done and finished and latency and ok):
        log(out)
        return {"sent": 0, "completed": 0, "lost": 0, "qps": 0, "avg_latency_ms": 0}
    seconds = float(finished.group(1)) / (1000 if finished.group(2) == "ms" else 1)
    answered = int(ok.group(1))
    scale = {"us": 1e-3, "ms": 1, "s": 1e3}[latency.group(2)]
    return {"sent": int(done.group(2)), "completed": answered, "lost": int(done.group(2)) - answered,
            "qps": answered / seconds, "avg_latency_ms": float(latency.group(1)) * scale}


def measure(server, datafile, duration, rate, mode, method, tool="dnsperf", workdir=None):
    port = PORTS[server.name][mode]
    before = cpu_seconds(server.proc.pid)
    if tool == "bench":
        r = bench(port, datafile, duration, rate, method)
    elif mode == "doh":
        r = h2load(port, workdir, duration, rate, method)
    else:
        r = parse_dnsperf(dnsperf(port, datafile, duration, rate, mode, method))
    cpu = cpu_seconds(server.proc.pid) - before
    r["server_cpu_s"] = cpu
    r["cpu_us_per_answer"] = cpu / r["completed"] * 1e6 if r["completed"] else None
    return r


def servers(workdir, cert, key):
    kudurru = os.path.join(TARGET, "kudurru")
    k = PORTS["kudurru"]
    d = PORTS["dnsdist"]
    dnsdist_conf = os.path.join(workdir, "dnsdist.conf")
    with open(dnsdist_conf, "w") as f:
        f.write(f"""setSecurityPollSuffix("")
setLocal("127.0.0.1:{d['udp']}")
addTLSLocal("127.0.0.1:{d['dot']}", "{cert}", "{key}")
addDOHLocal("127.0.0.1:{d['doh']}", "{cert}", "{key}", "/dns-query")
newServer{{address="127.0.0.1:{UPSTREAM_PORT}", name="up", healthCheckMode="lazy"}}
pc = newPacketCache(100000, {{maxTTL=86400, minTTL=0}})
getPool(""):setCache(pc)
""")
    return [
        ("kudurru", [kudurru, "serve", "--cores", "1", "--cpus", SERVER_CPU,
                     "--listen", f"127.0.0.1:{k['udp']}", "--listen", f"tls://127.0.0.1:{k['dot']}",
                     "--listen", f"https://127.0.0.1:{k['doh']}/dns-query", "--tls-cert", cert, "--tls-key", key,
                     "--upstream", f"udp://127.0.0.1:{UPSTREAM_PORT}", "--ops-address", f"127.0.0.1:{OPS_PORT}",
                     "--api-address", "", "--log-level", "warn"]),
        ("dnsdist", ["dnsdist", "--supervised", "--disable-syslog", "-C", dnsdist_conf]),
    ]


def label(mode, method, offered):
    name = mode if method is None else f"{mode}-{method.lower()}"
    return name if offered == "rate" else f"{name}-max"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs, one round")
    ap.add_argument("--duration", type=int, default=6, help="seconds per measured run")
    ap.add_argument("--rate", type=int, default=40000, help="offered QPS per run")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per server")
    ap.add_argument("--json", default=os.path.join(ROOT, "target", "bench-encrypted.json"))
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.rounds = 4, 1
    for tool in ("dnsperf", "dnsdist", "h2load", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install dnsperf dnsdist nghttp2-client util-linux")
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kudurru-control", "-p", "kudurru-bench"],
                       cwd=ROOT, check=True)
    workdir = tempfile.mkdtemp(prefix="kudurru-bench-tls-")
    cert, key = os.path.join(workdir, "c.pem"), os.path.join(workdir, "k.pem")
    subprocess.run([os.path.join(TARGET, "kudurru"), "cert", "generate", "--cert", cert, "--key", key],
                   check=True, stdout=subprocess.DEVNULL)
    os.chmod(key, 0o644)  # dnsdist may drop privileges before reading it
    hits = os.path.join(workdir, "hits.txt")
    write_names(hits, [f"h{i}.bench.example." for i in range(1000)])
    report = {"machine": machine(), "offered": vars(args), "rounds": []}
    echo = os.path.join(TARGET, "kudurru-echo")
    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, echo, "--mode", "answer", "--tcp", "--listen",
                                 f"127.0.0.1:{UPSTREAM_PORT}"], stderr=subprocess.DEVNULL)
    try:
        for round_no in range(args.rounds):
            results = {}
            for name, argv in servers(workdir, cert, key):
                log(f"== round {round_no + 1}: {name}")
                with Server(f"{name}", argv, PORTS[name]["udp"], workdir) as server:
                    res = {}
                    for mode, method, offered in WORKLOADS:
                        if offered == "rate":
                            # Warm this transport's cache entries (dnsdist keys DoH apart).
                            if mode == "dot":
                                dnsperf(PORTS[name][mode], hits, 5, 20000, mode, method, runs=1)
                            else:
                                bench(PORTS[name][mode], hits, 1, 20000, method)
                        rate = args.rate if offered == "rate" else None
                        res[label(mode, method, offered)] = measure(server, hits, args.duration, rate, mode, method,
                                                                    workdir=workdir)
                    for mode, method, offered in BENCH_WORKLOADS:
                        rate = args.rate if offered == "rate" else None
                        res["bench-" + label(mode, method, offered)] = measure(
                            server, hits, args.duration, rate, mode, method, tool="bench")
                    results[name] = res
                    log(json.dumps(res))
            report["rounds"].append(results)
    finally:
        upstream.send_signal(signal.SIGTERM)
        upstream.wait()
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(markdown(report))
    log(f"JSON report: {args.json}; logs in {workdir}")


def median_of(report, name, workload, key):
    values = [r[name][workload][key] for r in report["rounds"] if r[name][workload].get(key) is not None]
    return statistics.median(values) if values else None


def valid(report, name, workload):
    """A run counts when it lost under 1% of its queries."""
    sent = median_of(report, name, workload, "sent") or 0
    lost = median_of(report, name, workload, "lost") or 0
    return sent > 0 and lost / sent < 0.01


def markdown(report):
    o = report["offered"]
    lines = [f"Offered {o['rate']} q/s (`-max`: as fast as 100 outstanding queries allow) for "
             f"{o['duration']} s per run, median of {len(report['rounds'])} "
             "alternating rounds; cache hits over persistent connections (DoT: dnsperf -c 4 -q 100; DoH: h2load "
             "-c 4 -m 100, one name; `bench-` rows: kudurru-bench, 4 connections × 100 streams over 1000 names, "
             "`-max` closed loop with 400 outstanding). "
             "A run that lost 1% or more of its queries is shown but not compared.", "",
             "| workload | server | QPS | avg latency ms | lost | server CPU µs/answer | kudurru/dnsdist QPS | dnsdist/kudurru CPU per answer |",
             "|---|---|---|---|---|---|---|---|"]
    rows = [label(*w) for w in WORKLOADS] + ["bench-" + label(*w) for w in BENCH_WORKLOADS]
    for w in rows:
        for name in ("kudurru", "dnsdist"):
            qps = median_of(report, name, w, "qps") or 0
            cpu = median_of(report, name, w, "cpu_us_per_answer")
            lat = median_of(report, name, w, "avg_latency_ms") or 0
            sent = median_of(report, name, w, "sent") or 0
            lost = median_of(report, name, w, "lost") or 0
            ratios = ["", ""]
            if name == "kudurru":
                if valid(report, "kudurru", w) and valid(report, "dnsdist", w):
                    d_qps = median_of(report, "dnsdist", w, "qps")
                    d_cpu = median_of(report, "dnsdist", w, "cpu_us_per_answer")
                    ratios = [f"{qps / d_qps:.2f}x", f"{d_cpu / cpu:.2f}x"]
                else:
                    ratios = ["—", "—"]
            lost_text = f"{lost:,.0f} ({lost / sent:.0%})" if sent else "—"
            cpu_text = f"{cpu:.1f}" if cpu else "—"
            lines.append(f"| {w} | {name} | {qps:,.0f} | {lat:.3f} | {lost_text} | {cpu_text} | {ratios[0]} | {ratios[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
