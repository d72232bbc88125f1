//! `kudurru-echo`: the benchmark ceiling and the benchmark upstream.
//!
//! A single-threaded UDP responder with batched `recvmmsg`/`sendmmsg` (64 datagrams per call),
//! and with `--tcp` a single-threaded `epoll` TCP responder on the same port that answers every
//! whole frame of a read with one write.
//! `--mode echo` only flips QR and RA and sends the query back: nothing a DNS server can do is
//! cheaper, so its CPU per answer is the ceiling a server is compared against. `--mode answer`
//! also appends `A 192.0.2.1` (TTL `--ttl`, owner compressed to the question) after dropping any
//! OPT record: a minimal authoritative upstream that answers every name, for forwarder benchmarks.
//!
//! `--glommio` serves UDP from a glommio executor instead of a blocking loop, waiting the way a
//! kudurru core's listener does at light load (a multishot poll on the main ring, then
//! non-blocking `recvmmsg`/`sendmmsg` until the socket is empty) and doing nothing else: the
//! least a server on glommio pays per wake-up, the floor between the blocking ceiling and
//! kudurru (`ab.py` names it `glommio-floor`).

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};

const BATCH: usize = 64;
const MAX_DATAGRAM: usize = 1500;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Flip QR/RA and echo.
    Echo,
    /// Answer every A query with 192.0.2.1.
    Answer,
}

/// Batched UDP echo responder (benchmark ceiling) and minimal answering upstream.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on (loopback only in benchmarks).
    #[arg(long, default_value = "127.0.0.1:5400")]
    listen: SocketAddr,
    /// What to send back.
    #[arg(long, value_enum, default_value = "echo")]
    mode: Mode,
    /// TTL of the answer record in `answer` mode.
    #[arg(long, default_value_t = 3600)]
    ttl: u32,
    /// Also answer over TCP on the same port (one `epoll` thread for every connection): the TCP
    /// ceiling in `echo` mode, and an upstream for forwarders that send TCP queries upstream,
    /// such as dnsdist for TCP clients, in `answer` mode.
    #[arg(long)]
    tcp: bool,
    /// Serve UDP from a glommio executor (sized as a kudurru core's) that sleeps on a multishot
    /// poll when the socket is empty, instead of a blocking `recvmmsg`.
    #[arg(long)]
    glommio: bool,
}

/// Bytes read from a TCP connection at once; also the output a connection may hold.
const TCP_BUFFER: usize = 64 * 1024;

/// One client connection of the TCP side.
struct TcpConnection {
    stream: std::net::TcpStream,
    /// Bytes read and not yet framed.
    input: Vec<u8>,
    /// Framed replies not yet written.
    output: Vec<u8>,
}

/// The TCP side, on a thread of its own: one `epoll` loop over the listener and every
/// connection, each read drained of every whole frame and all of its replies written with one
/// `write` — the least a TCP DNS server can do per read, so its CPU per answer is the TCP
/// ceiling. A connection that sends a frame over `MAX_DATAGRAM` bytes or fails is closed.
fn serve_tcp(listen: SocketAddr, mode: Mode, ttl: u32) -> Result<()> {
    let listener =
        std::net::TcpListener::bind(listen).with_context(|| format!("binding tcp {listen}"))?;
    listener.set_nonblocking(true)?;
    // SAFETY: epoll_create1 has no memory arguments; the descriptor is checked below.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epoll < 0 {
        bail!("epoll_create1: {}", std::io::Error::last_os_error());
    }
    epoll_add(epoll, listener.as_raw_fd(), u64::MAX)?;
    std::thread::spawn(move || tcp_loop(epoll, listener, mode, ttl));
    Ok(())
}

