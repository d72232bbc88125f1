#!/usr/bin/env python3
"""kudurru-bench against dnsperf, side by side in one run.

One command (from the repository root):

    python3 benches/peers/generator.py            # ~4 minutes
    python3 benches/peers/generator.py --quick    # ~2 minutes

Two questions, each answered with both generators alternating in the same run, one core each
(the generator pinned to CPU 1, the server to CPU 0):

  ceiling    How many queries per second can one generator core drive? Target: kudurru-echo
             (the batched echo responder, the cheapest possible server). Each generator runs
             closed-loop at a few concurrency settings; the best of each is kept (dnsperf gets
             its best configuration too). Asked: kudurru-bench >= 1.5x dnsperf.
  agreement  Do the two agree on what they measure? Target: `kudurru serve --cores 1` answering
             cache hits, at the same offered rates (dnsperf -Q, kudurru-bench --rate), same
             query file and socket count. Compared: achieved QPS and latency (mean, p50, p99;
             dnsperf's percentiles from its per-query -v lines). Asked: within 10%.

Needs: dnsperf (Debian package), a release build (built here); tcpdump (optional) for the wire
latency reference of the agreement runs. Traffic stays on 127.0.0.1.
Writes a JSON report (--json) and prints Markdown tables for docs/benchmarks.md.
"""

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (CLIENT_CPU, ROOT, SERVER_CPU, TARGET, Server, dnsperf, log, machine,  # noqa: E402
                     parse_dnsperf, percentiles, write_names)

PORT_ECHO = 27421
PORT_KUDURRU = 27422
PORT_UPSTREAM = 27420
OPS_PORT = 27482


def bench(port, datafile, duration, mode="udp", rate=None, concurrency=None, connections=4, streams=100):
    out = os.path.join(tempfile.gettempdir(), f"kudurru-bench-{os.getpid()}.json")
    argv = ["taskset", "-c", CLIENT_CPU, os.path.join(TARGET, "kudurru-bench"), f"{mode}://127.0.0.1:{port}",
            "--queries", datafile, "--duration", f"{duration}s", "--connections", str(connections),
            "--streams", str(streams), "--json", out]
    argv += ["--rate", str(rate)] if rate else ["--concurrency", str(concurrency)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        report = json.load(f)
    os.unlink(out)
    return report


def dnsperf_run(port, datafile, duration, mode="udp", rate=None, clients=4, outstanding=1000, verbose=False):
    argv = ["taskset", "-c", CLIENT_CPU, "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", datafile,
            "-l", str(duration), "-c", str(clients), "-q", str(outstanding), "-t", "2", "-m", mode]
    if rate:
        argv += ["-Q", str(rate)]
    if verbose:
        argv.append("-v")
    return subprocess.run(argv, capture_output=True, text=True).stdout


def ceiling(datafile, args):
    """Closed loop against the echo responder: best QPS of each generator, per round."""
    dnsperf_configs = [(1, 500), (4, 1000), (8, 2000)]
    bench_configs = [(200, 1), (500, 2), (1000, 4)]
    rounds = {"udp": {"dnsperf": [], "kudurru-bench": []}, "tcp": {"dnsperf": [], "kudurru-bench": []}}
    echo = os.path.join(TARGET, "kudurru-echo")
    with Server("echo", [echo, "--mode", "echo", "--tcp", "--listen", f"127.0.0.1:{PORT_ECHO}"], PORT_ECHO,
                args.workdir):
        for r in range(args.rounds):
            order = ["dnsperf", "kudurru-bench"] if r % 2 == 0 else ["kudurru-bench", "dnsperf"]
            for tool in order:
                if tool == "dnsperf":
                    best = max(parse_dnsperf(dnsperf_run(PORT_ECHO, datafile, args.duration, clients=c,
                                                         outstanding=q))["qps"] for c, q in dnsperf_configs)
                    tcp = parse_dnsperf(dnsperf_run(PORT_ECHO, datafile, args.duration, mode="tcp", clients=4,
                                                    outstanding=400))["qps"]
                else:
                    best = max(bench(PORT_ECHO, datafile, args.duration, concurrency=c, connections=k)["qps"]
                               for c, k in bench_configs)
                    tcp = bench(PORT_ECHO, datafile, args.duration, mode="tcp", concurrency=400, connections=4)["qps"]
                rounds["udp"][tool].append(best)
                rounds["tcp"][tool].append(tcp)
                log(f"ceiling round {r} {tool}: udp {best:.0f}/s tcp {tcp:.0f}/s")
    return rounds


def agreement(datafile, args):
    """Open loop against kudurru at the same rates: QPS and latency of both generators."""
    kudurru = os.path.join(TARGET, "kudurru")
    echo = os.path.join(TARGET, "kudurru-echo")
    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, echo, "--mode", "answer", "--listen",
                                 f"127.0.0.1:{PORT_UPSTREAM}"], stderr=subprocess.DEVNULL)
    results = {}
    try:
        argv = [kudurru, "serve", "--cores", "1", "--cpus", SERVER_CPU, "--listen", f"127.0.0.1:{PORT_KUDURRU}",
                "--upstream", f"udp://127.0.0.1:{PORT_UPSTREAM}", "--ops-address", f"127.0.0.1:{OPS_PORT}",
                "--api-address", "", "--log-level", "warn"]
        with Server("kudurru", argv, PORT_KUDURRU, args.workdir):
            dnsperf(PORT_KUDURRU, datafile, 5, 20000, runs=1)  # warm the cache: every name once
            for rate in args.rates:
                rows = {"dnsperf": [], "kudurru-bench": []}
                for r in range(args.rounds):
                    order = ["dnsperf", "kudurru-bench"] if r % 2 == 0 else ["kudurru-bench", "dnsperf"]
                    for tool in order:
                        row = agreement_run(tool, datafile, rate, args)
                        rows[tool].append(row)
                        log(f"agreement {rate}/s round {r} {tool}: {row}")
                # One more run each under tcpdump (apart: the capture costs CPU): what the
                # wire saw next to what the generator reported.
                wire = {}
                for tool in ("dnsperf", "kudurru-bench"):
                    with Capture(PORT_KUDURRU, args.workdir) as capture:
                        row = agreement_run(tool, datafile, rate, args)
                    row.update(wire_summary(capture.latencies()))
                    wire[tool] = row
                    log(f"wire {rate}/s {tool}: {row}")
                results[rate] = {"rounds": rows, "wire": wire}
    finally:
        upstream.terminate()
        upstream.wait()
    return results


