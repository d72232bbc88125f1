//! Helpers for kudurru's end-to-end tests: the real binary on loopback ports, a scripted test
//! upstream, and thin wrappers around real clients (dig, kdig).
//!
//! The test upstream answers by the first label of the qname:
//!
//! | first label | behaviour |
//! |---|---|
//! | `nx-…` | NXDOMAIN with SOA (TTL 3600, MINIMUM 60) |
//! | `nodata-…` | NOERROR, no answer, SOA |
//! | `big-…` | over UDP TC=1 and no records; over TCP 9 TXT records (~1.1 KB) |
//! | `slow-…` | the normal answer after 400 ms |
//! | `servfail-…` | SERVFAIL |
//! | `silent-…` | never answers |
//! | `spoof-…` | first a reply with a wrong ID, then the genuine one |
//! | `ttl<N>-…` | the normal answer with TTL N |
//! | anything else | `A 192.0.2.1`, TTL 300 |
#![allow(unreachable_pub)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use kudurru_core::wire::{self, Query, ReplyOptions, rcode, rtype};

const UDP: ReplyOptions = ReplyOptions {
    payload: 1232,
    tcp_keepalive: None,
    padding: false,
};

/// The kudurru binary, built once per test process with the same profile as the tests.
pub fn kudurru_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(path) = std::env::var("KUDURRU_BIN") {
            return PathBuf::from(path);
        }
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(&root)
            .args([
                "build",
                "--quiet",
                "-p",
                "kudurru-control",
                "--bin",
                "kudurru",
            ])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the kudurru binary failed");
        let target = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join("target"));
        target.join("debug").join("kudurru")
    })
    .clone()
}

/// Lowercase hex of `bytes`, for DNS messages handed to the Python helpers.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The octets of lowercase or uppercase hex digits (the Python helpers' output).
pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The Python with dnspython, aioquic, h2 and httpx2: the venv `.ci/test-deps` creates, else
/// `python3`.
pub fn python() -> PathBuf {
    let venv = PathBuf::from(std::env::var("HOME").unwrap_or_default())
        .join(".cache/kudurru/venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// A binary of the bench crate (`kudurru-bench`, `kudurru-echo`), built once per test process.
pub fn bench_bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(&root)
            .args(["build", "--quiet", "-p", "kudurru-bench", "--bins"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the bench binaries failed");
    });
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    target.join("debug").join(name)
}

/// What [`ScriptedResponder`] does with the Nth query it receives (counting from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// Answer only every `n`th query; drop the others.
    AnswerEvery(usize),
    /// Answer all, but every `n`th with another ID.
    WrongIdEvery(usize),
    /// Answer all, but every `n`th with another question type.
    WrongQuestionEvery(usize),
}

/// A responder for load-generator tests, UDP and TCP on one port: it echoes each query as a
/// NOERROR response, following its [`Script`], and counts what it did.
pub struct ScriptedResponder {
    /// Where it listens.
    pub addr: SocketAddr,
    received: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl ScriptedResponder {
    /// Starts the responder on a free loopback port.
    pub fn start(script: Script) -> Self {
        let received = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        // The Nth query overall (UDP and TCP share the count); `None`: drop it.
        let reply = {
            let (received, answered) = (received.clone(), answered.clone());
            move |query: &[u8]| -> Option<Vec<u8>> {
                let n = received.fetch_add(1, Ordering::SeqCst) + 1;
                if query.len() < 12 {
                    return None;
                }
                let mut out = query.to_vec();
                out[2] |= 0x80;
                out[3] = 0x80;
                match script {
                    Script::AnswerEvery(every) if n % every != 0 => return None,
                    Script::WrongIdEvery(every) if n % every == 0 => out[0] ^= 0x80,
                    Script::WrongQuestionEvery(every) if n % every == 0 => {
                        // The last two bytes of the question are the class; the two before
                        // them the type (queries without OPT end with the question).
                        let at = out.len() - 3;
                        out[at] ^= 0x40;
                    }
                    _ => {}
                }
                answered.fetch_add(1, Ordering::SeqCst);
                Some(out)
            }
        };
        let addr = serve_loopback(
            stop.clone(),
            Udp::Inline,
            Arc::default(),
            move |query, _| reply(query).into_iter().collect(),
        );
        Self {
            addr,
            received,
            answered,
            stop,
        }
    }

    /// Queries received so far.
    pub fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }

