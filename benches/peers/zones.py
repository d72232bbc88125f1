#!/usr/bin/env python3
"""Authoritative serving: kudurru against NSD and Knot DNS with the same zones, in one run.

One command (from the repository root):

    python3 benches/peers/zones.py              # every row, ~3 minutes
    python3 benches/peers/zones.py --quick      # shorter load runs, ~2 minutes
    python3 benches/peers/zones.py --servers nsd,knot --skip-big

The zones (generated, deterministic for --seed):

  bench.example   100k owner names in the bench kit's shape (`h{i}.bench.example.`): every name
                  has an A record except one in 20, which is a CNAME to the next name; one in
                  three has an AAAA, one in ten an MX, one in ten a TXT: 151,670 records.
  big.example     1,000,000 records (not counting SOA, NS and glue) over ~571k names: A for every
                  name, AAAA for every other, TXT and MX for one in eight each.

The query mix for bench.example (`--queries`, shuffled): 55% A on names with an A, 5% A on the
CNAME names (the answer is the CNAME and the target's A), 15% AAAA, 5% MX, 5% TXT (all
existing), 8% NXDOMAIN (random names under the apex), 7% NODATA (an existing name, a type it has
not). Every server answers the same file, and the rcodes of each run are checked against the
mix (NXDOMAIN within one point of 8%), so a server that does not serve the zone fails loudly.

Rows, each server (never two measured at once) pinned to CPU 0 with one serving thread or process
(NSD `server-count: 1`, Knot `udp-workers: 1`, kudurru `--cores 1`); the load generator on CPU 1:

  rate      dnsperf at --rate for --duration seconds: server CPU (utime+stime of the process and
            its children, /proc/PID/stat) per answer, at the same offered rate for every server.
            All three serve bench.example at once (idle, the others cost nothing: the report
            keeps their CPU during each run) and take turns for --rounds rounds, the order
            rotated each round; the median round is kept, the range printed beside it
  capacity  kudurru-bench closed loop (--concurrency outstanding over 4 sockets): answered QPS and
            CPU per answer on the one core (the generator's ceiling is ~300k QPS: a server
            below ~95% CPU was not saturated and the row says so)
  load      the 1M-record zone: seconds from starting the server until the zone's last name is
            answered (polled every 20 ms); kudurru: from applying the Zone object on a running
            server, and from a restart with the object stored
  memory    PSS (proportional set size, summed over the server's processes: NSD forks a server
            and xfrd child sharing the zone's pages) with the 1M zone, minus the same with no zone;
            per million records. RSS of the largest process is printed beside it.
  axfr-out  seconds for an AXFR of the 1M-record zone from each server, read by a minimal client
            here (counts records, no printing): the serving side alone
  axfr-in   seconds from starting a secondary (a new NSD or Knot process, or a secondary Zone
            object applied to a new kudurru) until it answers the zone's last name: NSD primary
            to kudurru, kudurru primary to NSD, and NSD to NSD and to Knot as references.
            Secondaries run on CPU 1 (the primary stays on CPU 0).

Needs: nsd, knot (Debian packages; /usr/sbin/nsd, /usr/sbin/knotd), dnsperf, taskset, a release
build (built here unless --no-build). Traffic stays on 127.0.0.1. Writes a JSON report (--json)
and prints Markdown tables for docs/benchmarks.md.
"""

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import CLIENT_CPU, ROOT, SERVER_CPU, log, parse_dnsperf, port_free  # noqa: E402

PORTS = {"nsd": 27601, "knot": 27602, "kudurru": 27603, "nsd-secondary": 27611, "knot-secondary": 27612,
         "kudurru-secondary": 27613}
DEAD_UPSTREAM = 27600  # nothing listens: every answer must come from the zone
OPS_PORTS = {"kudurru": 27681, "kudurru-secondary": 27682}
API_PORTS = {"kudurru": 27691, "kudurru-secondary": 27692}
NSD, KNOTD = "/usr/sbin/nsd", "/usr/sbin/knotd"
SERVERS = ["nsd", "knot", "kudurru"]
SMALL, BIG = "bench.example.", "big.example."
SERIAL = 2026120701
BIG_RECORDS = 1_000_000
NOERROR, NXDOMAIN = 0, 3
A, NS, CNAME, SOA, MX, TXT, AAAA, AXFR = 1, 2, 5, 6, 15, 16, 28, 252
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# The zones and the queries

def soa_lines(apex):
    return [f"$ORIGIN {apex}", "$TTL 3600",
            f"@ IN SOA ns1.{apex} hostmaster.{apex} {SERIAL} 3600 600 604800 300",
            f"@ IN NS ns1.{apex}", "ns1 IN A 192.0.2.53"]


def ipv4(i):
    return f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"


def ipv6(i):
    return f"2001:db8::{(i >> 16) & 0xffff:x}:{i & 0xffff:x}"


