//! Blocking on the control thread: the list manager (fetch, parse and compile block lists,
//! build the policy index), the publisher that hangs the index off the settings snapshot,
//! the objects' status, readiness, metrics and the `check` explanation.
//!
//! ```text
//! store watch (BlockList, ClientGroup, Policy) ─┐
//! timers (refreshInterval, backoff, schedules) ─┤                     blocking pool
//! file watcher, API refresh, settings reload ───┴▶ manager ──▶ parse ─▶ Matcher::with_list
//!                                                     │                  PolicyIndex::build
//!                      body cache ◀── last good body ─┤
//!                      status (update_status) ◀───────┤
//!                      Shared: readiness, metrics, diagnoses, check inputs
//!                                                     └▶ Publisher ──arc-swap──▶ every core
//! ```
//! Protection never switches off: a failed or empty refresh keeps the last good compiled list
//! (`Degraded=True` says why), and at start each list is loaded from the body cache before it
//! is fetched again. Disabled objects are left out as if absent.

pub mod check;
pub mod engine;
pub mod fetch;
pub mod manager;
pub mod metrics;
pub mod publish;
pub mod source;
pub mod status;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;

pub use check::{CheckInputs, CheckQuery, explanation_json};
pub use engine::{CoreEngine, Engine, SharedEngine};
pub use fetch::Fetcher;
pub use manager::{Command, Manager, ManagerParts};
pub use metrics::BlockingMetrics;
pub use publish::Publisher;
pub use source::{HttpFetcher, ListFetcher, SharedFetcher, SourceError};

/// The user agent of list fetches.
pub const USER_AGENT: &str = concat!("kudurru/", env!("CARGO_PKG_VERSION"), " (block lists)");

/// A diagnosis for `GET /api/v1/info/messages`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    /// `info`, `warning` or `error`.
    pub severity: &'static str,
    /// A stable code (`blocklist_degraded`, `reference_disabled`, …).
    pub code: &'static str,
    /// For people.
    pub message: String,
}

/// What the manager shares with the API and the ops listener.
pub struct Shared {
    /// Counters and gauges for `/metrics`.
    pub metrics: BlockingMetrics,
    /// The publisher (the live index).
    pub publisher: Arc<Publisher>,
    /// The engine (throwaway indexes for `check?at=`).
    pub engine: SharedEngine,
    /// Enabled lists that never loaded; `None` until the first list of BlockLists was read.
    unloaded: Mutex<Option<Vec<String>>>,
    /// `blocking.allowDegraded`.
    allow_degraded: AtomicBool,
    /// Diagnoses of the objects.
    diagnoses: Mutex<Vec<Diagnosis>>,
    /// What the live index was built from.
    check: Mutex<Option<Arc<CheckInputs>>>,
}

impl Shared {
    /// Shared state over `publisher` and `engine`, not yet synced with the store.
    pub fn new(publisher: Arc<Publisher>, engine: SharedEngine, allow_degraded: bool) -> Self {
        Self {
            metrics: BlockingMetrics::default(),
            publisher,
            engine,
            unloaded: Mutex::new(None),
            allow_degraded: AtomicBool::new(allow_degraded),
            diagnoses: Mutex::new(Vec::new()),
            check: Mutex::new(None),
        }
    }

    /// Why the node is not ready because of its lists: `None` when every enabled list has
    /// loaded once, or `blocking.allowDegraded` is on.
    pub fn unready(&self) -> Option<String> {
        if self.allow_degraded.load(Ordering::Relaxed) {
            return None;
        }
        match &*self.unloaded.lock().unwrap_or_else(PoisonError::into_inner) {
            None => Some("block lists are still being read from the store".into()),
            Some(names) if names.is_empty() => None,
            Some(names) => Some(format!(
                "block lists never loaded: {} (blocking.allowDegraded = false)",
                names.join(", ")
            )),
        }
    }

    /// The diagnoses of the blocking objects.
    pub fn diagnoses(&self) -> Vec<Diagnosis> {
        self.diagnoses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What the live index was built from (`None` before the first build).
    pub fn check_inputs(&self) -> Option<Arc<CheckInputs>> {
        self.check
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_unloaded(&self, names: Vec<String>) {
        *self.unloaded.lock().unwrap_or_else(PoisonError::into_inner) = Some(names);
    }

    pub(crate) fn set_allow_degraded(&self, allow: bool) {
        self.allow_degraded.store(allow, Ordering::Relaxed);
    }

    pub(crate) fn set_diagnoses(&self, diagnoses: Vec<Diagnosis>) {
        *self
            .diagnoses
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = diagnoses;
    }

    pub(crate) fn set_check_inputs(&self, inputs: Arc<CheckInputs>) {
        *self.check.lock().unwrap_or_else(PoisonError::into_inner) = Some(inputs);
    }
}

/// What the API holds: the manager's mailbox and its shared state.
#[derive(Clone)]
pub struct Handle {
    /// The manager's commands.
    pub commands: mpsc::UnboundedSender<Command>,
    /// Its shared state.
    pub shared: Arc<Shared>,
}

impl Handle {
    /// Asks for an immediate refresh of `list` (URL sources fetched skipping the interval and
    /// any failure cooldown, files read again); false when the manager has stopped.
    pub fn refresh(&self, list: &str) -> bool {
        self.commands
            .send(Command::Refresh(list.to_owned()))
            .is_ok()
    }
}
