//! Queries in flight on one flow (a UDP socket or a stream connection), keyed by message ID,
//! and the check of every reply against the query it claims to answer.
//!
//! IDs are handed out from a shuffled queue and go back to its end when freed, so an ID is
//! reused as late as possible: a reply that arrives after its query timed out is then almost
//! always an unknown ID, not a false match for a newer query. A reply must carry the ID of a
//! query in flight and its exact question (name case aside); anything else is counted as a
//! mismatch and leaves the query waiting.

use std::collections::VecDeque;

use crate::queries::{Asked, HEADER_LEN, QueryMix, Rng};

/// IDs per flow.
const IDS: usize = 1 << 16;

#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Bumped every time the ID is handed out; the timeout queue holds it to skip entries of
    /// queries already answered.
    generation: u32,
    busy: bool,
    /// When the query was due, in nanoseconds since the run's start: the intended send time
    /// in an open loop, the send itself in a closed loop.
    due_ns: u64,
    /// When it was actually sent (timeouts count from here).
    sent_ns: u64,
    asked: Asked,
}

/// What a received message turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The answer to a query in flight.
    Answered {
        /// The header RCODE (the low four bits; extended RCODEs are not decoded).
        rcode: u8,
        /// TC was set.
        truncated: bool,
        /// When its query was due.
        due_ns: u64,
        /// When its query was sent.
        sent_ns: u64,
        /// What it asked.
        asked: Asked,
    },
    /// No query in flight has this ID (a late reply after a timeout, or a stray).
    UnknownId,
    /// The ID is in flight but the question differs (or is missing).
    QuestionMismatch,
    /// Shorter than a header, or not a response (QR clear).
    Malformed,
}

/// The queries in flight on one flow.
#[derive(Debug)]
pub struct InFlight {
    slots: Box<[Slot]>,
    free: VecDeque<u16>,
    /// (ID, generation) in send order, for timeouts.
    order: VecDeque<(u16, u32)>,
    outstanding: usize,
}

impl InFlight {
    /// An empty table with its IDs shuffled by `rng`.
    pub fn new(rng: &mut Rng) -> Self {
        let mut ids: Vec<u16> = (0..=u16::MAX).collect();
        for i in (1..ids.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            ids.swap(i, j);
        }
        Self {
            slots: vec![
                Slot {
                    generation: 0,
                    busy: false,
                    due_ns: 0,
                    sent_ns: 0,
                    asked: Asked::Fixed(0),
                };
                IDS
            ]
            .into_boxed_slice(),
            free: ids.into(),
            order: VecDeque::new(),
            outstanding: 0,
        }
    }

    /// Queries waiting for a reply.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Registers a query about to be sent, due at `due_ns` and sent at `sent_ns`; its ID, or
    /// `None` when all 65536 are in flight.
    pub fn start(&mut self, asked: Asked, due_ns: u64, sent_ns: u64) -> Option<u16> {
        let id = self.free.pop_front()?;
        let slot = &mut self.slots[usize::from(id)];
        slot.generation = slot.generation.wrapping_add(1);
        slot.busy = true;
        slot.due_ns = due_ns;
        slot.sent_ns = sent_ns;
        slot.asked = asked;
        self.order.push_back((id, slot.generation));
        self.outstanding += 1;
        Some(id)
    }

    /// Takes back a query that was registered but could not be sent.
    pub fn cancel(&mut self, id: u16) {
        self.release(id);
    }

    fn release(&mut self, id: u16) {
        let slot = &mut self.slots[usize::from(id)];
        if slot.busy {
            slot.busy = false;
            self.outstanding -= 1;
            self.free.push_back(id);
        }
    }

    /// Checks `reply` against the queries in flight; an answer frees its query.
    pub fn finish(&mut self, reply: &[u8], mix: &QueryMix) -> Outcome {
        if reply.len() < HEADER_LEN || reply[2] & 0x80 == 0 {
            return Outcome::Malformed;
        }
        let id = u16::from_be_bytes([reply[0], reply[1]]);
        let slot = self.slots[usize::from(id)];
        if !slot.busy {
            return Outcome::UnknownId;
        }
        let qdcount = u16::from_be_bytes([reply[4], reply[5]]);
        if qdcount != 1 || mix.matches(slot.asked, &reply[HEADER_LEN..]).is_none() {
            return Outcome::QuestionMismatch;
        }
        self.release(id);
        Outcome::Answered {
            rcode: reply[3] & 0x0f,
            truncated: reply[2] & 0x02 != 0,
            due_ns: slot.due_ns,
            sent_ns: slot.sent_ns,
            asked: slot.asked,
        }
    }

    /// Gives up on queries sent at or before `now_ns - timeout_ns`; how many timed out.
    pub fn expire(&mut self, now_ns: u64, timeout_ns: u64) -> usize {
        let mut expired = 0;
        while let Some(&(id, generation)) = self.order.front() {
            let slot = self.slots[usize::from(id)];
            if slot.busy && slot.generation == generation {
                if slot.sent_ns.saturating_add(timeout_ns) > now_ns {
                    break;
                }
                self.release(id);
                expired += 1;
            }
            self.order.pop_front();
        }
        expired
    }