def small_zone(path, names):
    """bench.example: `names` owners h0..h{names-1}; returns the facts the query mix needs."""
    kinds = {"a": [], "cname": [], "aaaa": [], "mx": [], "txt": [], "no_aaaa": []}
    records = 3
    with open(path, "w") as f:
        f.write("\n".join(soa_lines(SMALL)) + "\n")
        for i in range(names):
            owner = f"h{i}"
            if i % 20 == 7:
                f.write(f"{owner} CNAME h{i + 1}\n")
                kinds["cname"].append(owner)
                records += 1
                continue
            f.write(f"{owner} A {ipv4(i)}\n")
            kinds["a"].append(owner)
            records += 1
            if i % 3 == 0:
                f.write(f"{owner} AAAA {ipv6(i)}\n")
                kinds["aaaa"].append(owner)
                records += 1
            else:
                kinds["no_aaaa"].append(owner)
            if i % 10 == 1:
                f.write(f"{owner} MX 10 mail{i % 7}.{SMALL}\n")
                kinds["mx"].append(owner)
                records += 1
            if i % 10 == 2:
                f.write(f'{owner} TXT "v=spf1 ip4:{ipv4(i)} -all" "bench {i}"\n')
                kinds["txt"].append(owner)
                records += 1
    kinds["records"] = records
    return kinds


def query_mix(path, kinds, count, rng):
    """The query file: (share, picker) rows; returns the expected NXDOMAIN share."""
    mix = [(0.55, lambda: (rng.choice(kinds["a"]), "A")),
           (0.05, lambda: (rng.choice(kinds["cname"]), "A")),
           (0.15, lambda: (rng.choice(kinds["aaaa"]), "AAAA")),
           (0.05, lambda: (rng.choice(kinds["mx"]), "MX")),
           (0.05, lambda: (rng.choice(kinds["txt"]), "TXT")),
           (0.08, lambda: (f"m{rng.getrandbits(40):x}", "A")),
           (0.07, lambda: (rng.choice(kinds["no_aaaa"]), "AAAA"))]
    lines = []
    for share, pick in mix:
        for _ in range(int(count * share)):
            name, qtype = pick()
            lines.append(f"{name}.{SMALL} {qtype}")
    rng.shuffle(lines)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0.08


def big_zone(path):
    """big.example: BIG_RECORDS records besides SOA, NS and glue; returns (records in an AXFR
    including both SOAs, the last name and its address)."""
    count, i = 0, 0
    with open(path, "w") as f:
        f.write("\n".join(soa_lines(BIG)) + "\n")
        out = []
        while count < BIG_RECORDS:
            owner = f"n{i}"
            out.append(f"{owner} A {ipv4(i)}\n")
            count += 1
            last = (owner, ipv4(i))
            for cond, line in ((i % 2 == 0, f"{owner} AAAA {ipv6(i)}\n"),
                               (i % 8 == 1, f'{owner} TXT "record {i} of the big zone"\n'),
                               (i % 8 == 3, f"{owner} MX 10 mx{i % 5}.{BIG}\n")):
                if cond and count < BIG_RECORDS:
                    out.append(line)
                    count += 1
            i += 1
            if len(out) > 50_000:
                f.write("".join(out))
                out.clear()
        f.write("".join(out))
    return {"records": count + 3, "axfr_records": count + 4, "names": i, "last": f"{last[0]}.{BIG}",
            "last_address": last[1]}


# ---------------------------------------------------------------------------------------------
# DNS, enough to check an answer and to read an AXFR

def encode_name(name):
    return b"".join(bytes([len(l)]) + l.encode() for l in name.rstrip(".").split(".") if l) + b"\0"


def skip_name(data, pos):
    while True:
        n = data[pos]
        if n == 0:
            return pos + 1
        if n & 0xC0 == 0xC0:
            return pos + 2
        pos += n + 1


