//! One query in, one answer out: the pipeline for transports that carry a single message per
//! request (DoH, DoH3 and DoQ). A request is answered where it arrives when it is a hit, and
//! goes on in a task of its own only when it has to wait ([`inline_or_queued`]).
//!
//! ```text
//! message ─▶ ingress ─┬ Respond ─────────────────────────────▶ Some(answer)
//!                     ├ Drop ────────────────────────────────▶ None (the transport aborts)
//!                     └ Resolve ─▶ hit on this core / resolve ─▶ Some(answer)
//! ```
//! The settings snapshot is loaded once per query, before ingress: a hit reads it through the
//! `arc-swap` guard (no reference count), a miss takes it on as an `Arc` to resolve under.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Instant;

use kudurru_core::policy::{Blocked, PolicyDecision};
use kudurru_core::wire::{self, Query, ReplyOptions};
use kudurru_core::{CacheKey, CachedAnswer, Client, Decision, Settings, Stage, ingress, policy};

use crate::core_context::Active;
use crate::metrics::{AnswerSource, Transport};
use crate::querylog::Outcome;
use crate::worker::Worker;
use kudurru_core::querylog::Source;

/// What a query is answered from: its own key, or the target of a policy's CNAME rewrite
/// (the answer is then the CNAME and the target's records, `policy::answer::write_chased`).
/// Boxed target: the variant is rare (rewrites), and `Now` and DoH's `Answer` carry a
/// `Lookup` on every miss.
#[derive(Clone)]
pub(crate) enum Lookup {
    /// The query's own name.
    Own,
    /// A policy rewrote the name to a CNAME to `target`, TTL `ttl`.
    Chase {
        /// The CNAME's target with the query's type and class.
        target: Box<CacheKey>,
        /// The CNAME's TTL.
        ttl: u32,
        /// The policy (and list) that rewrote the name, for the query log.
        blocked: Blocked,
    },
}

impl Lookup {
    /// The key to serve or resolve.
    pub(crate) fn key<'k>(&'k self, query: &'k Query<'_>) -> &'k CacheKey {
        match self {
            Self::Own => query.key(),
            Self::Chase { target, .. } => target,
        }
    }

    /// The query log's outcome of a hit on this core: the cache's answer, or a rewrite's.
    pub(crate) fn hit(&self) -> Outcome<'static> {
        match self {
            Self::Own => Outcome::CACHE,
            Self::Chase { blocked, .. } => Outcome::policy(*blocked, true),
        }
    }

    /// The query log's outcome of a miss for `query` resolved to `answer` under `settings`
    /// between `started` and `now`: from the upstream that answered (its URL and the
    /// exchange's time), served stale, or a failure answered here (with the miss's wait); a
    /// rewrite's chase is the policy's answer.
    pub(crate) fn missed<'s>(
        &self,
        query: &Query<'_>,
        answer: &CachedAnswer,
        settings: &'s Settings,
        started: Instant,
        now: Instant,
    ) -> Outcome<'s> {
        let waited =
            u32::try_from(now.saturating_duration_since(started).as_micros()).unwrap_or(u32::MAX);
        let source = if answer.is_stale() {
            Source::Stale
        } else if answer.kind() == kudurru_core::AnswerKind::Failure {
            Source::Local
        } else {
            Source::Upstream
        };
        let mut outcome = Outcome {
            latency_us: waited,
            ..Outcome::of(source)
        };
        if source == Source::Upstream
            && let Some((index, rtt_us)) = answer.answered_from()
            && let Some(spec) = crate::upstream::upstream_at(self.key(query), settings, index)
        {
            outcome = outcome.answered_by(spec, rtt_us);
        }
        match self {
            Self::Own => outcome,
            Self::Chase { blocked, .. } => Outcome {
                source: Source::Policy,
                ..outcome
            }
            .blocked(*blocked),
        }
    }

    /// Writes the answer to `query` from `answer`, the cached answer for [`Self::key`], as
    /// `to` says; unless CNAME cloaking blocks it for the client, when the block answer is
    /// written instead (and counted). [`Written::Dropped`]: send nothing (an RPZ drop,
    /// counted).
    pub(crate) fn write(
        &self,
        to: &Answering<'_>,
        query: &Query<'_>,
        answer: &CachedAnswer,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Written {
        match self {
            Self::Own => {
                match kudurru_core::cloaked(
                    &to.settings.policy,
                    to.client,
                    query,
                    answer,
                    to.options,
                    out,
                ) {
                    PolicyDecision::Pass => {
                        answer.write_response(query, now, to.limit, to.options, out);
                    }
                    PolicyDecision::Answer(blocked) => {
                        to.settings.policy.count(to.shard, blocked);
                        return Written::Cloaked(blocked);
                    }
                    PolicyDecision::Drop(blocked) | PolicyDecision::Chase { blocked, .. } => {
                        // A cloaked name that a rule rewrites is blocked like a dropped one:
                        // the client asked for the name, not for the rule's target.
                        to.settings.policy.count(to.shard, blocked);
                        return Written::Dropped(blocked);
                    }
                }
            }
            Self::Chase { target, ttl, .. } => {
                policy::answer::write_chased(
                    query,
                    target.qname(),
                    *ttl,
                    answer,
                    now,
                    to.options,
                    out,
                );
                // Too large for the client's UDP limit: TC=1, so it asks again over TCP.
                if to.limit.is_some_and(|limit| out.len() > limit) {
                    wire::write_truncated(query, to.options, out);
                }
            }
        }
        Written::Answer
    }
}

