#!/usr/bin/env python3
"""Block lists: kudurru against Unbound, dnsmasq and PowerDNS Recursor with the same list, in one run.

One command (from the repository root):

    python3 benches/peers/blocking.py                          # 100k, 1M, 3M and the real list
    python3 benches/peers/blocking.py --sizes 10k --quick      # a smoke run, ~3 minutes
    python3 benches/peers/blocking.py --servers unbound,dnsmasq --sizes 100k

The lists. `--sizes` names generated lists (`10k`, `100k`, `1m`, `3m`, any count) and `real`: the
domain-only rules (`||name^`) of EasyList and EasyPrivacy as Debian's webext-ublock-origin-firefox
ships them (~84k names; `apt-get install --no-install-recommends webext-ublock-origin-firefox`; the row is skipped with a
message when it is not installed). Generated lists are deterministic (--seed): tracker- and
ad-like names of 2 to 5 labels, TLDs weighted roughly as such lists have them, words, word-word
(hyphenated), numbered and hash-like labels, all IDNA-free. Every list comes with 1000 allowed
names (neither in the list nor under a listed name) and 1000 blocked names drawn from it.

Every server gets the same list in its own syntax, and blocks a listed name and everything under
it, answering NXDOMAIN:

  kudurru         a BlockList (`file` source, format `wildcard`: the name and everything under it, as the peers are configured, mode deny) and a Policy for the
                  `default` client group, created on the HTTP API (see `kudurru_objects`)
  unbound         `local-zone: "name." always_nxdomain`, one per name (module-config "iterator")
  unbound-rpz     the RPZ module (module-config "respip validator iterator"), a zone file with
                  `name CNAME .` and `*.name CNAME .` per name
  dnsmasq         `address=/name/` lines in a conf-file
  pdns-recursor   `rpzFile` in the Lua configuration, the same RPZ zone file

Each server in turn (never two at once) runs pinned to CPU 0, forwarding to the benchmark
upstream (`kudurru-echo --mode answer`: A 192.0.2.1, TTL 3600) pinned to CPU 1 with dnsperf.
Measured for each server and list:

  load        seconds from starting the process (kudurru: from creating the objects on a running
              server) until the last name of the list is blocked, polled every 20 ms; kudurru also
              from a restart with the objects stored until that name is blocked
  RSS         VmRSS after load, beside the same server's RSS started with an empty list (kudurru:
              no objects); (with - without) / names is the list's cost in bytes per name
  allowed     UDP cache hits: the 1000 allowed names warmed, then dnsperf at --rate for --duration;
              the server's utime+stime (/proc/PID/stat) per answer
  blocked     the 1000 blocked names at the same rate; CPU per answer

Every answer is checked, so a misconfigured server fails loudly instead of measuring nothing:
before measuring, 20 blocked names must get NXDOMAIN and 20 allowed names the upstream's
192.0.2.1; in the measured runs at least 99% of the answers must have the expected rcode. A run
that loses more than 1% of its queries is marked over capacity (lower --rate); one where dnsperf
could not send 97% of the offered rate is marked with †.

kudurru only (at the `1m` size, else the largest generated one; `--skip-extras` leaves them out):
  cores       RSS of `--cores 2` with and without the list, beside `--cores 1`: the list's cost must
              not double (one compiled matcher shared by every core)
  refreshes   --refreshes (20) rewrites of the list file (one marker name more each time, then
              `POST /api/v1/blocklists/{name}/refresh`), each waited for until the marker is
              blocked; RSS after each (target: flat within 5%)
  ab          allowed cache hits with the list and Policy active against blocking off (Policy
              deleted), in one process, --ab-rounds alternating rounds (ab.py's method; target: on
              within 1.05x of off)

Bounded: every load has a deadline (--load-timeout) and an RSS ceiling (--max-rss-gib); a server
past either is stopped and its row says so. Traffic stays on 127.0.0.1. Writes a JSON report
(--json) and prints Markdown tables for docs/benchmarks.md.

Needs: dnsperf, unbound, dnsmasq, pdns-recursor, taskset (Debian packages), a release build
(built here unless --no-build; --bin-dir to use another build's target/release).
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (CLIENT_CPU, ROOT, SERVER_CPU, cpu_seconds, dnsperf, log, parse_dnsperf,  # noqa: E402
                     port_free, rss_bytes, write_names)

UPSTREAM_PORT = 27500
PORTS = {"kudurru": 27502, "unbound": 27503, "unbound-rpz": 27504, "dnsmasq": 27505, "pdns-recursor": 27506}
OPS_PORT, API_PORT = 27581, 27582
UPSTREAM_ADDRESS = "192.0.2.1"  # what kudurru-echo --mode answer puts in every answer
SERVERS = ["kudurru", "unbound", "unbound-rpz", "dnsmasq", "pdns-recursor"]
RPZ_ORIGIN = "rpz.bench."
LIST_NAME, POLICY_NAME = "bench", "bench"
UBO_ASSETS = ("/usr/share/mozilla/extensions/{ec8030f7-c20a-464f-9b0e-13a3a9e97384}/uBlock0@raymondhill.net/"
              "assets/thirdparties/easylist")
NXDOMAIN, NOERROR = 3, 0


# ---------------------------------------------------------------------------------------------
# The lists

TLDS = [("com", 40), ("net", 11), ("org", 4), ("io", 4), ("ru", 4), ("de", 3), ("xyz", 3), ("top", 3),
        ("info", 2), ("co", 2), ("cn", 2), ("co.uk", 2), ("fr", 2), ("online", 1), ("site", 1), ("jp", 1),
        ("com.br", 1), ("pl", 1), ("nl", 1), ("biz", 1), ("app", 1), ("tv", 1), ("me", 1), ("in", 1),
        ("es", 1), ("it", 1), ("club", 1), ("live", 1), ("cloud", 1), ("us", 1), ("pro", 1), ("vn", 1)]
WORDS = ("ads ad adserver adservice adsrv track tracker tracking trk metrics metric pixel px stats stat "
         "analytics analytic collect collector tag tags tagman beacon click clicks clk counter count log logs "
         "telemetry sync rtb bid bidder bids media static img cdn api events event insight insights measure "
         "data push notify affiliate aff partner partners promo banner banners popup pop offer offers deals "
         "cash win bet casino crypto coin survey sponsor native video vast impression imp conv conversion "
         "retarget audience segment id uid cookie match usermatch delivery serve serving adx dsp ssp exchange "
         "network smart fast global secure my get web mobile app cloud online digital hub lab zone point line "
         "box link links site visit view views open mail news daily top best free go one").split()
REGIONS = ["eu", "us", "asia", "ap", "east", "west", "north", "south", "fra", "ams", "lon", "nyc", "sfo", "sg"]
CONSONANTS, VOWELS = "bcdfghjklmnprstvwxz", "aeiou"
ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"


class NameGenerator:
    """Tracker- and ad-like names, deterministic for a seed."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.tlds = [t for t, _ in TLDS]
        self.tld_weights = [w for _, w in TLDS]

    def syllables(self):
        r = self.rng
        return "".join(r.choice(CONSONANTS) + r.choice(VOWELS) for _ in range(r.randint(2, 4)))

    def alnum(self, lo, hi):
        r = self.rng
        return "".join(r.choice(ALNUM) for _ in range(r.randint(lo, hi)))

    def base(self):
        """The registrable label."""
        r, x = self.rng, self.rng.random()
        if x < 0.25:
            return r.choice(WORDS) + r.choice(WORDS)
        if x < 0.40:
            return r.choice(WORDS) + "-" + r.choice(WORDS)  # hyphenated
        if x < 0.52:
            return r.choice(WORDS) + str(r.randint(1, 999))
        if x < 0.80:
            return self.syllables() + (r.choice(WORDS) if r.random() < 0.3 else "")
        if x < 0.95:
            return self.alnum(5, 12)
        return self.alnum(16, 32)  # hash-like

    def sub(self):
        r, x = self.rng, self.rng.random()
        if x < 0.45:
            return r.choice(WORDS)
        if x < 0.60:
            return r.choice(WORDS) + str(r.randint(0, 99))
        if x < 0.70:
            return f"{r.choice(REGIONS)}-{r.choice(WORDS)}" if r.random() < 0.5 else f"{r.choice(REGIONS)}{r.randint(1, 9)}"
        if x < 0.85:
            return self.alnum(4, 10)
        if x < 0.95:
            return r.choice(WORDS) + "-" + r.choice(WORDS)
        return self.alnum(12, 40)

    def name(self):
        r = self.rng
        tld = r.choices(self.tlds, self.tld_weights)[0]
        labels = r.choices((2, 3, 4, 5), (35, 40, 18, 7))[0]
        subs = max(0, labels - 1 - tld.count(".") - 1)
        return ".".join([self.sub() for _ in range(subs)] + [self.base(), tld])

    def unique(self, count, exclude=frozenset()):
        seen, out = set(), []
        while len(out) < count:
            n = self.name()
            if n not in seen and n not in exclude:
                seen.add(n)
                out.append(n)
        return out