def agreement_run(tool, datafile, rate, args):
    if tool == "dnsperf":
        out = dnsperf_run(PORT_KUDURRU, datafile, args.duration, rate=rate, verbose=True)
        summary, pct = parse_dnsperf(out), percentiles(out)
        row = {"qps": summary["qps"], "mean_us": summary["avg_latency_ms"] * 1000,
               "p50_us": pct.get("p50_ms", 0) * 1000, "p99_us": pct.get("p99_ms", 0) * 1000,
               "lost": summary["lost"]}
    else:
        rep = bench(PORT_KUDURRU, datafile, args.duration, rate=rate)
        lat = rep["service_latency"]
        row = {"qps": rep["qps"], "mean_us": lat["mean_us"], "p50_us": lat["p50_us"],
               "p99_us": lat["p99_us"], "lost": rep["timeouts"] + sum(rep["errors"].values())}
    return row


class Capture:
    """tcpdump on loopback for one run: the wire latency (query packet to response packet, as
    the kernel saw them) is the reference both generators' figures are held against. Each
    generator adds its own delay on top: the time from the reply reaching its socket to its
    timestamp (a wake-up, on a VM tens of microseconds)."""

    def __init__(self, port, workdir):
        self.port, self.path, self.proc = port, os.path.join(workdir, "wire.pcap"), None

    def __enter__(self):
        if shutil.which("tcpdump"):
            self.proc = subprocess.Popen(["taskset", "-c", CLIENT_CPU, "tcpdump", "-i", "lo", "-w", self.path, "-B",
                                          "65536", "-s", "128", "--time-stamp-precision=nano", "-U",
                                          f"udp port {self.port}"], stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        if self.proc:
            time.sleep(0.3)
            self.proc.terminate()
            self.proc.wait()

    def latencies(self):
        """Wire latencies in µs, sorted (empty without tcpdump)."""
        if not self.proc:
            return []
        with open(self.path, "rb") as f:
            data = f.read()
        scale = 1e-9 if struct.unpack("<I", data[:4])[0] == 0xa1b23c4d else 1e-6
        l2 = 14 if struct.unpack("<I", data[20:24])[0] == 1 else 16
        off, sent, lat = 24, {}, []
        while off + 16 <= len(data):
            sec, frac, incl, _ = struct.unpack("<IIII", data[off:off + 16])
            pkt, off = data[off + 16:off + 16 + incl], off + 16 + incl
            ip = pkt[l2:]
            if len(ip) < 20 or ip[0] >> 4 != 4:
                continue
            udp = ip[(ip[0] & 15) * 4:]
            if len(udp) < 11:
                continue
            sport, dport = struct.unpack(">HH", udp[:4])
            dns, t = udp[8:], sec + frac * scale
            if dport == self.port and not dns[2] & 0x80:
                sent[(sport, dns[:2])] = t
            elif sport == self.port and dns[2] & 0x80:
                t0 = sent.pop((dport, dns[:2]), None)
                if t0 is not None:
                    lat.append((t - t0) * 1e6)
        return sorted(lat)


def wire_summary(lat):
    if not lat:
        return {}
    return {"wire_mean_us": statistics.mean(lat), "wire_p50_us": lat[len(lat) // 2],
            "wire_p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))]}


def median(rows, key):
    return statistics.median(row[key] for row in rows)


def wire(rows, key):
    values = [row[key] for row in rows if key in row]
    return f"{statistics.median(values):.1f}" if values else "-"


def markdown(report):
    lines = [f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} vCPUs, kernel "
             f"{report['machine']['kernel']}; {report['machine']['date']}; {report['rounds']} alternating rounds of "
             f"{report['duration']} s, medians.", "",
             "### One generator core against the echo ceiling (closed loop, best configuration each)", "",
             "| transport | dnsperf QPS | kudurru-bench QPS | kudurru-bench / dnsperf |", "|---|---|---|---|"]
    for transport, tools in report["ceiling"].items():
        d, b = statistics.median(tools["dnsperf"]), statistics.median(tools["kudurru-bench"])
        lines.append(f"| {transport} | {d:.0f} | {b:.0f} | {b / d:.2f}x |")
    lines += ["", "### Against `kudurru serve --cores 1`, cache hits, same offered rate (open loop)", "",
              "| offered QPS | generator | answered QPS | lost | mean µs | p50 µs | p99 µs |", "|---|---|---|---|---|---|---|"]
    for rate, result in report["agreement"].items():
        tools = result["rounds"]
        for tool, rows in tools.items():
            lines.append(f"| {rate} | {tool} | {median(rows, 'qps'):.0f} | {median(rows, 'lost'):.0f} | "
                         f"{median(rows, 'mean_us'):.1f} | {median(rows, 'p50_us'):.1f} | {median(rows, 'p99_us'):.1f} |")
        ratios = [median(tools["kudurru-bench"], k) / median(tools["dnsperf"], k) if median(tools["dnsperf"], k) else 0
                  for k in ("qps", "mean_us", "p50_us", "p99_us")]
        lines.append(f"| {rate} | **kudurru-bench / dnsperf** | **{ratios[0]:.3f}** | | **{ratios[1]:.2f}** | "
                     f"**{ratios[2]:.2f}** | **{ratios[3]:.2f}** |")
    if any(result["wire"].get("dnsperf", {}).get("wire_p50_us") for result in report["agreement"].values()):
        lines += ["", "### Reported latency against the wire (one run each under tcpdump)", "",
                  "| offered QPS | generator | reported p50 µs | wire p50 µs | own delay p50 µs | reported mean µs | "
                  "wire mean µs | reported p99 µs | wire p99 µs |", "|---|---|---|---|---|---|---|---|---|"]
        for rate, result in report["agreement"].items():
            for tool, row in result["wire"].items():
                if "wire_p50_us" not in row:
                    continue
                lines.append(f"| {rate} | {tool} | {row['p50_us']:.1f} | {row['wire_p50_us']:.1f} | "
                             f"{row['p50_us'] - row['wire_p50_us']:.1f} | {row['mean_us']:.1f} | {row['wire_mean_us']:.1f} | "
                             f"{row['p99_us']:.1f} | {row['wire_p99_us']:.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs, fewer rounds")
    ap.add_argument("--duration", type=int, default=5, help="seconds per measured run")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per comparison")
    ap.add_argument("--rates", default="10000,20000,50000,100000", help="offered rates for the agreement runs")
    ap.add_argument("--json", default=os.path.join(ROOT, "target", "bench-generator.json"))
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    args.rates = [int(r) for r in args.rates.split(",")]
    if args.quick:
        args.duration, args.rounds = 3, 2
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kudurru-control", "-p", "kudurru-bench"],
                       cwd=ROOT, check=True)
    args.workdir = tempfile.mkdtemp(prefix="kudurru-generator-")
    datafile = os.path.join(args.workdir, "hits.txt")
    write_names(datafile, [f"h{i}.bench.example." for i in range(1000)])
    report = {"machine": machine(), "duration": args.duration, "rounds": args.rounds,
              "ceiling": ceiling(datafile, args), "agreement": agreement(datafile, args)}
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(markdown(report))
    log(f"JSON report: {args.json}; logs in {args.workdir}")


if __name__ == "__main__":
    main()