fn epoll_add(epoll: i32, fd: i32, token: u64) -> Result<()> {
    let mut event = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: token,
    };
    // SAFETY: `event` is a valid epoll_event for the duration of the call.
    if unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) } < 0 {
        bail!("epoll_ctl: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

fn tcp_loop(epoll: i32, listener: std::net::TcpListener, mode: Mode, ttl: u32) {
    use std::io::{ErrorKind, Read};
    let mut connections: Vec<Option<TcpConnection>> = Vec::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
    let mut chunk = vec![0u8; TCP_BUFFER];
    loop {
        // SAFETY: `events` has room for the 64 events asked for.
        let n = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), 64, -1) };
        if n < 0 {
            continue; // EINTR
        }
        for event in &events[..n as usize] {
            let token = event.u64;
            if token == u64::MAX {
                while let Ok((stream, _)) = listener.accept() {
                    let _ = stream.set_nonblocking(true);
                    let _ = stream.set_nodelay(true);
                    let slot = connections
                        .iter()
                        .position(Option::is_none)
                        .unwrap_or_else(|| {
                            connections.push(None);
                            connections.len() - 1
                        });
                    if epoll_add(epoll, stream.as_raw_fd(), slot as u64).is_ok() {
                        connections[slot] = Some(TcpConnection {
                            stream,
                            input: Vec::with_capacity(TCP_BUFFER),
                            output: Vec::with_capacity(TCP_BUFFER),
                        });
                    }
                }
                continue;
            }
            let slot = token as usize;
            let Some(connection) = connections.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            let open = loop {
                match connection.stream.read(&mut chunk) {
                    Ok(0) => break false,
                    Ok(read) => {
                        connection.input.extend_from_slice(&chunk[..read]);
                        if !answer_frames(connection, mode, ttl) {
                            break false;
                        }
                        if read < chunk.len() {
                            break true;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break true,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break false,
                }
            };
            let written = connection.output.is_empty() || write_out(connection);
            if !open || !written {
                // Dropping the stream closes it, which also removes it from the epoll set.
                connections[slot] = None;
            }
        }
    }
}

/// Writes and clears `connection.output`; `false` when the connection failed. One
/// non-blocking `write` nearly always takes it all; the rest, if any, is written blocking (a
/// benchmark client reads its replies), switching the socket's mode only then: two `ioctl`s
/// per write would be charged to the ceiling.
fn write_out(connection: &mut TcpConnection) -> bool {
    use std::io::{ErrorKind, Write};
    let output = std::mem::take(&mut connection.output);
    let mut rest = &output[..];
    while !rest.is_empty() {
        match connection.stream.write(rest) {
            Ok(0) => return false,
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let _ = connection.stream.set_nonblocking(false);
                let ok = connection.stream.write_all(rest).is_ok();
                let _ = connection.stream.set_nonblocking(true);
                if !ok {
                    return false;
                }
                break;
            }
            Err(_) => return false,
        }
    }
    connection.output = output;
    connection.output.clear();
    true
}

/// Answers every whole frame in `connection.input` into `connection.output`; `false` when the
/// connection is to be closed.
fn answer_frames(connection: &mut TcpConnection, mode: Mode, ttl: u32) -> bool {
    let mut used = 0;
    let mut buf = [0u8; MAX_DATAGRAM];
    while let Some(header) = connection.input.get(used..used + 2) {
        let len = usize::from(u16::from_be_bytes([header[0], header[1]]));
        if len > MAX_DATAGRAM {
            return false;
        }
        let Some(message) = connection.input.get(used + 2..used + 2 + len) else {
            break;
        };
        buf[..len].copy_from_slice(message);
        used += 2 + len;
        let Some(reply_len) = respond(&mut buf, len, mode, ttl) else {
            return false;
        };
        connection
            .output
            .extend_from_slice(&(reply_len as u16).to_be_bytes());
        connection.output.extend_from_slice(&buf[..reply_len]);
    }
    connection.input.drain(..used);
    true
}

fn main() -> Result<()> {
    let args = Args::parse();
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(args.listen),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    let _ = socket.set_recv_buffer_size(8 << 20);
    let _ = socket.set_send_buffer_size(8 << 20);
    socket
        .bind(&args.listen.into())
        .with_context(|| format!("binding {}", args.listen))?;
    if args.tcp {
        serve_tcp(args.listen, args.mode, args.ttl)?;
    }
    eprintln!(
        "kudurru-echo: {:?} on {}{}",
        args.mode,
        args.listen,
        if args.glommio { " (glommio)" } else { "" }
    );
    let mut batch = Batch::new();
    if !args.glommio {
        let fd = socket.as_raw_fd();
        loop {
            batch.exchange(fd, libc::MSG_WAITFORONE, args.mode, args.ttl)?;
        }
    }
    socket.set_nonblocking(true)?;
    let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(kudurru_transports::runtime::IO_MEMORY_PER_CORE)
        .ring_depth(kudurru_transports::runtime::RING_DEPTH)
        .make()
        .map_err(|e| anyhow::anyhow!("starting a glommio executor: {e}"))?;
    executor.run(async move {
        // SAFETY: the descriptor is a bound UDP socket whose ownership moves to glommio here.
        let socket = unsafe { glommio::net::UdpSocket::from_raw_fd(socket.into_raw_fd()) };
        let fd = socket.as_raw_fd();
        let readiness = socket.readiness();
        loop {
            // A short batch emptied the socket: sleep until the next datagram.
            if batch.exchange(fd, libc::MSG_DONTWAIT, args.mode, args.ttl)? < BATCH {
                readiness.wait().await?;
            }
        }
    })
}