def parse_size(text):
    text = text.strip().lower()
    mult = {"k": 1000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * mult)


def real_list():
    """Domain-only rules of EasyList and EasyPrivacy (Debian's webext-ublock-origin-firefox), or None."""
    names, seen = [], set()
    for f in ("easylist.txt", "easyprivacy.txt"):
        path = os.path.join(UBO_ASSETS, f)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = re.match(r"^\|\|([a-z0-9][a-z0-9.-]*[a-z0-9])\^$", line.strip())
                if m and "." in m.group(1) and "xn--" not in m.group(1) and m.group(1) not in seen:
                    seen.add(m.group(1))
                    names.append(m.group(1))
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "webext-ublock-origin-firefox"],
                             capture_output=True, text=True).stdout.strip()
    return names, f"EasyList + EasyPrivacy domain rules (webext-ublock-origin-firefox {version})"


def covered(name, listed):
    """Whether `name` or a parent of it is in `listed`."""
    labels = name.split(".")
    return any(".".join(labels[i:]) in listed for i in range(len(labels) - 1))


class ListSet:
    """One list and its files in every server's syntax."""

    def __init__(self, label, names, workdir, seed, source):
        self.label, self.names, self.source = label, names, source
        self.dir = os.path.join(workdir, f"list-{label}")
        os.makedirs(self.dir, exist_ok=True)
        listed = set(names)
        rng = random.Random(seed + 1)
        self.blocked = rng.sample(names, min(1000, len(names)))
        gen = NameGenerator(seed + 2)
        self.allowed = []
        while len(self.allowed) < 1000:
            n = gen.name()
            if not covered(n, listed) and n not in self.allowed:
                self.allowed.append(n)
        self.probe = names[-1]  # the last one read: blocked means the whole list is in
        self.files = {}

    def path(self, kind):
        return os.path.join(self.dir, kind)

    def write(self):
        """domains, unbound local-zone include, RPZ zone, dnsmasq conf; query files."""
        t0 = time.time()
        forms = {
            "domains.txt": "{}\n",
            "unbound-local-zones.conf": 'local-zone: "{}." always_nxdomain\n',
            "rpz.zone": "{0} CNAME .\n*.{0} CNAME .\n",
            "dnsmasq-addresses.conf": "address=/{}/\n",
        }
        for fname, fmt in forms.items():
            with open(self.path(fname), "w") as f:
                if fname == "rpz.zone":
                    f.write(rpz_header())
                for i in range(0, len(self.names), 50_000):
                    f.write("".join(fmt.format(n) for n in self.names[i:i + 50_000]))
        write_names(self.path("allowed.txt"), [n + "." for n in self.allowed])
        write_names(self.path("blocked.txt"), [n + "." for n in self.blocked])
        log(f"list {self.label}: {len(self.names)} names written in {time.time() - t0:.1f} s ({self.dir})")