def query(port, name, qtype=A, timeout=0.5):
    """{rcode, aa, answer: [(type, rdata bytes)], authority: [types]} or None without an answer."""
    qid = random.getrandbits(16)
    q = struct.pack(">HHHHHH", qid, 0, 1, 0, 0, 0) + encode_name(name) + struct.pack(">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(("127.0.0.1", port))
            s.send(q)
            while True:
                data = s.recv(65535)
                if len(data) >= 12 and struct.unpack(">H", data[:2])[0] == qid:
                    break
        except OSError:
            return None
    flags = struct.unpack(">H", data[2:4])[0]
    qd, an, ns = struct.unpack(">HHH", data[4:10])
    out = {"rcode": flags & 15, "aa": bool(flags & 0x0400), "answer": [], "authority": []}
    pos = 12
    try:
        for _ in range(qd):
            pos = skip_name(data, pos) + 4
        for section, n in (("answer", an), ("authority", ns)):
            for _ in range(n):
                pos = skip_name(data, pos)
                rtype, _, _, rdlen = struct.unpack(">HHIH", data[pos:pos + 10])
                pos += 10
                out[section].append((rtype, data[pos:pos + rdlen]) if section == "answer" else rtype)
                pos += rdlen
    except (IndexError, struct.error):
        pass
    return out


def answers_address(port, name, address, timeout=0.2):
    r = query(port, name, A, timeout)
    return r is not None and r["rcode"] == NOERROR and (A, socket.inet_aton(address)) in r["answer"]


def soa_serial(port, zone, timeout=0.3):
    r = query(port, zone, SOA, timeout)
    if r is None or r["rcode"] != NOERROR:
        return None
    for rtype, rdata in r["answer"]:
        if rtype == SOA:
            pos = skip_name(rdata, skip_name(rdata, 0))
            return struct.unpack(">I", rdata[pos:pos + 4])[0]
    return None


def check_shapes(port, kinds, server):
    """The answer shapes of the mix, before measuring anything."""
    a, cname, aaaa = kinds["a"][5], kinds["cname"][0], kinds["aaaa"][0]
    i = int(a[1:])
    checks = []
    r = query(port, f"{a}.{SMALL}", A, 1.0)
    checks.append(("A", r and r["rcode"] == NOERROR and r["aa"] and (A, socket.inet_aton(ipv4(i))) in r["answer"], r))
    r = query(port, f"{cname}.{SMALL}", A, 1.0)
    checks.append(("CNAME chain", r and r["aa"] and [t for t, _ in r["answer"]] == [CNAME, A], r))
    r = query(port, f"{aaaa}.{SMALL}", AAAA, 1.0)
    checks.append(("AAAA", r and r["rcode"] == NOERROR and [t for t, _ in r["answer"]] == [AAAA], r))
    r = query(port, f"nonexistent.{SMALL}", A, 1.0)
    checks.append(("NXDOMAIN", r and r["rcode"] == NXDOMAIN and r["aa"] and SOA in r["authority"], r))
    r = query(port, f"{kinds['no_aaaa'][0]}.{SMALL}", AAAA, 1.0)
    checks.append(("NODATA", r and r["rcode"] == NOERROR and not r["answer"] and SOA in r["authority"], r))
    bad = [(what, r) for what, ok, r in checks if not ok]
    if bad:
        raise BenchError(f"{server}: wrong answer shapes: {bad}")


def axfr(port, zone, expected, timeout=120):
    """Seconds to receive an AXFR of `expected` records (both SOAs counted), bytes, messages."""
    qid = random.getrandbits(16)
    q = struct.pack(">HHHHHH", qid, 0, 1, 0, 0, 0) + encode_name(zone) + struct.pack(">HH", AXFR, 1)
    records = messages = total = 0
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        t0 = time.perf_counter()
        s.sendall(struct.pack(">H", len(q)) + q)
        buf = bytearray()
        deadline = t0 + timeout
        while records < expected:
            chunk = s.recv(1 << 20)
            if not chunk:
                raise BenchError(f"AXFR of {zone} from port {port}: closed after {records} of {expected} records")
            total += len(chunk)
            buf += chunk
            pos = 0
            while len(buf) - pos >= 2:
                length = struct.unpack(">H", buf[pos:pos + 2])[0]
                if len(buf) - pos - 2 < length:
                    break
                header = buf[pos + 2:pos + 14]
                if struct.unpack(">H", header[:2])[0] != qid or header[3] & 15:
                    raise BenchError(f"AXFR of {zone} from port {port}: rcode {header[3] & 15}")
                records += struct.unpack(">H", header[6:8])[0]
                messages += 1
                pos += 2 + length
            del buf[:pos]
            if time.perf_counter() > deadline:
                raise BenchError(f"AXFR of {zone} from port {port}: {records} of {expected} records in {timeout} s")
        elapsed = time.perf_counter() - t0
    return {"seconds": elapsed, "records": records, "bytes": total, "messages": messages}


# ---------------------------------------------------------------------------------------------
# Processes

def children(pid):
    """`pid` and its descendants."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except OSError:
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def cpu_seconds(pid):
    total = 0.0
    for p in children(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        except OSError:
            pass
    return total


def memory(pid):
    """PSS summed over the process tree, and the largest RSS, in bytes."""
    pss = rss = 0
    for p in children(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key == "Pss":
                        pss += int(value.split()[0]) * 1024
                    elif key == "Rss":
                        rss = max(rss, int(value.split()[0]) * 1024)
        except OSError:
            pass
    return {"pss": pss, "rss": rss}


class Proc:
    """One server process pinned to `cpus`, stopped (with its children) on exit."""

    def __init__(self, name, argv, port, workdir, env=None, cpus=SERVER_CPU):
        self.name, self.argv, self.port, self.env, self.cpus = name, argv, port, env, cpus
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.proc = None

    def start(self):
        if not port_free(self.port):
            raise BenchError(f"port {self.port} is in use; stop whatever holds it")
        self.log = open(self.log_path, "a")
        self.log.write(f"\n=== {' '.join(self.argv)}\n")
        self.log.flush()
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(["taskset", "-c", self.cpus] + self.argv, stdout=self.log, stderr=self.log,
                                     env=dict(os.environ, **(self.env or {})), start_new_session=True)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def tail(self, lines=5):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc:
            self.log.close()
            # NSD's children exit after their parent; wait for the port to be free again.
            deadline = time.time() + 10
            while not port_free(self.port) and time.time() < deadline:
                time.sleep(0.05)
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def wait_for(proc, check, what, timeout, since=None, interval=0.02):
    """Polls `check()` until true; seconds since `since` (default the process's start)."""
    t0 = proc.started if since is None else since
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if not proc.alive():
            raise BenchError(f"{proc.name} exited while waiting for {what}: {proc.tail()}")
        if check():
            return time.perf_counter() - t0
        time.sleep(interval)
    raise BenchError(f"{proc.name}: no {what} within {timeout} s")


def settle():
    """Lets a server finish what it does after its first answer before memory is read."""
    time.sleep(1.5)


# ---------------------------------------------------------------------------------------------
# NSD and Knot

def nsd_conf(workdir, name, port, zones):
    """zones: [(apex, zonefile or None, primary port or None)]."""
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "nsd.conf")
    lines = ["server:", f"    ip-address: 127.0.0.1@{port}", f"    port: {port}", "    server-count: 1",
             '    username: ""', '    chroot: ""', f"    zonesdir: {d}", '    database: ""',
             f"    zonelistfile: {d}/zone.list", f"    xfrdfile: {d}/xfrd.state", f"    xfrdir: {d}",
             f"    pidfile: {d}/nsd.pid", "    verbosity: 1", "    hide-version: yes",
             # Debian's NSD has response rate limiting on by default: off, as in the other servers.
             "    xfrd-reload-timeout: 0", "    rrl-ratelimit: 0", "    rrl-whitelist-ratelimit: 0",
             "    receive-buffer-size: 8388608", "    send-buffer-size: 8388608",
             "remote-control:", "    control-enable: no"]
    for apex, zonefile, primary in zones:
        lines += ["zone:", f"    name: {apex}", "    provide-xfr: 127.0.0.0/8 NOKEY"]
        if zonefile:
            lines.append(f"    zonefile: {zonefile}")
        if primary:
            lines += [f"    request-xfr: AXFR 127.0.0.1@{primary} NOKEY", "    allow-notify: 127.0.0.0/8 NOKEY"]
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    return [NSD, "-d", "-c", conf]


def knot_conf(workdir, name, port, zones):
    d = os.path.join(workdir, name)
    os.makedirs(os.path.join(d, "run"), exist_ok=True)
    conf = os.path.join(d, "knot.conf")
    lines = ["server:", f"    listen: 127.0.0.1@{port}", "    udp-workers: 1", "    tcp-workers: 1",
             "    background-workers: 1", f"    rundir: {d}/run", "    udp-max-payload: 1232",
             "log:", "  - target: stderr", "    any: warning",
             "database:", f"    storage: {d}/db",
             "remote:", "  - id: primary", f"    address: 127.0.0.1@{PORTS['nsd']}",
             "acl:", "  - id: xfr", "    address: 127.0.0.0/8", "    action: [transfer, notify]",
             "template:", "  - id: default", f"    storage: {d}", "    zonefile-sync: -1", "    zonefile-load: whole",
             "    journal-content: none", "    semantic-checks: off", "    acl: xfr"]
    zone_lines = []
    for apex, zonefile, primary in zones:
        zone_lines += [f"  - domain: {apex}"]
        zone_lines.append(f"    file: {zonefile}" if zonefile else f"    file: {d}/{apex}zone")
        if primary:
            zone_lines.append("    master: primary")
    if zone_lines:
        lines += ["zone:"] + zone_lines
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    return [KNOTD, "-c", conf]


def peer_argv(server, workdir, label, zones, port=None):
    port = port or PORTS[server]
    if server == "nsd":
        return nsd_conf(workdir, f"nsd-{label}", port, zones)
    return knot_conf(workdir, f"knot-{label}", port, zones)


# ---------------------------------------------------------------------------------------------
# kudurru

class Api:
    def __init__(self, port, token):
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            c.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=self.headers)
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data.decode(errors="replace")

    def expect(self, wanted, method, path, body=None):
        status, out = self.call(method, path, body)
        if status not in wanted:
            raise BenchError(f"kudurru: {method} {path} answered {status}: {out}")
        return out