    /// Replies sent so far (mangled ones included).
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedResponder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How [`serve_loopback`] answers UDP messages.
#[derive(Clone, Copy)]
enum Udp {
    /// On the receiving thread, in order (cheap; for load).
    Inline,
    /// On a thread per message (a slow reply holds up nothing else).
    ThreadPerMessage,
}

/// Serves UDP and TCP (RFC 1035 framing, a thread per connection, 5 s read timeout) on one free
/// 127.0.0.1 port until `stop` is set, sending what `reply(message, "udp" | "tcp")` returns;
/// counts accepted TCP connections in `tcp_accepted`.
fn serve_loopback(
    stop: Arc<AtomicBool>,
    udp_mode: Udp,
    tcp_accepted: Arc<AtomicUsize>,
    reply: impl Fn(&[u8], &'static str) -> Vec<Vec<u8>> + Send + Sync + 'static,
) -> SocketAddr {
    // Bound directly, not probed first: a probe socket can live on for a moment in a child
    // another test thread is forking, which would make a bind right after the probe fail.
    let (addr, udp, tcp) = loop {
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        if let Ok(udp) = UdpSocket::bind(addr)
            && let Ok(tcp) = TcpListener::bind(addr)
        {
            break (addr, udp, tcp);
        }
    };
    udp.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    tcp.set_nonblocking(true).unwrap();
    let reply = Arc::new(reply);
    {
        let (stop, reply) = (stop.clone(), reply.clone());
        let udp = Arc::new(udp);
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                let Ok((n, peer)) = udp.recv_from(&mut buf) else {
                    continue;
                };
                let answer = {
                    let (udp, reply) = (udp.clone(), reply.clone());
                    move |message: &[u8]| {
                        for out in reply(message, "udp") {
                            let _ = udp.send_to(&out, peer);
                        }
                    }
                };
                match udp_mode {
                    Udp::Inline => answer(&buf[..n]),
                    Udp::ThreadPerMessage => {
                        let message = buf[..n].to_vec();
                        thread::spawn(move || answer(&message));
                    }
                }
            }
        });
    }
    thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut stream, _)) = tcp.accept() else {
                thread::sleep(Duration::from_millis(5));
                continue;
            };
            tcp_accepted.fetch_add(1, Ordering::SeqCst);
            let reply = reply.clone();
            thread::spawn(move || {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                loop {
                    let mut len = [0u8; 2];
                    if stream.read_exact(&mut len).is_err() {
                        return;
                    }
                    let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    if stream.read_exact(&mut message).is_err() {
                        return;
                    }
                    for out in reply(&message, "tcp") {
                        let mut frame = (out.len() as u16).to_be_bytes().to_vec();
                        frame.extend_from_slice(&out);
                        if stream.write_all(&frame).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A scratch directory for one test (certificates, query files), removed when dropped, so
/// also when the test fails.
pub struct Scratch(PathBuf);

impl Scratch {
    /// `kudurru-e2e-NAME-PID` under the system's temporary directory, created empty.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kudurru-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Self(dir)
    }
}

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a self-signed pair with `kudurru cert generate` into `dir`: (certificate, key).
pub fn cert_pair(dir: &std::path::Path, name: &str) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    let status = Command::new(kudurru_bin())
        .args(["cert", "generate", "--cert"])
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .stdout(Stdio::null())
        .status()
        .expect("kudurru cert generate runs");
    assert!(status.success(), "kudurru cert generate failed");
    (cert, key)
}

/// A loopback port free for UDP and TCP on 127.0.0.1 and ::1 right now, never handed out twice
/// by this process (tests run in parallel threads).
///
/// Ports come from below the kernel's ephemeral range (`ip_local_port_range`): the kernel never
/// hands those out on its own, so a port probed free here cannot be taken by a source port of
/// some other socket (kudurru's own upstream sockets, dig, the test upstream) before the test
/// binds it. Each test process starts at an offset derived from its PID, so test binaries that
/// run at the same time rarely probe the same ports.
pub fn free_port() -> u16 {
    static NEXT: Mutex<Option<u32>> = Mutex::new(None);
    let (low, high) = below_ephemeral_range();
    let span = high - low;
    let mut next = NEXT.lock().unwrap();
    let cursor = next.get_or_insert_with(|| std::process::id().wrapping_mul(2_654_435_761) % span);
    for _ in 0..span {
        let port = (low + *cursor) as u16;
        *cursor = (*cursor + 1) % span;
        if port_is_free(port) {
            return port;
        }
    }
    panic!("no free loopback port in {low}..{high}");
}

/// `[low, high)`: the ports under the ephemeral range this helper hands out.
fn below_ephemeral_range() -> (u32, u32) {
    let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let high = start.clamp(12_000, 65_536);
    (high - 10_000, high)
}

fn port_is_free(port: u16) -> bool {
    let v4 = std::net::Ipv4Addr::LOCALHOST;
    let v6 = std::net::Ipv6Addr::LOCALHOST;
    UdpSocket::bind((v4, port)).is_ok()
        && TcpListener::bind((v4, port)).is_ok()
        && UdpSocket::bind((v6, port)).is_ok()
        && TcpListener::bind((v6, port)).is_ok()
}

/// What the test upstream saw: queries per (lowercased qname text, transport).
#[derive(Default)]
struct Seen {
    counts: HashMap<(String, &'static str), usize>,
}

/// A scripted upstream on loopback, UDP and TCP on one port.
pub struct TestUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    tcp_accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    /// While set, queries are counted and never answered (an upstream gone away).
    silent: Arc<AtomicBool>,
}

impl TestUpstream {
    /// Stops answering (queries are still counted), as an upstream that went away; `false`
    /// answers again.
    pub fn set_silent(&self, silent: bool) {
        self.silent.store(silent, Ordering::SeqCst);
    }

    /// Starts the upstream on a free loopback port.
    pub fn start() -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let tcp_accepted = Arc::new(AtomicUsize::new(0));
        let silent = Arc::new(AtomicBool::new(false));
        // A thread per UDP message: `slow-` names must not hold up the others.
        let addr = serve_loopback(stop.clone(), Udp::ThreadPerMessage, tcp_accepted.clone(), {
            let (seen, silent) = (seen.clone(), silent.clone());
            move |message, transport| {
                let replies = respond(message, transport, &seen);
                if silent.load(Ordering::SeqCst) {
                    Vec::new()
                } else {
                    replies
                }
            }
        });
        Self {
            addr,
            seen,
            tcp_accepted,
            stop,
            silent,
        }
    }

    /// TCP connections accepted so far. Each connection's thread reads its queries in order
    /// and closes it after 5 s without one.
    pub fn tcp_connections(&self) -> usize {
        self.tcp_accepted.load(Ordering::SeqCst)
    }

    /// `udp://addr` for `--upstream`.
    pub fn udp_url(&self) -> String {
        format!("udp://{}", self.addr)
    }

    /// How many queries for `name` (presentation form, trailing dot) arrived over `transport`.
    pub fn count(&self, name: &str, transport: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.counts
            .get(&(name.to_ascii_lowercase(), transport))
            .copied()
            .unwrap_or(0)
    }

    /// Distinct names asked (over either transport) that end in `suffix` (presentation form,
    /// lowercase, trailing dot).
    pub fn names_under(&self, suffix: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        let names: std::collections::HashSet<&str> = seen
            .counts
            .keys()
            .map(|(name, _)| name.as_str())
            .filter(|name| name.ends_with(suffix))
            .collect();
        names.len()
    }

    /// Queries for `name` over both transports.
    pub fn total(&self, name: &str) -> usize {
        self.count(name, "udp") + self.count(name, "tcp")
    }
}

impl Drop for TestUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn soa_rdata(minimum: u32) -> Vec<u8> {
    let mut r = b"\x02ns\x04test\x00\x05admin\x04test\x00".to_vec();
    for v in [1u32, 3600, 600, 86400, minimum] {
        r.extend_from_slice(&v.to_be_bytes());
    }
    r
}

/// The test upstream's replies to one message (usually one; `spoof-` sends two).
fn respond(message: &[u8], transport: &'static str, seen: &Mutex<Seen>) -> Vec<Vec<u8>> {
    let Ok(query) = Query::parse(message) else {
        return Vec::new();
    };
    let name = query.key().qname_text();
    *seen
        .lock()
        .unwrap()
        .counts
        .entry((name.clone(), transport))
        .or_default() += 1;
    let first = name.split('.').next().unwrap_or("").to_owned();
    let mut out = Vec::new();
    let answer_a = |out: &mut Vec<u8>, ttl: u32| {
        wire::start_response(&query, rcode::NOERROR, false, out);
        if query.qtype() == rtype::A {
            wire::push_record(out, wire::HEADER_LEN, rtype::A, ttl, &[192, 0, 2, 1]);
            wire::count_answer(out);
        }
        wire::finish_response(&query, out, &UDP);
    };
    if first.starts_with("nx-") || first.starts_with("nodata-") {
        let code = if first.starts_with("nx-") {
            rcode::NXDOMAIN
        } else {
            rcode::NOERROR
        };
        wire::start_response(&query, code, true, &mut out);
        wire::push_record(&mut out, wire::HEADER_LEN, rtype::SOA, 3600, &soa_rdata(60));
        wire::count_authority(&mut out);
        wire::finish_response(&query, &mut out, &UDP);
    } else if first.starts_with("big-") {
        wire::start_response(&query, rcode::NOERROR, false, &mut out);
        if transport == "udp" {
            out[2] |= 0x02;
        } else {
            for i in 0..9u8 {
                let mut txt = vec![99u8];
                txt.extend(std::iter::repeat_n(b'a' + i, 99));
                wire::push_record(&mut out, wire::HEADER_LEN, rtype::TXT, 300, &txt);
                wire::count_answer(&mut out);
            }
        }
        wire::finish_response(&query, &mut out, &UDP);
    } else if first.starts_with("servfail-") {
        wire::write_error(&query, rcode::SERVFAIL, &UDP, &mut out);
    } else if first.starts_with("silent-") {
        return Vec::new();
    } else if first.starts_with("cloak-") {
        // A first-party name that is a CNAME to a tracker, then the tracker's address (CNAME
        // cloaking, as trackers hide behind customers' subdomains).
        wire::start_response(&query, rcode::NOERROR, false, &mut out);
        let target_at = out.len() + 12;
        wire::push_record(
            &mut out,
            wire::HEADER_LEN,
            rtype::CNAME,
            300,
            b"\x07tracker\x05cloak\x07example\x00",
        );
        wire::count_answer(&mut out);
        if query.qtype() == rtype::A {
            wire::push_record(&mut out, target_at, rtype::A, 300, &[192, 0, 2, 66]);
            wire::count_answer(&mut out);
        }
        wire::finish_response(&query, &mut out, &UDP);
    } else if first.starts_with("slow5s-") {
        // Slower than a short `server.shutdownGrace` (the drain tests' cut-off).
        thread::sleep(Duration::from_secs(5));
        answer_a(&mut out, 300);
    } else if first.starts_with("slow2s-") {
        // Slower than the default `upstream.timeout` (1.5 s), every time.
        thread::sleep(Duration::from_secs(2));
        answer_a(&mut out, 300);
    } else if first.starts_with("slow-") {
        thread::sleep(Duration::from_millis(400));
        answer_a(&mut out, 300);
    } else if first.starts_with("spoof-") {
        answer_a(&mut out, 300);
        let mut forged = out.clone();
        forged[0] ^= 0x5a;
        return vec![forged, out];
    } else if let Some(ttl) = first
        .strip_prefix("ttl")
        .and_then(|r| r.split('-').next())
        .and_then(|n| n.parse().ok())
    {
        answer_a(&mut out, ttl);
    } else {
        answer_a(&mut out, 300);
    }
    vec![out]
}

/// A running kudurru process, stopped (SIGTERM) when dropped.
pub struct Kudurru {
    child: Option<Child>,
    /// Client listener (UDP and TCP).
    pub addr: SocketAddr,
    /// Ops listener.
    pub ops: SocketAddr,
    /// HTTP API listener.
    pub api: SocketAddr,
    /// Its data directory (tokens), private to this instance.
    pub data_dir: PathBuf,
    /// DNS-over-TLS listener, when the builder was given a certificate.
    pub tls: Option<SocketAddr>,
    /// DNS-over-HTTPS listener (path `/dns-query`), when the builder was given a certificate.
    pub https: Option<SocketAddr>,
    /// DNS-over-QUIC listener (UDP), when the builder was given a certificate.
    pub quic: Option<SocketAddr>,
    /// DNS-over-HTTP/3 listener (UDP, path `/dns-query`, the DoH listener's port), when the
    /// builder was given a certificate.
    pub h3: Option<SocketAddr>,
}

/// How to start kudurru for a test.
pub struct KudurruBuilder {
    cores: usize,
    upstreams: Vec<String>,
    env: Vec<(String, String)>,
    extra: Vec<String>,
    log_level: Option<String>,
    stderr: Option<PathBuf>,
    tls: Option<(PathBuf, PathBuf)>,
    data_dir: Option<PathBuf>,
}

impl Kudurru {
    /// A builder with one core and the given upstreams.
    pub fn builder(upstreams: &[String]) -> KudurruBuilder {
        KudurruBuilder {
            cores: 1,
            upstreams: upstreams.to_vec(),
            env: Vec::new(),
            extra: Vec::new(),
            log_level: Some("warn".into()),
            stderr: None,
            tls: None,
            data_dir: None,
        }
    }

    /// GET `path` on the ops listener: (status, body).
    pub fn ops_get(&self, path: &str) -> (u16, String) {
        http_get(self.ops, path)
    }

    /// The value of one metric line (exact name and labels) from `/metrics`.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.ops_get("/metrics");
        body.lines().find_map(|l| {
            l.strip_prefix(series)
                .and_then(|v| v.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
    }

    /// The sum of all series of a metric name.
    pub fn metric_sum(&self, name: &str) -> f64 {
        let (_, body) = self.ops_get("/metrics");
        body.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        signal(&child, libc::SIGTERM);
        wait_timeout(&mut child, Duration::from_secs(15)).expect("kudurru exits after SIGTERM")
    }

    /// Creates an API token with `role` (and `--ttl`, if given) through `kudurru token create`.
    pub fn token(&self, role: &str, ttl: Option<&str>) -> String {
        let mut cmd = Command::new(kudurru_bin());
        cmd.args(["token", "create", "--role", role, "--data-dir"])
            .arg(&self.data_dir)
            .env_remove("KUDURRU_SETTINGS_FILE");
        if let Some(ttl) = ttl {
            cmd.args(["--ttl", ttl]);
        }
        let out = cmd.output().expect("kudurru token runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Sends SIGKILL (no shutdown of any kind) and waits for the process to be gone.
    pub fn kill(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        signal(&child, libc::SIGKILL);
        child.wait().expect("kudurru is reaped after SIGKILL")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }
}

/// Sends `sig` to `child`.
pub fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid; no memory is touched.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

/// Waits for a child with a bound.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

impl Drop for Kudurru {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGTERM);
            if wait_timeout(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl KudurruBuilder {
    /// Executors to run.
    pub fn cores(mut self, n: usize) -> Self {
        self.cores = n;
        self
    }

    /// Sets a configuration key through its environment variable.
    pub fn env(mut self, var: &str, value: &str) -> Self {
        self.env.push((var.into(), value.into()));
        self
    }

    /// `--log-level` (default `warn`); `None` passes no flag, so the level can come from a file.
    pub fn log_level(mut self, level: Option<&str>) -> Self {
        self.log_level = level.map(str::to_owned);
        self
    }

    /// Sends kudurru's stderr (its log) to `path` instead of the test's stderr.
    pub fn stderr_to(mut self, path: &std::path::Path) -> Self {
        self.stderr = Some(path.to_owned());
        self
    }

    /// Extra command-line arguments.
    pub fn arg(mut self, arg: &str) -> Self {
        self.extra.push(arg.into());
        self
    }

    /// Uses `dir` as the data directory instead of a fresh one, so a restart finds what the
    /// previous server stored (objects, tokens).
    pub fn data_dir(mut self, dir: &std::path::Path) -> Self {
        self.data_dir = Some(dir.to_owned());
        self
    }

    /// The command that would run, for tests that expect a start failure.
    pub fn command(&self, port: u16, ops_port: u16) -> Command {
        self.command_with_api(port, ops_port, None)
    }

    /// The command with the API on `api` (port, data directory); `None` runs no API.
    pub fn command_with_api(
        &self,
        port: u16,
        ops_port: u16,
        api: Option<(u16, &std::path::Path)>,
    ) -> Command {
        let mut cmd = Command::new(kudurru_bin());
        cmd.arg("serve")
            .arg("--cores")
            .arg(self.cores.to_string())
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--ops-address")
            .arg(format!("127.0.0.1:{ops_port}"));
        match api {
            Some((api_port, data_dir)) => {
                cmd.arg("--api-address")
                    .arg(format!("127.0.0.1:{api_port}"))
                    .arg("--data-dir")
                    .arg(data_dir);
            }
            None => {
                // No data directory of its own: objects in memory, so parallel servers never
                // share (and lock) one objects.redb.
                cmd.arg("--api-address").arg("").arg("--ephemeral");
            }
        }
        if let Some(level) = &self.log_level {
            cmd.arg("--log-level").arg(level);
        }
        // The tests' own environment must not leak a settings file in.
        cmd.env_remove("KUDURRU_SETTINGS_FILE");
        for u in &self.upstreams {
            cmd.arg("--upstream").arg(u);
        }
        cmd.args(&self.extra);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Also serves DNS over TLS, HTTPS, QUIC and HTTP/3 (`tls://`, `https://…/dns-query`,
    /// `quic://` and `h3://…/dns-query`, the last on the DoH port as a real deployment would)
    /// with this certificate and key.
    pub fn tls(mut self, cert: &std::path::Path, key: &std::path::Path) -> Self {
        self.tls = Some((cert.to_owned(), key.to_owned()));
        self
    }

    /// Starts kudurru and waits until `/healthz/ready` answers 200.
    ///
    /// A start that fails to bind (exit code 3) is retried on fresh ports: the probe sockets of
    /// [`free_port`] can live on for a moment in a child another test thread is forking.
    pub fn start(self) -> Kudurru {
        for _ in 0..5 {
            let port = free_port();
            let ops_port = free_port();
            let api_port = free_port();
            let data_dir = self.data_dir.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("kudurru-e2e-data-{}-{port}", std::process::id()))
            });
            let mut command = self.command_with_api(port, ops_port, Some((api_port, &data_dir)));
            let encrypted = self.tls.as_ref().map(|(cert, key)| {
                let (tls_port, https_port, quic_port) = (free_port(), free_port(), free_port());
                command
                    .arg("--listen")
                    .arg(format!("tls://127.0.0.1:{tls_port}"))
                    .arg("--listen")
                    .arg(format!("https://127.0.0.1:{https_port}/dns-query"))
                    .arg("--listen")
                    .arg(format!("quic://127.0.0.1:{quic_port}"))
                    .arg("--listen")
                    .arg(format!("h3://127.0.0.1:{https_port}/dns-query"))
                    .arg("--tls-cert")
                    .arg(cert)
                    .arg("--tls-key")
                    .arg(key);
                (
                    SocketAddr::from(([127, 0, 0, 1], tls_port)),
                    SocketAddr::from(([127, 0, 0, 1], https_port)),
                    SocketAddr::from(([127, 0, 0, 1], quic_port)),
                )
            });
            command.stdout(Stdio::null());
            if let Some(path) = &self.stderr {
                command.stderr(std::fs::File::create(path).expect("stderr file"));
            }
            let child = command.spawn().expect("kudurru starts");
            let mut k = Kudurru {
                child: Some(child),
                addr: ([127, 0, 0, 1], port).into(),
                ops: ([127, 0, 0, 1], ops_port).into(),
                api: ([127, 0, 0, 1], api_port).into(),
                data_dir: data_dir.clone(),
                tls: encrypted.map(|(tls, ..)| tls),
                https: encrypted.map(|(_, https, _)| https),
                quic: encrypted.map(|(.., quic)| quic),
                h3: encrypted.map(|(_, https, _)| https),
            };
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Some(status) = k.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                    assert_eq!(
                        status.code(),
                        Some(3),
                        "kudurru exited before it was ready: {status}"
                    );
                    k.child = None;
                    break;
                }
                if http_try_get(k.ops, "/healthz/ready").is_some_and(|(s, _)| s == 200) {
                    return k;
                }
                assert!(Instant::now() < deadline, "kudurru did not become ready");
                thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("kudurru could not bind fresh loopback ports five times in a row");
    }
}

fn http_try_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// GET over HTTP/1.1, panicking when the server does not answer.
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    http_try_get(addr, path).unwrap_or_else(|| panic!("no HTTP answer from {addr}{path}"))
}

/// The parsed parts of dig's output that tests look at.
#[derive(Debug, Clone)]
pub struct DigAnswer {
    /// `NOERROR`, `NXDOMAIN`, …
    pub status: String,
    /// Header flags (`qr`, `aa`, `tc`, …).
    pub flags: Vec<String>,
    /// Answer section lines as (owner, ttl, type, rdata).
    pub answers: Vec<(String, u32, String, String)>,
    /// Authority section lines, same shape.
    pub authority: Vec<(String, u32, String, String)>,
    /// Whether an OPT pseudo-section was printed.
    pub edns: bool,
    /// The raw output.
    pub raw: String,
}

/// Runs dig against `server` with extra arguments; panics when dig gets no answer at all.
pub fn dig(server: SocketAddr, args: &[&str]) -> DigAnswer {
    try_dig(server, args).unwrap_or_else(|raw| panic!("dig got no answer: {raw}"))
}

/// Runs dig; `Err(output)` when no response arrived.
pub fn try_dig(server: SocketAddr, args: &[&str]) -> Result<DigAnswer, String> {
    let output = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .arg("-p")
        .arg(server.port().to_string())
        .args(["+time=5", "+tries=1", "+nocookie"])
        .args(args)
        .output()
        .expect("dig is installed (apt-get install dnsutils)");
    let raw = String::from_utf8_lossy(&output.stdout).into_owned();
    let Some(status) = raw
        .split("status: ")
        .nth(1)
        .and_then(|s| s.split(',').next())
    else {
        return Err(raw);
    };
    let flags = raw
        .split(";; flags: ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let section = |title: &str| -> Vec<(String, u32, String, String)> {
        let Some(start) = raw.find(title) else {
            return Vec::new();
        };
        raw[start..]
            .lines()
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| {
                let mut parts = l.split_whitespace();
                let owner = parts.next()?.to_owned();
                let ttl = parts.next()?.parse().ok()?;
                let _class = parts.next()?;
                let rtype = parts.next()?.to_owned();
                let rdata = parts.collect::<Vec<_>>().join(" ");
                Some((owner, ttl, rtype, rdata))
            })
            .collect()
    };
    Ok(DigAnswer {
        status: status.to_owned(),
        flags,
        answers: section(";; ANSWER SECTION:"),
        authority: section(";; AUTHORITY SECTION:"),
        edns: raw.contains("OPT PSEUDOSECTION"),
        raw,
    })
}

/// Sends one raw datagram from a fresh socket and returns the reply, if any arrives in `wait`.
pub fn udp_exchange(server: SocketAddr, message: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(wait)).unwrap();
    socket.send_to(message, server).unwrap();
    let mut buf = [0u8; 65535];
    socket.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
}

/// A query in wire form: `name` dotted, with RD set and an optional OPT (payload, version, DO).
pub fn query_bytes(
    id: u16,
    name: &str,
    qtype: u16,
    qclass: u16,
    opt: Option<(u16, u8, bool)>,
) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&qclass.to_be_bytes());
    if let Some((payload, version, dnssec_ok)) = opt {
        m[11] = 1;
        m.push(0);
        m.extend_from_slice(&rtype::OPT.to_be_bytes());
        m.extend_from_slice(&payload.to_be_bytes());
        m.extend_from_slice(&[0, version, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
    }
    m
}

/// A unique name under `example.` for one test (so tests never share cache entries).
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}-{n}.kudurru-e2e.example.", std::process::id())
}

