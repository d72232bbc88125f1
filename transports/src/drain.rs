//! One core's shutdown drain: the signal its connection tasks watch, the count of requests each
//! connection still owes an answer, and the grace cut-off.
//!
//! ```text
//! stop raised (after shutdown.drainDelay in lameduck) ─▶ listener tasks cancelled: no accept
//!   ─▶ Drain::begin ─▶ every connection task sees it:
//!        TCP, DoT      stop reading; answer what was read; close
//!        DoH HTTP/2    GOAWAY(last stream id); answer the streams below it; close
//!        DoH HTTP/1.1  the response in progress carries `Connection: close`; close
//!        DoQ           accept no stream; answer the open ones; CONNECTION_CLOSE(DOQ_NO_ERROR)
//!        DoH3          GOAWAY(next stream id) on the control stream; answer the open
//!                      requests; CONNECTION_CLOSE(H3_NO_ERROR)
//!        UDP           the queries already read are answered (their tasks hold the socket)
//!   ─▶ the core waits until no connection is open and no query in flight, at most
//!      server.shutdownGrace ─▶ what is left is cut: tasks cancelled, counted
//!      (kudurru_shutdown_connections_cut_total), logged
//! ```
//!
//! The counts the core waits on are the connection table's ([`crate::connections`]) and the
//! in-flight queries ([`crate::core_context::Active`]); this module adds the signal and, per
//! connection, [`Requests`]: the answers it still owes, so a QUIC connection knows when its last
//! stream is done.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use crate::core_context::CoreContext;

/// How often the drain looks at the counts (they change as tasks end; a check is two loads).
const DRAIN_CHECK: Duration = Duration::from_millis(5);

/// What a core's drain left behind when the grace ran out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cut {
    /// Connections still open, cut.
    pub(crate) connections: usize,
    /// Queries still being resolved (any transport), abandoned.
    pub(crate) queries: usize,
}

/// Drains the core: signals every connection ([`crate::connections::Connections::begin_drain`]),
/// waits until none is open and no query is in flight, at most `grace`, then cuts what is
/// left, counts it and logs it. The listeners must be closed first.
pub(crate) async fn drain(context: &CoreContext, grace: Duration) -> Cut {
    context.connections.begin_drain();
    let deadline = Instant::now() + grace;
    while (context.connections.open() > 0 || context.active() > 0) && Instant::now() < deadline {
        glommio::timer::sleep(DRAIN_CHECK).await;
    }
    let cut = Cut {
        queries: context.active(),
        connections: context.connections.cut_all(),
    };
    if cut != Cut::default() {
        let metrics = &context.metrics;
        metrics
            .shutdown_connections_cut
            .fetch_add(cut.connections as u64, Relaxed);
        metrics
            .shutdown_queries_abandoned
            .fetch_add(cut.queries as u64, Relaxed);
        tracing::warn!(
            core = context.shard(),
            connections_cut = cut.connections,
            queries_abandoned = cut.queries,
            grace = ?grace,
            "shutdown grace passed: connections cut at grace"
        );
    }
    cut
}

/// The requests one connection has accepted and not yet answered (its streams, for QUIC).
#[derive(Default)]
pub(crate) struct Requests {
    open: Cell<usize>,
    waiter: Cell<Option<Waker>>,
}

impl Requests {
    /// Counts a request as open while the returned guard lives.
    pub(crate) fn enter(self: &Rc<Self>) -> Request {
        self.open.set(self.open.get() + 1);
        Request(self.clone())
    }

    /// Resolves once no request is open.
    pub(crate) fn done(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.open.get() == 0 {
                return Poll::Ready(());
            }
            self.waiter.set(Some(cx.waker().clone()));
            Poll::Pending
        })
    }
}

/// One open request of a connection ([`Requests::enter`]); dropping it closes it.
pub(crate) struct Request(Rc<Requests>);

impl Drop for Request {
    fn drop(&mut self) {
        let open = self.0.open.get().saturating_sub(1);
        self.0.open.set(open);
        if open == 0
            && let Some(waker) = self.0.waiter.take()
        {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Context;

    struct Count(Arc<AtomicUsize>);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn requests_are_done_when_the_last_guard_drops() {
        let requests = Rc::new(Requests::default());
        let woken = Arc::new(AtomicUsize::new(0));
        let waker = Waker::from(Arc::new(Count(woken.clone())));
        let mut cx = Context::from_waker(&waker);
        let (a, b) = (requests.enter(), requests.enter());
        let mut done = Box::pin(requests.done());
        assert!(done.as_mut().poll(&mut cx).is_pending());
        drop(a);
        assert_eq!(woken.load(Ordering::SeqCst), 0, "one request is still open");
        drop(b);
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        assert!(done.as_mut().poll(&mut cx).is_ready());
    }
}