def rpz_header():
    return (f"$ORIGIN {RPZ_ORIGIN}\n$TTL 300\n@ SOA localhost. hostmaster.localhost. 1 3600 600 86400 300\n"
            "@ NS localhost.\n")


def empty_files(workdir):
    d = os.path.join(workdir, "list-empty")
    os.makedirs(d, exist_ok=True)
    for fname in ("domains.txt", "unbound-local-zones.conf", "dnsmasq-addresses.conf"):
        open(os.path.join(d, fname), "w").close()
    with open(os.path.join(d, "rpz.zone"), "w") as f:
        f.write(rpz_header())
    return d


# ---------------------------------------------------------------------------------------------
# DNS over UDP, enough to check an answer

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


def dns_query(port, name, timeout=0.5):
    """(rcode, [A addresses]) of an A query for `name`, or None without an answer."""
    qid = random.getrandbits(16)
    query = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + encode_name(name) + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(("127.0.0.1", port))  # connected: a port nobody holds yet fails at once
            s.send(query)
            while True:
                data = s.recv(4096)
                if len(data) >= 12 and struct.unpack(">H", data[:2])[0] == qid:
                    break
        except OSError:
            return None
    rcode = data[3] & 0x0F
    qd, an = struct.unpack(">HH", data[4:8])
    pos, addrs = 12, []
    try:
        for _ in range(qd):
            pos = skip_name(data, pos) + 4
        for _ in range(an):
            pos = skip_name(data, pos)
            rtype, _, _, rdlen = struct.unpack(">HHIH", data[pos:pos + 10])
            pos += 10
            if rtype == 1 and rdlen == 4:
                addrs.append(socket.inet_ntoa(data[pos:pos + 4]))
            pos += rdlen
    except (IndexError, struct.error):
        pass
    return rcode, addrs


def is_blocked(port, name):
    a = dns_query(port, name, timeout=0.2)
    return a is not None and a[0] == NXDOMAIN


def is_allowed(port, name):
    a = dns_query(port, name, timeout=1.0)
    return a is not None and a[0] == NOERROR and UPSTREAM_ADDRESS in a[1]


class BenchError(Exception):
    pass


def verify(port, listset, server):
    """20 blocked names NXDOMAIN, 20 allowed names the upstream's answer; subdomains recorded."""
    bad = [n for n in listset.blocked[:20] if not is_blocked(port, n)]
    if bad:
        raise BenchError(f"{server}: {len(bad)} of 20 listed names are not blocked, e.g. {bad[0]}: "
                         f"{dns_query(port, bad[0])}")
    bad = [n for n in listset.allowed[:20] if not is_allowed(port, n)]
    if bad:
        raise BenchError(f"{server}: {len(bad)} of 20 allowed names did not get the upstream's answer, "
                         f"e.g. {bad[0]}: {dns_query(port, bad[0], timeout=1.0)}")
    subs = [f"sub{i}.{n}" for i, n in enumerate(listset.blocked[:10])]
    return sum(is_blocked(port, s) for s in subs) == len(subs)


# ---------------------------------------------------------------------------------------------
# Processes