/// Waits until something accepts TCP connections on `addr`; panics when `child` exits first
/// or after 20 s.
pub fn wait_listening(addr: SocketAddr, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening on {addr}: {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Unbound (Debian's `unbound`) on loopback, in the foreground, from `unbound.conf` in its
/// directory: the settings every test wants (no daemon, no chroot, no syslog, one thread,
/// loopback clients, the iterator only: nothing leaves the machine unless a forward-zone
/// says so), plus the test's own. Stopped when dropped.
pub struct Unbound {
    child: Option<Child>,
    conf: PathBuf,
    /// The TCP address waited for before a start returns.
    listening: SocketAddr,
}

impl Unbound {
    /// Writes the configuration (`server` lines appended to the common `server:` section,
    /// then `tail`: forward zones, say) into `dir` and starts Unbound; returns once it accepts
    /// TCP on `listening` (one of its interfaces).
    pub fn start(dir: &std::path::Path, listening: SocketAddr, server: &str, tail: &str) -> Self {
        let conf = dir.join("unbound.conf");
        std::fs::write(
            &conf,
            format!(
                r#"server:
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "{dir}"
  pidfile: ""
  use-syslog: no
  logfile: "{dir}/unbound.log"
  verbosity: 0
  do-ip6: no
  num-threads: 1
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
{server}
{tail}
remote-control:
  control-enable: no
"#,
                dir = dir.display(),
            ),
        )
        .expect("unbound.conf written");
        let mut unbound = Self {
            child: None,
            conf,
            listening,
        };
        unbound.spawn();
        unbound
    }

    fn spawn(&mut self) {
        let mut child = Command::new("unbound")
            .arg("-d")
            .arg("-c")
            .arg(&self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("unbound runs (apt-get install unbound)");
        wait_listening(self.listening, &mut child, "unbound");
        self.child = Some(child);
    }

    /// Stops it and starts it again with the same configuration.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Stops it (SIGKILL) and waits for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = wait_timeout(&mut child, Duration::from_secs(10));
        }
    }
}

impl Drop for Unbound {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fault-injecting upstream on loopback (UDP and TCP on one port): the first label of the
/// qname picks the bad reply it sends, as recorded from misbehaving servers.
///
/// | first label starts with | reply |
/// |---|---|
/// | `wrongid-` | the answer with another message ID |
/// | `wrongclass-` | the answer with the question's class changed to CH |
/// | `tcloop-` | TC=1 and nothing else, over UDP and over TCP alike |
/// | `oversized-` | 40 TXT records of 255 bytes (about 10 KB), over UDP too |
/// | `cnameloop-` | the qname as a CNAME to itself |
/// | anything else | one A record, 192.0.2.1, TTL 300 |
pub struct FaultyUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    seen: Arc<Mutex<HashMap<String, usize>>>,
    stop: Arc<AtomicBool>,
}

impl FaultyUpstream {
    /// Starts it on a free loopback port.
    pub fn start() -> Self {
        let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let addr = serve_loopback(stop.clone(), Udp::ThreadPerMessage, Arc::default(), {
            let seen = seen.clone();
            move |message, _| {
                let Ok(query) = Query::parse(message) else {
                    return Vec::new();
                };
                let name = query.key().qname_text();
                *seen.lock().unwrap().entry(name.clone()).or_default() += 1;
                vec![faulty_reply(&query, &name)]
            }
        });
        Self { addr, seen, stop }
    }

    /// `udp://ADDR`.
    pub fn udp_url(&self) -> String {
        format!("udp://{}", self.addr)
    }

    /// Queries for `name` (presentation form, trailing dot) over either transport.
    pub fn asked(&self, name: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .get(&name.to_ascii_lowercase())
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for FaultyUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn faulty_reply(query: &Query<'_>, name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let first = name.split('.').next().unwrap_or("");
    wire::start_response(query, rcode::NOERROR, false, &mut out);
    if first.starts_with("tcloop-") {
        out[2] |= 0x02;
    } else if first.starts_with("oversized-") {
        for i in 0..40u8 {
            let mut txt = vec![254u8];
            txt.extend(std::iter::repeat_n(b'a' + i % 26, 254));
            wire::push_record(&mut out, wire::HEADER_LEN, rtype::TXT, 300, &txt);
            wire::count_answer(&mut out);
        }
    } else if first.starts_with("cnameloop-") {
        wire::push_record(&mut out, wire::HEADER_LEN, rtype::CNAME, 300, &[0xc0, 12]);
        wire::count_answer(&mut out);
    } else {
        wire::push_record(&mut out, wire::HEADER_LEN, rtype::A, 300, &[192, 0, 2, 1]);
        wire::count_answer(&mut out);
    }
    if first.starts_with("wrongid-") {
        out[0] ^= 0xff;
        out[1] ^= 0xff;
    } else if first.starts_with("wrongclass-") {
        // The question's class: its last two bytes, right after the qname and type.
        let at = wire::HEADER_LEN + query.key().qname().len() + 2;
        if let Some(class) = out.get_mut(at..at + 2) {
            class.copy_from_slice(&3u16.to_be_bytes());
        }
    }
    out
}
