//! Warnings that peers can trigger in libraries (rustls logs one per connection that opens
//! with a ChangeCipherSpec record; quinn and h2 have their own) are let through at most
//! [`BURST`] per library per [`WINDOW`]; the rest are counted, and a control-thread task logs
//! how many were held back. kudurru's own warnings are never held back: they are written once
//! per change, not once per peer.
//!
//! ```text
//! event ─▶ target starts with "kudurru"? ─ yes ─▶ log
//!                   │ no
//!                   ▼
//!          this library's window: < BURST so far ─▶ log
//!                                  else ─▶ count (summary by `summarize`, once per WINDOW)
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::Metadata;
use tracing_subscriber::layer::{Context, Filter};

/// Warnings let through per library per window.
pub const BURST: u64 = 10;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(60);

/// One library's window.
#[derive(Debug)]
struct Window {
    start: Instant,
    passed: u64,
    held: u64,
}

/// The filter and its counts, shared with the summarising task.
#[derive(Debug, Clone, Default)]
pub struct PeerNoise {
    windows: Arc<Mutex<HashMap<String, Window>>>,
}

impl PeerNoise {
    /// Whether an event from `target` passes now, counting it either way.
    fn admit(&self, target: &str, now: Instant) -> bool {
        if target.starts_with("kudurru") {
            return true;
        }
        let library = target.split("::").next().unwrap_or(target);
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let window = windows.entry(library.to_owned()).or_insert(Window {
            start: now,
            passed: 0,
            held: 0,
        });
        if now.duration_since(window.start) >= WINDOW && window.held == 0 {
            window.start = now;
            window.passed = 0;
        }
        if window.passed < BURST {
            window.passed += 1;
            true
        } else {
            window.held += 1;
            false
        }
    }

    /// The libraries whose window has ended with events held back, and how many; their
    /// windows start again.
    pub fn take_held(&self, now: Instant) -> Vec<(String, u64)> {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let mut held = Vec::new();
        for (library, window) in windows.iter_mut() {
            if window.held > 0 && now.duration_since(window.start) >= WINDOW {
                held.push((library.clone(), window.held));
                window.start = now;
                window.passed = 0;
                window.held = 0;
            }
        }
        held.sort();
        held
    }
}

impl<S> Filter<S> for PeerNoise {
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        // Decided per event below: `enabled` can be asked more than once for one event (a
        // `log` record bridged into tracing is), which would spend the burst twice.
        true
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, _: &Context<'_, S>) -> bool {
        let metadata = event.metadata();
        // Only warnings and below are limited: an error is rare enough to keep.
        if *metadata.level() == tracing::Level::ERROR {
            return true;
        }
        self.admit(metadata.target(), Instant::now())
    }

    fn callsite_enabled(&self, _: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        // Decided per event: the window moves.
        tracing::subscriber::Interest::sometimes()
    }
}

/// Logs, once per window, how many warnings each library had held back, until the runtime ends.
pub async fn summarize(noise: PeerNoise) {
    let mut tick = tokio::time::interval(WINDOW / 4);
    loop {
        tick.tick().await;
        for (library, held) in noise.take_held(Instant::now()) {
            tracing::warn!(
                library,
                held,
                "{held} more {library} messages in the last minute were not logged (at most {BURST} a minute per library; peers can trigger them)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_gets_a_burst_per_window_and_the_rest_is_counted_once() {
        let noise = PeerNoise::default();
        let start = Instant::now();
        let passed = (0..300)
            .filter(|_| noise.admit("rustls::check", start))
            .count();
        assert_eq!(passed as u64, BURST);
        assert!(
            noise.admit("kudurru_transports::tcp", start),
            "kudurru's own pass"
        );
        assert!(
            noise.admit("quinn_proto::endpoint", start),
            "another library has its own"
        );
        assert!(
            noise.take_held(start).is_empty(),
            "the window has not ended"
        );
        let later = start + WINDOW;
        assert_eq!(noise.take_held(later), [("rustls".to_owned(), 300 - BURST)]);
        assert!(noise.take_held(later).is_empty(), "said once");
        assert!(noise.admit("rustls::check", later), "a new window");
    }
}
