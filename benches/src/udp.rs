//! The UDP flows of one core: a connected socket per flow (the kernel drops datagrams from any
//! other source), queries sent and replies received in batches (`sendmmsg` / `recvmmsg`).
//!
//! One loop drives all of a core's sockets and, when nothing is due and nothing has arrived,
//! blocks its thread in `ppoll` until a socket is readable or the next query is due. That wait
//! is on purpose outside glommio: in an open loop the latency counts from the intended send
//! time, so a late wake-up shows up as latency, and `ppoll` (with the thread's timer slack set
//! to 1 ns) wakes within microseconds where glommio's reactor adds about a hundred.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use kudurru_transports::sys::{self, MmsgBatch};

use crate::inflight::{InFlight, Outcome};
use crate::queries::{Asked, Rng};
use crate::run::{Flow, Load};
use crate::tally::{ErrorKind, Progress, Tally};

/// Socket buffers: room for bursts of a fast open loop.
const SOCKET_BUFFER: usize = 4 << 20;
/// A wait shorter than this is not worth a system call: the loop goes round again.
const SPIN_NS: u64 = 2_000;
/// Longest wait, so an interrupt is noticed promptly.
const MAX_WAIT_NS: u64 = 50_000_000;

fn socket(target: SocketAddr) -> std::io::Result<OwnedFd> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(target),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    socket.set_nonblocking(true)?;
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    let local: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    socket.bind(&local.into())?;
    socket.connect(&target.into())?;
    Ok(socket.into())
}

/// One socket and what is in flight on it.
struct UdpFlow {
    flow: Flow,
    fd: OwnedFd,
    rng: Rng,
    cursor: usize,
    inflight: InFlight,
    /// Open loop: the next query of the schedule, and how many it holds.
    next: u64,
    scheduled: u64,
    sending: bool,
    /// Whether the socket may hold replies (`ppoll` said so, or the loop is spinning and did
    /// not ask): a flow that is not readable skips its `recvmmsg`, which would only say EAGAIN.
    readable: bool,
    tally: Tally,
}

/// Runs the UDP flows of one core to their end and returns what they counted; an error only
/// when a socket cannot be opened.
pub(crate) fn run_core(flows: Vec<Flow>) -> Result<Tally, String> {
    let _ = sys::set_timer_slack(1);
    let mut states = Vec::with_capacity(flows.len());
    for flow in flows {
        let target = flow.plan.target.addr;
        let fd =
            socket(target).map_err(|e| format!("cannot open a UDP socket to {target}: {e}"))?;
        let mut rng = flow.rng();
        let scheduled = match flow.plan.load {
            Load::Open { rate } => flow.scheduled(rate),
            Load::Closed { .. } => 0,
        };
        states.push(UdpFlow {
            cursor: flow.first_question(),
            inflight: InFlight::new(&mut rng),
            rng,
            fd,
            next: 0,
            scheduled,
            sending: true,
            readable: true,
            tally: Tally::new(),
            flow,
        });
    }
    let Some(first) = states.first() else {
        return Ok(Tally::new());
    };
    let clock = first.flow.clock;
    let fds: Vec<RawFd> = states.iter().map(|s| s.fd.as_raw_fd()).collect();
    let mut ready = vec![false; fds.len()];
    let mut outgoing = Box::new(MmsgBatch::new());
    let mut incoming = Box::new(MmsgBatch::new());
    let mut batch: Vec<(u16, Asked)> = Vec::with_capacity(sys::BATCH);
    let mut query = Vec::with_capacity(512);
    // Start together with the other cores.
    let start_in = clock
        .instant(0)
        .saturating_duration_since(std::time::Instant::now());
    std::thread::sleep(start_in);
    loop {
        let mut busy = false;
        let mut wake = u64::MAX;
        let mut running = false;
        for state in &mut states {
            let (moved, next_wake) =
                state.step(&mut outgoing, &mut incoming, &mut batch, &mut query);
            busy |= moved;
            wake = wake.min(next_wake);
            running |= state.sending || state.inflight.outstanding() > 0;
        }
        if !running {
            break;
        }
        if busy {
            continue;
        }
        let wait = wake.saturating_sub(clock.now_ns()).min(MAX_WAIT_NS);
        if wait >= SPIN_NS {
            // An error here (EINTR is already handled) only means the loop polls sooner, and
            // then looks at every socket.
            if sys::poll_readable(&fds, Duration::from_nanos(wait), &mut ready).is_err() {
                ready.fill(true);
            }
        } else {
            ready.fill(true);
        }
        for (state, &ready) in states.iter_mut().zip(&ready) {
            state.readable |= ready;
        }
    }
    let mut tally = Tally::new();
    for state in &states {
        tally.merge(&state.tally);
    }
    Ok(tally)
}