/// What [`Lookup::write`] wrote.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Written {
    /// The answer (or a rewrite's chased answer).
    Answer,
    /// CNAME cloaking blocked the answer: the block answer is written instead.
    Cloaked(Blocked),
    /// CNAME cloaking blocked the answer with a drop: send nothing.
    Dropped(Blocked),
}

impl Written {
    /// Whether something is to be sent.
    pub(crate) fn sent(self) -> bool {
        !matches!(self, Self::Dropped(_))
    }

    /// The query log's outcome of a query that would have been `base` had cloaking not
    /// blocked it.
    pub(crate) fn outcome(self, base: Outcome<'_>) -> Outcome<'_> {
        match self {
            Self::Answer => base,
            Self::Cloaked(blocked) => base.cloaked(blocked, true),
            Self::Dropped(blocked) => base.cloaked(blocked, false),
        }
    }
}

/// For whom and how an answer is written: the query's snapshot (its policies), the core that
/// counts blocks, the client, the transport's EDNS options and, on UDP, the size limit.
#[derive(Clone, Copy)]
pub(crate) struct Answering<'a> {
    /// The snapshot the query was admitted under.
    pub(crate) settings: &'a Settings,
    /// The core's shard number (per-core block counters).
    pub(crate) shard: usize,
    /// Who asked.
    pub(crate) client: Client<'a>,
    /// How the transport shapes answers.
    pub(crate) options: &'a ReplyOptions,
    /// The most bytes a UDP answer may have (`None` on streams).
    pub(crate) limit: Option<usize>,
}

/// Answers `message` from `client`, received at `received`, under the current settings
/// snapshot, loaded once; `None` when the pipeline drops it (nothing may be sent). Counts the
/// response (or the drop) in the core's metrics.
pub(crate) async fn answer(
    worker: &Rc<Worker>,
    origin: Origin,
    message: &[u8],
    client: Client<'_>,
    received: Instant,
) -> Option<Vec<u8>> {
    let _active = Active::enter(worker.context());
    let mut out = Vec::with_capacity(512);
    let settings = worker.context().settings();
    match answer_now(
        worker, &settings, origin, message, client, received, &mut out,
    ) {
        Now::Answered => Some(out),
        Now::Dropped => None,
        Now::Miss(lookup) => {
            let settings = arc_swap::Guard::into_inner(settings);
            // Boxed: a miss's state (the upstream exchange, a cross-core lookup) would otherwise
            // widen every request's future, hits included, past the allocator's thread cache.
            Box::pin(answer_miss(
                worker, &settings, origin, message, lookup, client, received,
            ))
            .await
        }
    }
}

