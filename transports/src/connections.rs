//! One core's table of client connections (TCP, DoT, DoH, DoQ, DoH3): who holds them and when
//! each last carried a query, so that no client can hold the core's connections hostage.
//!
//! ```text
//! accept ─▶ admit(client prefix) ─┬ over the client's own limit ─────────▶ refused (counted)
//!                                 ├ core full ─▶ close the longest-idle ─▶ admitted (counted)
//!                                 └ otherwise ──────────────────────────▶ admitted
//! connection task: touch() on every query; its Admission's drop frees the slot
//! ```
//!
//! Two rules, as Unbound's `tcp-connection-limit` per netblock and its adaptive TCP timeouts
//! do: a client prefix (the rate limiter's, `ratelimit.ipv4Prefix`/`ipv6Prefix`) holds at most
//! `tcp.maxConnectionsPerClient` stream or `quic.maxConnectionsPerClient` QUIC connections per
//! core; and a full core closes the connection that went longest without a query to admit a
//! new one, instead of refusing every newcomer while the table is held. Idleness is measured
//! in queries, not packets: keep-alives, PINGs and trickled bytes do not count.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use glommio::task::JoinHandle;
use kudurru_core::Prefix;

use crate::metrics::CoreMetrics;

/// Which per-client budget a connection counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    /// TCP, DoT and DoH (`tcp.maxConnectionsPerClient`).
    Stream,
    /// DoQ and DoH3 (`quic.maxConnectionsPerClient`).
    Quic,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The client prefix holds its limit of connections on this core.
    ClientLimit,
    /// The core is full and no connection could be closed for it (none has started yet).
    Full,
}

/// The limits an admission is checked against, from the settings snapshot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections per core, all families (`tcp.maxConnectionsPerCore`).
    pub(crate) per_core: usize,
    /// Connections per client prefix per core, this family.
    pub(crate) per_client: usize,
}

/// One core's connection table.
#[derive(Default)]
pub(crate) struct Connections {
    inner: RefCell<Inner>,
    /// When a refusal was last logged.
    last_logged: std::cell::Cell<Option<Instant>>,
    /// The core is draining for shutdown ([`crate::drain`]): every connection finishes what it
    /// read and closes.
    draining: std::cell::Cell<bool>,
}

#[derive(Default)]
struct Inner {
    slots: Vec<Slot>,
    free: Vec<usize>,
    open: usize,
    per_client: HashMap<(Family, Prefix), usize>,
}

struct Slot {
    /// Bumped each time the slot is freed, so a stale [`Admission`] cannot free it again.
    generation: u64,
    entry: Option<Entry>,
}

struct Entry {
    key: (Family, Prefix),
    last_query: Instant,
    /// The connection's task, cancelled to close it (dropping its socket or QUIC handle).
    task: Option<JoinHandle<()>>,
    /// The connection task waiting for the drain ([`Admission::poll_drain`]), woken when it
    /// starts. Kept in the entry so that it goes with the connection.
    drain_waker: Option<Waker>,
}

impl Connections {
    /// Starts the drain: every connection task waiting for it is woken.
    pub(crate) fn begin_drain(&self) {
        self.draining.set(true);
        let wakers: Vec<Waker> = self
            .inner
            .borrow_mut()
            .slots
            .iter_mut()
            .filter_map(|slot| slot.entry.as_mut()?.drain_waker.take())
            .collect();
        // Woken outside the borrow: a waker may run code that touches the table.
        for waker in wakers {
            waker.wake();
        }
    }

    /// Whether the core is draining.
    pub(crate) fn draining(&self) -> bool {
        self.draining.get()
    }

    /// Cuts every connection still open (the grace passed): their tasks are cancelled, which
    /// closes their sockets. Returns how many were cut.
    pub(crate) fn cut_all(&self) -> usize {
        let tasks: Vec<Option<JoinHandle<()>>> = {
            let mut inner = self.inner.borrow_mut();
            let open: Vec<usize> = inner
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, slot)| slot.entry.as_ref().map(|_| i))
                .collect();
            open.into_iter()
                .filter_map(|slot| inner.release(slot))
                .map(|entry| entry.task)
                .collect()
        };
        let cut = tasks.len();
        for task in tasks.into_iter().flatten() {
            task.cancel();
        }
        cut
    }

    /// Connections open on this core.
    pub(crate) fn open(&self) -> usize {
        self.inner.borrow().open
    }

    /// Whether a refusal at `now` is to be logged: at most one per `period` per core, so a
    /// flood of connections cannot flood the log (the counters count every one).
    pub(crate) fn should_log(&self, now: Instant, period: std::time::Duration) -> bool {
        if self
            .last_logged
            .get()
            .is_some_and(|at| now.saturating_duration_since(at) < period)
        {
            return false;
        }
        self.last_logged.set(Some(now));
        true
    }

    /// Admits a connection from `client` at `now`, or says why not; closes the longest-idle
    /// connection of the core first when the core is full.
    pub(crate) fn admit(
        self: &Rc<Self>,
        family: Family,
        client: Prefix,
        limits: Limits,
        now: Instant,
        metrics: &Arc<CoreMetrics>,
    ) -> Result<Admission, Refusal> {
        let mut inner = self.inner.borrow_mut();
        let key = (family, client);
        if inner.per_client.get(&key).copied().unwrap_or(0) >= limits.per_client {
            CoreMetrics::bump(&metrics.tcp_refused_per_client);
            return Err(Refusal::ClientLimit);
        }
        if inner.open >= limits.per_core {
            let Some(victim) = inner.longest_idle() else {
                CoreMetrics::bump(&metrics.tcp_refused);
                return Err(Refusal::Full);
            };
            let entry = inner.release(victim);
            if let Some(task) = entry.and_then(|e| e.task) {
                task.cancel();
            }
            CoreMetrics::bump(&metrics.tcp_evicted);
        }
        let slot = match inner.free.pop() {
            Some(slot) => slot,
            None => {
                inner.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                inner.slots.len() - 1
            }
        };
        inner.slots[slot].entry = Some(Entry {
            key,
            last_query: now,
            task: None,
            drain_waker: None,
        });
        inner.open += 1;
        *inner.per_client.entry(key).or_default() += 1;
        let generation = inner.slots[slot].generation;
        Ok(Admission {
            table: self.clone(),
            slot,
            generation,
        })
    }
}

