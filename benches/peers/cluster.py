#!/usr/bin/env python3
"""A fleet on etcd: how fast an object change reaches every node's DNS answers, against the
number of objects in the store and the number of nodes; how long a leader kill takes to move
leadership; what etcd spends.

One command (from the repository root):

    python3 benches/peers/cluster.py                       # nodes 1,3,5 x objects 100,1000,10000
    python3 benches/peers/cluster.py --nodes 3 --objects 100   # a quick look

For each node count: a fresh etcd (Debian's etcd-server, one member on loopback, a temporary
data directory), then that many `kudurru serve --cores 1` with cluster.driver = etcd and
cluster.leaseTTL = 3s. For each object count (ascending, cumulative): ClientGroups are created
through node 0's API until the store holds that many (each ~200 bytes of JSON), then
--changes changes of one BlockList (an inline source naming a fresh domain), written through
the nodes in turn, each timed from sending the PATCH until every node answers NXDOMAIN for the
new name (dnspython polls each node every 5 ms). Reported: p50 and p99 of that propagation, the
create rate, etcd's CPU (utime+stime) per change during the propagation phase, etcd's database
size (member/snap/db) after it. Then, with two nodes or more: the leader is SIGKILLed and the
time until another node's /metrics says kudurru_cluster_leader 1 is measured (the lease TTL
bounds it from above).

Needs: etcd-server (Debian), dnspython (~/.cache/kudurru/venv), a kudurru build
(--kudurru PATH; default target/release/kudurru). Traffic stays on 127.0.0.1. Prints Markdown.
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

try:
    import dns.message
    import dns.query
    import dns.rcode
except ImportError:
    sys.exit("needs dnspython: ~/.cache/kudurru/venv/bin/python3 benches/peers/cluster.py")

LEASE_TTL = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait(what, check, limit=60.0):
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > limit:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - start


class Etcd:
    def __init__(self, root):
        self.dir = os.path.join(root, "etcd")
        self.client = f"http://127.0.0.1:{free_port()}"
        peer = f"http://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            ["etcd", "--name", "bench", "--data-dir", self.dir,
             "--listen-client-urls", self.client, "--advertise-client-urls", self.client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"bench={peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait("etcd", lambda: subprocess.run(
            ["etcdctl", "--endpoints", self.client, "endpoint", "health"],
            env={**os.environ, "ETCDCTL_API": "3"}, capture_output=True).returncode == 0)

    def db_bytes(self):
        path = os.path.join(self.dir, "member", "snap", "db")
        return os.path.getsize(path) if os.path.exists(path) else 0

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Node:
    def __init__(self, binary, root, name, endpoints):
        self.name = name
        self.data = os.path.join(root, name)
        os.makedirs(self.data, exist_ok=True)
        self.dns = free_port()
        self.ops = free_port()
        self.api = free_port()
        env = {**os.environ,
               "KUDURRU_CLUSTER__DRIVER": "etcd",
               "KUDURRU_CLUSTER__ETCD__ENDPOINTS": endpoints,
               "KUDURRU_CLUSTER__NAME": "bench",
               "KUDURRU_CLUSTER__NODENAME": name,
               "KUDURRU_CLUSTER__LEASETTL": f"{LEASE_TTL}s"}
        env.pop("KUDURRU_SETTINGS_FILE", None)
        self.proc = subprocess.Popen(
            [binary, "serve", "--cores", "1", "--listen", f"127.0.0.1:{self.dns}",
             "--ops-address", f"127.0.0.1:{self.ops}", "--api-address", f"127.0.0.1:{self.api}",
             "--data-dir", self.data, "--upstream", "udp://127.0.0.1:9", "--log-level", os.environ.get("BENCH_LOG", "warn")],
            env=env, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(root, f"{name}.log"), "w"))
        self.token = subprocess.run(
            [binary, "token", "create", "--role", "admin", "--data-dir", self.data],
            capture_output=True, text=True, check=True).stdout.strip()
        wait(f"{name} ready", lambda: self.get_ops("/healthz/ready")[0] == 200)

    def get_ops(self, path):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.ops, timeout=2)
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        except OSError:
            return 0, ""

    def leads(self):
        return "\nkudurru_cluster_leader 1\n" in ("\n" + self.get_ops("/metrics")[1])

    def call(self, method, path, body=None, conn=None):
        c = conn or http.client.HTTPConnection("127.0.0.1", self.api, timeout=30)
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        return r.status, r.read()

    def rcode(self, name):
        q = dns.message.make_query(name, "A")
        try:
            return dns.query.udp(q, "127.0.0.1", port=self.dns, timeout=0.5).rcode()
        except Exception:
            return None

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def create_groups(node, start, end, threads=4):
    def work(ids):
        conn = http.client.HTTPConnection("127.0.0.1", node.api, timeout=30)
        for i in ids:
            status, body = node.call("POST", "/api/v1/clientgroups", {
                "metadata": {"name": f"group-{i}"},
                "spec": {"clients": [f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}/32"]},
            }, conn)
            if status != 201:
                raise SystemExit(f"create group-{i}: {status} {body[:200]}")
    ids = list(range(start, end))
    chunks = [ids[k::threads] for k in range(threads)]
    workers = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, round((len(s) - 1) * p))]


def run(binary, nodes_count, object_counts, changes):
    root = tempfile.mkdtemp(prefix=f"kudurru-bench-cluster-{nodes_count}-")
    etcd = Etcd(root)
    nodes = [Node(binary, root, f"n{i + 1}", etcd.client) for i in range(nodes_count)]
    rows = []
    try:
        wait("a leader", lambda: sum(n.leads() for n in nodes) == 1)
        status, body = nodes[0].call("POST", "/api/v1/policies", {
            "metadata": {"name": "bench"},
            "spec": {"clientGroups": ["default"], "denyLists": ["prop"]}})
        assert status == 201, body
        status, body = nodes[0].call("POST", "/api/v1/blocklists", {
            "metadata": {"name": "prop"},
            "spec": {"sources": [{"inline": ["start.bench.example"]}]}})
        assert status == 201, body
        have = 0
        for count in object_counts:
            started = time.monotonic()
            create_groups(nodes[0], have, count)
            create_rate = (count - have) / max(time.monotonic() - started, 1e-9)
            have = count
            cpu_before = cpu_seconds(etcd.proc.pid)
            samples = []
            for k in range(changes):
                writer = nodes[k % len(nodes)]
                name = f"c{count}-{k}.bench.example"
                t0 = time.monotonic()
                status, body = writer.call("PATCH", "/api/v1/blocklists/prop", {
                    "spec": {"sources": [{"inline": [name]}]}})
                assert status == 200, body
                for n in nodes:
                    wait(f"{name} on {n.name}",
                         lambda n=n: n.rcode(name) == dns.rcode.NXDOMAIN, limit=60)
                samples.append(time.monotonic() - t0)
            cpu = cpu_seconds(etcd.proc.pid) - cpu_before
            rows.append({
                "nodes": nodes_count, "objects": count,
                "create_per_s": create_rate,
                "p50_ms": percentile(samples, 0.5) * 1000,
                "p99_ms": percentile(samples, 0.99) * 1000,
                "etcd_cpu_ms_per_change": cpu / changes * 1000,
                "etcd_db_mib": etcd.db_bytes() / 2**20,
            })
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        election = None
        if nodes_count >= 2:
            leader = next(n for n in nodes if n.leads())
            leader.kill()
            t0 = time.monotonic()
            wait("a new leader", lambda: any(n.leads() for n in nodes if n is not leader))
            election = time.monotonic() - t0
        return rows, election
    except BaseException:
        print(f"failed; the nodes' logs stay in {root}", file=sys.stderr)
        root = None
        raise
    finally:
        for n in nodes:
            n.stop()
        etcd.stop()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kudurru", default="target/release/kudurru")
    parser.add_argument("--nodes", default="1,3,5")
    parser.add_argument("--objects", default="100,1000,10000")
    parser.add_argument("--changes", type=int, default=20)
    args = parser.parse_args()
    node_counts = [int(x) for x in args.nodes.split(",")]
    object_counts = sorted(int(x) for x in args.objects.split(","))
    print("| nodes | objects | creates/s | propagation p50 | p99 | etcd CPU per change | etcd db |")
    print("|---|---|---|---|---|---|---|")
    elections = []
    for n in node_counts:
        rows, election = run(args.kudurru, n, object_counts, args.changes)
        for r in rows:
            print(f"| {r['nodes']} | {r['objects']} | {r['create_per_s']:.0f} | "
                  f"{r['p50_ms']:.0f} ms | {r['p99_ms']:.0f} ms | "
                  f"{r['etcd_cpu_ms_per_change']:.1f} ms | {r['etcd_db_mib']:.1f} MiB |", flush=True)
        if election is not None:
            elections.append((n, election))
    for n, seconds in elections:
        print(f"\nleader SIGKILLed with {n} nodes: a new leader after {seconds:.2f} s "
              f"(lease TTL {LEASE_TTL} s)")


if __name__ == "__main__":
    main()
