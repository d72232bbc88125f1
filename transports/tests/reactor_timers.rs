//! The patched glommio reactor (transports/vendor) keeps its latency-ring timer armed across
//! sleeps. A kept timer can fire between the check that keeps it and the executor going to
//! sleep; its completion is then consumed on the way and the executor used to sleep with no
//! timer at all, until some unrelated event woke it (seen as 10 s stalls of a 2 µs timer in
//! kudurru-bench's open loop, and as idle-timeout and upstream-timeout timers firing late).
//! This test drives many short timers next to socket I/O and requires every one to fire; the
//! bounds (a second per timer, 30 s in all) detect hangs, they are no speed requirement.
//! Without the fix it hangs in about two runs out of three on a 2-core machine.

mod support;

use std::net::UdpSocket as StdUdpSocket;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use glommio::net::UdpSocket;

/// How long one short timer may take before the test calls it lost.
const LOST: Duration = Duration::from_secs(1);

/// Short timers on one task while another waits for echoes of what the first sent: the shape
/// of an open-loop load generator, and of a core with answers and timeouts. An echo that
/// arrives just before a timer expires wakes the executor with that timer still pending;
/// after it, nothing but the timer can wake the executor again.
#[test]
fn short_timers_fire_next_to_socket_io() {
    let echo = StdUdpSocket::bind("127.0.0.1:0").unwrap();
    let echo_address = echo.local_addr().unwrap();
    echo.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let echoer = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok((n, from)) = echo.recv_from(&mut buf) {
            let _ = echo.send_to(&buf[..n], from);
            if &buf[..n] == b"stop" {
                break;
            }
        }
    });
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let result = support::executor(move || async move {
            let socket = Rc::new(UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?);
            let receiver = socket.clone();
            let reader = glommio::spawn_local(async move {
                let mut buf = [0u8; 64];
                let mut echoes = 0u64;
                while let Ok((n, _)) = receiver.recv_from(&mut buf).await {
                    if &buf[..n] == b"stop" {
                        break;
                    }
                    echoes += 1;
                }
                echoes
            });
            let mut slowest = Duration::ZERO;
            for i in 0..40_000u64 {
                let _ = socket.send_to(b"tick", echo_address).await;
                let started = Instant::now();
                glommio::timer::sleep(Duration::from_micros(5 + i % 60)).await;
                slowest = slowest.max(started.elapsed());
            }
            let _ = socket.send_to(b"stop", echo_address).await;
            let echoes = reader.await;
            if slowest > LOST {
                return Err(format!("a short sleep took {slowest:?}"));
            }
            if echoes == 0 {
                return Err("no echo came back".into());
            }
            Ok(())
        })
        .join()
        .expect("executor thread");
        let _ = done_tx.send(result);
    });
    // A timer lost for good hangs the executor: give up on it after a while.
    let result = done_rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| Err("the executor hung".into()));
    result.unwrap();
    echoer.join().unwrap();
}