impl UdpFlow {
    /// Sends what is due, takes in what has arrived, expires what waited too long. Returns
    /// whether any datagram moved and when this flow next needs attention.
    fn step(
        &mut self,
        outgoing: &mut MmsgBatch,
        incoming: &mut MmsgBatch,
        batch: &mut Vec<(u16, Asked)>,
        query: &mut Vec<u8>,
    ) -> (bool, u64) {
        let flow = &self.flow;
        let plan = &flow.plan;
        let mix = &plan.mix;
        let fd = self.fd.as_raw_fd();
        let timeout_ns = plan.timeout.as_nanos() as u64;
        let duration_ns = plan.duration.as_nanos() as u64;
        let now = flow.clock.now_ns();
        if self.sending && !flow.sending(now) {
            self.sending = false;
            self.tally.sending_ns = now.min(duration_ns);
        }
        let mut moved = false;
        if self.sending {
            while batch.len() < sys::BATCH {
                let stamp = match plan.load {
                    Load::Open { rate } => {
                        let due = flow.intended_ns(rate, self.next);
                        if due > now || self.next >= self.scheduled {
                            break;
                        }
                        self.next += 1;
                        due
                    }
                    Load::Closed { concurrency } => {
                        if self.inflight.outstanding() >= flow.concurrency(concurrency) {
                            break;
                        }
                        now
                    }
                };
                let asked = mix.pick(&mut self.rng, &mut self.cursor);
                let Some(id) = self.inflight.start(asked, stamp, now) else {
                    self.tally.error(ErrorKind::IdsExhausted, 1);
                    if matches!(plan.load, Load::Closed { .. }) {
                        break;
                    }
                    continue;
                };
                mix.write_query(asked, id, query);
                outgoing.push(query, plan.target.addr);
                batch.push((id, asked));
            }
            if !batch.is_empty() {
                let sent = outgoing.send(fd);
                for &(id, _) in &batch[sent..] {
                    self.inflight.cancel(id);
                }
                self.tally
                    .error(ErrorKind::Send, (batch.len() - sent) as u64);
                let fresh = batch[..sent]
                    .iter()
                    .filter(|(_, asked)| matches!(asked, Asked::Fresh(_)))
                    .count();
                self.tally.sent += sent as u64;
                self.tally.fresh += fresh as u64;
                Progress::add(&flow.progress.sent, sent as u64);
                Progress::add(&flow.progress.failed, (batch.len() - sent) as u64);
                moved = true;
                outgoing.clear();
                batch.clear();
            }
        }
        let answered_before = self.tally.answered;
        // An error (ECONNREFUSED: nothing listens) ends the batch; the queries will time out.
        while self.readable
            && let Ok(n) = incoming.recv(fd)
        {
            if n == 0 {
                break;
            }
            moved = true;
            let arrived = flow.clock.now_ns();
            for i in 0..n {
                let outcome = match incoming.datagram(i).0 {
                    Some(message) => self.inflight.finish(message, mix),
                    None => Outcome::Malformed,
                };
                self.tally.record(outcome, arrived);
            }
            if n < sys::BATCH {
                break;
            }
        }
        self.readable = false;
        Progress::add(
            &flow.progress.answered,
            self.tally.answered - answered_before,
        );
        let expired = self.inflight.expire(flow.clock.now_ns(), timeout_ns) as u64;
        self.tally.timeouts += expired;
        Progress::add(&flow.progress.failed, expired);
        let mut wake = self.inflight.next_expiry(timeout_ns).unwrap_or(u64::MAX);
        if self.sending {
            wake = wake.min(duration_ns);
            match plan.load {
                Load::Open { rate } if self.next < self.scheduled => {
                    wake = wake.min(flow.intended_ns(rate, self.next));
                }
                Load::Closed { concurrency }
                    if self.inflight.outstanding() < flow.concurrency(concurrency) =>
                {
                    wake = 0;
                }
                _ => {}
            }
        }
        (moved, wake)
    }
}
