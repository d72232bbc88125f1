//! Forwarding-loop detection (kudurru → upstream → … → kudurru): the control thread sends each
//! plain-DNS upstream a probe query for a name of its own and the cores count the probes that
//! come back in as client queries (`kudurru_core::loop_probe`); one that does is a loop.
//!
//! ```text
//! at start, when the published upstreams change, every PERIOD (RECHECK after a loop or an
//! unanswered probe):
//!   token = random; every core's LoopProbe::start_round(token)
//!   TXT <token><i>.kudurru-loop.alt ──udp/tcp──▶ upstream i   (wait REPLY_TIMEOUT for its reply)
//!   arrivals(i) summed over the cores ≥ 1 ─▶ looping: error log, doctor fails,
//!                                            kudurru_upstream_loop_detected{upstream} 1
//! ```
//! The probe goes straight to each upstream, not through kudurru's own listener, so an arrival
//! names the upstream the loop runs through (dnsmasq's `--dns-loop-detect` does the same per
//! server; CoreDNS's `loop` sends through itself and so must see its probe more than twice).
//! One arrival is enough: the name is random per round and nobody else can ask it. A looping
//! upstream is taken out of rotation (as dnsmasq disables such a server; docs/operations.md,
//! "Forwarding loops"): each core's health check reads the marks this sets and holds it down
//! without probing it back until a round finds the loop gone.
//!
//! Encrypted upstreams (DoT, DoH, DoQ, DoH3) are not probed: the control thread has no client
//! for them; doctor says so.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use kudurru_core::UpstreamSpec;
use kudurru_core::loop_probe::{PROBED_UPSTREAMS, probe_name, probe_query};
use kudurru_core::upstream::UpstreamProtocol;
use kudurru_core::wire;
use kudurru_transports::{CoreMetrics, SharedSettings};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UdpSocket};

/// How often the upstreams are probed when the last round found nothing wrong.
pub const PERIOD: Duration = Duration::from_secs(300);
/// How soon they are probed again after a loop (to see it fixed) or an unanswered probe (the
/// upstream may not have been up yet).
pub const RECHECK: Duration = Duration::from_secs(10);
/// The wait for an upstream's reply to its probe.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(3);
/// The wait after the last reply for probes still bouncing to arrive.
const SETTLE: Duration = Duration::from_millis(300);
/// How often the published upstream set is looked at for a change.
const CHANGE_POLL: Duration = Duration::from_secs(1);

/// What the last round found for one upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The probe did not come back; the upstream answered it with `rcode`.
    Clear {
        /// The reply's rcode (NXDOMAIN from a resolver that recursed; SERVFAIL or REFUSED
        /// from one that could not).
        rcode: u8,
    },
    /// The probe came back in as a client query `arrivals` times: a forwarding loop.
    Looping {
        /// How often.
        arrivals: u32,
    },
    /// No reply and no arrival: nothing known (the upstream may be down).
    NoReply {
        /// Why there was no reply.
        error: String,
    },
    /// Not probed.
    NotProbed {
        /// Why.
        reason: &'static str,
    },
}

/// One upstream's probe and its verdict.
#[derive(Debug, Clone)]
pub struct UpstreamProbe {
    /// The upstream's URL.
    pub upstream: String,
    /// The name it was asked (empty when not probed).
    pub name: String,
    /// What the round found.
    pub verdict: Verdict,
    /// When the round ran.
    pub at: SystemTime,
}

impl UpstreamProbe {
    /// Doctor's status (`ok`, `fail`) and message for this upstream.
    pub fn check(&self) -> (&'static str, String) {
        match &self.verdict {
            Verdict::Looping { arrivals } => (
                "fail",
                format!(
                    "forwarding loop through {}: the probe {} came back {arrivals} times",
                    self.upstream, self.name
                ),
            ),
            Verdict::Clear { rcode } => (
                "ok",
                format!(
                    "no loop: the probe {} did not come back (answered rcode {rcode})",
                    self.name
                ),
            ),
            Verdict::NoReply { error } => (
                "ok",
                format!(
                    "no loop seen: the probe {} did not come back, and got no reply ({error}); probed again every {}s",
                    self.name,
                    RECHECK.as_secs()
                ),
            ),
            Verdict::NotProbed { reason } => ("ok", format!("not probed: {reason}")),
        }
    }

    /// Whether the last round saw a loop through this upstream.
    pub fn looping(&self) -> bool {
        matches!(self.verdict, Verdict::Looping { .. })
    }
}

/// The loop prober's shared state: the last round's verdicts, for doctor and `/metrics`.
#[derive(Debug, Default)]
pub struct LoopProbes {
    last: Mutex<Vec<UpstreamProbe>>,
    /// The published set the cores' looping marks are about, kept alive so its address (the
    /// marks' identity) is not reused by another set.
    marked: Mutex<Option<Arc<[UpstreamSpec]>>>,
}