def memory(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


class Proc:
    """One server process pinned to CPU 0 (or `cpus`), stopped on exit."""

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
        env = dict(os.environ, **(self.env or {}))
        self.proc = subprocess.Popen(["taskset", "-c", self.cpus] + self.argv, stdout=self.log, stderr=self.log,
                                     env=env)
        self.started = time.perf_counter()
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
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def wait_for(proc, check, what, timeout, max_rss, interval=0.02):
    """Polls `check()` until true; seconds since `proc` started. Stops at a deadline, an exit or
    an RSS past `max_rss`."""
    t0 = proc.started
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if not proc.alive():
            raise BenchError(f"{proc.name} exited while waiting for {what}: {proc.tail()}")
        if check():
            return time.perf_counter() - t0
        if max_rss and rss_bytes(proc.pid) > max_rss:
            raise BenchError(f"{proc.name} passed the RSS ceiling ({max_rss / 2**30:.1f} GiB) before {what}")
        time.sleep(interval)
    raise BenchError(f"{proc.name}: no {what} within {timeout} s")


# ---------------------------------------------------------------------------------------------
# The peers' configurations

def unbound_argv(workdir, port, files, rpz):
    conf = os.path.join(workdir, f"unbound-{'rpz' if rpz else 'lz'}-{os.path.basename(files)}.conf")
    with open(conf, "w") as f:
        f.write(f"""server:
    interface: 127.0.0.1@{port}
    port: {port}
    num-threads: 1
    access-control: 127.0.0.0/8 allow
    do-daemonize: no
    chroot: ""
    username: ""
    pidfile: ""
    logfile: ""
    use-syslog: no
    verbosity: 0
    module-config: "{'respip validator iterator' if rpz else 'iterator'}"
    do-not-query-localhost: no
    qname-minimisation: no
    prefetch: no
    msg-cache-size: 64m
    rrset-cache-size: 128m
    num-queries-per-thread: 4096
    outgoing-range: 8192
    so-rcvbuf: 8m
    so-sndbuf: 8m
""")
        if rpz:
            f.write(f"""rpz:
    name: "{RPZ_ORIGIN}"
    zonefile: "{os.path.join(files, 'rpz.zone')}"
    rpz-log: no
""")
        else:
            f.write(f'    include: "{os.path.join(files, "unbound-local-zones.conf")}"\n')
        f.write(f"""forward-zone:
    name: "."
    forward-addr: 127.0.0.1@{UPSTREAM_PORT}
""")
    return ["unbound", "-d", "-c", conf]


def dnsmasq_argv(workdir, port, files):
    conf = os.path.join(workdir, f"dnsmasq-{os.path.basename(files)}.conf")
    with open(conf, "w") as f:
        f.write(f"""port={port}
listen-address=127.0.0.1
bind-interfaces
no-resolv
no-hosts
no-poll
keep-in-foreground
pid-file={os.path.join(workdir, 'dnsmasq.pid')}
server=127.0.0.1#{UPSTREAM_PORT}
cache-size=100000
dns-forward-max=4096
conf-file={os.path.join(files, 'dnsmasq-addresses.conf')}
""")
    return ["dnsmasq", "--conf-file=" + conf, "--log-facility=-"]


def pdns_argv(workdir, port, files):
    d = os.path.join(workdir, f"pdns-{os.path.basename(files)}")
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "recursor.conf"), "w").close()
    lua = os.path.join(d, "rpz.lua")
    with open(lua, "w") as f:
        f.write(f'rpzFile("{os.path.join(files, "rpz.zone")}", {{policyName="bench"}})\n')
    return ["pdns_recursor", "--daemon=no", f"--config-dir={d}", f"--socket-dir={d}", "--local-address=127.0.0.1",
            f"--local-port={port}", f"--forward-zones-recurse=.=127.0.0.1:{UPSTREAM_PORT}",
            f"--lua-config-file={lua}", "--threads=1", "--pdns-distributes-queries=no", "--dnssec=off",
            "--security-poll-suffix=", "--disable-syslog=yes", "--loglevel=3", "--quiet=yes",
            "--max-cache-entries=1000000", "--max-mthreads=4096"]


def peer_argv(server, workdir, files):
    port = PORTS[server]
    if server == "unbound":
        return unbound_argv(workdir, port, files, rpz=False)
    if server == "unbound-rpz":
        return unbound_argv(workdir, port, files, rpz=True)
    if server == "dnsmasq":
        return dnsmasq_argv(workdir, port, files)
    if server == "pdns-recursor":
        return pdns_argv(workdir, port, files)
    raise ValueError(server)


# ---------------------------------------------------------------------------------------------
# Measuring

def rcodes(out):
    m = re.search(r"Response codes:\s+(.*)", out)
    return {k: int(v) for k, v in re.findall(r"([A-Z]+) (\d+) \(", m.group(1))} if m else {}


def run_load(proc, port, datafile, args, expect):
    """Warms with every name once, then dnsperf at --rate: the server's CPU per answer, checked."""
    dnsperf(port, datafile, 5, 20000, runs=1)
    before = cpu_seconds(proc.pid)
    out = dnsperf(port, datafile, args.duration, args.rate)
    cpu = cpu_seconds(proc.pid) - before
    r = parse_dnsperf(out)
    r["rcodes"] = rcodes(out)
    r["server_cpu_s"] = cpu
    r["cpu_us_per_answer"] = cpu / r["completed"] * 1e6 if r["completed"] else None
    # Lost answers are the server's; queries never sent are the generator's (CPU 1 is shared
    # with the upstream), so the two are told apart.
    r["over_capacity"] = r["lost"] > 0.01 * max(r["sent"], 1)
    r["generator_short"] = r["sent"] < 0.97 * args.rate * args.duration
    wanted = r["rcodes"].get(expect, 0)
    if not r["completed"] or wanted < 0.99 * r["completed"]:
        raise BenchError(f"{proc.name}: {wanted} of {r['completed']} answers were {expect} ({r['rcodes']})")
    return r


