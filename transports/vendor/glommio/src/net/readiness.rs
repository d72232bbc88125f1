// kudurru patch: readability events of a socket from one multishot poll.

use crate::{reactor::Reactor, sys::Source};
use std::{
    cell::{Cell, RefCell},
    io,
    os::unix::io::RawFd,
    rc::Weak,
    task::{Context, Poll},
};

/// Readability events of one socket from a poll armed once (`IORING_POLL_ADD_MULTI`, Linux
/// 5.13): the kernel posts a completion each time data (or an error) arrives on the socket,
/// and a wait submits nothing. When the kernel ends the poll (a completion without
/// `IORING_CQE_F_MORE`: an error, a full completion queue), the next wait arms a new one; a
/// kernel that refuses the flag (`EINVAL`) gets a one-shot poll per wait from then on.
///
/// A wait returns once for all the events posted since the last one returned, so the caller
/// reads until it knows the socket is empty before it waits again, and may find the socket
/// empty after a wait (the event of data it had already read). Dropping it cancels the poll.
#[derive(Debug)]
pub struct Readiness {
    reactor: Weak<Reactor>,
    fd: RawFd,
    source: RefCell<Option<Source>>,
    multishot: Cell<bool>,
}

impl Readiness {
    pub(crate) fn new(reactor: Weak<Reactor>, fd: RawFd) -> Self {
        Self {
            reactor,
            fd,
            source: RefCell::new(None),
            multishot: Cell::new(true),
        }
    }

    /// Waits until the socket had a readability event since the last wait returned (or, the
    /// first time, until it is readable).
    pub async fn wait(&self) -> io::Result<()> {
        futures_lite::future::poll_fn(|cx| self.poll_wait(cx)).await
    }

    /// Ready when the socket had a readability event since the last call that returned ready
    /// (or, the first time, if it is readable when the poll is armed); the waker of the latest
    /// call is the one woken.
    pub(crate) fn poll_wait(&self, cx: &Context<'_>) -> Poll<io::Result<()>> {
        let mut slot = self.source.borrow_mut();
        loop {
            if slot.is_none() {
                let reactor = self.reactor.upgrade().unwrap();
                *slot = Some(reactor.poll_read_events(self.fd, self.multishot.get()));
            }
            let source = slot.as_ref().unwrap();
            match source.take_result() {
                Some(Ok(_)) => {
                    if !source.is_pending() {
                        // The poll ended (one-shot, or the kernel ended it): re-armed next wait.
                        *slot = None;
                    }
                    return Poll::Ready(Ok(()));
                }
                Some(Err(e)) => {
                    *slot = None;
                    if e.raw_os_error() == Some(libc::EINVAL) && self.multishot.get() {
                        // A kernel before 5.13: one-shot polls from now on.
                        self.multishot.set(false);
                        continue;
                    }
                    return Poll::Ready(Err(e));
                }
                None if !source.is_pending() => {
                    *slot = None;
                }
                None => {
                    source.add_waiter_single(cx.waker());
                    return Poll::Pending;
                }
            }
        }
    }
}
