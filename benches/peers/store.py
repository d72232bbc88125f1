#!/usr/bin/env python3
"""The object store under load: kudurru's objects API beside etcd 3.4, in one run.

One command (from the repository root):

    python3 benches/peers/store.py                    # 10,000 objects of 1 KiB, ~2 minutes + build
    python3 benches/peers/store.py --objects 1000     # a quick look

Each server in turn (never both at once) runs pinned to CPU 0 on a fresh data directory:
`kudurru serve --cores 1` (a release build, built here) and `etcd` (Debian's etcd-server 3.4,
one member on loopback). This script, the load generator, pins itself to CPU 1 and talks HTTP/1.1
+ JSON to both: kudurru's `/api/v1/clientgroups`, etcd's gRPC-gateway (`/v3/kv/txn`,
`/v3/kv/range`, `/v3/watch`, base64 keys and values). The same transport class on both sides,
and no client library's speed mixed into the comparison.

Phases, each with --clients concurrent keep-alive connections (one thread each):
  create   --objects ClientGroups of ~1 KiB (a spec of 56 addresses). kudurru: POST; etcd: a txn
           that puts the key only if its create_revision is 0 (create-if-absent, as Kubernetes
           does on etcd), the value the same JSON kudurru gets.
  update   each object once: kudurru PUT with the resourceVersion from create; etcd a txn that
           puts if mod_revision still equals the create's revision (optimistic concurrency).
  read     each object once: kudurru GET; etcd range on the key.
  list     all objects in one request, --lists times in a row (one connection).
  watch    one watch on the whole kind from the current revision, then --watch-writes updates one
           at a time, 5 ms apart: latency from sending the write to receiving its event (p50,
           p99), and the write's own answer latency beside it.
Then: the database file (kudurru: objects.redb; etcd: member/snap/db; etcd's WAL besides), and
the server's RSS (VmRSS now, VmHWM peak).

Both servers make a write durable before they answer: kudurru commits every write in its own
redb transaction with Durability::Immediate (fsync); etcd appends to its raft WAL and fsyncs it
before it applies, batching the entries of concurrent requests into one fsync.

Reported per phase: operations per second, p50 and p99 latency, the server's CPU per operation
(utime+stime from /proc/PID/stat) and the generator's CPU use (a phase at ~100% is limited by
this Python client, not the server). Prints Markdown tables; --json writes the raw results.

Needs: etcd-server and taskset (Debian), a kudurru release build. Traffic stays on 127.0.0.1.
"""

import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SERVER_CPU, CLIENT_CPU = 0, 1
API_PORT, OPS_PORT, DNS_PORT = 18280, 18281, 18253
ETCD_CLIENT, ETCD_PEER = 18379, 18380
PREFIX = "/kudurru/clientgroups/"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def name_of(i):
    return f"bench-{i:05d}"


def spec(i, version):
    """~1 KiB of JSON: 56 distinct host addresses, different for every (object, version)."""
    base = (i * 7 + version * 131) % 200
    return {"clients": [f"10.{(base + j) % 256}.{i // 256 % 256}.{i % 256}/32" for j in range(56)]}


def body(i, version, resource_version=None):
    metadata = {"name": name_of(i), "labels": {"bench": "store"}}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata, "spec": spec(i, version)}


def b64(text):
    return base64.b64encode(text.encode()).decode()


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


class Connection:
    """One keep-alive HTTP/1.1 connection; `call` returns (status, body bytes)."""

    def __init__(self, port, headers):
        self.port, self.headers = port, headers
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, method, path, payload=None):
        data = None if payload is None else json.dumps(payload).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=data, headers=headers)
        response = self.conn.getresponse()
        return response.status, response.read()

    def close(self):
        self.conn.close()