impl Inner {
    /// The slot of the connection that went longest without a query, among those whose task
    /// has started (a connection still being set up cannot be closed from here).
    fn longest_idle(&self) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| slot.entry.as_ref().map(|entry| (i, entry)))
            .filter(|(_, entry)| entry.task.is_some())
            .min_by_key(|(_, entry)| entry.last_query)
            .map(|(i, _)| i)
    }

    /// Frees `slot`, returning its entry.
    fn release(&mut self, slot: usize) -> Option<Entry> {
        let entry = self.slots.get_mut(slot)?.entry.take()?;
        self.slots[slot].generation += 1;
        self.free.push(slot);
        self.open -= 1;
        if let Some(count) = self.per_client.get_mut(&entry.key) {
            *count -= 1;
            if *count == 0 {
                self.per_client.remove(&entry.key);
            }
        }
        Some(entry)
    }
}

/// A connection's place in the table, held by its task: dropping it (the connection ended,
/// or its task was cancelled) frees the place.
pub(crate) struct Admission {
    table: Rc<Connections>,
    slot: usize,
    generation: u64,
}

impl Admission {
    /// Records the connection's task, so that a full core can close it.
    pub(crate) fn set_task(&self, task: JoinHandle<()>) {
        if let Some(entry) = self.entry_mut(&mut self.table.inner.borrow_mut()) {
            entry.task = Some(task);
        }
    }

    /// Records a query on the connection at `now`: it is not idle.
    pub(crate) fn touch(&self, now: Instant) {
        if let Some(entry) = self.entry_mut(&mut self.table.inner.borrow_mut()) {
            entry.last_query = now;
        }
    }

