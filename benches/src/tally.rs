//! Counts and latencies of one flow, merged per core and then for the whole run, and the live
//! counters the progress line reads.

use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;

use crate::inflight::Outcome;

/// Highest latency the histogram records exactly, in nanoseconds (longer ones saturate).
pub const LATENCY_MAX_NS: u64 = 3_600 * 1_000_000_000;
/// Significant digits of recorded latencies.
const LATENCY_DIGITS: u8 = 3;

/// Why a query got no answer, other than a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The kernel refused the datagram or the write (buffer full, unreachable, reset).
    Send,
    /// A stream connection could not be opened.
    Connect,
    /// The TLS handshake failed (certificate not trusted, no common protocol) or timed out.
    Tls,
    /// The connection closed with the query in flight.
    Closed,
    /// All 65536 IDs of the flow were in flight (open loop against a slow target).
    IdsExhausted,
    /// The query was due but its connection was down or had `--streams` in flight (open loop).
    Backlog,
}

impl ErrorKind {
    /// Every kind, in report order.
    pub const ALL: [Self; 6] = [
        Self::Send,
        Self::Connect,
        Self::Tls,
        Self::Closed,
        Self::IdsExhausted,
        Self::Backlog,
    ];

    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Connect => "connect",
            Self::Tls => "tls",
            Self::Closed => "closed",
            Self::IdsExhausted => "ids-exhausted",
            Self::Backlog => "backlog",
        }
    }
}

/// Counts of one flow, core or run.
#[derive(Debug, Clone)]
pub struct Tally {
    /// Queries written to the network.
    pub sent: u64,
    /// Of those, fresh (cache-miss) names.
    pub fresh: u64,
    /// Replies matched to their query.
    pub answered: u64,
    /// Answers by header RCODE.
    pub rcodes: [u64; 16],
    /// Answers with TC set.
    pub truncated: u64,
    /// Queries given up after `--timeout`.
    pub timeouts: u64,
    /// Queries lost otherwise, by [`ErrorKind`] (index of [`ErrorKind::ALL`]).
    pub errors: [u64; ErrorKind::ALL.len()],
    /// Replies with an ID not in flight.
    pub unknown_id: u64,
    /// Replies with the right ID and another question.
    pub question_mismatch: u64,
    /// Messages that were not DNS responses.
    pub malformed: u64,
    /// Latency of answers from when their query was due, in nanoseconds (in an open loop this
    /// includes any delay in sending: no coordinated omission).
    pub latency: Histogram<u64>,
    /// Latency of answers from when their query was actually sent, in nanoseconds (what
    /// dnsperf reports).
    pub service: Histogram<u64>,
    /// How long the flows sent, in nanoseconds since the start (the longest of them).
    pub sending_ns: u64,
    /// DoH requests that got no answer, by HTTP status (0: stream reset or connection error);
    /// those queries also count as timeouts.
    pub http_failures: std::collections::BTreeMap<u16, u64>,
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

fn histogram() -> Histogram<u64> {
    // The bounds are constants that satisfy the crate's preconditions.
    Histogram::new_with_bounds(1, LATENCY_MAX_NS, LATENCY_DIGITS).expect("valid histogram bounds")
}

impl Tally {
    /// All zero.
    pub fn new() -> Self {
        Self {
            sent: 0,
            fresh: 0,
            answered: 0,
            rcodes: [0; 16],
            truncated: 0,
            timeouts: 0,
            errors: [0; ErrorKind::ALL.len()],
            unknown_id: 0,
            question_mismatch: 0,
            malformed: 0,
            latency: histogram(),
            service: histogram(),
            sending_ns: 0,
            http_failures: std::collections::BTreeMap::new(),
        }
    }

    /// Counts an error of `kind`.
    pub fn error(&mut self, kind: ErrorKind, count: u64) {
        self.errors[kind as usize] += count;
    }

    /// Counts what a received message was; `now_ns` is when it arrived.
    pub fn record(&mut self, outcome: Outcome, now_ns: u64) {
        match outcome {
            Outcome::Answered {
                rcode,
                truncated,
                due_ns,
                sent_ns,
                ..
            } => {
                self.answered += 1;
                self.rcodes[usize::from(rcode & 0x0f)] += 1;
                self.truncated += u64::from(truncated);
                self.latency
                    .saturating_record(now_ns.saturating_sub(due_ns).max(1));
                self.service
                    .saturating_record(now_ns.saturating_sub(sent_ns).max(1));
            }
            Outcome::UnknownId => self.unknown_id += 1,
            Outcome::QuestionMismatch => self.question_mismatch += 1,
            Outcome::Malformed => self.malformed += 1,
        }
    }

    /// Adds `other` into this tally.
    pub fn merge(&mut self, other: &Self) {
        self.sent += other.sent;
        self.fresh += other.fresh;
        self.answered += other.answered;
        for (a, b) in self.rcodes.iter_mut().zip(other.rcodes) {
            *a += b;
        }
        self.truncated += other.truncated;
        self.timeouts += other.timeouts;
        for (a, b) in self.errors.iter_mut().zip(other.errors) {
            *a += b;
        }
        self.unknown_id += other.unknown_id;
        self.question_mismatch += other.question_mismatch;
        self.malformed += other.malformed;
        self.sending_ns = self.sending_ns.max(other.sending_ns);
        for (status, n) in &other.http_failures {
            *self.http_failures.entry(*status).or_default() += n;
        }
        // Same bounds on both sides, so adding cannot fail.
        self.latency
            .add(&other.latency)
            .expect("histograms with equal bounds");
        self.service
            .add(&other.service)
            .expect("histograms with equal bounds");
    }

    /// Errors of every kind.
    pub fn error_total(&self) -> u64 {
        self.errors.iter().sum()
    }
}

/// Live totals of one core for the progress line, updated by its flows as they go.
#[derive(Debug, Default)]
pub struct Progress {
    /// Queries sent.
    pub sent: AtomicU64,
    /// Answers matched.
    pub answered: AtomicU64,
    /// Timeouts and errors.
    pub failed: AtomicU64,
}

impl Progress {
    /// Adds to a counter (only the owning core writes; readers tolerate lag).
    pub fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Current (sent, answered, failed).
    pub fn read(&self) -> (u64, u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.answered.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queries::Asked;

    #[test]
    fn record_and_merge() {
        let mut a = Tally::new();
        a.sent = 3;
        a.record(
            Outcome::Answered {
                rcode: 3,
                truncated: true,
                due_ns: 1_000,
                sent_ns: 11_000,
                asked: Asked::Fixed(0),
            },
            51_000,
        );
        a.record(Outcome::UnknownId, 0);
        a.record(Outcome::QuestionMismatch, 0);
        a.record(Outcome::Malformed, 0);
        a.error(ErrorKind::Closed, 2);
        let mut b = Tally::new();
        b.sent = 1;
        b.timeouts = 1;
        b.merge(&a);
        assert_eq!((b.sent, b.answered, b.timeouts), (4, 1, 1));
        assert_eq!((b.rcodes[3], b.truncated), (1, 1));
        assert_eq!((b.unknown_id, b.question_mismatch, b.malformed), (1, 1, 1));
        assert_eq!(b.errors[ErrorKind::Closed as usize], 2);
        assert_eq!(b.error_total(), 2);
        assert_eq!(b.latency.len(), 1);
        assert!(b.latency.equivalent(b.latency.max(), 50_000));
        assert!(b.service.equivalent(b.service.max(), 40_000));
    }
}