class Kudurru:
    label = "kudurru"

    def __init__(self, binary, data):
        self.binary, self.data = binary, data

    def start(self):
        self.token = subprocess.run(
            [self.binary, "token", "create", "--role", "operator", "--data-dir", self.data],
            check=True, capture_output=True, text=True).stdout.strip()
        argv = ["taskset", "-c", str(SERVER_CPU), self.binary, "serve", "--cores", "1",
                "--listen", f"127.0.0.1:{DNS_PORT}", "--upstream", "udp://127.0.0.1:9",
                "--ops-address", f"127.0.0.1:{OPS_PORT}", "--api-address", f"127.0.0.1:{API_PORT}",
                "--data-dir", self.data, "--log-level", "error"]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(OPS_PORT, "GET", "/healthz/ready")

    def connect(self):
        return Connection(API_PORT, {"Authorization": f"Bearer {self.token}"})

    def create(self, c, i):
        status, out = c.call("POST", "/api/v1/clientgroups", body(i, 0))
        expect(status, 201, out)
        return json.loads(out)["metadata"]["resourceVersion"]

    def update(self, c, i, version, revision):
        status, out = c.call("PUT", f"/api/v1/clientgroups/{name_of(i)}", body(i, version, revision))
        expect(status, 200, out)
        return json.loads(out)["metadata"]["resourceVersion"]

    def read(self, c, i):
        status, out = c.call("GET", f"/api/v1/clientgroups/{name_of(i)}")
        expect(status, 200, out)

    def list(self, c):
        status, out = c.call("GET", "/api/v1/clientgroups")
        expect(status, 200, out)
        return len(json.loads(out)["items"]), len(out)

    def revision(self, c):
        status, out = c.call("GET", "/api/v1/clientgroups?limit=1")
        expect(status, 200, out)
        return json.loads(out)["metadata"]["resourceVersion"]

    def watch(self, revision):
        """A stream of (object name, receive time) for every change after `revision`."""
        c = self.connect()
        c.conn.request("GET", f"/api/v1/clientgroups?watch=true&resourceVersion={revision}",
                       headers=c.headers)
        response = c.conn.getresponse()
        expect(response.status, 200, b"")
        while True:
            line = response.readline()
            if not line:
                return
            at = time.perf_counter()
            event = json.loads(line)
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                yield event["object"]["metadata"]["name"], at

    def files(self):
        return {"database": os.path.getsize(os.path.join(self.data, "objects.redb"))}


class Etcd:
    label = "etcd"

    def __init__(self, binary, data):
        self.binary, self.data = binary, data

    def start(self):
        client, peer = f"http://127.0.0.1:{ETCD_CLIENT}", f"http://127.0.0.1:{ETCD_PEER}"
        argv = ["taskset", "-c", str(SERVER_CPU), self.binary, "--name", "bench",
                "--data-dir", self.data, "--listen-client-urls", client,
                "--advertise-client-urls", client, "--listen-peer-urls", peer,
                "--initial-advertise-peer-urls", peer, "--initial-cluster", f"bench={peer}",
                "--log-level", "error", "--logger", "zap"]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(ETCD_CLIENT, "GET", "/health")

    def connect(self):
        return Connection(ETCD_CLIENT, {})

    def txn(self, c, key, value, compare):
        status, out = c.call("POST", "/v3/kv/txn", {
            "compare": [compare],
            "success": [{"request_put": {"key": key, "value": b64(json.dumps(value))}}],
        })
        expect(status, 200, out)
        answer = json.loads(out)
        if not answer.get("succeeded"):
            raise SystemExit(f"etcd txn failed its compare: {answer}")
        return answer["header"]["revision"]

    def create(self, c, i):
        key = b64(PREFIX + name_of(i))
        return self.txn(c, key, body(i, 0),
                        {"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"})

    def update(self, c, i, version, revision):
        key = b64(PREFIX + name_of(i))
        return self.txn(c, key, body(i, version),
                        {"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": revision})

    def read(self, c, i):
        status, out = c.call("POST", "/v3/kv/range", {"key": b64(PREFIX + name_of(i))})
        expect(status, 200, out)
        if json.loads(out).get("count") != "1":
            raise SystemExit(f"etcd range found no {name_of(i)}: {out[:200]}")

    def prefix_range(self):
        return {"key": b64(PREFIX), "range_end": b64(PREFIX[:-1] + chr(ord(PREFIX[-1]) + 1))}

    def list(self, c):
        status, out = c.call("POST", "/v3/kv/range", self.prefix_range())
        expect(status, 200, out)
        return len(json.loads(out).get("kvs", [])), len(out)

    def revision(self, c):
        status, out = c.call("POST", "/v3/kv/range", {"key": b64(PREFIX), "count_only": True})
        expect(status, 200, out)
        return json.loads(out)["header"]["revision"]

    def watch(self, revision):
        c = self.connect()
        request = {"create_request": dict(self.prefix_range(), start_revision=int(revision) + 1)}
        c.conn.request("POST", "/v3/watch", body=json.dumps(request).encode(),
                       headers={"Content-Type": "application/json"})
        response = c.conn.getresponse()
        expect(response.status, 200, b"")
        while True:
            line = response.readline()
            if not line:
                return
            at = time.perf_counter()
            for event in json.loads(line).get("result", {}).get("events", []):
                key = base64.b64decode(event["kv"]["key"]).decode()
                yield key[len(PREFIX):], at

    def files(self):
        wal = os.path.join(self.data, "member", "wal")
        return {
            "database": os.path.getsize(os.path.join(self.data, "member", "snap", "db")),
            "wal": sum(os.path.getsize(os.path.join(wal, f)) for f in os.listdir(wal)),
        }


