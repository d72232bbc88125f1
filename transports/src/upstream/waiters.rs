//! The queries waiting on one upstream socket or connection, by the message ID each was sent
//! with: the UDP sockets ([`super::udp`]) and the TCP connections ([`super::tcp`]) hand every
//! reply to the query registered under its ID, which validates it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use smallvec::SmallVec;

/// Replies buffered per waiting query (a spoofed reply with a guessed ID must not crowd out the
/// genuine one).
const REPLIES_PER_QUERY: usize = 4;
/// A registered query's mailbox, kept in its socket's table under the query's ID: a slot in
/// the table rather than a channel per query (two allocations per cache miss).
#[derive(Default)]
struct Waiting {
    replies: SmallVec<[Vec<u8>; REPLIES_PER_QUERY]>,
    waker: Option<Waker>,
}

impl Waiting {
    /// Queues a reply unless [`REPLIES_PER_QUERY`] already wait, and wakes the query.
    fn deliver(&mut self, reply: Vec<u8>) {
        if self.replies.len() < REPLIES_PER_QUERY {
            self.replies.push(reply);
        }
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// The queries waiting on one socket or connection, by the message ID each was sent with.
/// Keyed by IDs kudurru chose at random: a fast hash is enough (a reply's ID is only looked up).
#[derive(Clone, Default)]
pub(crate) struct Waiters(Rc<RefCell<HashMap<u16, Waiting, foldhash::fast::RandomState>>>);

impl Waiters {
    /// Registers a query under a random ID no other waiting query has.
    pub(crate) fn register(&self) -> Registration {
        let mut waiters = self.0.borrow_mut();
        let mut id: u16 = rand::random();
        while waiters.contains_key(&id) {
            id = rand::random();
        }
        waiters.insert(id, Waiting::default());
        Registration {
            waiters: self.clone(),
            id,
        }
    }

    /// Hands `reply` to the query waiting for its ID; `false` when none does (a mismatched
    /// reply).
    pub(crate) fn deliver(&self, reply: &[u8]) -> bool {
        kudurru_core::wire::message_id(reply).is_some_and(|id| {
            self.0
                .borrow_mut()
                .get_mut(&id)
                .map(|waiting| waiting.deliver(reply.to_vec()))
                .is_some()
        })
    }

    /// Hands `reply` to the query registered with `id`, whatever ID the reply carries (a
    /// transport that matches replies by its own means: DoH streams); `false` when none waits.
    pub(crate) fn deliver_to(&self, id: u16, reply: Vec<u8>) -> bool {
        self.0
            .borrow_mut()
            .get_mut(&id)
            .map(|waiting| waiting.deliver(reply))
            .is_some()
    }

    /// Every waiting query gets an empty reply: the upstream is unreachable (an ICMP error on a
    /// connected socket concerns it as a whole) or the connection ended, so they fail over now,
    /// not at their timeouts.
    pub(crate) fn fail_all(&self) {
        for waiting in self.0.borrow_mut().values_mut() {
            waiting.deliver(Vec::new());
        }
    }

    /// Whether no query waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.borrow().is_empty()
    }
}

/// A query registered in a [`Waiters`] table; dropping it unregisters.
pub(crate) struct Registration {
    waiters: Waiters,
    id: u16,
}

impl Registration {
    /// The ID the query must carry.
    pub(crate) fn id(&self) -> u16 {
        self.id
    }

    /// The next reply carrying this ID (the caller validates it); an empty reply means the
    /// upstream is unreachable or the connection ended.
    pub(crate) async fn reply(&self) -> Vec<u8> {
        poll_fn(|cx| {
            let mut waiters = self.waiters.0.borrow_mut();
            // The slot lives as long as the registration: only its drop removes it.
            let waiting = waiters.entry(self.id).or_default();
            if waiting.replies.is_empty() {
                waiting.waker = Some(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(waiting.replies.remove(0))
            }
        })
        .await
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.waiters.0.borrow_mut().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    fn reply_with_id(id: u16, tag: u8) -> Vec<u8> {
        let mut m = id.to_be_bytes().to_vec();
        m.extend_from_slice(&[0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, tag]);
        m
    }

    #[test]
    fn replies_reach_the_query_with_their_id_and_no_other() {
        let waiters = Waiters::default();
        let a = waiters.register();
        let b = waiters.register();
        assert_ne!(a.id(), b.id());
        assert!(waiters.deliver(&reply_with_id(b.id(), 1)));
        assert!(waiters.deliver(&reply_with_id(a.id(), 2)));
        assert_eq!(block_on(a.reply()), reply_with_id(a.id(), 2));
        assert_eq!(block_on(b.reply()), reply_with_id(b.id(), 1));
        // An ID nobody waits for, and a datagram too short to carry one.
        let unused = (0..=u16::MAX)
            .find(|id| *id != a.id() && *id != b.id())
            .unwrap();
        assert!(!waiters.deliver(&reply_with_id(unused, 3)));
        assert!(!waiters.deliver(&[0x12]));
    }

    #[test]
    fn a_query_keeps_at_most_four_replies_and_fails_over_on_fail_all() {
        let waiters = Waiters::default();
        let a = waiters.register();
        for tag in 0..6 {
            waiters.deliver(&reply_with_id(a.id(), tag));
        }
        for tag in 0..REPLIES_PER_QUERY as u8 {
            assert_eq!(block_on(a.reply()), reply_with_id(a.id(), tag));
        }
        waiters.fail_all();
        assert!(
            block_on(a.reply()).is_empty(),
            "an empty reply: failed over"
        );
    }

    #[test]
    fn dropping_a_registration_unregisters_its_id() {
        let waiters = Waiters::default();
        let a = waiters.register();
        let id = a.id();
        assert!(!waiters.is_empty());
        drop(a);
        assert!(waiters.is_empty());
        assert!(!waiters.deliver(&reply_with_id(id, 0)));
    }
}
