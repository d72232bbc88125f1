//! An executor about to sleep sets its `should_notify` flag, then sweeps its cross-executor
//! queues once more; a producer on another thread pushes, then checks that flag and writes
//! the sleeper's eventfd. kudurru's glommio patch orders both sides with `SeqCst` fences
//! instead of glommio's `membarrier()` (transports/vendor/README.md). Without a barrier on
//! either side the flag store can be delayed past the sweep while the producer reads the old
//! flag: the message sits in the queue and the executor sleeps on (a lost wake-up).
//!
//! Here one executor sends messages one at a time over a shared channel, every other one after
//! a pause long enough for the receiving executor to go to sleep, and waits for each echo
//! before the next; a lost wake-up stalls the exchange until the bound (no speed requirement)
//! runs out. The cores' cache sharding relies on the same wake-ups (cross-core lookups and
//! fetches). It fails at once when the producer's side of the handshake is broken (checked
//! with the eventfd write removed); a missing barrier is a narrow race that 3,000 round trips
//! on x86 do not reliably hit (removing both fences still passed 8 runs of 8), so the
//! ordering argument in transports/vendor/README.md carries that part.

mod support;

use std::time::Duration;

use glommio::channels::shared_channel;
use support::executor;

/// Round trips between the two executors.
const ROUND_TRIPS: u32 = 3_000;
/// How long all of them may take before the test calls a wake-up lost.
const BOUND: Duration = Duration::from_secs(60);

#[test]
fn sleeping_executors_are_woken_by_every_cross_executor_message() {
    let (to_echo, echo_in) = shared_channel::new_bounded::<u32>(4);
    let (echo_out, from_echo) = shared_channel::new_bounded::<u32>(4);

    let echo = executor(move || async move {
        let (incoming, outgoing) = (echo_in.connect().await, echo_out.connect().await);
        while let Some(n) = incoming.recv().await {
            if outgoing.send(n).await.is_err() {
                break;
            }
        }
    });

    let driver = executor(move || async move {
        let exchange = async {
            let (outgoing, incoming) = (to_echo.connect().await, from_echo.connect().await);
            for n in 0..ROUND_TRIPS {
                // Every other message after a pause that lets the echo executor fall asleep.
                if n % 2 == 0 {
                    glommio::timer::sleep(Duration::from_micros(50 + u64::from(n % 7) * 30)).await;
                }
                outgoing.send(n).await.map_err(|_| "echo executor gone")?;
                match incoming.recv().await {
                    Some(m) if m == n => {}
                    Some(m) => return Err(format!("sent {n}, echoed {m}")),
                    None => return Err("echo executor gone".to_string()),
                }
            }
            Ok(())
        };
        // Connecting the channels needs cross-executor wake-ups too.
        futures_lite::FutureExt::or(exchange, async {
            glommio::timer::sleep(BOUND).await;
            Err(format!("stalled for {BOUND:?}: a lost wake-up"))
        })
        .await
    });

    // The driver first: after a lost wake-up the echo executor may never wake to see its
    // channel close.
    driver
        .join()
        .expect("driver thread")
        .expect("every message echoed");
    echo.join().expect("echo thread");
}