def expect(status, wanted, out):
    if status != wanted:
        raise SystemExit(f"HTTP {status}, wanted {wanted}: {out[:300]!r}")


def wait_http(port, method, path, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request(method, path)
            if c.getresponse().status == 200:
                c.close()
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"server on {port} did not become ready")


def phase(server, clients, count, work):
    """Runs `work(connection, i)` for i in 0..count over `clients` threads; returns its figures."""
    latencies = [[] for _ in range(clients)]
    errors = []

    def run(t):
        c = server.connect()
        try:
            for i in range(t, count, clients):
                t0 = time.perf_counter()
                work(c, i)
                latencies[t].append(time.perf_counter() - t0)
        except BaseException as e:  # reported after the join
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(t,)) for t in range(clients)]
    cpu0, gen0, t0 = cpu_seconds(server.process.pid), os.times(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    gen1, cpu = os.times(), cpu_seconds(server.process.pid) - cpu0
    if errors:
        raise errors[0]
    flat = [x for per in latencies for x in per]
    return {
        "ops": count,
        "ops_per_s": count / wall,
        "p50_ms": percentile(flat, 50) * 1e3,
        "p99_ms": percentile(flat, 99) * 1e3,
        "server_cpu_us_per_op": cpu / count * 1e6,
        "generator_cpu": ((gen1.user - gen0.user) + (gen1.system - gen0.system)) / wall,
    }


def measure(server, args):
    result = {}
    print(f"{server.label}: starting", flush=True)
    server.start()
    try:
        n = args.objects
        revisions = [None] * n
        result["create"] = phase(server, args.clients, n,
                                 lambda c, i: revisions.__setitem__(i, server.create(c, i)))
        print(f"{server.label}: create {result['create']}", flush=True)
        result["update"] = phase(server, args.clients, n,
                                 lambda c, i: revisions.__setitem__(i, server.update(c, i, 1, revisions[i])))
        print(f"{server.label}: update {result['update']}", flush=True)
        result["read"] = phase(server, args.clients, n, server.read)
        print(f"{server.label}: read {result['read']}", flush=True)

        c = server.connect()
        times, size = [], 0
        for _ in range(args.lists):
            t0 = time.perf_counter()
            items, size = server.list(c)
            times.append(time.perf_counter() - t0)
            if items != n:
                raise SystemExit(f"{server.label} listed {items} objects, not {n}")
        result["list"] = {"objects": n, "bytes": size, "p50_ms": statistics.median(times) * 1e3,
                          "max_ms": max(times) * 1e3, "lists": args.lists}
        print(f"{server.label}: list {result['list']}", flush=True)

        result["watch"] = watch_latency(server, c, revisions, args.watch_writes)
        print(f"{server.label}: watch {result['watch']}", flush=True)
        c.close()
        result["memory"] = memory(server.process.pid)
        result["files"] = server.files()
        print(f"{server.label}: memory {result['memory']} files {result['files']}", flush=True)
    finally:
        server.process.terminate()
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    return result


def watch_latency(server, c, revisions, writes):
    start = server.revision(c)
    received = {}
    ready = threading.Event()

    def read_events():
        stream = server.watch(start)
        ready.set()
        for name, at in stream:
            received.setdefault(name, at)
            if len(received) == writes:
                return

    reader = threading.Thread(target=read_events, daemon=True)
    reader.start()
    ready.wait(10)
    time.sleep(0.2)
    sent, acked = {}, []
    for i in range(writes):
        t0 = time.perf_counter()
        sent[name_of(i)] = t0
        revisions[i] = server.update(c, i, 2, revisions[i])
        acked.append(time.perf_counter() - t0)
        time.sleep(0.005)
    reader.join(10)
    if len(received) != writes:
        raise SystemExit(f"{server.label}: {len(received)} of {writes} watch events arrived")
    delays = [received[name] - t0 for name, t0 in sent.items()]
    return {"writes": writes, "p50_ms": percentile(delays, 50) * 1e3,
            "p99_ms": percentile(delays, 99) * 1e3, "write_p50_ms": percentile(acked, 50) * 1e3}


def build_kudurru():
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "kudurru-control", "--bin", "kudurru"],
                   check=True)
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    return os.path.join(target, "release", "kudurru")