def measure_peer(server, listset, empty_dir, args, baselines):
    """Start → blocked, RSS, CPU per allowed and blocked answer for one peer and one list."""
    port = PORTS[server]
    res = {}
    if server not in baselines:
        with Proc(server, peer_argv(server, args.workdir, empty_dir), port, args.workdir) as p:
            start = wait_for(p, lambda: is_allowed(port, listset.allowed[0]), "an answer", 60, 0)
            time.sleep(1)
            baselines[server] = {"start_s": start, **memory(p.pid)}
    res["empty"] = baselines[server]
    with Proc(server, peer_argv(server, args.workdir, listset.dir), port, args.workdir) as p:
        res["load_s"] = wait_for(p, lambda: is_blocked(port, listset.probe), "the last listed name blocked",
                                 args.load_timeout, args.max_rss)
        time.sleep(1)
        res["loaded"] = memory(p.pid)
        res["subdomains_blocked"] = verify(port, listset, server)
        res["allowed"] = run_load(p, port, listset.path("allowed.txt"), args, "NOERROR")
        res["blocked"] = run_load(p, port, listset.path("blocked.txt"), args, "NXDOMAIN")
        res["after"] = memory(p.pid)
    res["bytes_per_name"] = (res["loaded"]["VmRSS"] - res["empty"]["VmRSS"]) / len(listset.names)
    return res


# ---------------------------------------------------------------------------------------------
# kudurru

class Api:
    def __init__(self, token):
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=60)
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


def kudurru_objects(list_file):
    """The objects the benchmark creates: adjust here when the API's shapes settle."""
    blocklist = {"apiVersion": "kudurru.io/v1", "kind": "BlockList", "metadata": {"name": LIST_NAME},
                 "spec": {"sources": [{"file": list_file}], "format": "wildcard", "mode": "deny"}}
    policy = {"apiVersion": "kudurru.io/v1", "kind": "Policy", "metadata": {"name": POLICY_NAME},
              "spec": {"clientGroups": ["default"], "denyLists": [LIST_NAME]}}
    return blocklist, policy


def create_objects(api, list_file):
    blocklist, policy = kudurru_objects(list_file)
    api.expect((201,), "POST", "/api/v1/blocklists", blocklist)
    api.expect((201,), "POST", "/api/v1/policies", policy)


def kudurru_env(args):
    return {"KUDURRU_BLOCKING__FILESOURCEDIR": args.kudurru_lists,
            "KUDURRU_BLOCKING__MAXLISTBYTES": str(1 << 30),
            "KUDURRU_BLOCKING__MAXLISTENTRIES": str(10_000_000)}


def kudurru_support(binary, args):
    """None when this build blocks, else why the kudurru rows are skipped."""
    if not os.path.exists(binary):
        return f"no kudurru binary at {binary}"
    keys = subprocess.run([binary, "config", "keys"], capture_output=True, text=True).stdout
    spec = subprocess.run([binary, "api", "openapi"], capture_output=True, text=True).stdout
    missing = [what for what, ok in (("the blocking.fileSourceDir key", "blocking.fileSourceDir" in keys),
                                     ("/api/v1/blocklists", "/api/v1/blocklists" in spec),
                                     ("/api/v1/policies", "/api/v1/policies" in spec)) if not ok]
    if missing:
        return (f"this kudurru build has no blocking yet (missing {', '.join(missing)}): the kudurru rows are "
                f"skipped; run again once issue 34 is merged")
    check = subprocess.run([binary, "config", "check"], capture_output=True, text=True,
                           env=dict(os.environ, **kudurru_env(args)))
    if check.returncode != 0:
        return f"kudurru config check refuses the benchmark's settings: {check.stdout}{check.stderr}"
    return None


class Kudurru:
    def __init__(self, binary, args, data_dir, cores=1):
        self.binary, self.args, self.data, self.cores = binary, args, data_dir, cores
        os.makedirs(data_dir, exist_ok=True)
        token = subprocess.run([binary, "token", "create", "--role", "operator", "--data-dir", data_dir],
                               check=True, capture_output=True, text=True).stdout.strip()
        self.api = Api(token)
        cpus = ["--cpus", SERVER_CPU] if cores == 1 else []
        argv = [binary, "serve", "--cores", str(cores), *cpus, "--listen", f"127.0.0.1:{PORTS['kudurru']}",
                "--upstream", f"udp://127.0.0.1:{UPSTREAM_PORT}", "--ops-address", f"127.0.0.1:{OPS_PORT}",
                "--api-address", f"127.0.0.1:{API_PORT}", "--data-dir", data_dir, "--log-level", "warn"]
        self.proc = Proc(f"kudurru-c{cores}", argv, PORTS["kudurru"], args.workdir, env=kudurru_env(args),
                         cpus=SERVER_CPU if cores == 1 else f"{SERVER_CPU},{CLIENT_CPU}")

    def __enter__(self):
        self.proc.start()
        return self

    def __exit__(self, *exc):
        self.proc.stop()


def kudurru_list_file(args, listset):
    """The list inside blocking.fileSourceDir (a copy: refreshes rewrite it)."""
    path = os.path.join(args.kudurru_lists, f"{listset.label}.txt")
    shutil.copyfile(listset.path("domains.txt"), path)
    return path