/// Where a one-message query came from, for the query log: its transport and peer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    /// The transport it arrived on.
    pub(crate) transport: Transport,
    /// The client's address and port.
    pub(crate) peer: SocketAddr,
}

impl Origin {
    /// Records the query's end in the core's query log (a branch when it is off).
    pub(crate) fn record(
        self,
        worker: &Worker,
        settings: &Settings,
        client: &Client<'_>,
        outcome: Outcome<'_>,
        query: &[u8],
        response: &[u8],
    ) {
        let log = &worker.context().querylog;
        if log.on() {
            log.record(
                crate::querylog::now_ns(),
                self.transport,
                self.peer,
                client,
                outcome,
                &settings.policy,
                query,
                response,
            );
        }
    }
}

/// How answers on the one-message transports (DoH, DoH3, DoQ) are shaped under `settings`:
/// padded when the query asks (RFC 8467), no TCP keepalive.
pub(crate) fn reply_options(settings: &Settings) -> ReplyOptions {
    ReplyOptions {
        payload: settings.edns_payload,
        tcp_keepalive: None,
        padding: true,
    }
}

/// What [`answer_now`] could do without waiting.
pub(crate) enum Now {
    /// The answer is in `out` (and counted).
    Answered,
    /// The pipeline dropped the query: send nothing (counted).
    Dropped,
    /// A cache miss on this core: [`answer_miss`] finishes it.
    Miss(Lookup),
}

/// The synchronous part of [`answer`] under `settings`, the query's snapshot: ingress, then a
/// hit on this core or a locally answered name, written to `out`. A connection loop calls it
/// inline and spawns a task only for a miss, which [`answer_miss`] finishes under the same
/// snapshot. `received`: when the transport took the query in (the caller's clock reading,
/// also the pipeline's `now`); the answer's latency counts from it.
pub(crate) fn answer_now(
    worker: &Worker,
    settings: &Settings,
    origin: Origin,
    message: &[u8],
    client: Client<'_>,
    received: Instant,
    out: &mut Vec<u8>,
) -> Now {
    let context = worker.context();
    let options = &reply_options(settings);
    let stage = Stage::new(settings, options, context.lameduck());
    let now = received;
    let decision = ingress(
        message,
        &stage,
        client,
        &mut context.limiter.borrow_mut(),
        now,
        out,
    );
    let to = Answering {
        settings,
        shard: context.shard(),
        client,
        options,
        limit: None,
    };
    let outcome = match decision {
        Decision::Respond => Outcome::LOCAL,
        // Transfers are served on TCP and DoT only (tcp.rs); refuse them here.
        Decision::Transfer { query, .. } => {
            wire::write_error(&query, wire::rcode::REFUSED, options, out);
            Outcome::LOCAL
        }
        Decision::Drop => {
            context.metrics.dropped();
            origin.record(worker, settings, &client, Outcome::DROPPED, message, &[]);
            return Now::Dropped;
        }
        Decision::Refused { answered } => {
            context.metrics.acl_refused(answered);
            if !answered {
                origin.record(worker, settings, &client, Outcome::DROPPED, message, &[]);
                return Now::Dropped;
            }
            Outcome::LOCAL
        }
        Decision::Blocked { blocked, answered } => {
            settings.policy.count(context.shard(), blocked);
            if !answered {
                context.metrics.dropped();
                let outcome = Outcome::policy(blocked, false);
                origin.record(worker, settings, &client, outcome, message, &[]);
                return Now::Dropped;
            }
            Outcome::policy(blocked, true)
        }
        Decision::Resolve(query) => {
            match worker.serve_local(query.key(), now, |answer| {
                Lookup::Own.write(&to, &query, answer, now, out)
            }) {
                Some(written) if written.sent() => written.outcome(Outcome::CACHE),
                Some(written) => {
                    context.metrics.dropped();
                    let outcome = written.outcome(Outcome::CACHE);
                    origin.record(worker, settings, &client, outcome, message, &[]);
                    return Now::Dropped;
                }
                None => return Now::Miss(Lookup::Own),
            }
        }
        // NOTIFY and UPDATE reach the control thread over UDP and TCP only (crate::inbox).
        Decision::Control(_) => {
            if !wire::write_header_error(message, wire::rcode::NOTIMP, out) {
                context.metrics.dropped();
                origin.record(worker, settings, &client, Outcome::DROPPED, message, &[]);
                return Now::Dropped;
            }
            Outcome::LOCAL
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
            let hit = worker.serve_local(&target, now, |answer| {
                lookup.write(&to, &query, answer, now, out)
            });
            if hit.is_none() {
                return Now::Miss(lookup);
            }
            Outcome::policy(blocked, true)
        }
    };
    let rcode = wire::header_rcode(out).unwrap_or(0);
    context.metrics.response(rcode);
    context.metrics.answered(
        origin.transport,
        AnswerSource::of(outcome.source, rcode),
        received.elapsed(),
    );
    origin.record(worker, settings, &client, outcome, message, out);
    Now::Answered
}

