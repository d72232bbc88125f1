#!/usr/bin/env python3
"""An edit that races the leader's status write: does every node apply it?

One command (from the repository root; a debug build is enough):

    ~/.cache/kudurru/venv/bin/python3 benches/peers/cluster_race.py --kudurru target/debug/kudurru

A fresh etcd and --nodes `kudurru serve` in a fleet (the classes of benches/peers/cluster.py).
Each trial PATCHes one BlockList (an inline source naming a fresh domain, through the leader),
waits 0 to 59 ms (the trial number mod 60), then PATCHes it again through the nodes in turn:
the second edit lands while the leader compiles the first and writes its status. It then waits
(at most 10 s) until the leader answers NXDOMAIN for the second name. Prints each trial whose
second edit the leader did not apply, and the count; exits 1 if there was one. The nodes' logs
stay in the printed directory. The nodes log at info (BENCH_LOG overrides): the race shows at
that level and, on a quiet machine, hardly at warn (the timing moves).

Before the fix of docs/benchmarks.md "Cluster" (the list manager took the object its status
write returned after a Conflict, edit included, as the one it had acted on), 2 to 6 of 180-240
trials stalled, at delays of 0 to 3 ms.
"""

import argparse
import importlib.util
import os
import sys
import tempfile
import time

spec = importlib.util.spec_from_file_location(
    "cluster", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster.py"))
cluster = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cluster)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kudurru", default="target/release/kudurru")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--trials", type=int, default=180)
    args = parser.parse_args()
    os.environ.setdefault("BENCH_LOG", "info")
    root = tempfile.mkdtemp(prefix="kudurru-bench-race-")
    etcd = cluster.Etcd(root)
    nodes = [cluster.Node(args.kudurru, root, f"n{i + 1}", etcd.client) for i in range(args.nodes)]
    stalls = 0
    try:
        cluster.wait("a leader", lambda: sum(n.leads() for n in nodes) == 1)
        leader = next(n for n in nodes if n.leads())
        status, body = leader.call("POST", "/api/v1/policies", {
            "metadata": {"name": "bench"},
            "spec": {"clientGroups": ["default"], "denyLists": ["prop"]}})
        assert status == 201, body
        status, body = leader.call("POST", "/api/v1/blocklists", {
            "metadata": {"name": "prop"},
            "spec": {"sources": [{"inline": ["start.bench.example"]}]}})
        assert status == 201, body
        for i in range(args.trials):
            first = f"a{i}.bench.example"
            second = f"b{i}.bench.example"
            status, body = leader.call("PATCH", "/api/v1/blocklists/prop", {
                "spec": {"sources": [{"inline": [first]}]}})
            assert status == 200, body
            time.sleep((i % 60) / 1000)
            status, body = nodes[i % len(nodes)].call("PATCH", "/api/v1/blocklists/prop", {
                "spec": {"sources": [{"inline": [second]}]}})
            assert status == 200, body
            started = time.monotonic()
            while leader.rcode(second) != cluster.dns.rcode.NXDOMAIN:
                if time.monotonic() - started > 10:
                    stalls += 1
                    print(f"trial {i} (delay {i % 60} ms): the leader did not apply the "
                          "second edit within 10 s", flush=True)
                    break
                time.sleep(0.005)
        print(f"{args.trials} trials, {stalls} where the leader did not apply the second edit "
              f"(logs: {root})")
    finally:
        for n in nodes:
            n.stop()
        etcd.stop()
    sys.exit(1 if stalls else 0)


if __name__ == "__main__":
    main()