def measure_kudurru(binary, listset, args, extras):
    port = PORTS["kudurru"]
    allowed0 = listset.allowed[0]
    res = {}
    list_file = kudurru_list_file(args, listset)
    data = tempfile.mkdtemp(prefix="data-c1-", dir=args.workdir)
    with Kudurru(binary, args, data) as k:
        res["empty"] = {"start_s": wait_for(k.proc, lambda: is_allowed(port, allowed0), "an answer", 60, 0)}
        time.sleep(1)
        res["empty"].update(memory(k.proc.pid))
        t0 = time.perf_counter()
        create_objects(k.api, list_file)
        k.proc.started = t0
        res["load_s"] = wait_for(k.proc, lambda: is_blocked(port, listset.probe), "the last listed name blocked",
                                 args.load_timeout, args.max_rss)
        time.sleep(1)
        res["loaded"] = memory(k.proc.pid)
        res["subdomains_blocked"] = verify(port, listset, "kudurru")
        status, res["blocklist_status"] = k.api.call("GET", f"/api/v1/blocklists/{LIST_NAME}")
        res["allowed"] = run_load(k.proc, port, listset.path("allowed.txt"), args, "NOERROR")
        res["blocked"] = run_load(k.proc, port, listset.path("blocked.txt"), args, "NXDOMAIN")
        res["after"] = memory(k.proc.pid)
        if extras:
            res["refreshes"] = refreshes(k, listset, list_file, args)
            res["ab"] = ab_rounds(k, listset, list_file, args)
    res["bytes_per_name"] = (res["loaded"]["VmRSS"] - res["empty"]["VmRSS"]) / len(listset.names)
    # A restart with the objects (and the list's body) stored: start → blocked.
    with Kudurru(binary, args, data) as k:
        res["restart_s"] = wait_for(k.proc, lambda: is_blocked(port, listset.probe),
                                    "the last listed name blocked after a restart", args.load_timeout, args.max_rss)
        time.sleep(1)
        res["restart"] = memory(k.proc.pid)
    if extras:
        res["cores"] = cores_two(binary, listset, args, data, res)
    return res


def cores_two(binary, listset, args, data, res):
    """--cores 2 with and without the list: its cost beside --cores 1's."""
    port = PORTS["kudurru"]
    out = {"cores1_empty": res["empty"]["VmRSS"], "cores1_list": res["restart"]["VmRSS"]}
    with Kudurru(binary, args, tempfile.mkdtemp(prefix="data-c2-", dir=args.workdir), cores=2) as k:
        wait_for(k.proc, lambda: is_allowed(port, listset.allowed[0]), "an answer", 60, 0)
        time.sleep(1)
        out["cores2_empty"] = rss_bytes(k.proc.pid)
    with Kudurru(binary, args, data, cores=2) as k:
        wait_for(k.proc, lambda: is_blocked(port, listset.probe), "the last listed name blocked", args.load_timeout,
                 args.max_rss)
        time.sleep(1)
        out["cores2_list"] = rss_bytes(k.proc.pid)
    out["list_cost_cores1"] = out["cores1_list"] - out["cores1_empty"]
    out["list_cost_cores2"] = out["cores2_list"] - out["cores2_empty"]
    out["ratio"] = out["list_cost_cores2"] / out["list_cost_cores1"] if out["list_cost_cores1"] > 0 else None
    log(f"kudurru cores: {out}")
    return out


def refreshes(k, listset, list_file, args):
    """Rewrites the list with a new marker name, asks for a refresh, waits until the marker is
    blocked; RSS after each."""
    port = PORTS["kudurru"]
    samples, times = [], []
    for i in range(args.refreshes):
        marker = f"refresh{i}-marker.bench-refresh.example"
        tmp = list_file + ".tmp"
        shutil.copyfile(listset.path("domains.txt"), tmp)
        with open(tmp, "a") as f:
            f.write(marker + "\n")
        os.replace(tmp, list_file)
        t0 = time.perf_counter()
        k.api.expect((202,), "POST", f"/api/v1/blocklists/{LIST_NAME}/refresh")
        k.proc.started = t0
        times.append(wait_for(k.proc, lambda: is_blocked(port, marker), f"refresh {i} (its marker blocked)",
                              args.load_timeout, args.max_rss))
        time.sleep(0.5)
        samples.append(rss_bytes(k.proc.pid))
        log(f"kudurru refresh {i + 1}: {times[-1]:.2f} s, RSS {samples[-1] / 2**20:.1f} MiB")
    first = samples[0]
    return {"rss": samples, "seconds": times, "max_over_first": max(samples) / first,
            "min_over_first": min(samples) / first}


def ab_rounds(k, listset, list_file, args):
    """Allowed cache hits with the Policy (on) and without it (off), alternating, one process."""
    port = PORTS["kudurru"]
    _, policy = kudurru_objects(list_file)
    allowed = listset.path("allowed.txt")
    results = {"on": [], "off": []}

    def switch(on):
        if on:
            k.api.expect((201,), "POST", "/api/v1/policies", policy)
        else:
            k.api.expect((200,), "DELETE", f"/api/v1/policies/{POLICY_NAME}")
        k.proc.started = time.perf_counter()
        wait_for(k.proc, (lambda: is_blocked(port, listset.probe)) if on else (lambda: is_allowed(port, listset.probe)),
                 f"blocking {'on' if on else 'off'}", 60, args.max_rss)

    state = True  # the Policy exists now
    for r in range(args.ab_rounds):
        for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
            want = mode == "on"
            if want != state:
                switch(want)
                state = want
            res = run_load(k.proc, port, allowed, args, "NOERROR")
            results[mode].append(res["cpu_us_per_answer"])
            log(f"kudurru ab round {r + 1} {mode}: {res['cpu_us_per_answer']:.2f} µs/answer, {res['qps']:.0f} q/s")
    if not state:
        switch(True)
    on, off = statistics.median(results["on"]), statistics.median(results["off"])
    return {"on": results["on"], "off": results["off"], "median_on": on, "median_off": off, "ratio": on / off}


