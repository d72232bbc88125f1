//! Deadlines for the futures of every layer: [`until`] an instant, [`within`] a duration. Both
//! poll the future first and arm a glommio timer only when it has to wait, so a future that is
//! ready at once (most on the hot paths) costs no timer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Runs `future` until `deadline`; `None` when the deadline passed first. A future that is
/// ready at once arms no timer: on the hot paths (the next request already read, a body
/// already buffered) that is most of them.
pub(crate) fn until<F: Future>(
    deadline: Instant,
    future: F,
) -> Bounded<F, impl FnOnce() -> Duration> {
    Bounded::new(future, move || {
        deadline.saturating_duration_since(Instant::now())
    })
}

/// Runs `future` for at most `timeout`; `None` when it ran out first. Like [`until`], but the
/// clock is read only when the future has to wait: for the per-request deadlines of the
/// stream transports, which are mostly met at the first poll.
pub(crate) fn within<F: Future>(
    timeout: Duration,
    future: F,
) -> Bounded<F, impl FnOnce() -> Duration> {
    Bounded::new(future, move || timeout)
}

pin_project_lite::pin_project! {
    /// [`until`] and [`within`]: polls the future first and arms a timer of `left()` only when
    /// the future has to wait.
    ///
    /// Written out rather than as an `async fn`: an async wrapper keeps its argument and its
    /// pinned copy side by side in its state, so every level of `until` doubled the size of
    /// the future inside it (the UDP cache-miss task was 2.9 KB, past the allocator's
    /// thread cache, and each miss paid for a large allocation).
    pub(crate) struct Bounded<F, L> {
        #[pin]
        future: F,
        left: Option<L>,
        timer: Option<glommio::timer::Timer>,
    }
}

impl<F, L> Bounded<F, L> {
    fn new(future: F, left: L) -> Self {
        Self {
            future,
            left: Some(left),
            timer: None,
        }
    }
}

impl<F: Future, L: FnOnce() -> Duration> Future for Bounded<F, L> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(done) = this.future.poll(cx) {
            return Poll::Ready(Some(done));
        }
        let timer = match this.timer {
            Some(timer) => timer,
            None => {
                let left = this.left.take().map_or(Duration::ZERO, |left| left());
                this.timer.insert(glommio::timer::Timer::new(left))
            }
        };
        match Pin::new(timer).poll(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
