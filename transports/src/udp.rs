//! The UDP listener of one core: one SO_REUSEPORT socket, answers sent from the same socket.
//!
//! The loop moves datagrams in batches (`recvmmsg` / `sendmmsg`, [`sys::BATCH`] at a time) and
//! sleeps on glommio (a poll for readability on the main ring, which reads nothing: one
//! armed for good at light load, one per sleep under load, [`Sleeper`]) only when the socket
//! is empty. Hits and local answers are written straight
//! into the send batch; misses are handed to a task so the loop never waits on an upstream.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use glommio::net::{Readiness, UdpSocket};
use kudurru_core::wire::{self, Query, ReplyOptions};
use kudurru_core::{Client, Decision, Settings, Stage, ingress};

use crate::answer::{Answering, Lookup, Origin, Written};
use crate::core_context::Active;
use crate::inbox::InboxTransport;
use crate::metrics::{AnswerSource, AnswerTally, Transport};
use crate::querylog::Outcome;
use crate::sys::{self, MmsgBatch};
use crate::worker::Worker;

/// Serves queries on `socket` until the task is dropped.
pub(crate) async fn serve(worker: Rc<Worker>, socket: Rc<UdpSocket>) {
    let fd = socket.as_raw_fd();
    let mut incoming = Box::new(MmsgBatch::new());
    let mut replies = Box::new(MmsgBatch::new());
    let mut out = Vec::with_capacity(sys::DATAGRAM_MAX);
    // Whether the last receive found the socket empty, or emptied it (a short batch).
    let mut drained = false;
    let mut sleeper = Sleeper::new();
    loop {
        if drained {
            // Sleep until a datagram arrives (cancel-safe: nothing is consumed). A short batch
            // emptied the socket, so no `recvmmsg` that only says EAGAIN first. A poll, not a
            // one-byte peek: no receive tried at submission and run again at completion, and
            // one ring to wake instead of two (3.6 µs less per wake-up, docs/benchmarks.md
            // "Waiting with a poll"). A multishot poll's event for a datagram already read
            // ends a sleep early; the receive then finds nothing and the loop sleeps again.
            if let Err(e) = sleeper.sleep(&socket).await {
                tracing::debug!(error = %e, "udp wait failed");
            }
        }
        let n = match incoming.recv(fd) {
            Ok(0) => {
                sleeper.received(0);
                drained = true;
                continue;
            }
            Ok(n) => {
                sleeper.received(n);
                drained = n < sys::BATCH;
                n
            }
            Err(e) => {
                tracing::debug!(error = %e, "udp receive failed");
                glommio::yield_if_needed().await;
                continue;
            }
        };
        {
            // The snapshot every query of the batch is admitted under (a miss takes it on as an
            // `Arc`), and the limiter: held for the batch only, nothing in it awaits.
            let context = worker.context();
            let settings = context.settings();
            let options = ReplyOptions::udp(settings.edns_payload);
            let stage = Stage::new(&settings, &options, context.lameduck());
            // The batch's receipt: every answer written below is measured from it.
            let now = Instant::now();
            let mut tally = AnswerTally::default();
            let mut limiter = context.limiter.borrow_mut();
            // One clock read per receive batch for the query log's records, none when it is off.
            let time_ns = if context.querylog.on() {
                crate::querylog::now_ns()
            } else {
                0
            };
            let log = |peer, client: &Client<'_>, outcome, query: &[u8], response: &[u8]| {
                context.querylog.record(
                    time_ns,
                    Transport::Udp,
                    peer,
                    client,
                    outcome,
                    &settings.policy,
                    query,
                    response,
                );
            };
            for i in 0..n {
                context.metrics.query(Transport::Udp);
                let (Some(message), Some(peer)) = incoming.datagram(i) else {
                    // Nothing to log: no message, or no peer to name.
                    context.metrics.dropped();
                    continue;
                };
                let client = Client {
                    addr: peer.ip(),
                    datagram: true,
                    id: None,
                    sni: None,
                };
                let outcome = match ingress(message, &stage, client, &mut limiter, now, &mut out) {
                    Decision::Respond => Outcome::LOCAL,
                    // The zone stage asks for transfers over streams only; refuse anyway.
                    Decision::Transfer { query, zone } => {
                        match settings.zones.served().get(zone) {
                            Some(served) => {
                                let now = std::time::SystemTime::now()
                                    .duration_since(std::time::UNIX_EPOCH)
                                    .map_or(0, |d| d.as_secs());
                                out = served.transfer_datagram(message, peer.ip(), now);
                            }
                            None => {
                                wire::write_error(&query, wire::rcode::REFUSED, &options, &mut out)
                            }
                        }
                        Outcome::LOCAL
                    }
                    Decision::Drop => {
                        context.metrics.dropped();
                        log(peer, &client, Outcome::DROPPED, message, &[]);
                        continue;
                    }
                    Decision::Refused { answered } => {
                        context.metrics.acl_refused(answered);
                        if !answered {
                            log(peer, &client, Outcome::DROPPED, message, &[]);
                            continue;
                        }
                        Outcome::LOCAL
                    }
                    Decision::Blocked { blocked, answered } => {
                        settings.policy.count(context.shard(), blocked);
                        if !answered {
                            context.metrics.dropped();
                            log(peer, &client, Outcome::policy(blocked, false), message, &[]);
                            continue;
                        }
                        // RPZ local data can outgrow the client's UDP limit: TC=1 then, so it
                        // asks again over TCP (the message scanned once; it scans again).
                        if let Ok(query) = Query::parse(message)
                            && out.len() > query.udp_limit(settings.edns_payload)
                        {
                            wire::write_truncated(&query, &options, &mut out);
                        }
                        Outcome::policy(blocked, true)
                    }
                    Decision::Resolve(query) => {
                        let to = Answering {
                            settings: &settings,
                            shard: context.shard(),
                            client,
                            options: &options,
                            limit: Some(query.udp_limit(settings.edns_payload)),
                        };
                        match worker.serve_local(query.key(), now, |answer| {
                            Lookup::Own.write(&to, &query, answer, now, &mut out)
                        }) {
                            Some(Written::Answer) => Outcome::CACHE,
                            Some(written) if written.sent() => written.outcome(Outcome::CACHE),
                            Some(written) => {
                                context.metrics.dropped();
                                log(peer, &client, written.outcome(Outcome::CACHE), message, &[]);
                                continue;
                            }
                            None => {
                                let task = resolve_and_reply(
                                    worker.clone(),
                                    Arc::clone(&settings),
                                    socket.clone(),
                                    message.to_vec(),
                                    peer,
                                    Lookup::Own,
                                    now,
                                );
                                glommio::spawn_local(task).detach();
                                continue;
                            }
                        }
                    }
                    Decision::Control(_) => {
                        let task = control_and_reply(
                            worker.clone(),
                            socket.clone(),
                            message.to_vec(),
                            peer,
                            now,
                        );
                        glommio::spawn_local(task).detach();
                        continue;
                    }
                    Decision::Chase {
                        query,
                        blocked,
                        target,
                        ttl,
                    } => {
                        settings.policy.count(context.shard(), blocked);
                        let lookup = Lookup::Chase {
                            target: Box::new(target),
                            ttl,
                            blocked,
                        };
                        let to = Answering {
                            settings: &settings,
                            shard: context.shard(),
                            client,
                            options: &options,
                            limit: Some(query.udp_limit(settings.edns_payload)),
                        };
                        let hit = worker.serve_local(&target, now, |answer| {
                            lookup.write(&to, &query, answer, now, &mut out)
                        });
                        if hit.is_none() {
                            let task = resolve_and_reply(
                                worker.clone(),
                                Arc::clone(&settings),
                                socket.clone(),
                                message.to_vec(),
                                peer,
                                lookup,
                                now,
                            );
                            glommio::spawn_local(task).detach();
                            continue;
                        }
                        Outcome::policy(blocked, true)
                    }
                };
                let rcode = wire::header_rcode(&out).unwrap_or(0);
                context.metrics.response(rcode);
                tally.count(AnswerSource::of(outcome.source, rcode));
                log(peer, &client, outcome, message, &out);
                replies.push(&out, peer);
            }
            // One clock reading for the whole batch's answers, handed to the send path now.
            if !replies.is_empty() {
                context
                    .metrics
                    .answer_latency(Transport::Udp, now.elapsed(), replies.len() as u64);
                context.metrics.add_answers(&tally);
            }
        }
        flush(&socket, &mut replies).await;
        glommio::yield_if_needed().await;
    }
}