/// Resolves a query [`answer_now`] found missing on this core (it passed ingress there, under
/// `settings`, from `client`, received at `received`) and returns the counted answer; `None`
/// when nothing may be sent (CNAME cloaking reached an RPZ drop).
pub(crate) async fn answer_miss(
    worker: &Rc<Worker>,
    settings: &Arc<Settings>,
    origin: Origin,
    message: &[u8],
    lookup: Lookup,
    client: Client<'_>,
    received: Instant,
) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(512);
    let mut outcome = Outcome::LOCAL;
    let mut now = received;
    // Ingress accepted this message, so it parses.
    if let Ok(query) = Query::parse(message) {
        let started = Instant::now();
        let answer = worker.resolve(lookup.key(&query), settings).await;
        now = Instant::now();
        let options = reply_options(settings);
        let to = Answering {
            settings,
            shard: worker.context().shard(),
            client,
            options: &options,
            limit: None,
        };
        let written = lookup.write(&to, &query, &answer, now, &mut out);
        outcome = written.outcome(lookup.missed(&query, &answer, settings, started, now));
        if !written.sent() {
            worker.context().metrics.dropped();
            origin.record(worker, settings, &client, outcome, message, &[]);
            return None;
        }
    }
    let rcode = wire::header_rcode(&out).unwrap_or(0);
    let metrics = &worker.context().metrics;
    metrics.response(rcode);
    metrics.answered(
        origin.transport,
        AnswerSource::of(outcome.source, rcode),
        now.saturating_duration_since(received),
    );
    origin.record(worker, settings, &client, outcome, message, &out);
    Some(out)
}

/// Runs `request` here as far as it goes without waiting, and the rest in a task of its own,
/// queued behind the running one ([`spawn_queued`]), whose first poll takes over its wake-ups.
/// For a connection's accept loop: most requests arrive whole with their stream and are cache
/// hits, answered here with no task of their own; the transport's driver, woken by the write,
/// still sends every answer of the batch together once the loop waits.
///
/// A plain function, polling with a no-op waker: whatever the first poll registers is replaced
/// by the task's own waker when the task polls it again, which it does before anything could
/// have been missed (it re-reads the state it waits on). Not `async`: an `async fn` would keep
/// the request in its own future (the caller's) and move it once more into the box.
pub(crate) fn inline_or_queued(request: impl Future<Output = ()> + 'static) {
    let mut request = Box::pin(request);
    let mut cx = Context::from_waker(Waker::noop());
    if request.as_mut().poll(&mut cx).is_pending() {
        spawn_queued(request);
    }
}