# ---------------------------------------------------------------------------------------------
# Report

def machine():
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    versions = {}
    for tool, argv in (("unbound", ["unbound", "-V"]), ("dnsmasq", ["dnsmasq", "--version"]),
                       ("pdns-recursor", ["pdns_recursor", "--version"]), ("dnsperf", ["dnsperf", "-h"])):
        try:
            out = subprocess.run(argv, capture_output=True, text=True)
        except FileNotFoundError:
            versions[tool] = "missing"
            continue
        text = (out.stdout + out.stderr).splitlines()
        line = next((l for l in text if "ersion" in l or "PowerDNS Recursor" in l), "")
        m = re.search(r"(?:[Vv]ersion|Recursor) (\S+)", line)
        versions[tool] = m.group(1) if m else line.strip()
    model = re.search(r"Model name:\s+(.*)", lscpu)
    return {"cpu": model.group(1).strip() if model else "unknown", "cores": os.cpu_count(),
            "kernel": " ".join(os.uname()[2:4]), "lscpu": lscpu, "versions": versions,
            "load_average_at_start": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def mib(x):
    return f"{x / 2**20:.1f}"


def markdown(report):
    m = report["machine"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} vCPUs, kernel {m['kernel']}; {m['date']}; "
             f"load average at start {m['load_average_at_start'][0]:.2f}. Offered {report['args']['rate']} q/s for "
             f"{report['args']['duration']} s per run. Versions: "
             + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if k != "dnsperf") + ".", ""]
    if report.get("kudurru_skipped"):
        lines += [f"kudurru: {report['kudurru_skipped']}", ""]
    for label, entry in report["lists"].items():
        lines += [f"### {entry['names']:,} names: {entry['source']}", "",
                  "| server | start → last name blocked s | RSS without list MiB | RSS with list MiB | bytes per name "
                  "| allowed hits µs/answer | vs kudurru | blocked µs/answer | vs kudurru | subdomains blocked |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        res = entry["servers"]
        base = res.get("kudurru", {})
        for server in SERVERS:
            r = res.get(server)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {server} | failed: {r['error']} | | | | | | | | |")
                continue
            cells = []
            for kind in ("allowed", "blocked"):
                cpu = r[kind]["cpu_us_per_answer"]
                kb = base.get(kind, {}).get("cpu_us_per_answer") if "error" not in base else None
                over = " (over capacity: lost {:.1%})".format(r[kind]["lost"] / max(r[kind]["sent"], 1)) \
                    if r[kind]["over_capacity"] else ""
                over += " †" if r[kind].get("generator_short") else ""
                cells += [f"{cpu:.2f}{over}", f"{cpu / kb:.2f}x" if kb else "–"]
            load = f"{r['load_s']:.2f}"
            if server == "kudurru":
                load += f" (objects created → blocked; restart → blocked {r['restart_s']:.2f})"
            else:
                load += f" (without list {r['empty']['start_s']:.2f})"
            lines.append(f"| {server} | {load} | {mib(r['empty']['VmRSS'])} | {mib(r['loaded']['VmRSS'])} | "
                         f"{r['bytes_per_name']:.0f} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | "
                         f"{'yes' if r['subdomains_blocked'] else 'no'} |")
        if any(r.get(kind, {}).get("generator_short") for r in res.values() for kind in ("allowed", "blocked")):
            lines.append("\n† dnsperf sent less than 97% of the offered rate (the generator's CPU was short); the "
                         "CPU per answer is still per answer.")
        lines.append("")
        k = res.get("kudurru", {})
        if k.get("cores"):
            c = k["cores"]
            lines += [f"kudurru `--cores 2` against `--cores 1`: the list costs {mib(c['list_cost_cores2'])} MiB on two "
                      f"cores, {mib(c['list_cost_cores1'])} MiB on one ({c['ratio']:.2f}x; target ≈ 1x, no second copy).",
                      ""]
        if k.get("refreshes"):
            f = k["refreshes"]
            lines += [f"kudurru, {len(f['rss'])} refreshes of this list: RSS {mib(min(f['rss']))}–{mib(max(f['rss']))} MiB "
                      f"({(f['max_over_first'] - 1) * 100:+.1f}% at most over the first; target within 5%), "
                      f"refresh → marker blocked median {statistics.median(f['seconds']):.2f} s.", ""]
        if k.get("ab"):
            a = k["ab"]
            lines += [f"kudurru, allowed cache hits with this list active against blocking off (no Policy), "
                      f"{len(a['on'])} alternating rounds: {a['median_on']:.2f} against {a['median_off']:.2f} µs/answer "
                      f"(medians; on {' '.join(f'{x:.2f}' for x in a['on'])}, off {' '.join(f'{x:.2f}' for x in a['off'])}): "
                      f"{a['ratio']:.3f}x (target ≤ 1.05x).", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100k,1m,3m,real", help="comma-separated list sizes (10k, 1m, …) and 'real'")
    ap.add_argument("--servers", default=",".join(SERVERS), help="comma-separated subset of " + ",".join(SERVERS))
    ap.add_argument("--quick", action="store_true", help="shorter runs (3 s), 2 A/B rounds, 5 refreshes")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    ap.add_argument("--rate", type=int, default=30000, help="offered q/s for every measured run (below every "
                    "server's capacity)")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--refreshes", type=int, default=20)
    ap.add_argument("--ab-rounds", type=int, default=5)
    ap.add_argument("--extras-size", default=None, help="the size of kudurru's extra rows (default 1m, else the "
                    "largest generated)")
    ap.add_argument("--skip-extras", action="store_true", help="no --cores 2, refresh and A/B rows")
    ap.add_argument("--load-timeout", type=int, default=900, help="seconds a server may take to load a list")
    ap.add_argument("--max-rss-gib", type=float, default=None,
                    help="RSS ceiling while loading (default: 80%% of MemAvailable at start)")
    ap.add_argument("--json", default=os.path.join(ROOT, "target", "bench-blocking.json"))
    ap.add_argument("--bin-dir", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                                                      "release"), help="where kudurru and kudurru-echo are")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (lists, configurations, logs)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.ab_rounds, args.refreshes = 3, 2, 5
    if args.max_rss_gib is None:
        with open("/proc/meminfo") as f:
            avail = int(re.search(r"MemAvailable:\s+(\d+)", f.read()).group(1)) * 1024
        args.max_rss = int(avail * 0.8)
    else:
        args.max_rss = int(args.max_rss_gib * 2**30)
    servers = [s for s in args.servers.split(",") if s]
    for s in servers:
        if s not in SERVERS:
            sys.exit(f"unknown server {s}; choose from {','.join(SERVERS)}")
    tools = {"dnsperf": "dnsperf", "taskset": "util-linux", "unbound": "unbound", "dnsmasq": "dnsmasq",
             "pdns_recursor": "pdns-recursor"}
    needed = ["dnsperf", "taskset"] + [t for t, s in (("unbound", "unbound"), ("unbound", "unbound-rpz"),
                                                      ("dnsmasq", "dnsmasq"), ("pdns_recursor", "pdns-recursor"))
                                       if s in servers]
    missing = [t for t in needed if not shutil.which(t)]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: apt-get install {' '.join(sorted(set(tools[t] for t in missing)))}")
    if not args.no_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kudurru-control", "-p", "kudurru-bench"],
                       cwd=ROOT, check=True)
    echo = os.path.join(args.bin_dir, "kudurru-echo")
    kudurru = os.path.join(args.bin_dir, "kudurru")
    if not os.path.exists(echo):
        sys.exit(f"no {echo}: build the release binaries (or pass --bin-dir)")
    args.workdir = tempfile.mkdtemp(prefix="kudurru-blocking-")
    args.kudurru_lists = os.path.join(args.workdir, "kudurru-lists")
    os.makedirs(args.kudurru_lists)
    report = {"machine": machine(), "args": {k: v for k, v in vars(args).items()}, "lists": {}}

    skipped = None
    if "kudurru" in servers:
        skipped = kudurru_support(kudurru, args)
        if skipped:
            log(f"!! kudurru: {skipped}")
            report["kudurru_skipped"] = skipped
            servers.remove("kudurru")

    sizes = [s for s in args.sizes.split(",") if s]
    generated = [parse_size(s) for s in sizes if s != "real"]
    extras_label = args.extras_size or ("1m" if "1m" in sizes else
                                        max((s for s in sizes if s != "real"), key=parse_size, default=None))
    t0 = time.time()
    universe = NameGenerator(args.seed).unique(max(generated)) if generated else []
    log(f"generated {len(universe)} names in {time.time() - t0:.1f} s")
    empty_dir = empty_files(args.workdir)

    upstream = subprocess.Popen(["taskset", "-c", CLIENT_CPU, echo, "--mode", "answer", "--listen",
                                 f"127.0.0.1:{UPSTREAM_PORT}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    failed = []
    baselines = {}
    try:
        time.sleep(0.3)
        for label in sizes:
            if label == "real":
                real = real_list()
                if real is None:
                    log("!! real list: webext-ublock-origin-firefox is not installed "
                        "(apt-get install webext-ublock-origin-firefox); row skipped")
                    report["skipped_lists"] = {"real": "webext-ublock-origin-firefox not installed"}
                    continue
                names, source = real
            else:
                names, source = universe[:parse_size(label)], f"generated (seed {args.seed})"
            listset = ListSet(label, names, args.workdir, args.seed, source)
            listset.write()
            entry = {"names": len(names), "source": source, "probe": listset.probe, "servers": {}}
            report["lists"][label] = entry
            for server in servers:
                log(f"== {server}, list {label} ({len(names)} names)")
                try:
                    if server == "kudurru":
                        r = measure_kudurru(kudurru, listset, args, extras=(label == extras_label and not args.skip_extras))
                    else:
                        r = measure_peer(server, listset, empty_dir, args, baselines)
                except BenchError as e:
                    log(f"!! {e}")
                    failed.append(str(e))
                    r = {"error": str(e)}
                entry["servers"][server] = r
                log(json.dumps({k: v for k, v in r.items() if k not in ("blocklist_status",)}, default=str)[:2000])
            if not args.keep:
                shutil.rmtree(listset.dir, ignore_errors=True)
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2, default=str)
    finally:
        upstream.send_signal(signal.SIGTERM)
        upstream.wait()
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2, default=str)
    print(markdown(report))
    log(f"JSON report: {args.json}; logs in {args.workdir}")
    if failed:
        log("FAILED:\n  " + "\n  ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