impl LoopProbes {
    /// The last round's verdicts, in upstream order (empty before the first round).
    pub fn statuses(&self) -> Vec<UpstreamProbe> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Probes the published upstreams at start, when they change, and every [`PERIOD`]
    /// ([`RECHECK`] after a loop or an unanswered probe), for as long as the runtime runs;
    /// `metrics` are the cores' (their loop-probe rounds).
    /// `enabled` reads `upstream.loopProbe`: while it is false nothing is probed and no
    /// upstream is held out of rotation as looping.
    pub async fn run(
        self: Arc<Self>,
        settings: SharedSettings,
        metrics: Vec<Arc<CoreMetrics>>,
        enabled: impl Fn() -> bool,
    ) {
        loop {
            if !enabled() {
                self.last
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
                self.mark(&settings.load().upstreams.clone(), 0, &metrics);
                while !enabled() {
                    tokio::time::sleep(CHANGE_POLL).await;
                }
                continue;
            }
            let upstreams = settings.load().upstreams.clone();
            let probed = identity(&upstreams);
            let soon = self.round(&upstreams, &metrics).await;
            let wait = if soon { RECHECK } else { PERIOD };
            let until = tokio::time::Instant::now() + wait;
            let mut marked = upstreams;
            while tokio::time::Instant::now() < until {
                tokio::time::sleep(CHANGE_POLL.min(until - tokio::time::Instant::now())).await;
                let now = settings.load().upstreams.clone();
                if identity(&now) != probed || !enabled() {
                    break;
                }
                if !Arc::ptr_eq(&now, &marked) {
                    // A reload published the same upstreams anew: the marks follow.
                    self.mark(&now, self.mask(), &metrics);
                    marked = now;
                }
            }
        }
    }

    /// One round over `upstreams`; returns whether the next should come soon.
    async fn round(&self, upstreams: &Arc<[UpstreamSpec]>, metrics: &[Arc<CoreMetrics>]) -> bool {
        let token = loop {
            let token: u64 = rand::random();
            if token != 0 {
                break token;
            }
        };
        for core in metrics {
            core.loop_probe.start_round(token);
        }
        let mut asks = tokio::task::JoinSet::new();
        for (index, spec) in upstreams.iter().enumerate().take(PROBED_UPSTREAMS) {
            if matches!(spec.protocol, UpstreamProtocol::Udp | UpstreamProtocol::Tcp) {
                let (protocol, addr) = (spec.protocol, spec.addr);
                asks.spawn(async move {
                    let id: u16 = rand::random();
                    let query = probe_query(token, index, id);
                    (index, ask(protocol, addr, &query, id).await)
                });
            }
        }
        let mut replies: Vec<Option<Result<u8, String>>> = vec![None; upstreams.len()];
        while let Some(done) = asks.join_next().await {
            if let Ok((index, reply)) = done
                && let Some(slot) = replies.get_mut(index)
            {
                *slot = Some(reply);
            }
        }
        tokio::time::sleep(SETTLE).await;
        let at = SystemTime::now();
        let verdicts: Vec<UpstreamProbe> = upstreams
            .iter()
            .enumerate()
            .map(|(index, spec)| {
                let arrivals: u32 = metrics
                    .iter()
                    .map(|core| core.loop_probe.arrivals(index))
                    .sum();
                let reply = replies.get(index).cloned().flatten();
                let verdict = match reply {
                    _ if index >= PROBED_UPSTREAMS => Verdict::NotProbed {
                        reason: "past the first 16 upstreams",
                    },
                    None => Verdict::NotProbed {
                        reason: "an encrypted upstream (only udp:// and tcp:// ones are probed)",
                    },
                    Some(_) if arrivals > 0 => Verdict::Looping { arrivals },
                    Some(Ok(rcode)) => Verdict::Clear { rcode },
                    Some(Err(error)) => Verdict::NoReply { error },
                };
                let name = match verdict {
                    Verdict::NotProbed { .. } => String::new(),
                    _ => probe_name(token, index),
                };
                UpstreamProbe {
                    upstream: spec.to_string(),
                    name,
                    verdict,
                    at,
                }
            })
            .collect();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        // A loop is gone only when the probe resolved (NOERROR or NXDOMAIN): a SERVFAIL or
        // no reply without an arrival may be the other resolver holding kudurru down after
        // the refusals, not a fixed loop.
        let mut verdicts = verdicts;
        for probe in &mut verdicts {
            let resolved = matches!(
                probe.verdict,
                Verdict::Clear { rcode } if rcode == wire::rcode::NOERROR || rcode == wire::rcode::NXDOMAIN
            );
            if !resolved
                && !probe.looping()
                && let Some(before) = last
                    .iter()
                    .find(|p| p.upstream == probe.upstream && p.looping())
            {
                // The loop as last seen: its probe name and count.
                probe.verdict = before.verdict.clone();
                probe.name = before.name.clone();
            }
        }
        for probe in &verdicts {
            let was_looping = last
                .iter()
                .any(|p| p.upstream == probe.upstream && p.looping());
            match (&probe.verdict, was_looping) {
                (Verdict::Looping { arrivals }, false) => {
                    tracing::error!(upstream = %probe.upstream, probe = %probe.name, arrivals, "forwarding loop: the probe sent to this upstream came back to kudurru as a client query; it is out of rotation until the loop is fixed");
                }
                (Verdict::Looping { .. }, true) => {}
                (_, true) => {
                    tracing::info!(upstream = %probe.upstream, probe = %probe.name, "forwarding loop gone: the probe did not come back");
                }
                (_, false) => {}
            }
        }
        let soon = verdicts
            .iter()
            .any(|p| matches!(p.verdict, Verdict::Looping { .. } | Verdict::NoReply { .. }));
        // The cores hold the looping upstreams of this set out of rotation (their health
        // checks read the marks); a set without a loop clears them.
        let mask = verdicts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.looping())
            .fold(0u32, |mask, (index, _)| mask | (1 << index));
        self.mark(upstreams, mask, metrics);
        *last = verdicts;
        soon
    }

    /// The looping upstreams of the last round, a bit per index.
    fn mask(&self) -> u32 {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .enumerate()
            .filter(|(_, p)| p.looping())
            .fold(0u32, |mask, (index, _)| mask | (1 << index))
    }

    /// Marks the upstreams of `set` in `mask` as looping on every core (their health checks
    /// hold them out of rotation), keeping `set` alive while the marks name it.
    fn mark(&self, set: &Arc<[UpstreamSpec]>, mask: u32, metrics: &[Arc<CoreMetrics>]) {
        let id = Arc::as_ptr(set).cast::<()>() as usize;
        *self.marked.lock().unwrap_or_else(PoisonError::into_inner) = Some(set.clone());
        for core in metrics {
            core.loop_probe.set_looping(id, mask);
        }
    }
}