def zone_object(name, spec):
    """The Zone object the benchmark creates (the agreed spec of issue 35)."""
    return {"apiVersion": "kudurru.io/v1", "kind": "Zone", "metadata": {"name": name}, "spec": spec}


def primary_spec(apex, zonefile, notify=()):
    spec = {"zone": apex, "type": "primary", "file": os.path.basename(zonefile),
            "allowTransfer": ["127.0.0.0/8"]}
    if notify:
        spec["notify"] = list(notify)
    return spec


def secondary_spec(apex, primary_port):
    return {"zone": apex, "type": "secondary", "primaries": [{"address": f"127.0.0.1:{primary_port}"}]}


def kudurru_env(args):
    return {"KUDURRU_ZONES__FILEDIR": args.zonedir}


def kudurru_support(binary, args):
    """None when this build serves zones, else why the kudurru rows are skipped."""
    if not os.path.exists(binary):
        return f"no kudurru binary at {binary}"
    keys = subprocess.run([binary, "config", "keys"], capture_output=True, text=True).stdout
    spec = subprocess.run([binary, "api", "openapi"], capture_output=True, text=True).stdout
    missing = [what for what, ok in (("the zones.fileDir key", "zones.fileDir" in keys),
                                     ("/api/v1/zones", "/api/v1/zones" in spec)) if not ok]
    if missing:
        return f"this kudurru build has no zones yet (missing {', '.join(missing)}): the kudurru rows are skipped"
    return None