/// How the listener sleeps on an empty socket, chosen by its load.
///
/// A multishot poll, armed once, costs nothing per sleep but posts a completion for every
/// datagram, also those that arrive while the loop is busy; a one-shot `POLL_ADD`, armed at
/// each sleep, costs a submission and the kernel's arming (~1 µs) per sleep and nothing per
/// datagram. At light load (a datagram or two per wake-up) the first is cheaper, under load
/// the second (docs/benchmarks.md, "The listener's sleep follows its load").
struct Sleeper {
    multishot: Option<Readiness>,
    /// Datagrams per receive, an average over the last ~8, in sixteenths.
    load: u32,
}

/// Above this average of datagrams per receive (in sixteenths) the listener arms a one-shot
/// poll per sleep; below [`LIGHT`] it keeps a multishot poll.
const BUSY: u32 = 4 * 16;
const LIGHT: u32 = 2 * 16;

impl Sleeper {
    fn new() -> Self {
        Self {
            multishot: None,
            load: LIGHT,
        }
    }

    fn received(&mut self, datagrams: usize) {
        let sample = (datagrams.min(sys::BATCH) as u32) * 16;
        self.load = self.load - self.load / 8 + sample / 8;
    }

    /// The poll the next sleep should use: `Some(true)` multishot, `Some(false)` one-shot,
    /// `None` whichever is in use (between the two thresholds).
    fn wants_multishot(&self) -> Option<bool> {
        if self.load > BUSY {
            Some(false)
        } else if self.load < LIGHT {
            Some(true)
        } else {
            None
        }
    }

