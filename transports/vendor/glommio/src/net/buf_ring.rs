// kudurru patch: multishot receives into a ring of provided buffers.

use crate::{reactor::Reactor, sys::Source};
use std::{
    cell::{Cell, RefCell},
    collections::VecDeque,
    io,
    os::unix::io::RawFd,
    ptr::NonNull,
    rc::{Rc, Weak},
    sync::atomic::{AtomicU16, Ordering},
    task::{Context, Poll},
};

/// `IORING_CQE_F_BUFFER`: the completion names a buffer, its ID in the high 16 bits.
const CQE_F_BUFFER: u32 = 1;
const CQE_BUFFER_SHIFT: u32 = 16;
/// `struct io_uring_buf`: 16 bytes per entry; the ring's tail overlays the first entry's last two.
const ENTRY_SIZE: usize = 16;
const TAIL_OFFSET: usize = 14;

/// A ring of buffers provided to the kernel (`IORING_REGISTER_PBUF_RING`, Linux 5.19) on the
/// executor's main ring: a multishot receive ([`MultiRecv`]) takes one per datagram, and the
/// datagram's completion names it; it returns to the ring once its datagram was handled.
/// Shared by any number of sockets of one executor. Dropping the last handle unregisters it.
#[derive(Debug, Clone)]
pub struct BufRing {
    inner: Rc<BufRingInner>,
}

#[derive(Debug)]
struct BufRingInner {
    reactor: Weak<Reactor>,
    group: u16,
    /// The `io_uring_buf` entries, page-aligned (an anonymous mapping).
    ring: NonNull<u8>,
    ring_bytes: usize,
    mask: u16,
    tail: Cell<u16>,
    /// `entries * size` bytes that only the kernel (while a buffer is in the ring) or the
    /// completion's handler (after) touches, through raw pointers.
    buffers: NonNull<u8>,
    size: usize,
    entries: usize,
}