class Kudurru:
    def __init__(self, binary, args, label, data_dir=None, port=None, cpus=SERVER_CPU, role="kudurru"):
        self.data = data_dir or tempfile.mkdtemp(prefix=f"data-{label}-", dir=args.workdir)
        token = subprocess.run([binary, "token", "create", "--role", "operator", "--data-dir", self.data],
                               check=True, capture_output=True, text=True).stdout.strip()
        self.port = port or PORTS[role]
        self.api = Api(API_PORTS[role], token)
        argv = [binary, "serve", "--cores", "1", "--cpus", cpus, "--listen", f"127.0.0.1:{self.port}",
                "--upstream", f"udp://127.0.0.1:{DEAD_UPSTREAM}", "--ops-address", f"127.0.0.1:{OPS_PORTS[role]}",
                "--api-address", f"127.0.0.1:{API_PORTS[role]}", "--data-dir", self.data, "--log-level", "warn"]
        self.proc = Proc(f"{role}-{label}", argv, self.port, args.workdir, env=kudurru_env(args), cpus=cpus)

    def start(self):
        self.proc.start()
        # Any answer at all (localhost is a built-in name) says the data plane is up.
        self.up_s = wait_for(self.proc, lambda: query(self.port, "localhost.", A, 0.2) is not None, "an answer", 60)
        return self

    def apply(self, name, spec):
        self.api.expect((200, 201), "POST", "/api/v1/zones", zone_object(name, spec))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.proc.stop()


# ---------------------------------------------------------------------------------------------
# The rows

def rcodes(out):
    m = re.search(r"Response codes:\s*(.*)", out)
    return {k: int(v) for k, v in re.findall(r"([A-Z]+) (\d+)", m.group(1))} if m else {}


def dnsperf_rate(proc, port, datafile, args, expect_nx):
    argv = ["taskset", "-c", CLIENT_CPU, "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", datafile,
            "-l", str(args.duration), "-c", "4", "-q", "1000", "-t", "2", "-Q", str(args.rate)]
    before = cpu_seconds(proc.pid)
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    cpu = cpu_seconds(proc.pid) - before
    r = parse_dnsperf(out)
    r["rcodes"] = rcodes(out)
    check_rcodes(r["rcodes"], r["completed"], expect_nx, proc.name)
    r["server_cpu_s"] = cpu
    r["cpu_us_per_answer"] = cpu / r["completed"] * 1e6 if r["completed"] else None
    r["cpu_share"] = cpu / args.duration
    return r


def check_rcodes(counts, completed, expect_nx, who):
    if not completed:
        raise BenchError(f"{who}: no answers")
    nx = counts.get("NXDOMAIN", 0) / completed
    other = completed - counts.get("NOERROR", 0) - counts.get("NXDOMAIN", 0)
    if abs(nx - expect_nx) > 0.01 or other > completed * 0.001:
        raise BenchError(f"{who}: rcodes {counts} do not fit the mix ({expect_nx:.0%} NXDOMAIN)")


def capacity(proc, port, datafile, args, expect_nx):
    bench = os.path.join(args.bin_dir, "kudurru-bench")
    out = os.path.join(args.workdir, "capacity.json")
    argv = ["taskset", "-c", CLIENT_CPU, bench, f"udp://127.0.0.1:{port}", "--queries", datafile,
            "--duration", f"{args.duration}s", "--connections", "4", "--concurrency", str(args.concurrency),
            "--json", out]
    before = cpu_seconds(proc.pid)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    cpu = cpu_seconds(proc.pid) - before
    with open(out) as f:
        rep = json.load(f)
    check_rcodes(rep["rcodes"], rep["answered"], expect_nx, proc.name)
    return {"qps": rep["qps"], "answered": rep["answered"], "timeouts": rep["timeouts"], "rcodes": rep["rcodes"],
            "p50_us": rep.get("service_latency", {}).get("p50_us"), "server_cpu_s": cpu,
            "cpu_us_per_answer": cpu / rep["answered"] * 1e6 if rep["answered"] else None,
            "cpu_share": cpu / rep["duration_s"]}


def start_small(server, binary, args, kinds, stack):
    """`server` serving bench.example, up and checked; its Proc."""
    last = kinds["a"][-1]
    if server == "kudurru":
        k = stack.enter_context(Kudurru(binary, args, "small"))
        t0 = time.perf_counter()
        k.apply("bench", primary_spec(SMALL, args.small_file))
        load = wait_for(k.proc, lambda: answers_address(k.port, f"{last}.{SMALL}", ipv4(int(last[1:]))),
                        "the zone's last name", 60, since=t0)
        log(f"kudurru small zone answered {load:.2f} s after the apply")
        proc = k.proc
    else:
        argv = peer_argv(server, args.workdir, "small", [(SMALL, args.small_file, None)])
        proc = stack.enter_context(Proc(f"{server}-small", argv, PORTS[server], args.workdir))
        wait_for(proc, lambda: answers_address(PORTS[server], f"{last}.{SMALL}", ipv4(int(last[1:]))),
                 "the zone's last name", 60)
    check_shapes(proc.port, kinds, proc.name)
    return proc