/// What identifies a published upstream set for change detection: URLs and addresses.
fn identity(upstreams: &[UpstreamSpec]) -> Vec<(String, SocketAddr)> {
    upstreams
        .iter()
        .map(|spec| (spec.to_string(), spec.addr))
        .collect()
}

/// Sends `query` (id `id`) to `addr` over `protocol` (UDP or TCP) and returns the reply's
/// rcode, or why there was none within [`REPLY_TIMEOUT`].
async fn ask(
    protocol: UpstreamProtocol,
    addr: SocketAddr,
    query: &[u8],
    id: u16,
) -> Result<u8, String> {
    let exchange = async {
        match protocol {
            UpstreamProtocol::Tcp => ask_tcp(addr, query, id).await,
            _ => ask_udp(addr, query, id).await,
        }
    };
    match tokio::time::timeout(REPLY_TIMEOUT, exchange).await {
        Ok(Ok(rcode)) => Ok(rcode),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no reply in {}s", REPLY_TIMEOUT.as_secs())),
    }
}

/// The rcode of `reply` when it is a reply with `id`.
fn reply_rcode(reply: &[u8], id: u16) -> Option<u8> {
    (wire::is_reply_to(reply, id)).then(|| wire::header_rcode(reply))?
}

async fn ask_udp(addr: SocketAddr, query: &[u8], id: u16) -> std::io::Result<u8> {
    let local: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(addr).await?;
    socket.send(query).await?;
    let mut buffer = vec![0u8; 4096];
    loop {
        let n = socket.recv(&mut buffer).await?;
        if let Some(rcode) = buffer.get(..n).and_then(|reply| reply_rcode(reply, id)) {
            return Ok(rcode);
        }
    }
}

async fn ask_tcp(addr: SocketAddr, query: &[u8], id: u16) -> std::io::Result<u8> {
    let mut stream = TcpStream::connect(addr).await?;
    let len = u16::try_from(query.len()).map_err(std::io::Error::other)?;
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    stream.write_all(&framed).await?;
    loop {
        let mut prefix = [0u8; 2];
        stream.read_exact(&mut prefix).await?;
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
        stream.read_exact(&mut reply).await?;
        if let Some(rcode) = reply_rcode(&reply, id) {
            return Ok(rcode);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_fails_doctor_with_the_upstream_name_and_count() {
        let probe = UpstreamProbe {
            upstream: "udp://127.0.0.1:5300".into(),
            name: probe_name(0xab, 0),
            verdict: Verdict::Looping { arrivals: 3 },
            at: SystemTime::now(),
        };
        let (status, message) = probe.check();
        assert_eq!(status, "fail");
        assert_eq!(
            message,
            "forwarding loop through udp://127.0.0.1:5300: the probe 00000000000000ab00.kudurru-loop.alt. came back 3 times"
        );
        assert!(probe.looping());
        let clear = UpstreamProbe {
            verdict: Verdict::Clear { rcode: 3 },
            ..probe
        };
        assert_eq!(clear.check().0, "ok");
        assert!(!clear.looping());
    }

    #[test]
    fn only_a_reply_with_our_id_counts() {
        let query = probe_query(1, 0, 0x1234);
        let mut reply = query.clone();
        reply[2] |= 0x80;
        reply[3] = (reply[3] & 0xf0) | 3;
        assert_eq!(reply_rcode(&reply, 0x1234), Some(3));
        assert_eq!(reply_rcode(&reply, 0x1235), None);
        assert_eq!(reply_rcode(&query, 0x1234), None, "not a reply (QR=0)");
        assert_eq!(reply_rcode(&[], 0x1234), None);
    }
}