/// Buffers and message headers for one `recvmmsg` and one `sendmmsg` of up to [`BATCH`].
struct Batch {
    bufs: Vec<[u8; MAX_DATAGRAM]>,
    lens: [usize; BATCH],
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Batch {
    fn new() -> Self {
        // SAFETY: zeroed sockaddr_storage, iovec and mmsghdr are valid initial values; the
        // pointers set in `exchange` point into these vectors, which never reallocate.
        Self {
            bufs: vec![[0u8; MAX_DATAGRAM]; BATCH],
            lens: [0; BATCH],
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            iovs: vec![unsafe { std::mem::zeroed() }; BATCH],
            msgs: vec![unsafe { std::mem::zeroed() }; BATCH],
        }
    }

    /// Receives up to [`BATCH`] datagrams (`flags`: wait for one, or not at all), answers
    /// them with one `sendmmsg`, and returns how many arrived (0 when the socket was empty).
    fn exchange(&mut self, fd: i32, flags: i32, mode: Mode, ttl: u32) -> Result<usize> {
        let Self {
            bufs,
            lens,
            addrs,
            iovs,
            msgs,
        } = self;
        for i in 0..BATCH {
            iovs[i] = libc::iovec {
                iov_base: bufs[i].as_mut_ptr().cast(),
                iov_len: MAX_DATAGRAM,
            };
            msgs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_storage).cast();
            msgs[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_len = 0;
        }
        // SAFETY: `msgs` holds BATCH initialised headers pointing at live buffers.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                BATCH as u32,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            return match err.kind() {
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock => Ok(0),
                _ => bail!("recvmmsg: {err}"),
            };
        }
        let n = n as usize;
        let mut out = 0;
        for i in 0..n {
            let len = msgs[i].msg_len as usize;
            if let Some(reply_len) = respond(&mut bufs[i], len, mode, ttl) {
                lens[out] = reply_len;
                if out != i {
                    bufs.swap(out, i);
                    addrs.swap(out, i);
                    let namelen = msgs[i].msg_hdr.msg_namelen;
                    msgs[out].msg_hdr.msg_namelen = namelen;
                }
                out += 1;
            }
        }
        for i in 0..out {
            iovs[i] = libc::iovec {
                iov_base: bufs[i].as_mut_ptr().cast(),
                iov_len: lens[i],
            };
            msgs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_storage).cast();
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        let mut sent = 0;
        while sent < out {
            // SAFETY: the first `out` headers point at live reply buffers and addresses.
            let rc =
                unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr().add(sent), (out - sent) as u32, 0) };
            if rc <= 0 {
                break; // UDP: a reply that cannot be sent now is dropped
            }
            sent += rc as usize;
        }
        Ok(n)
    }
}

/// Turns the query in `buf[..len]` into a reply in place; `None` for non-queries.
fn respond(buf: &mut [u8; MAX_DATAGRAM], len: usize, mode: Mode, ttl: u32) -> Option<usize> {
    if len < 12 || buf[2] & 0x80 != 0 {
        return None;
    }
    buf[2] |= 0x80; // QR
    buf[3] |= 0x80; // RA
    if mode == Mode::Echo {
        return Some(len);
    }
    // Find the end of the question: an uncompressed qname, qtype, qclass.
    let mut pos = 12;
    loop {
        let label = usize::from(*buf.get(pos)?);
        if label & 0xc0 != 0 {
            return None;
        }
        pos += 1 + label;
        if label == 0 {
            break;
        }
    }
    let question_end = pos + 4;
    if question_end > len || question_end + 16 > MAX_DATAGRAM {
        return None;
    }
    buf[2] |= 0x04; // AA
    buf[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]); // one answer, no OPT kept
    let record = [
        [0xc0, 0x0c, 0, 1, 0, 1].as_slice(),
        &ttl.to_be_bytes(),
        &[0, 4, 192, 0, 2, 1],
    ]
    .concat();
    buf[question_end..question_end + record.len()].copy_from_slice(&record);
    Some(question_end + record.len())
}