def small_rows(servers, binary, args, kinds, expect_nx):
    """Every server up at once (the idle ones cost nothing: checked), then --rounds rounds of
    the rate row, the servers' order rotated each round, then one capacity run each."""
    out = {s: {"rate_rounds": [], "idle_cpu_s": []} for s in servers}
    with contextlib.ExitStack() as stack:
        procs = {}
        for s in servers:
            try:
                procs[s] = start_small(s, binary, args, kinds, stack)
            except BenchError as e:
                log(f"{s} small: {e}")
                out[s] = {"error": str(e)}
        up = list(procs)
        warm = argparse.Namespace(**dict(vars(args), duration=2))
        for s in up:
            dnsperf_rate(procs[s], procs[s].port, args.queries_file, warm, expect_nx)
        for r in range(args.rounds):
            for s in up[r % len(up):] + up[:r % len(up)]:
                others = {o: cpu_seconds(procs[o].pid) for o in up if o != s}
                row = dnsperf_rate(procs[s], procs[s].port, args.queries_file, args, expect_nx)
                out[s]["rate_rounds"].append(row)
                out[s]["idle_cpu_s"].append(max([cpu_seconds(procs[o].pid) - c for o, c in others.items()] or [0]))
                log(f"round {r} {s}: {row['cpu_us_per_answer']:.2f} µs/answer, {row['qps']:.0f} QPS, lost {row['lost']}")
        for s in up:
            rows = sorted(out[s]["rate_rounds"], key=lambda x: x["cpu_us_per_answer"])
            out[s]["rate"] = rows[len(rows) // 2]
            out[s]["capacity"] = capacity(procs[s], procs[s].port, args.queries_file, args, expect_nx)
            log(f"{s} capacity: {out[s]['capacity']}")
    return out


def peer_big(server, args, big, pulls):
    """Memory empty and loaded, load time, AXFR out; with the primary still up, the pulls."""
    res = {}
    port = PORTS[server]
    with Proc(f"{server}-empty", peer_argv(server, args.workdir, "empty", []), port, args.workdir) as p:
        wait_for(p, lambda: query(port, "localhost.", A, 0.2) is not None, "an answer", 30)
        settle()
        res["empty"] = memory(p.pid)
    argv = peer_argv(server, args.workdir, "big", [(BIG, args.big_file, None)])
    with Proc(f"{server}-big", argv, port, args.workdir) as p:
        res["load_s"] = wait_for(p, lambda: answers_address(port, big["last"], big["last_address"]),
                                 "the big zone's last name", args.load_timeout)
        settle()
        res["loaded"] = memory(p.pid)
        res["axfr_out"] = axfr_best(port, big, args)
        log(f"{server} big: {res}")
        for pull in pulls:
            res.setdefault("pulls", {})[pull.__name__] = guarded(pull, args, big)
    res["bytes_per_record"] = (res["loaded"]["pss"] - res["empty"]["pss"]) / big["records"]
    return res


def axfr_best(port, big, args):
    runs = [axfr(port, BIG, big["axfr_records"]) for _ in range(args.axfr_runs)]
    best = min(runs, key=lambda r: r["seconds"])
    best["all_seconds"] = [r["seconds"] for r in runs]
    return best


def guarded(fn, *a):
    try:
        return fn(*a)
    except BenchError as e:
        log(f"{fn.__name__}: {e}")
        return {"error": str(e)}


def pull_into(server, primary_port):
    """A secondary pull function: a new `server` process pulling BIG from `primary_port`."""
    def pull(args, big):
        name = f"{server}-secondary"
        argv = (nsd_conf if server == "nsd" else knot_conf)(args.workdir, f"{name}-{primary_port}", PORTS[name],
                                                           [(BIG, None, primary_port)])
        with Proc(f"{name}-{primary_port}", argv, PORTS[name], args.workdir, cpus=CLIENT_CPU) as p:
            seconds = wait_for(p, lambda: answers_address(PORTS[name], big["last"], big["last_address"]),
                               "the transferred zone's last name", args.pull_timeout)
            serial = soa_serial(PORTS[name], BIG)
        return {"seconds": seconds, "serial": serial}
    pull.__name__ = f"{server}-secondary"
    return pull


def kudurru_pull(binary, primary_port):
    def pull(args, big):
        with Kudurru(binary, args, f"secondary-{primary_port}", cpus=CLIENT_CPU, role="kudurru-secondary") as k:
            t0 = time.perf_counter()
            k.apply("big-secondary", secondary_spec(BIG, primary_port))
            seconds = wait_for(k.proc, lambda: answers_address(k.port, big["last"], big["last_address"]),
                               "the transferred zone's last name", args.pull_timeout, since=t0)
            serial = soa_serial(k.port, BIG)
            return {"seconds": seconds, "serial": serial}
    pull.__name__ = "kudurru-secondary"
    return pull


def kudurru_small(binary, args, kinds, expect_nx):
    with Kudurru(binary, args, "small") as k:
        t0 = time.perf_counter()
        k.apply("bench", primary_spec(SMALL, args.small_file))
        last = kinds["a"][-1]
        load = wait_for(k.proc, lambda: answers_address(k.port, f"{last}.{SMALL}", ipv4(int(last[1:]))),
                        "the zone's last name", 60, since=t0)
        log(f"kudurru small zone answered {load:.2f} s after the apply")
        return serve_rows(k.proc, k.port, args, kinds, expect_nx)


def kudurru_big(binary, args, big, pulls):
    res = {}
    with Kudurru(binary, args, "big") as k:
        res["up_s"] = k.up_s
        settle()
        res["empty"] = memory(k.proc.pid)
        t0 = time.perf_counter()
        k.apply("big", primary_spec(BIG, args.big_file))
        res["apply_s"] = time.perf_counter() - t0
        res["load_s"] = wait_for(k.proc, lambda: answers_address(k.port, big["last"], big["last_address"]),
                                 "the big zone's last name", args.load_timeout, since=t0)
        settle()
        res["loaded"] = memory(k.proc.pid)
        res["bytes_per_record"] = (res["loaded"]["pss"] - res["empty"]["pss"]) / big["records"]
        log(f"kudurru big: {res}")
        res["axfr_out"] = guarded(axfr_best, k.port, big, args)
        for pull in pulls:
            res.setdefault("pulls", {})[pull.__name__] = guarded(pull, args, big)
        data = k.data
    # A restart with the Zone object stored: process start to the last name answered.
    with Kudurru(binary, args, "big", data_dir=data) as k:
        res["restart_s"] = wait_for(k.proc, lambda: answers_address(k.port, big["last"], big["last_address"]),
                                    "the big zone's last name after a restart", args.load_timeout)
        settle()
        res["restart"] = memory(k.proc.pid)
    return res


# ---------------------------------------------------------------------------------------------
# Report

def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {}
    for tool, argv in (("nsd", [NSD, "-v"]), ("knot", [KNOTD, "-V"]), ("dnsperf", ["dnsperf", "-h"])):
        out = subprocess.run(argv, capture_output=True, text=True)
        text = (out.stdout + out.stderr).splitlines()
        versions[tool] = next((l.strip() for l in text if "ersion" in l), "")
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": os.uname().release, "versions": versions,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def ratio(x, base):
    return f"{x / base:.2f}x" if x and base else "–"


def markdown(report):
    res = report["results"]
    m = report["machine"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} vCPUs, kernel {m['kernel']}; {m['versions'].get('nsd')}, "
             f"{m['versions'].get('knot')}; {m['date']}.", ""]
    small = {s: r["small"] for s, r in res.items() if isinstance(r.get("small"), dict) and "rate" in r["small"]}
    if small:
        o = report["offered"]
        lines += [f"### Authoritative UDP answers, bench.example ({report['zones']['small_records']} records, "
                  f"{report['zones']['small_names']} names), the query mix", "",
                  "| server | offered QPS | answered QPS | lost | server CPU µs/answer (median of the rounds, range) | vs NSD | vs Knot | "
                  "capacity QPS (one core) | CPU at capacity | µs/answer at capacity | vs NSD |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        nsd_r = small.get("nsd", {}).get("rate", {}).get("cpu_us_per_answer")
        knot_r = small.get("knot", {}).get("rate", {}).get("cpu_us_per_answer")
        nsd_c = small.get("nsd", {}).get("capacity", {}).get("cpu_us_per_answer")
        for s in SERVERS:
            if s not in small:
                continue
            r, c = small[s]["rate"], small[s]["capacity"]
            spread = [x["cpu_us_per_answer"] for x in small[s].get("rate_rounds", [])]
            cell = f"{r['cpu_us_per_answer']:.2f}" + (f" ({min(spread):.2f}–{max(spread):.2f})" if len(spread) > 1 else "")
            lines.append(f"| {s} | {o['rate']} | {r['qps']:.0f} | {r['lost']} | {cell} | "
                         f"{ratio(r['cpu_us_per_answer'], nsd_r)} | {ratio(r['cpu_us_per_answer'], knot_r)} | "
                         f"{c['qps']:.0f}{'' if c['cpu_share'] >= 0.9 else ' †'} | {c['cpu_share']:.0%} | "
                         f"{c['cpu_us_per_answer']:.2f} | "
                         f"{ratio(c['cpu_us_per_answer'], nsd_c)} |")
        if any(small[s]["capacity"]["cpu_share"] < 0.9 for s in small):
            lines += ["", "† the server used less than 90 % of its core: the generator, not the server, set this QPS."]
        lines.append("")
    big = {s: r["big"] for s, r in res.items() if isinstance(r.get("big"), dict) and "loaded" in r["big"]}
    if big:
        z = report["zones"]
        lines += [f"### big.example: {z['big_records']} records ({z['big_names']} names)", "",
                  "| server | load s | PSS empty MiB | PSS loaded MiB | largest RSS MiB | bytes/record | "
                  "MiB per million records | vs NSD | AXFR out s | vs NSD |", "|---|---|---|---|---|---|---|---|---|---|"]
        nsd_b = big.get("nsd", {}).get("bytes_per_record")
        nsd_x = big.get("nsd", {}).get("axfr_out", {}).get("seconds")
        for s in SERVERS:
            if s not in big:
                continue
            b = big[s]
            x = b.get("axfr_out", {}).get("seconds")
            load = f"{b['load_s']:.2f}" + (f" (restart {b['restart_s']:.2f})" if "restart_s" in b else "")
            lines.append(f"| {s} | {load} | {b['empty']['pss'] / 2**20:.1f} | {b['loaded']['pss'] / 2**20:.1f} | "
                         f"{b['loaded']['rss'] / 2**20:.1f} | {b['bytes_per_record']:.0f} | "
                         f"{b['bytes_per_record'] * 1e6 / 2**20:.0f} | {ratio(b['bytes_per_record'], nsd_b)} | "
                         f"{x:.2f} | {ratio(x, nsd_x)} |" if x else
                         f"| {s} | {load} | {b['empty']['pss'] / 2**20:.1f} | {b['loaded']['pss'] / 2**20:.1f} | "
                         f"{b['loaded']['rss'] / 2**20:.1f} | {b['bytes_per_record']:.0f} | "
                         f"{b['bytes_per_record'] * 1e6 / 2**20:.0f} | {ratio(b['bytes_per_record'], nsd_b)} | "
                         f"{b.get('axfr_out', {}).get('error', '–')} | – |")
        lines += ["", "### AXFR in: a new secondary until it answers the zone's last name", "",
                  "| primary → secondary | seconds | serial |", "|---|---|---|"]
        for s in SERVERS:
            for sec, r in big.get(s, {}).get("pulls", {}).items():
                cell = f"{r['seconds']:.2f} | {r['serial']}" if "seconds" in r else f"{r['error']} | –"
                lines.append(f"| {s} → {sec.replace('-secondary', '')} | {cell} |")
    for s, r in res.items():
        for part in ("small", "big"):
            if isinstance(r.get(part), dict) and "error" in r[part]:
                lines += ["", f"{s} {part}: {r[part]['error']}"]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter load runs")
    ap.add_argument("--servers", default=",".join(SERVERS), help="comma-separated subset")
    ap.add_argument("--names", type=int, default=100_000, help="owner names of bench.example")
    ap.add_argument("--queries", type=int, default=200_000, help="lines of the query file")
    ap.add_argument("--rate", type=int, default=30_000, help="offered QPS for the rate rows")
    ap.add_argument("--concurrency", type=int, default=500, help="outstanding queries of the capacity rows")
    ap.add_argument("--duration", type=int, default=10, help="seconds per load run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the rate row (median kept)")
    ap.add_argument("--axfr-runs", type=int, default=3, help="AXFRs out per server (best kept)")
    ap.add_argument("--load-timeout", type=int, default=120, help="seconds a zone load may take")
    ap.add_argument("--pull-timeout", type=int, default=30, help="seconds a secondary's first transfer may take")
    ap.add_argument("--skip-small", action="store_true")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--no-pulls", action="store_true",
                    help="big zone: load, memory and AXFR out only (no secondaries pulling it)")
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--json", default=os.path.join(ROOT, "target", "bench-zones.json"))
    ap.add_argument("--bin-dir", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                                                      "release"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (zones, configs, logs)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.axfr_runs, args.rounds = 5, 2, 2
    servers = args.servers.split(",")
    for tool in ("dnsperf", "taskset", NSD, KNOTD):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install dnsperf nsd knot util-linux")
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kudurru-control", "-p", "kudurru-bench"],
                       cwd=ROOT, check=True)
    kudurru = os.path.join(args.bin_dir, "kudurru")
    args.workdir = tempfile.mkdtemp(prefix="kudurru-zones-")
    args.zonedir = os.path.join(args.workdir, "zones")
    os.makedirs(args.zonedir)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    args.small_file = os.path.join(args.zonedir, "bench.example.zone")
    kinds = small_zone(args.small_file, args.names)
    args.queries_file = os.path.join(args.workdir, "queries.txt")
    expect_nx = query_mix(args.queries_file, kinds, args.queries, rng)
    args.big_file = os.path.join(args.zonedir, "big.example.zone")
    big = big_zone(args.big_file) if not args.skip_big else None
    log(f"zones written in {time.perf_counter() - t0:.1f} s to {args.zonedir}")
    report = {"machine": machine(), "offered": {"rate": args.rate, "concurrency": args.concurrency,
                                                 "duration": args.duration},
              "zones": {"small_records": kinds["records"], "small_names": args.names,
                        "big_records": big and big["records"], "big_names": big and big["names"]},
              "results": {}}
    why_not = kudurru_support(kudurru, args) if "kudurru" in servers else None
    if why_not:
        log(why_not)
        report["kudurru_skipped"] = why_not
        servers.remove("kudurru")
    try:
        if not args.skip_small:
            log("== bench.example, every server")
            for server, res in small_rows(servers, kudurru, args, kinds, expect_nx).items():
                report["results"].setdefault(server, {})["small"] = res
        for server in servers:
            log(f"== {server}")
            res = report["results"].setdefault(server, {})
            if big:
                try:
                    if server == "nsd":
                        pulls = [pull_into("nsd", PORTS["nsd"]), pull_into("knot", PORTS["nsd"])]
                        if "kudurru" in servers:
                            pulls.append(kudurru_pull(kudurru, PORTS["nsd"]))
                        pulls = [] if args.no_pulls else pulls
                        res["big"] = peer_big(server, args, big, pulls)
                    elif server == "kudurru":
                        res["big"] = kudurru_big(kudurru, args, big,
                                                 [] if args.no_pulls else [pull_into("nsd", PORTS["kudurru"])])
                    else:
                        res["big"] = peer_big(server, args, big, [])
                except BenchError as e:
                    log(f"{server} big: {e}")
                    res["big"] = {"error": str(e)}
    finally:
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print(markdown(report))
    log(f"JSON report: {args.json}; total {time.perf_counter() - t0:.0f} s")
    if args.keep:
        log(f"work directory kept: {args.workdir}")
    else:
        shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