/// Spawns a request's task behind the tasks already queued on this core, detached. glommio's
/// `spawn_local` runs a new task at once, inside its spawner: a connection loop that spawned
/// that way would answer, and its transport flush, request by request. Queued, the loop first
/// takes every request that has arrived, then they are answered, and one flush carries them
/// all.
pub(crate) fn spawn_queued(request: impl Future<Output = ()> + 'static) {
    let queue = glommio::executor().current_task_queue();
    // The running task's own queue always exists.
    if let Ok(task) = glommio::spawn_local_into(request, queue) {
        task.detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{IO_MEMORY_PER_CORE, RING_DEPTH};
    use glommio::channels::local_channel;
    use glommio::{LocalExecutorBuilder, Placement};
    use std::cell::Cell;
    use std::time::Duration;

    /// The query log's view of CNAME cloaking: a cache hit or an upstream answer that
    /// cloaking blocked is the policy's answer (or a drop), BLOCKED and CLOAKED, naming the
    /// policy and keeping the upstream that answered; an answer it let through is unchanged.
    #[test]
    fn cloaking_turns_an_answer_into_a_blocked_and_cloaked_policy_answer_or_drop() {
        use kudurru_core::querylog::flags;
        let blocked = Blocked {
            policy: 2,
            list: None,
        };
        let spec: kudurru_core::upstream::UpstreamSpec =
            "udp://192.0.2.53:53".parse().expect("an upstream URL");
        let upstream = Outcome::of(Source::Upstream).answered_by(&spec, 1500);
        let through = Written::Answer.outcome(upstream);
        assert_eq!((through.source, through.flags), (Source::Upstream, 0));
        let answered = Written::Cloaked(blocked).outcome(upstream);
        assert_eq!(answered.source, Source::Policy);
        assert_eq!(answered.flags, flags::BLOCKED | flags::CLOAKED);
        assert_eq!(answered.blocked, Some(blocked));
        assert_eq!(
            (answered.upstream, answered.latency_us),
            (Some(&spec), 1500)
        );
        let dropped = Written::Dropped(blocked).outcome(Outcome::CACHE);
        assert_eq!(dropped.source, Source::Dropped);
        assert_eq!(dropped.flags, flags::BLOCKED | flags::CLOAKED);
        assert!(!Written::Dropped(blocked).sent() && Written::Cloaked(blocked).sent());
    }

    /// A request that does not wait finishes inside the call; one that waits is finished by
    /// its own task, woken by what it waited on although its first poll saw a no-op waker.
    #[test]
    fn inline_or_queued_finishes_a_request_inline_or_in_its_own_task() {
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(IO_MEMORY_PER_CORE)
            .ring_depth(RING_DEPTH)
            .spawn(|| async {
                let done = Rc::new(Cell::new(0));
                let inline = done.clone();
                inline_or_queued(async move { inline.set(1) });
                assert_eq!(done.get(), 1, "a ready request runs inside the call");

                let (tx, rx) = local_channel::new_bounded::<u8>(1);
                let waiting = done.clone();
                inline_or_queued(async move {
                    if let Some(n) = rx.recv().await {
                        waiting.set(n);
                    }
                });
                assert_eq!(done.get(), 1, "the waiting request has not finished");
                // Its task is queued behind this one: let it take over its wake-ups first,
                // then once more after the send.
                glommio::timer::sleep(Duration::from_millis(5)).await;
                tx.send(2)
                    .await
                    .expect("the request's task holds the receiver");
                for _ in 0..100 {
                    if done.get() == 2 {
                        break;
                    }
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
                assert_eq!(done.get(), 2, "the queued request was never woken");
            })
            .expect("a glommio executor");
        executor.join().expect("executor thread");
    }
}