impl BufRing {
    /// Registers `entries` (a power of two, at most 32768) buffers of `size` bytes with the
    /// current executor. Fails with the kernel's error where it has no provided-buffer rings
    /// (`EINVAL` before 5.19).
    pub fn new(entries: u16, size: usize) -> io::Result<Self> {
        if !entries.is_power_of_two() || entries > 32768 || size == 0 || size > u32::MAX as usize
        {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let reactor = crate::executor().reactor();
        let ring_bytes = (usize::from(entries) * ENTRY_SIZE).max(page_size());
        let ring = map(ring_bytes)?;
        let buffers_bytes = usize::from(entries) * size;
        let buffers = match map(buffers_bytes) {
            Ok(b) => b,
            Err(e) => {
                unsafe { libc::munmap(ring.as_ptr().cast(), ring_bytes) };
                return Err(e);
            }
        };
        let group = reactor.next_buf_group();
        let inner = BufRingInner {
            reactor: Rc::downgrade(&reactor),
            group,
            ring,
            ring_bytes,
            mask: entries - 1,
            tail: Cell::new(0),
            buffers,
            size,
            entries: usize::from(entries),
        };
        // Dropping `inner` from here on unmaps both (and unregisters: harmless if never done).
        reactor
            .sys
            .register_buf_ring(ring.as_ptr() as u64, u32::from(entries), group)?;
        for bid in 0..entries {
            inner.provide(bid);
        }
        Ok(Self {
            inner: Rc::new(inner),
        })
    }

    /// The size of each buffer: a longer datagram arrives cut to it.
    pub fn buffer_size(&self) -> usize {
        self.inner.size
    }

    pub(crate) fn group(&self) -> u16 {
        self.inner.group
    }

    /// The first `len` bytes of buffer `bid`, which the kernel filled and handed over.
    ///
    /// # Safety
    /// `bid` came from a completion of this ring and has not been provided again.
    unsafe fn filled(&self, bid: u16, len: usize) -> &[u8] {
        let start = usize::from(bid) * self.inner.size;
        std::slice::from_raw_parts(
            self.inner.buffers.as_ptr().add(start),
            len.min(self.inner.size),
        )
    }

    /// Hands buffer `bid` back to the kernel.
    pub(crate) fn recycle(&self, bid: u16) {
        if usize::from(bid) < self.inner.entries {
            self.inner.provide(bid);
        }
    }
}

impl BufRingInner {
    fn provide(&self, bid: u16) {
        let tail = self.tail.get();
        let slot = usize::from(tail & self.mask) * ENTRY_SIZE;
        unsafe {
            let entry = self.ring.as_ptr().add(slot);
            let addr = self.buffers.as_ptr().add(usize::from(bid) * self.size) as u64;
            entry.cast::<u64>().write(addr);
            entry.add(8).cast::<u32>().write(self.size as u32);
            entry.add(12).cast::<u16>().write(bid);
            // The entry is written before the kernel can see the tail that covers it.
            let tail_at = &*self.ring.as_ptr().add(TAIL_OFFSET).cast::<AtomicU16>();
            tail_at.store(tail.wrapping_add(1), Ordering::Release);
        }
        self.tail.set(tail.wrapping_add(1));
    }
}

impl Drop for BufRingInner {
    fn drop(&mut self) {
        // Every receive that used the ring held a handle: none is armed any more.
        if let Some(reactor) = self.reactor.upgrade() {
            let _ = reactor.sys.unregister_buf_ring(self.group);
        }
        unsafe {
            libc::munmap(self.ring.as_ptr().cast(), self.ring_bytes);
            libc::munmap(self.buffers.as_ptr().cast(), self.entries * self.size);
        }
    }
}

fn page_size() -> usize {
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

fn map(bytes: usize) -> io::Result<NonNull<u8>> {
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(ptr.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

/// The completions of one multishot receive, kept in its source until read. Buffers of
/// completions nobody read (the receive was dropped with datagrams pending) go back to the
/// ring when the source goes.
#[derive(Debug)]
pub(crate) struct RecvQueue {
    completions: VecDeque<(i32, u32)>,
    ring: BufRing,
}

impl RecvQueue {
    pub(crate) fn new(ring: BufRing) -> Self {
        Self {
            completions: VecDeque::new(),
            ring,
        }
    }

    pub(crate) fn push(&mut self, result: i32, flags: u32) {
        self.completions.push_back((result, flags));
    }

    pub(crate) fn group(&self) -> u16 {
        self.ring.group()
    }

    pub(crate) fn pop(&mut self) -> Option<(i32, u32)> {
        self.completions.pop_front()
    }
}

impl Drop for RecvQueue {
    fn drop(&mut self) {
        for (_, flags) in self.completions.drain(..) {
            if flags & CQE_F_BUFFER != 0 {
                self.ring.recycle((flags >> CQE_BUFFER_SHIFT) as u16);
            }
        }
    }
}

/// Datagrams of one socket from a receive armed once (`IORING_OP_RECV` with
/// `IORING_RECV_MULTISHOT` and a [`BufRing`], Linux 6.0): the kernel copies each datagram
/// into a buffer of the ring as it arrives and posts a completion, so reading it takes no
/// system call. When the kernel ends the receive (an error such as an ICMP error on a
/// connected socket, no free buffer, a full completion queue) the next call arms a new one.
/// Dropping it cancels the receive.
#[derive(Debug)]
pub struct MultiRecv {
    reactor: Weak<Reactor>,
    fd: RawFd,
    ring: BufRing,
    source: RefCell<Option<Source>>,
    /// An error that came after datagrams, returned by the next call.
    deferred: Cell<Option<i32>>,
}

impl MultiRecv {
    pub(crate) fn new(reactor: Weak<Reactor>, fd: RawFd, ring: BufRing) -> Self {
        Self {
            reactor,
            fd,
            ring,
            source: RefCell::new(None),
            deferred: Cell::new(None),
        }
    }

    /// Waits for datagrams, then hands each one that arrived since the last call to `f`, in
    /// order, and returns how many. An error the kernel reported for the socket is returned
    /// after the datagrams that came before it; the call after it arms a new receive.
    /// `EINVAL` means the kernel has no multishot receive (before 6.0).
    pub async fn recv_with(&self, mut f: impl FnMut(&[u8])) -> io::Result<usize> {
        futures_lite::future::poll_fn(|cx| self.poll_recv_with(cx, &mut f)).await
    }

    fn poll_recv_with(
        &self,
        cx: &Context<'_>,
        f: &mut impl FnMut(&[u8]),
    ) -> Poll<io::Result<usize>> {
        if let Some(errno) = self.deferred.take() {
            return Poll::Ready(Err(io::Error::from_raw_os_error(errno)));
        }
        let mut slot = self.source.borrow_mut();
        loop {
            if slot.is_none() {
                let reactor = self.reactor.upgrade().ok_or_else(|| {
                    io::Error::new(io::ErrorKind::Other, "the executor is gone")
                })?;
                *slot = Some(reactor.recv_multishot(self.fd, RecvQueue::new(self.ring.clone())));
            }
            let source = slot.as_ref().unwrap();
            let mut received = 0;
            let mut error = None;
            let mut out_of_buffers = false;
            // One completion at a time: `f` runs with the source not borrowed.
            while let Some((result, flags)) = source.recv_queue_pop() {
                if flags & CQE_F_BUFFER != 0 {
                    let bid = (flags >> CQE_BUFFER_SHIFT) as u16;
                    if let Ok(len) = usize::try_from(result) {
                        f(unsafe { self.ring.filled(bid, len) });
                        received += 1;
                    }
                    self.ring.recycle(bid);
                } else if result == -libc::ENOBUFS {
                    // Every buffer was taken: the datagram waits in the socket.
                    out_of_buffers = true;
                } else if result < 0 && error.is_none() {
                    error = Some(-result);
                }
            }
            source.take_result();
            let ended = !source.is_pending();
            if !ended && error.is_none() && received == 0 && !out_of_buffers {
                source.add_waiter_single(cx.waker());
                return Poll::Pending;
            }
            if ended {
                *slot = None;
            }
            if let Some(errno) = error {
                if received == 0 {
                    return Poll::Ready(Err(io::Error::from_raw_os_error(errno)));
                }
                // The datagrams that came before it first.
                self.deferred.set(Some(errno));
                return Poll::Ready(Ok(received));
            }
            if received > 0 {
                return Poll::Ready(Ok(received));
            }
            // The receive ended, or ran out of buffers (they are back in the ring now): arm
            // a new one.
            *slot = None;
        }
    }
}