    async fn sleep(&mut self, socket: &UdpSocket) -> glommio::Result<(), ()> {
        match self.wants_multishot() {
            // Dropping it cancels the multishot poll.
            Some(false) => self.multishot = None,
            Some(true) if self.multishot.is_none() => self.multishot = Some(socket.readiness()),
            _ => {}
        }
        match &self.multishot {
            Some(readiness) => readiness.wait().await.map_err(Into::into),
            None => socket.readable().await,
        }
    }
}

/// Sends the queued replies; what the socket cannot take right now goes out the slow way.
async fn flush(socket: &UdpSocket, replies: &mut MmsgBatch) {
    let sent = replies.send(socket.as_raw_fd());
    for i in sent..replies.len() {
        let (reply, peer) = replies.queued(i);
        if let Some(peer) = peer
            && let Err(e) = socket.send_to(reply, peer).await
        {
            tracing::debug!(%peer, error = %e, "udp send failed");
        }
    }
    replies.clear();
}

/// Resolves a miss under `settings`, the snapshot the receive loop admitted it under, and sends
/// the answer; its latency counts from `received`, its receive batch.
async fn resolve_and_reply(
    worker: Rc<Worker>,
    settings: Arc<Settings>,
    socket: Rc<UdpSocket>,
    message: Vec<u8>,
    peer: SocketAddr,
    lookup: Lookup,
    received: Instant,
) {
    let _active = Active::enter(worker.context());
    // The message already scanned once in the receive loop; it scans the same way again.
    let Ok(query) = Query::parse(&message) else {
        return;
    };
    let started = Instant::now();
    let answer = worker.resolve(lookup.key(&query), &settings).await;
    let now = Instant::now();
    let mut out = Vec::with_capacity(1232);
    let options = ReplyOptions::udp(settings.edns_payload);
    let client = Client {
        addr: peer.ip(),
        datagram: true,
        id: None,
        sni: None,
    };
    let to = Answering {
        settings: &settings,
        shard: worker.context().shard(),
        client,
        options: &options,
        limit: Some(query.udp_limit(settings.edns_payload)),
    };
    let written = lookup.write(&to, &query, &answer, now, &mut out);
    let origin = Origin {
        transport: Transport::Udp,
        peer,
    };
    let outcome = written.outcome(lookup.missed(&query, &answer, &settings, started, now));
    if !written.sent() {
        worker.context().metrics.dropped();
        origin.record(&worker, &settings, &client, outcome, &message, &[]);
        return;
    }
    let rcode = wire::header_rcode(&out).unwrap_or(0);
    let metrics = &worker.context().metrics;
    metrics.response(rcode);
    metrics.answered(
        Transport::Udp,
        AnswerSource::of(outcome.source, rcode),
        now.saturating_duration_since(received),
    );
    origin.record(&worker, &settings, &client, outcome, &message, &out);
    let sent = match sys::try_send(socket.as_raw_fd(), &out, Some(peer)) {
        Ok(Some(_)) => Ok(()),
        // Socket buffer full: wait for room. Boxed, as it is rare and its future is large.
        Ok(None) => Box::pin(socket.send_to(&out, peer))
            .await
            .map(|_| ())
            .map_err(std::io::Error::from),
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        tracing::debug!(%peer, error = %e, "udp send failed");
    }
}

