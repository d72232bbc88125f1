//! `glommio::net::UdpSocket::readable` and `readiness` (kudurru's glommio patch): the UDP
//! listener, the QUIC sockets and the upstream sockets sleep on them when they find their
//! socket empty, then read with their own system calls. A wait must not complete while the
//! socket is empty, must complete once a datagram is queued, and must leave that datagram
//! queued. The loop below is the listener's: wait, then drain with non-blocking receives; a
//! lost wake-up shows as a missing datagram when the bound (no speed requirement) runs out.
//! `readable` arms a one-shot poll per wait; `readiness` one multishot poll for the socket's
//! life, whose events for datagrams already read make a wait return early (the drain then
//! finds nothing), never late.

mod support;

use std::net::UdpSocket as StdUdpSocket;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use kudurru_transports::sys;

/// Datagrams the sender thread sends, with short pauses so the receiver sleeps in between.
const DATAGRAMS: u32 = 2_000;
/// How long the whole exchange may take before the test calls a datagram lost.
const BOUND: Duration = Duration::from_secs(30);

/// The listener's loop against a sender on another thread: `DATAGRAMS` datagrams, with short
/// pauses so the receiver sleeps in between, drained with non-blocking receives; `wait` sleeps
/// on an empty socket, bounded so that a lost wake-up fails the test.
async fn listen<W, F>(io: &StdUdpSocket, sender: StdUdpSocket, wait: W) -> Result<(), String>
where
    W: Fn() -> F,
    F: Future<Output = Result<(), String>>,
{
    let address = io.local_addr().map_err(|e| e.to_string())?;
    let thread = std::thread::spawn(move || {
        for i in 0..DATAGRAMS {
            let _ = sender.send_to(&i.to_be_bytes(), address);
            if i % 3 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    });
    let start = Instant::now();
    let (mut received, mut buf) = (0, [0u8; 64]);
    while received < DATAGRAMS {
        if start.elapsed() > BOUND {
            return Err(format!(
                "{received} of {DATAGRAMS} datagrams within {BOUND:?}"
            ));
        }
        match io.recv_from(&mut buf) {
            Ok((4, _)) => received += 1,
            Ok((n, _)) => return Err(format!("a datagram of {n} bytes")),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                wait()
                    .or(async {
                        glommio::timer::sleep(BOUND).await;
                        Err("no wake-up for a queued datagram".to_string())
                    })
                    .await?;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    thread.join().map_err(|_| "sender thread")?;
    Ok(())
}

/// A non-blocking socket on loopback, its address, and a duplicate of it for the ring side.
fn socket_pair() -> (StdUdpSocket, std::net::SocketAddr, OwnedFd) {
    let io = StdUdpSocket::bind("127.0.0.1:0").expect("bind");
    io.set_nonblocking(true).expect("non-blocking");
    let address = io.local_addr().expect("address");
    let ring_side = OwnedFd::from(io.try_clone().expect("dup"));
    (io, address, ring_side)
}

#[test]
fn readiness_waits_for_a_datagram_and_wakes_for_every_later_one() {
    let (io, address, ring_side) = socket_pair();

    let outcome = support::executor(move || async move {
        let socket = sys::glommio_udp(ring_side);
        let readiness = socket.readiness();
        let sender = StdUdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        // Queued before the poll is armed: the first wait completes at once.
        sender
            .send_to(b"early", address)
            .map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_millis(10));
        readiness.wait().await.map_err(|e| e.to_string())?;
        let mut buf = [0u8; 64];
        let (n, _) = io.recv_from(&mut buf).map_err(|e| e.to_string())?;
        if &buf[..n] != b"early" {
            return Err(format!("received {:?} after the wait", &buf[..n]));
        }
        // Read, and nothing arrived since: the next wait sleeps (one early return for the
        // datagram just read is allowed; a second one would be a poll that is always ready).
        for attempt in 0..2 {
            let woke = async { readiness.wait().await.map(|()| true) }
                .or(async {
                    glommio::timer::sleep(Duration::from_millis(50)).await;
                    Ok(false)
                })
                .await
                .map_err(|e| e.to_string())?;
            if !woke {
                break;
            }
            if attempt == 1 {
                return Err("readiness keeps completing on an empty socket".into());
            }
        }

        listen(&io, sender, || async {
            readiness.wait().await.map_err(|e| e.to_string())
        })
        .await
    })
    .join()
    .expect("executor thread");
    outcome.expect("readiness");
}

#[test]
fn readable_waits_for_a_datagram_and_leaves_it_queued() {
    let (io, address, ring_side) = socket_pair();

    let outcome = support::executor(move || async move {
        let socket = sys::glommio_udp(ring_side);
        let sender = StdUdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;

        // Empty socket: still waiting when a 50 ms timer fires.
        let waited = async { socket.readable().await.map(|()| true) }
            .or(async {
                glommio::timer::sleep(Duration::from_millis(50)).await;
                Ok(false)
            })
            .await
            .map_err(|e| e.to_string())?;
        if waited {
            return Err("readable completed on an empty socket".into());
        }

        // A queued datagram: readable completes and the datagram is still there, whole.
        sender
            .send_to(b"first", address)
            .map_err(|e| e.to_string())?;
        socket.readable().await.map_err(|e| e.to_string())?;
        let mut buf = [0u8; 64];
        let (n, _) = io.recv_from(&mut buf).map_err(|e| e.to_string())?;
        if &buf[..n] != b"first" {
            return Err(format!("received {:?} after readable", &buf[..n]));
        }

        // The listener's loop: sleep on the ring whenever the socket is empty.
        listen(&io, sender, || async {
            socket.readable().await.map_err(|e| e.to_string())
        })
        .await
    })
    .join()
    .expect("executor thread");
    outcome.expect("readable");
}
