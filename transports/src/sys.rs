//! The only module with `unsafe`: socket setup that std and glommio do not expose.
//!
//! Sockets are created and bound here with socket2 (SO_REUSEPORT, IPV6_V6ONLY, buffer sizes),
//! then handed to glommio by file descriptor: glommio 0.9 is built on socket2 0.4, so the
//! `From<socket2::Socket>` conversions do not accept our socket2 0.6 sockets. The io_uring sizes
//! every executor is built with live here too, beside the RLIMIT_MEMLOCK they count against.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

/// Kernel receive buffer asked for on UDP listeners (the kernel caps it at `net.core.rmem_max`).
const UDP_RECV_BUFFER: usize = 4 << 20;
/// Listen backlog for TCP listeners.
const TCP_BACKLOG: i32 = 1024;
/// How long a listener address found in use is tried again before startup fails. A kudurru
/// that has just exited can still hold its sockets for a few milliseconds: the kernel releases
/// a socket that io_uring requests still reference in the ring's teardown, which runs after
/// the process is gone. A restart (stop, then start at once) hit that window in 2 of 10 tries
/// here without the retry.
pub const BIND_RETRY: Duration = Duration::from_secs(2);
/// Pause between two tries within [`BIND_RETRY`].
const BIND_RETRY_INTERVAL: Duration = Duration::from_millis(20);

/// Which kind of listening socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketKind {
    /// Datagram.
    Udp,
    /// Stream.
    Tcp,
}