/// A NOTIFY or UPDATE: the control thread's answer (crate::inbox), sent when it comes; its
/// latency counts from `received`, its receive batch.
async fn control_and_reply(
    worker: Rc<Worker>,
    socket: Rc<UdpSocket>,
    message: Vec<u8>,
    peer: SocketAddr,
    received: Instant,
) {
    let _active = Active::enter(worker.context());
    let context = worker.context();
    let origin = Origin {
        transport: Transport::Udp,
        peer,
    };
    let client = Client {
        addr: peer.ip(),
        datagram: true,
        id: None,
        sni: None,
    };
    let answer = context.inbox.ask(&message, peer, InboxTransport::Udp).await;
    let settings = context.settings();
    let Some(out) = answer else {
        context.metrics.dropped();
        origin.record(&worker, &settings, &client, Outcome::DROPPED, &message, &[]);
        return;
    };
    let rcode = wire::header_rcode(&out).unwrap_or(0);
    context.metrics.response(rcode);
    context.metrics.answered(
        Transport::Udp,
        AnswerSource::of(Outcome::LOCAL.source, rcode),
        received.elapsed(),
    );
    origin.record(&worker, &settings, &client, Outcome::LOCAL, &message, &out);
    if let Err(e) = socket.send_to(&out, peer).await {
        tracing::debug!(%peer, error = %e, "udp send failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sleeper_keeps_a_multishot_poll_at_light_load_only_with_hysteresis() {
        let mut sleeper = Sleeper::new();
        // Starts between the thresholds: it keeps what it has (nothing armed yet: one-shot).
        assert_eq!(sleeper.wants_multishot(), None);
        for _ in 0..16 {
            sleeper.received(1);
        }
        assert_eq!(
            sleeper.wants_multishot(),
            Some(true),
            "a datagram per wake-up"
        );
        for _ in 0..16 {
            sleeper.received(sys::BATCH);
        }
        assert_eq!(sleeper.wants_multishot(), Some(false), "full batches");
        // Three per receive sits between the thresholds: no switching back and forth.
        for _ in 0..64 {
            sleeper.received(3);
        }
        assert_eq!(sleeper.wants_multishot(), None);
        // An empty receive after an early wake-up counts as light load.
        for _ in 0..16 {
            sleeper.received(0);
        }
        assert_eq!(sleeper.wants_multishot(), Some(true));
    }
}
