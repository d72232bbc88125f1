//! The only module with `unsafe`: socket setup that std and glommio do not expose.
//!
//! Sockets are created and bound here with socket2 (SO_REUSEPORT, IPV6_V6ONLY, buffer sizes),
//! then handed to glommio by file descriptor: glommio 0.9 is built on socket2 0.4, so the
//! `From<socket2::Socket>` conversions do not accept our socket2 0.6 sockets.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use socket2::{Domain, Protocol, Socket, Type};

/// Kernel receive buffer asked for on UDP listeners (the kernel caps it at `net.core.rmem_max`).
const UDP_RECV_BUFFER: usize = 4 << 20;
/// Listen backlog for TCP listeners.
const TCP_BACKLOG: i32 = 1024;

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
/// that set SO_REUSEPORT itself) fails with `AddrInUse` instead of silently sharing traffic.
/// Port 0 resolves to one ephemeral port shared by all the sockets.
pub fn bind_reuseport(
    addr: SocketAddr,
    kind: SocketKind,
    count: usize,
) -> io::Result<(SocketAddr, Vec<OwnedFd>)> {
    let probe = new_socket(addr, kind)?;
    if kind == SocketKind::Tcp {
        probe.set_reuse_address(true)?;
    }
    probe.bind(&addr.into())?;
    let bound = probe.local_addr()?.as_socket().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "listener is not an IP socket")
    })?;
    drop(probe);
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