fn new_socket(addr: SocketAddr, kind: SocketKind) -> io::Result<Socket> {
    let domain = Domain::for_address(addr);
    let socket = match kind {
        SocketKind::Udp => Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?,
        SocketKind::Tcp => Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?,
    };
    if addr.is_ipv6() {
        // One socket per family: `[::]` must not also claim the IPv4 port.
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    Ok(socket)
}

/// Binds `count` SO_REUSEPORT sockets of `kind` on `addr`, one per core.
///
/// A probe bind without SO_REUSEPORT comes first, so a port held by any other process (even one
/// that set SO_REUSEPORT itself) fails with `AddrInUse` instead of silently sharing traffic;
/// it is tried again for up to [`BIND_RETRY`] first. Port 0 resolves to one ephemeral port
/// shared by all the sockets.
pub fn bind_reuseport(
    addr: SocketAddr,
    kind: SocketKind,
    count: usize,
) -> io::Result<(SocketAddr, Vec<OwnedFd>)> {
    let bound = probe_bind(addr, kind)?;
    let mut fds = Vec::with_capacity(count);
    for _ in 0..count {
        let socket = new_socket(bound, kind)?;
        socket.set_reuse_port(true)?;
        match kind {
            SocketKind::Udp => {
                // Best effort: a smaller buffer only means earlier drops under bursts.
                let _ = socket.set_recv_buffer_size(UDP_RECV_BUFFER);
            }
            SocketKind::Tcp => {
                socket.set_reuse_address(true)?;
                socket.set_tcp_nodelay(true)?;
            }
        }
        socket.bind(&bound.into())?;
        if kind == SocketKind::Tcp {
            socket.listen(TCP_BACKLOG)?;
        }
        fds.push(OwnedFd::from(socket));
    }
    Ok((bound, fds))
}

/// Binds and drops a socket without SO_REUSEPORT on `addr`: the address it got. `AddrInUse` is
/// tried again every [`BIND_RETRY_INTERVAL`] until [`BIND_RETRY`] has passed.
fn probe_bind(addr: SocketAddr, kind: SocketKind) -> io::Result<SocketAddr> {
    let deadline = Instant::now() + BIND_RETRY;
    loop {
        let probe = new_socket(addr, kind)?;
        if kind == SocketKind::Tcp {
            probe.set_reuse_address(true)?;
        }
        match probe.bind(&addr.into()) {
            Ok(()) => {
                return probe.local_addr()?.as_socket().ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "listener is not an IP socket")
                });
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                drop(probe);
                std::thread::sleep(BIND_RETRY_INTERVAL);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Attaches a classic-BPF reuseport program (SO_ATTACH_REUSEPORT_CBPF) to the SO_REUSEPORT
/// group `fd` belongs to; it replaces any program attached before.
pub fn attach_reuseport_program(fd: RawFd, program: &[crate::steering::Insn]) -> io::Result<()> {
    let mut filters: Vec<libc::sock_filter> = program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let len = u16::try_from(filters.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        filter: filters.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `filters`, alive for the call; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&raw const fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Wraps a bound UDP socket for the current glommio executor.
pub fn glommio_udp(fd: OwnedFd) -> glommio::net::UdpSocket {
    // SAFETY: `fd` is an owned, open, bound UDP socket; ownership moves into glommio.
    unsafe { glommio::net::UdpSocket::from_raw_fd(fd.into_raw_fd()) }
}

/// Wraps a listening TCP socket for the current glommio executor.
pub fn glommio_tcp_listener(fd: OwnedFd) -> glommio::net::TcpListener {
    // SAFETY: `fd` is an owned, open, listening TCP socket; ownership moves into glommio.
    unsafe { glommio::net::TcpListener::from_raw_fd(fd.into_raw_fd()) }
}

/// Memory glommio registers for I/O per core. Small on purpose: with SO_REUSEPORT sockets the
/// data path mostly bypasses these buffers, and registration counts against RLIMIT_MEMLOCK.
pub const IO_MEMORY_PER_CORE: usize = 1 << 20;
/// Submission queue entries per io_uring ring (glommio makes three rings per core).
pub const RING_DEPTH: usize = 256;

/// The soft RLIMIT_MEMLOCK in bytes (`None` when unlimited).
pub fn memlock_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and has no other effect.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    if rc != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(limit.rlim_cur)
}

/// The number of CPUs this process may run on.
pub fn available_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size matches the set we pass.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    }
    // SAFETY: CPU_ISSET reads the set filled above, for indices below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Datagrams moved per `recvmmsg`/`sendmmsg` call.
pub const BATCH: usize = 32;
/// Largest client datagram accepted on the batched path; longer ones are dropped (no DNS query
/// over UDP is legitimately longer than the 4096-byte EDNS maximum).
pub const DATAGRAM_MAX: usize = 4096;

/// Fixed buffers and headers for `recvmmsg` / `sendmmsg` on one socket, reused for every batch.
///
/// The raw `mmsghdr`s point into the boxed buffers of the same struct; they are rebuilt before
/// each call, so moving the struct never leaves a dangling pointer in use.
pub struct MmsgBatch {
    bufs: Box<[[u8; DATAGRAM_MAX]]>,
    lens: [usize; BATCH],
    addrs: Box<[libc::sockaddr_storage]>,
    iovs: Box<[libc::iovec]>,
    msgs: Box<[libc::mmsghdr]>,
    count: usize,
}

impl Default for MmsgBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl MmsgBatch {
    /// Empty buffers for [`BATCH`] datagrams.
    pub fn new() -> Self {
        Self {
            bufs: vec![[0u8; DATAGRAM_MAX]; BATCH].into_boxed_slice(),
            lens: [0; BATCH],
            addrs: zeroed_slice(),
            iovs: zeroed_slice(),
            msgs: zeroed_slice(),
            count: 0,
        }
    }

    fn prepare(&mut self, n: usize, receiving: bool) {
        for i in 0..n {
            let len = if receiving {
                DATAGRAM_MAX
            } else {
                self.lens[i]
            };
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i].as_mut_ptr().cast(),
                iov_len: len,
            };
            let hdr = &mut self.msgs[i].msg_hdr;
            hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            if receiving {
                hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            }
            hdr.msg_iov = &mut self.iovs[i];
            hdr.msg_iovlen = 1;
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
            hdr.msg_flags = 0;
            self.msgs[i].msg_len = 0;
        }
    }

    /// Receives up to [`BATCH`] datagrams without blocking; `Ok(0)` when none is queued.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.prepare(BATCH, true);
        // SAFETY: `msgs` holds BATCH headers pointing at this struct's live buffers.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(err),
            };
        }
        self.count = n as usize;
        for i in 0..self.count {
            self.lens[i] = self.msgs[i].msg_len as usize;
        }
        Ok(self.count)
    }

    /// Datagram `i` of the last [`Self::recv`]: its bytes (`None` if it was longer than
    /// [`DATAGRAM_MAX`]) and its source.
    pub fn datagram(&self, i: usize) -> (Option<&[u8]>, Option<SocketAddr>) {
        let truncated = self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let bytes = (!truncated).then(|| &self.bufs[i][..self.lens[i]]);
        (
            bytes,
            sockaddr_to_std(&self.addrs[i], self.msgs[i].msg_hdr.msg_namelen),
        )
    }

    /// Number of replies queued for [`Self::send`].
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no reply is queued.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether another reply fits in this batch.
    pub fn is_full(&self) -> bool {
        self.count == BATCH
    }

    /// Queues a reply to `to`; the caller checks [`Self::is_full`] first. Replies longer than
    /// [`DATAGRAM_MAX`] are not queued (callers truncate to the client's limit first).
    pub fn push(&mut self, reply: &[u8], to: SocketAddr) {
        if reply.len() > DATAGRAM_MAX || self.count == BATCH {
            return;
        }
        let i = self.count;
        self.bufs[i][..reply.len()].copy_from_slice(reply);
        self.lens[i] = reply.len();
        let (storage, len) = std_to_sockaddr(to);
        self.addrs[i] = storage;
        self.msgs[i].msg_hdr.msg_namelen = len;
        self.count += 1;
    }

    /// Sends the queued replies without blocking; returns how many were sent (the rest stay
    /// queued from index [`Self::sent`] on, for the caller to send the slow way).
    pub fn send(&mut self, fd: RawFd) -> usize {
        let n = self.count;
        self.prepare(n, false);
        let mut sent = 0;
        while sent < n {
            // SAFETY: the first `n` headers point at this struct's live reply buffers.
            let rc = unsafe {
                libc::sendmmsg(
                    fd,
                    self.msgs.as_mut_ptr().add(sent),
                    (n - sent) as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if rc <= 0 {
                break;
            }
            sent += rc as usize;
        }
        sent
    }

    /// Reply `i` of the queue (for sending the rest the slow way).
    pub fn queued(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        (
            &self.bufs[i][..self.lens[i]],
            sockaddr_to_std(&self.addrs[i], self.msgs[i].msg_hdr.msg_namelen),
        )
    }

    /// Empties the queue.
    pub fn clear(&mut self) {
        self.count = 0;
    }
}

/// Datagrams [`try_recv_some`] takes in one call at most.
pub const RECV_SOME_MAX: usize = 4;

/// Receives up to `lens.len()` datagrams (at most [`RECV_SOME_MAX`]) without waiting, with one
/// `recvmmsg`: datagram `i` lands in the `i`th of `lens.len()` equal slices of `buf` and its
/// length in `lens[i]`. Returns how many arrived, 0 when the socket is empty; fewer than asked
/// for means the call emptied the socket. On a connected socket an ICMP error the kernel queued
/// is returned as `Err` when no datagram precedes it.
pub fn try_recv_some(fd: RawFd, buf: &mut [u8], lens: &mut [usize]) -> io::Result<usize> {
    let slots = lens.len().min(RECV_SOME_MAX);
    if slots == 0 {
        return Ok(0);
    }
    let chunk = buf.len() / slots;
    // SAFETY: all-zero `iovec`s and `mmsghdr`s are valid (null pointers, zero lengths).
    let mut iovs: [libc::iovec; RECV_SOME_MAX] = unsafe { std::mem::zeroed() };
    let mut msgs: [libc::mmsghdr; RECV_SOME_MAX] = unsafe { std::mem::zeroed() };
    for (i, piece) in buf.chunks_exact_mut(chunk).take(slots).enumerate() {
        iovs[i].iov_base = piece.as_mut_ptr().cast();
        iovs[i].iov_len = chunk;
        msgs[i].msg_hdr.msg_iov = &mut iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    loop {
        // SAFETY: the first `slots` headers point at live slices of `buf`, each `chunk` long.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                slots as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n >= 0 {
            let n = n as usize;
            for (len, msg) in lens.iter_mut().zip(&msgs).take(n) {
                *len = msg.msg_len as usize;
            }
            return Ok(n);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Sends one datagram without blocking, to `to` or (with `None`) to the connected peer.
/// `Ok(None)` when the socket buffer is full: the caller waits the slow way. On the hot paths
/// this replaces glommio's `send_to`, whose future (650 bytes) made every task that awaited it
/// too large for the allocator's thread cache; glommio's own first attempt is this same call.
pub fn try_send(fd: RawFd, datagram: &[u8], to: Option<SocketAddr>) -> io::Result<Option<usize>> {
    let addr = to.map(std_to_sockaddr);
    let (name, len) = match &addr {
        Some((storage, len)) => ((storage as *const libc::sockaddr_storage).cast(), *len),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: `datagram` and the optional address are valid for the call's duration; a null
    // address with length 0 sends to the connected peer.
    let rc = unsafe {
        libc::sendto(
            fd,
            datagram.as_ptr().cast(),
            datagram.len(),
            libc::MSG_DONTWAIT,
            name,
            len,
        )
    };
    if rc >= 0 {
        return Ok(Some(rc as usize));
    }
    let err = io::Error::last_os_error();
    match err.kind() {
        io::ErrorKind::WouldBlock => Ok(None),
        _ => Err(err),
    }
}

/// [`BATCH`] all-zero values of a C struct.
fn zeroed_slice<T>() -> Box<[T]> {
    // SAFETY: only instantiated with sockaddr_storage, iovec and mmsghdr, for which all-zero is a
    // valid value (null pointers, zero lengths); they are filled in before every system call.
    (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect()
}

fn sockaddr_to_std(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    // SAFETY: `storage` holds `len` initialised bytes of a socket address written by the kernel
    // (or by `std_to_sockaddr`); SockAddr checks the family before converting.
    let addr = unsafe {
        socket2::SockAddr::new(
            std::ptr::read((storage as *const libc::sockaddr_storage).cast()),
            len,
        )
    };
    addr.as_socket()
}

fn std_to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let sock = socket2::SockAddr::from(addr);
    // SAFETY: SockAddr's storage is a sockaddr_storage of `len()` valid bytes.
    let storage = unsafe { std::ptr::read(sock.as_ptr().cast::<libc::sockaddr_storage>()) };
    (storage, sock.len())
}

/// Waits until one of `fds` is readable or `timeout` passes (nanosecond resolution, `ppoll`);
/// sets `ready[i]` to whether `fds[i]` is readable (or has an error to report) and returns how
/// many are. For callers that block their thread on purpose, such as the load generator's UDP
/// loop: a glommio wait would add its reactor's wake-up delay.
///
/// # Panics
///
/// If `ready` is shorter than `fds`.
pub fn poll_readable(fds: &[RawFd], timeout: Duration, ready: &mut [bool]) -> io::Result<usize> {
    assert!(ready.len() >= fds.len(), "one ready flag per descriptor");
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let spec = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `polled` holds `fds.len()` initialised pollfds and `spec` a valid timespec; both
    // outlive the call; a null signal mask keeps the current one.
    let rc = unsafe {
        libc::ppoll(
            polled.as_mut_ptr(),
            polled.len() as libc::nfds_t,
            &spec,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        return if err.kind() == io::ErrorKind::Interrupted {
            ready[..fds.len()].fill(false);
            Ok(0)
        } else {
            Err(err)
        };
    }
    for (ready, polled) in ready.iter_mut().zip(&polled) {
        *ready = polled.revents != 0;
    }
    Ok(rc as usize)
}

/// Allocations of this size and more are mapped on their own and unmapped when freed.
const MMAP_THRESHOLD: libc::c_int = 1 << 20;

/// Sets glibc's mmap threshold to a fixed 1 MiB (`M_MMAP_THRESHOLD`; glibc otherwise raises it
/// up to 32 MiB after a large block is freed): a block list's arrays and bodies (megabytes, and
/// replaced whole on every refresh) are then mapped and unmapped on their own, so refreshes do
/// not leave holes in an arena's heap that keep its pages resident. Call once, before threads
/// start. A no-op with other allocators.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` takes two integers and only changes glibc's own parameters; called
    // before other threads exist, it races with no allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// Gives the allocator's free memory back to the kernel (glibc's `malloc_trim`, over every
/// arena): after a large transient allocation on the control thread (a block list's parse, a
/// million small rules freed at once), free pages would otherwise stay resident in the arena of
/// the blocking thread that made them. A no-op with other allocators.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointers; it only walks glibc's own arenas under their
    // locks and may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`), how late the kernel may fire
/// its timers to batch wake-ups (50 µs by default): a load generator wants its sends on time.
pub fn set_timer_slack(nanoseconds: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only changes this thread.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, nanoseconds as libc::c_ulong) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    #[test]
    fn poll_readable_names_the_sockets_with_data() {
        let quiet = UdpSocket::bind("127.0.0.1:0").unwrap();
        let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fds = [quiet.as_raw_fd(), busy.as_raw_fd()];
        let mut ready = [true, true];
        // Nothing sent yet: the timeout passes and neither is readable.
        let n = poll_readable(&fds, Duration::from_millis(1), &mut ready).unwrap();
        assert_eq!((n, ready), (0, [false, false]));
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.send_to(b"x", busy.local_addr().unwrap()).unwrap();
        let n = poll_readable(&fds, Duration::from_secs(5), &mut ready).unwrap();
        assert_eq!((n, ready), (1, [false, true]));
    }

    #[test]
    fn try_recv_some_takes_what_is_queued_in_order_and_says_when_it_emptied_the_socket() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let upstream = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.connect(upstream.local_addr().unwrap()).unwrap();
        let (mut buf, mut lens) = (vec![0u8; 4 * 64], [0usize; 4]);
        // Empty: nothing, no error.
        assert_eq!(
            try_recv_some(socket.as_raw_fd(), &mut buf, &mut lens).unwrap(),
            0
        );
        for i in 0..6u8 {
            let datagram = vec![i; 10 + usize::from(i)];
            upstream
                .send_to(&datagram, socket.local_addr().unwrap())
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(20)); // loopback delivery
        let n = try_recv_some(socket.as_raw_fd(), &mut buf, &mut lens).unwrap();
        assert_eq!(n, 4, "a full batch");
        for i in 0..4 {
            assert_eq!(lens[i], 10 + i, "datagram {i}'s length");
            assert!(buf[i * 64..i * 64 + lens[i]].iter().all(|&b| b == i as u8));
        }
        // The rest: a short batch, which means the socket is empty now.
        let n = try_recv_some(socket.as_raw_fd(), &mut buf, &mut lens).unwrap();
        assert_eq!((n, &lens[..2]), (2, &[14, 15][..]));
        assert_eq!(buf[64], 5);
        assert_eq!(
            try_recv_some(socket.as_raw_fd(), &mut buf, &mut lens).unwrap(),
            0
        );
        // A connected socket whose peer is gone: the ICMP error comes back as an error.
        let gone = upstream.local_addr().unwrap();
        drop(upstream);
        socket.send(b"anyone?").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let e = try_recv_some(socket.as_raw_fd(), &mut buf, &mut lens).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "to {gone}");
    }
}