    /// When the oldest query in flight times out, if any is in flight.
    pub fn next_expiry(&mut self, timeout_ns: u64) -> Option<u64> {
        while let Some(&(id, generation)) = self.order.front() {
            let slot = self.slots[usize::from(id)];
            if slot.busy && slot.generation == generation {
                return Some(slot.sent_ns.saturating_add(timeout_ns));
            }
            self.order.pop_front();
        }
        None
    }

    /// Gives up on every query in flight (its connection is gone); how many there were.
    pub fn abandon_all(&mut self) -> usize {
        let lost = self.outstanding;
        while let Some((id, _)) = self.order.pop_front() {
            self.release(id);
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queries::{Shape, pool};

    fn mix() -> QueryMix {
        let shape = Shape {
            edns_payload: None,
            dnssec_ok: false,
        };
        QueryMix::new(pool("s.test", 4, "A").unwrap(), "s.test", "A", 0.0, shape).unwrap()
    }

    fn reply_to(mix: &QueryMix, asked: Asked, id: u16, rcode: u8) -> Vec<u8> {
        let mut out = Vec::new();
        mix.write_query(asked, id, &mut out);
        out[2] |= 0x80;
        out[3] = (out[3] & 0xf0) | rcode;
        out
    }

    #[test]
    fn an_answer_frees_its_id_once() {
        let mix = mix();
        let mut inflight = InFlight::new(&mut Rng::new(3));
        let id = inflight.start(Asked::Fixed(2), 500, 1_000).unwrap();
        assert_eq!(inflight.outstanding(), 1);
        let reply = reply_to(&mix, Asked::Fixed(2), id, 3);
        assert_eq!(
            inflight.finish(&reply, &mix),
            Outcome::Answered {
                rcode: 3,
                truncated: false,
                due_ns: 500,
                sent_ns: 1_000,
                asked: Asked::Fixed(2)
            }
        );
        assert_eq!(inflight.outstanding(), 0);
        assert_eq!(
            inflight.finish(&reply, &mix),
            Outcome::UnknownId,
            "a duplicate"
        );
    }

    #[test]
    fn mismatches_are_counted_and_the_query_keeps_waiting() {
        let mix = mix();
        let mut inflight = InFlight::new(&mut Rng::new(3));
        let id = inflight.start(Asked::Fixed(1), 0, 0).unwrap();
        let wrong_question = reply_to(&mix, Asked::Fixed(0), id, 0);
        assert_eq!(
            inflight.finish(&wrong_question, &mix),
            Outcome::QuestionMismatch
        );
        let wrong_id = reply_to(&mix, Asked::Fixed(1), id.wrapping_add(1), 0);
        assert_eq!(inflight.finish(&wrong_id, &mix), Outcome::UnknownId);
        let mut no_question = reply_to(&mix, Asked::Fixed(1), id, 0);
        no_question[5] = 0;
        assert_eq!(
            inflight.finish(&no_question, &mix),
            Outcome::QuestionMismatch
        );
        let mut query = reply_to(&mix, Asked::Fixed(1), id, 0);
        query[2] &= 0x7f;
        assert_eq!(inflight.finish(&query, &mix), Outcome::Malformed);
        assert_eq!(inflight.finish(&[0; 11], &mix), Outcome::Malformed);
        assert_eq!(inflight.outstanding(), 1);
        let good = reply_to(&mix, Asked::Fixed(1), id, 0);
        assert!(matches!(
            inflight.finish(&good, &mix),
            Outcome::Answered { .. }
        ));
    }

    #[test]
    fn expiry_skips_answered_queries_and_stops_at_the_first_young_one() {
        let mix = mix();
        let mut inflight = InFlight::new(&mut Rng::new(9));
        let a = inflight.start(Asked::Fixed(0), 100, 100).unwrap();
        let _b = inflight.start(Asked::Fixed(1), 200, 200).unwrap();
        let _c = inflight.start(Asked::Fixed(2), 300, 300).unwrap();
        inflight.finish(&reply_to(&mix, Asked::Fixed(0), a, 0), &mix);
        assert_eq!(inflight.next_expiry(50), Some(250));
        assert_eq!(inflight.expire(249, 50), 0);
        assert_eq!(inflight.expire(250, 50), 1);
        assert_eq!(inflight.outstanding(), 1);
        assert_eq!(inflight.abandon_all(), 1);
        assert_eq!(inflight.next_expiry(50), None);
    }

    #[test]
    fn ids_run_out_only_after_65536_and_are_reused_last() {
        let mut inflight = InFlight::new(&mut Rng::new(5));
        let ids: Vec<u16> = (0..IDS)
            .map(|_| inflight.start(Asked::Fixed(0), 0, 0).unwrap())
            .collect();
        assert_eq!(inflight.start(Asked::Fixed(0), 0, 0), None);
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), IDS, "every ID handed out once");
        assert!(
            ids[..16].windows(2).any(|w| w[1] != w[0].wrapping_add(1)),
            "shuffled"
        );
        inflight.cancel(ids[7]);
        inflight.cancel(ids[3]);
        assert_eq!(inflight.start(Asked::Fixed(0), 0, 0), Some(ids[7]));
        assert_eq!(inflight.start(Asked::Fixed(0), 0, 0), Some(ids[3]));
    }
}