def table(results):
    servers = list(results)
    lines = ["| operation | " + " | ".join(servers) + " |", "|---" * (len(servers) + 1) + "|"]
    for op in ("create", "update", "read"):
        cells = []
        for s in servers:
            r = results[s][op]
            cells.append(f"{r['ops_per_s']:,.0f}/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
                         f"{r['server_cpu_us_per_op']:.0f} µs CPU/op (gen {r['generator_cpu']:.0%})")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    cells = [f"p50 {results[s]['list']['p50_ms']:.0f} ms, max {results[s]['list']['max_ms']:.0f} ms "
             f"({results[s]['list']['bytes'] / 2**20:.1f} MiB)" for s in servers]
    lines.append(f"| list all {results[servers[0]]['list']['objects']:,} | " + " | ".join(cells) + " |")
    cells = [f"p50 {results[s]['watch']['p50_ms']:.2f} ms, p99 {results[s]['watch']['p99_ms']:.2f} ms "
             f"(write answered p50 {results[s]['watch']['write_p50_ms']:.2f} ms)" for s in servers]
    lines.append("| watch: write sent → event | " + " | ".join(cells) + " |")
    cells = []
    for s in servers:
        files = results[s]["files"]
        extra = f" + WAL {files['wal'] / 2**20:.1f} MiB" if "wal" in files else ""
        cells.append(f"{files['database'] / 2**20:.1f} MiB{extra}")
    lines.append("| database file | " + " | ".join(cells) + " |")
    cells = [f"{results[s]['memory']['VmRSS'] / 2**20:.0f} MiB (peak {results[s]['memory']['VmHWM'] / 2**20:.0f} MiB)"
             for s in servers]
    lines.append("| RSS at the end | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kudurru", help="a kudurru binary (default: build the release binary here)")
    ap.add_argument("--etcd", default=shutil.which("etcd") or "/usr/bin/etcd")
    ap.add_argument("--objects", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--lists", type=int, default=10)
    ap.add_argument("--watch-writes", type=int, default=200)
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()
    args.watch_writes = min(args.watch_writes, args.objects)
    binary = args.kudurru or build_kudurru()
    os.sched_setaffinity(0, {CLIENT_CPU})
    sample = len(json.dumps(body(0, 0)))
    print(f"{args.objects} objects of {sample} bytes of JSON, {args.clients} clients; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    results = {}
    for label, make in (("kudurru", lambda d: Kudurru(binary, d)), ("etcd", lambda d: Etcd(args.etcd, d))):
        with tempfile.TemporaryDirectory(prefix=f"store-bench-{label}-") as data:
            results[label] = measure(make(data), args)
    print(f"load average at the end {os.getloadavg()[0]:.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    print()
    print(table(results))


if __name__ == "__main__":
    sys.exit(main())
