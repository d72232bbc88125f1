//! Operator commands to every core's cache (`kudurru cache flush | dump | stats`): the control
//! thread cannot touch a core's shard or L1, so it posts a command to each core's mailbox and
//! waits for one report per core.
//!
//! ```text
//! control thread (blocking pool)           core i (its own task, between queries)
//! CacheControl::run ─ push (command, reply) ─▶ mailbox i ─ wake ─▶ recv ─▶ shard + L1
//!       ◀──────────── (i, report) over a std sync_channel ─────────────────┘
//! ```
//! The mailbox's lock is held only to push or pop a command: never on the query path, and a
//! core never waits on it for the control thread (the pusher holds it for a `VecDeque` push).
//! A core that does not answer in time (stopping) is reported as `None`.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use kudurru_core::cache_control::{DumpEntry, NameScope};

/// What to do to every core's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheCommand {
    /// Remove the answers in scope from the shard and the L1.
    Flush(NameScope),
    /// Report sizes and counters.
    Stats,
    /// List the shard's answers (the owner's copies; L1 entries are copies of other shards'),
    /// at most `limit` per core.
    Dump {
        /// Most entries one core lists.
        limit: usize,
    },
}

/// One core's report on a [`CacheCommand`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheReport {
    /// Answers removed by a flush.
    Flushed {
        /// From the core's shard.
        shard: usize,
        /// From its L1.
        l1: usize,
    },
    /// Sizes and counters.
    Stats(CoreCacheStats),
    /// The shard's answers.
    Dump {
        /// At most the command's `limit`.
        entries: Vec<DumpEntry>,
        /// Answers the shard holds (more than `entries.len()` when the dump was cut).
        total: usize,
    },
}

/// One core's cache sizes and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CoreCacheStats {
    /// Answers in the shard.
    pub entries: usize,
    /// Answers the shard may hold.
    pub capacity: usize,
    /// Copies of other cores' answers in the L1.
    pub l1_entries: usize,
    /// Copies the L1 may hold.
    pub l1_capacity: usize,
    /// Hits, shard and L1.
    pub hits: u64,
    /// Misses of the shard (an L1 miss is counted at the owner).
    pub misses: u64,
}

type Reply = SyncSender<(usize, CacheReport)>;

/// Commands waiting, and the core's command task to wake when one arrives.
type Queue = (VecDeque<(CacheCommand, Reply)>, Option<Waker>);

/// One core's queue of commands.
#[derive(Default)]
pub(crate) struct Mailbox {
    inner: Mutex<Queue>,
}

impl Mailbox {
    fn push(&self, command: CacheCommand, reply: Reply) {
        let waker = {
            // A queue has no invariant a panicking holder could break.
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            inner.0.push_back((command, reply));
            inner.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The next command and where its report goes; the core's command task awaits it.
    pub(crate) fn recv(&self) -> impl Future<Output = (CacheCommand, Reply)> + '_ {
        std::future::poll_fn(move |cx| {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            match inner.0.pop_front() {
                Some(next) => Poll::Ready(next),
                None => {
                    inner.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }
}

/// The control thread's handle on every core's cache.
#[derive(Clone)]
pub struct CacheControl {
    mailboxes: Arc<[Arc<Mailbox>]>,
}

impl CacheControl {
    /// Mailboxes for `cores` cores.
    pub(crate) fn new(cores: usize) -> Self {
        Self {
            mailboxes: (0..cores).map(|_| Arc::new(Mailbox::default())).collect(),
        }
    }

    /// Core `index`'s mailbox.
    pub(crate) fn mailbox(&self, index: usize) -> Arc<Mailbox> {
        self.mailboxes[index].clone()
    }

    /// Runs `command` on every core and returns each core's report, `None` for a core that
    /// did not answer within `timeout`. Blocks the calling thread: call it from a blocking
    /// pool, never from a core.
    pub fn run(&self, command: &CacheCommand, timeout: Duration) -> Vec<Option<CacheReport>> {
        let cores = self.mailboxes.len();
        let (tx, rx): (Reply, Receiver<_>) = sync_channel(cores);
        for mailbox in self.mailboxes.iter() {
            mailbox.push(command.clone(), tx.clone());
        }
        drop(tx);
        let mut reports = vec![None; cores];
        let deadline = Instant::now() + timeout;
        for _ in 0..cores {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((core, report)) if core < cores => reports[core] = Some(report),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        reports
    }
}
