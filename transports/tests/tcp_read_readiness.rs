//! TCP reads in kudurru's glommio patch wait on one multishot poll per stream instead of a
//! `POLL_ADD` submitted after every read that did not fill the buffer. Each query on a
//! persistent DNS connection usually arrives in a segment of its own, so the old way paid a
//! submission and the kernel's arming of a poll per query.
//!
//! The test drives one glommio `TcpStream` the way a connection task does: it reads what a
//! client on another thread sends in small writes (some back to back, some after pauses that
//! let the executor sleep, so both a read that finds an event's bytes already taken and a
//! wake-up from sleep happen), answering each with one byte. A lost wake-up shows as a stalled
//! exchange when the bound (no speed requirement) runs out. Meanwhile it counts the requests
//! the process's rings took in (`SqHead` in /proc/self/fdinfo): the reads must not need one
//! each. After the client closes, every read returns end of stream at once.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream as StdTcpStream;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt, FutureExt};
use glommio::net::TcpListener;

/// Messages the client sends; each is answered before the next group goes out.
const MESSAGES: u32 = 2_000;
/// How long the whole exchange may take before the test calls a wake-up lost.
const BOUND: Duration = Duration::from_secs(60);

/// Requests taken in by every io_uring instance of this process (the test binary runs this one
/// test, so they are the executor's rings).
fn ring_submissions() -> u64 {
    let mut total = 0u64;
    for entry in std::fs::read_dir("/proc/self/fdinfo").expect("fdinfo") {
        let Ok(text) = std::fs::read_to_string(entry.expect("entry").path()) else {
            continue;
        };
        if let Some(head) = text.lines().find_map(|l| l.strip_prefix("SqHead:")) {
            total += head.trim().parse::<u64>().expect("SqHead is a number");
        }
    }
    total
}

#[test]
fn tcp_reads_wake_for_every_segment_without_a_request_each() {
    let outcome = support::executor(move || async move {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        let client = std::thread::spawn(move || -> Result<(), String> {
            let mut stream = StdTcpStream::connect(address).map_err(|e| e.to_string())?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            let mut ack = [0u8; 1];
            let mut n = 0;
            while n < MESSAGES {
                // Groups of one to three messages, each its own segment.
                let group = 1 + n % 3;
                for i in n..(n + group).min(MESSAGES) {
                    stream
                        .write_all(&i.to_be_bytes())
                        .map_err(|e| e.to_string())?;
                }
                n = (n + group).min(MESSAGES);
                stream.read_exact(&mut ack).map_err(|e| e.to_string())?;
                if n % 5 == 0 {
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
            Ok(())
        });

        let mut stream = listener.accept().await.map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let before = ring_submissions();
        let start = Instant::now();
        let (mut expected, mut pending, mut reads) = (0u32, Vec::new(), 0u32);
        let mut buf = [0u8; 256];
        let mut group_left = 1;
        while expected < MESSAGES {
            let read = async { stream.read(&mut buf).await.map_err(|e| e.to_string()) }
                .or(async {
                    glommio::timer::sleep(BOUND.saturating_sub(start.elapsed())).await;
                    Err(format!(
                        "no wake-up for message {expected} within {BOUND:?}"
                    ))
                })
                .await?;
            if read == 0 {
                return Err(format!("the client closed after {expected} messages"));
            }
            reads += 1;
            pending.extend_from_slice(&buf[..read]);
            while pending.len() >= 4 {
                let message = u32::from_be_bytes(pending[..4].try_into().unwrap());
                pending.drain(..4);
                if message != expected {
                    return Err(format!("read message {message}, expected {expected}"));
                }
                expected += 1;
                group_left -= 1;
                if group_left == 0 || expected == MESSAGES {
                    stream.write_all(&[1]).await.map_err(|e| e.to_string())?;
                    group_left = 1 + expected % 3;
                }
            }
        }
        let submitted = ring_submissions() - before;
        client.join().map_err(|_| "client thread")??;
        // The client is gone: end of stream, and every read after it says so again at once.
        for _ in 0..2 {
            let read = async { stream.read(&mut buf).await.map_err(|e| e.to_string()) }
                .or(async {
                    glommio::timer::sleep(BOUND).await;
                    Err("a read after the client closed never returned".to_string())
                })
                .await?;
            if read != 0 {
                return Err(format!("{read} bytes after the client's last message"));
            }
        }
        Ok((reads, submitted))
    })
    .join()
    .expect("executor thread");
    let (reads, submitted) = outcome.expect("exchange");
    eprintln!("{reads} reads, {submitted} ring submissions");
    assert!(
        u64::from(reads) > 2 * submitted,
        "{reads} reads took {submitted} ring submissions: a request per read"
    );
}