    /// Ready once the core drains for shutdown; until then the task polling it is woken when
    /// the drain starts.
    pub(crate) fn poll_drain(&self, cx: &Context<'_>) -> Poll<()> {
        if self.table.draining.get() {
            return Poll::Ready(());
        }
        if let Some(entry) = self.entry_mut(&mut self.table.inner.borrow_mut()) {
            match &entry.drain_waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => entry.drain_waker = Some(cx.waker().clone()),
            }
        }
        Poll::Pending
    }

    /// Whether the core drains for shutdown.
    pub(crate) fn is_draining(&self) -> bool {
        self.table.draining.get()
    }

    /// Resolves once the core drains for shutdown.
    pub(crate) fn drained(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| self.poll_drain(cx))
    }

    fn entry_mut<'a>(&self, inner: &'a mut Inner) -> Option<&'a mut Entry> {
        let slot = inner.slots.get_mut(self.slot)?;
        if slot.generation != self.generation {
            return None;
        }
        slot.entry.as_mut()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut inner = self.table.inner.borrow_mut();
        if inner
            .slots
            .get(self.slot)
            .is_some_and(|slot| slot.generation == self.generation)
        {
            // Dropping the entry drops its task handle, which only detaches it.
            inner.release(self.slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn prefix(text: &str) -> Prefix {
        text.parse().expect("a test prefix")
    }

    const LIMITS: Limits = Limits {
        per_core: 3,
        per_client: 2,
    };

    #[test]
    fn a_client_prefix_gets_its_limit_and_no_more_and_a_freed_place_is_reused() {
        let table = Rc::new(Connections::default());
        let metrics = Arc::new(CoreMetrics::default());
        let now = Instant::now();
        let a = prefix("192.0.2.0/24");
        let first = table.admit(Family::Stream, a, LIMITS, now, &metrics);
        let second = table.admit(Family::Stream, a, LIMITS, now, &metrics);
        assert!(first.is_ok() && second.is_ok());
        assert_eq!(
            table.admit(Family::Stream, a, LIMITS, now, &metrics).err(),
            Some(Refusal::ClientLimit)
        );
        // The QUIC budget is its own.
        assert!(table.admit(Family::Quic, a, LIMITS, now, &metrics).is_ok());
        assert_eq!(
            table.open(),
            2,
            "the refused one and the dropped QUIC one hold nothing"
        );
        drop(first);
        assert_eq!(table.open(), 1);
        assert!(
            table
                .admit(Family::Stream, a, LIMITS, now, &metrics)
                .is_ok()
        );
        assert_eq!(
            metrics
                .tcp_refused_per_client
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }

    #[test]
    fn a_full_core_closes_the_connection_longest_without_a_query() {
        let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(crate::sys::IO_MEMORY_PER_CORE)
            .ring_depth(crate::sys::RING_DEPTH)
            .spawn(|| async {
                let table = Rc::new(Connections::default());
                let metrics = Arc::new(CoreMetrics::default());
                let start = Instant::now();
                let closed: Rc<RefCell<Vec<&str>>> = Rc::default();
                let mut held = Vec::new();
                for (name, client) in [
                    ("a", "192.0.2.0/24"),
                    ("b", "198.51.100.0/24"),
                    ("c", "203.0.113.0/24"),
                ] {
                    let admission = table
                        .admit(Family::Stream, prefix(client), LIMITS, start, &metrics)
                        .expect("room");
                    // A connection task that records its own end when cancelled.
                    struct OnDrop(&'static str, Rc<RefCell<Vec<&'static str>>>);
                    impl Drop for OnDrop {
                        fn drop(&mut self) {
                            self.1.borrow_mut().push(self.0);
                        }
                    }
                    let guard = OnDrop(name, closed.clone());
                    let task = glommio::spawn_local(async move {
                        let _guard = guard;
                        glommio::timer::sleep(Duration::from_secs(60)).await;
                    })
                    .detach();
                    admission.set_task(task);
                    held.push(admission);
                }
                // b and c carry queries later; a has been idle longest.
                held[1].touch(start + Duration::from_secs(2));
                held[2].touch(start + Duration::from_secs(1));
                let d = prefix("192.0.2.0/24");
                let newcomer = table
                    .admit(
                        Family::Stream,
                        d,
                        LIMITS,
                        start + Duration::from_secs(3),
                        &metrics,
                    )
                    .expect("a full core makes room");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                assert_eq!(
                    *closed.borrow(),
                    ["a"],
                    "the longest-idle connection was closed"
                );
                assert_eq!(table.open(), 3);
                assert_eq!(
                    metrics
                        .tcp_evicted
                        .load(std::sync::atomic::Ordering::Relaxed),
                    1
                );
                // The evicted connection's own admission, dropped late, frees nothing twice.
                drop(held.remove(0));
                assert_eq!(table.open(), 3);
                drop(newcomer);
                assert_eq!(table.open(), 2);
            })
            .expect("a glommio executor");
        executor.join().expect("executor thread");
    }

    /// The drain wakes the tasks waiting for it (a connection that ended took its waker
    /// with it); what is still open at the grace is cut and counted once.
    #[test]
    fn the_drain_wakes_each_connection_and_the_cut_closes_what_is_left() {
        let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(crate::sys::IO_MEMORY_PER_CORE)
            .ring_depth(crate::sys::RING_DEPTH)
            .spawn(|| async move {
                let table = Rc::new(Connections::default());
                let metrics = Arc::new(CoreMetrics::default());
                let now = Instant::now();
                let a = prefix("192.0.2.0/24");
                let limits = Limits {
                    per_core: 8,
                    per_client: 8,
                };
                let seen = Rc::new(std::cell::Cell::new(0));
                let mut held = Vec::new();
                for stubborn in [false, false, true] {
                    let admission = Rc::new(
                        table
                            .admit(Family::Stream, a, limits, now, &metrics)
                            .expect("room"),
                    );
                    let (mine, seen) = (admission.clone(), seen.clone());
                    let task = glommio::spawn_local(async move {
                        mine.drained().await;
                        seen.set(seen.get() + 1);
                        if stubborn {
                            // Ignores the drain: only the cut ends it.
                            glommio::timer::sleep(Duration::from_secs(60)).await;
                        }
                        drop(mine);
                    })
                    .detach();
                    admission.set_task(task);
                    held.push(admission);
                }
                drop(held);
                glommio::timer::sleep(Duration::from_millis(10)).await;
                assert_eq!(seen.get(), 0, "nothing drains before the drain");
                assert!(!table.draining());
                table.begin_drain();
                glommio::timer::sleep(Duration::from_millis(10)).await;
                assert_eq!(seen.get(), 3, "each waiting connection saw the drain");
                assert_eq!(table.open(), 1, "two closed by themselves");
                assert_eq!(table.cut_all(), 1, "the stubborn one is cut");
                assert_eq!(table.open(), 0);
                assert_eq!(table.cut_all(), 0, "nothing is cut twice");
            })
            .expect("a glommio executor");
        executor.join().expect("executor thread");
    }
}
