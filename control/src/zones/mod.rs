//! Zones on the control thread: the Zone and RecordSet objects, zone files, transfers in and
//! out, NOTIFY, dynamic updates and SOA timers, compiled into `kudurru_core::zone::Zones` and
//! published on the settings snapshot.
//!
//! ```text
//! store watch (Zone, RecordSet) ─┐
//! zone files (zones.fileDir) ────┤
//! transfers in (secondary) ──────┼─▶ manager ─▶ Zone::compile ─▶ Zones ─▶ Publisher ─▶ cores
//! UPDATE, NOTIFY (core inbox) ───┘      │
//!                                       └─▶ NOTIFY out, status, metrics, /internal/zones
//! ```
//!
//! The manager's handle is what the other parts call: the secondary's transfer loop hands it
//! what it transferred, the UPDATE handler the changes a client asked for. What they follow:
//!
//! - [`Shared::changes`]: a broadcast of [`ZoneChanged`] (apex, serial, `notify` targets,
//!   TSIG key) after every publish that changed a zone's data: NOTIFY out subscribes;
//! - [`Shared::secondaries`]: a watch of the [`SecondaryZone`]s (primaries, TSIG keys, the
//!   serial and SOA timers served): the transfer loops follow it;
//! - [`ZoneHandle`] (built in `serve` next to the manager): transfers, expiry and updates in.

pub mod build;
pub mod files;
pub mod inbox;
pub mod keys;
pub mod manager;
pub mod notify;
pub mod secondary;
pub mod stored;
pub mod update;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use kudurru_core::zone::xfr::Diff;
use kudurru_core::zone::{Record, ZoneData, ZoneError, ZoneErrorKind, ZoneKind};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::blocking::{Diagnosis, Publisher};
use crate::objects::kinds::SecondarySpec;

pub use manager::{Command, Manager, ManagerParts};

/// How many [`ZoneChanged`] events a slow subscriber may fall behind before it lags.
const CHANGES_CAPACITY: usize = 256;

/// What a transfer brought.
#[derive(Debug)]
pub enum Transferred {
    /// A whole zone (AXFR, or an IXFR answered with the whole zone).
    Full(ZoneData),
    /// Incremental changes, oldest first (IXFR).
    Diffs(Vec<Diff>),
}

/// A zone's data changed and was published: NOTIFY goes out (RFC 1996) from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneChanged {
    /// The Zone object's name.
    pub name: String,
    /// The apex, lowercase wire form.
    pub apex: Box<[u8]>,
    /// The new SOA serial.
    pub serial: u32,
    /// The zone's `notify` targets.
    pub notify: Vec<SocketAddr>,
    /// The TSIG key NOTIFY is signed with (`tsigKey`).
    pub tsig_key: Option<String>,
}

/// A secondary zone as its transfer loop needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecondaryZone {
    /// The Zone object's name.
    pub name: String,
    /// The apex, lowercase wire form.
    pub apex: Box<[u8]>,
    /// Primaries, own transfers and NOTIFY.
    pub spec: SecondarySpec,
    /// The serial served now (`None`: nothing transferred yet).
    pub serial: Option<u32>,
    /// The served SOA's refresh, retry and expire, seconds.
    pub timers: Option<SoaTimers>,
}

/// A secondary's SOA timers (RFC 1035 §3.3.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoaTimers {
    /// Seconds between refreshes.
    pub refresh: u32,
    /// Seconds between retries after a failed refresh.
    pub retry: u32,
    /// Seconds after the last refresh when the zone stops answering.
    pub expire: u32,
}

/// One zone served, as `/internal/zones`, the metrics and the records API see it.
#[derive(Debug, Clone)]
pub struct ServedView {
    /// The Zone object's name.
    pub name: String,
    /// The apex, lowercase wire form.
    pub apex: Box<[u8]>,
    /// Primary or secondary.
    pub kind: ZoneKind,
    /// The SOA serial.
    pub serial: u32,
    /// Owner names.
    pub names: usize,
    /// A secondary past its expire.
    pub expired: bool,
    /// The compiled zone: its records, SOA first, then by owner (canonical order, RFC 4034
    /// §6.1) and type, are what the records API pages through (no other copy is kept).
    pub zone: Arc<kudurru_core::zone::Zone>,
}

/// What the manager shares with the API, the ops listener and the transfer code.
pub struct Shared {
    /// The publisher (the live zones).
    pub publisher: Arc<Publisher>,
    /// The zones served; `None` until the first build.
    view: Mutex<Option<Arc<Vec<ServedView>>>>,
    /// Refused loads by apex text, for `kudurru_zone_load_failures_total`.
    failures: Mutex<BTreeMap<String, u64>>,
    /// Diagnoses of the zone objects.
    diagnoses: Mutex<Vec<Diagnosis>>,
    changes: broadcast::Sender<ZoneChanged>,
    secondaries: watch::Sender<Arc<Vec<SecondaryZone>>>,
    /// The TSIG keys (`zones.tsigKeyFile`).
    keys: Mutex<Arc<keys::TsigKeys>>,
    /// Transfers in by apex text: (successes, failures, last success in Unix seconds).
    transfers: Mutex<BTreeMap<String, (u64, u64, u64)>>,
}

impl Shared {
    /// Shared state over `publisher`, nothing built yet.
    pub fn new(publisher: Arc<Publisher>) -> Self {
        Self {
            publisher,
            view: Mutex::new(None),
            failures: Mutex::new(BTreeMap::new()),
            diagnoses: Mutex::new(Vec::new()),
            changes: broadcast::channel(CHANGES_CAPACITY).0,
            secondaries: watch::channel(Arc::new(Vec::new())).0,
            keys: Mutex::new(Arc::new(keys::TsigKeys::empty())),
            transfers: Mutex::new(BTreeMap::new()),
        }
    }

    /// The TSIG keys.
    pub fn keys(&self) -> Arc<keys::TsigKeys> {
        lock(&self.keys).clone()
    }

    /// Replaces the TSIG keys (before the manager's first build: they are read at start).
    pub fn set_keys(&self, keys: keys::TsigKeys) {
        *lock(&self.keys) = Arc::new(keys);
    }

    /// The primary and secondary zones served; `None` before the first build.
    pub fn served(&self) -> Option<Arc<Vec<ServedView>>> {
        lock(&self.view).clone()
    }

    /// Every published change of a zone's data, for NOTIFY out.
    pub fn changes(&self) -> broadcast::Receiver<ZoneChanged> {
        self.changes.subscribe()
    }

    /// The secondary zones, for their transfer loops (updated on every change).
    pub fn secondaries(&self) -> watch::Receiver<Arc<Vec<SecondaryZone>>> {
        self.secondaries.subscribe()
    }

    /// The diagnoses of the zone objects.
    pub fn diagnoses(&self) -> Vec<Diagnosis> {
        lock(&self.diagnoses).clone()
    }

    /// `GET /internal/zones`: the zones served with their serials (forward zones left out;
    /// an empty list until the first build).
    pub fn internal_json(&self) -> serde_json::Value {
        let zones: Vec<serde_json::Value> = self
            .served()
            .map(|view| {
                view.iter()
                    .map(|z| {
                        serde_json::json!({
                            "zone": zone_text(&z.apex),
                            "name": z.name,
                            "type": kind_label(z.kind),
                            "serial": z.serial,
                            "records": z.zone.record_count(),
                            "names": z.names,
                            "expired": z.expired,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        serde_json::json!({ "zones": zones })
    }

    /// The zone metrics in Prometheus text format.
    pub fn render_metrics(&self, out: &mut String) {
        let view = self.served();
        let view = view.as_deref().map(Vec::as_slice).unwrap_or_default();
        let _ = writeln!(
            out,
            "# HELP kudurru_zone_serial The SOA serial each primary and secondary zone serves.\n# TYPE kudurru_zone_serial gauge"
        );
        for z in view {
            let _ = writeln!(
                out,
                "kudurru_zone_serial{{zone=\"{}\"}} {}",
                label(&zone_text(&z.apex)),
                z.serial
            );
        }
        let _ = writeln!(
            out,
            "# HELP kudurru_zone_records Records (records: resource records, names: owner names) each zone serves.\n# TYPE kudurru_zone_records gauge"
        );
        for z in view {
            let zone = label(&zone_text(&z.apex));
            let _ = writeln!(
                out,
                "kudurru_zone_records{{zone=\"{zone}\",kind=\"records\"}} {}",
                z.zone.record_count()
            );
            let _ = writeln!(
                out,
                "kudurru_zone_records{{zone=\"{zone}\",kind=\"names\"}} {}",
                z.names
            );
        }
        let _ = writeln!(
            out,
            "# HELP kudurru_zone_load_failures_total Zone loads refused (bad file, bad data, too large): the last good zone stayed.\n# TYPE kudurru_zone_load_failures_total counter"
        );
        for (zone, count) in lock(&self.failures).iter() {
            let _ = writeln!(
                out,
                "kudurru_zone_load_failures_total{{zone=\"{}\"}} {count}",
                label(zone)
            );
        }
        self.render_transfer_metrics(out);
    }

    /// Counts a secondary's refresh: `ok` (the zone is current, transferred or not) at `now`
    /// (Unix seconds), or a failure.
    pub fn count_refresh(&self, apex: &[u8], ok: bool, now: u64) {
        let mut transfers = lock(&self.transfers);
        let entry = transfers.entry(zone_text(apex)).or_default();
        if ok {
            entry.0 += 1;
            entry.2 = now;
        } else {
            entry.1 += 1;
        }
    }

    fn render_transfer_metrics(&self, out: &mut String) {
        let transfers = lock(&self.transfers);
        let _ = writeln!(
            out,
            "# HELP kudurru_zone_transfers_total Refreshes of secondary zones (SOA check and transfer when needed) by result.\n# TYPE kudurru_zone_transfers_total counter"
        );
        for (zone, (ok, failed, _)) in transfers.iter() {
            let zone = label(zone);
            let _ = writeln!(
                out,
                "kudurru_zone_transfers_total{{zone=\"{zone}\",result=\"success\"}} {ok}"
            );
            let _ = writeln!(
                out,
                "kudurru_zone_transfers_total{{zone=\"{zone}\",result=\"failure\"}} {failed}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP kudurru_zone_last_refresh_seconds When each secondary zone last refreshed successfully (Unix seconds; 0: not yet).\n# TYPE kudurru_zone_last_refresh_seconds gauge"
        );
        for (zone, (_, _, last)) in transfers.iter() {
            let _ = writeln!(
                out,
                "kudurru_zone_last_refresh_seconds{{zone=\"{}\"}} {last}",
                label(zone)
            );
        }
    }

    pub(crate) fn set_view(&self, view: Vec<ServedView>) {
        *lock(&self.view) = Some(Arc::new(view));
    }

    pub(crate) fn count_failure(&self, apex: &[u8]) {
        *lock(&self.failures).entry(zone_text(apex)).or_default() += 1;
    }

    pub(crate) fn set_diagnoses(&self, diagnoses: Vec<Diagnosis>) {
        *lock(&self.diagnoses) = diagnoses;
    }

    pub(crate) fn announce(&self, change: ZoneChanged) {
        // No subscriber (no NOTIFY code running) is not an error.
        let _ = self.changes.send(change);
    }

    pub(crate) fn set_secondaries(&self, secondaries: Vec<SecondaryZone>) {
        self.secondaries.send_if_modified(|current| {
            if **current == secondaries {
                return false;
            }
            *current = Arc::new(secondaries);
            true
        });
    }
}

/// A zone's apex as text with the trailing dot (`corp.example.`).
pub fn zone_text(apex: &[u8]) -> String {
    let text = kudurru_core::policy::name::to_text(apex);
    if text == "." {
        text
    } else {
        format!("{text}.")
    }
}

/// `primary`, `secondary` or `builtin`.
pub fn kind_label(kind: ZoneKind) -> &'static str {
    match kind {
        ZoneKind::Primary => "primary",
        ZoneKind::Secondary => "secondary",
        ZoneKind::BuiltIn => "builtin",
    }
}

/// A Prometheus label value escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The manager as the transfer, NOTIFY and UPDATE code reach it (cheap to clone).
#[derive(Clone)]
pub struct ZoneHandle {
    commands: mpsc::UnboundedSender<Command>,
    shared: Arc<Shared>,
}

impl ZoneHandle {
    /// A handle on the manager whose mailbox is `commands`.
    pub fn new(commands: mpsc::UnboundedSender<Command>, shared: Arc<Shared>) -> Self {
        Self { commands, shared }
    }

    /// What the manager shares (served zones, change events, secondaries).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// A secondary zone's new data from a transfer: compiled, kept in storage (a restart serves
    /// it at once), published, and NOTIFY sent on to its own secondaries.
    pub async fn transferred(&self, apex: &[u8], data: Transferred) -> Result<(), ZoneError> {
        let (reply, answer) = oneshot::channel();
        self.ask(
            Command::Transferred {
                apex: apex.into(),
                data,
                reply,
            },
            answer,
        )
        .await?
    }

    /// A secondary zone's SOA expire passed (`true`: SERVFAIL) or a transfer succeeded.
    pub async fn set_expired(&self, apex: &[u8], expired: bool) {
        let (reply, answer) = oneshot::channel();
        let _ = self
            .ask(
                Command::SetExpired {
                    apex: apex.into(),
                    expired,
                    reply,
                },
                answer,
            )
            .await;
    }

    /// What the UPDATE handler needs of the zone at `apex`: whether it is an enabled, loaded
    /// primary here, its `allowUpdate` and its records now.
    pub async fn update_target(&self, apex: &[u8]) -> update::UpdateTarget {
        let (reply, answer) = oneshot::channel();
        self.ask(
            Command::UpdateTarget {
                apex: apex.into(),
                reply,
            },
            answer,
        )
        .await
        .unwrap_or(update::UpdateTarget::NotPrimary)
    }

    /// A dynamic update (RFC 2136) to a primary zone: `removed` and `added` records (SOA not
    /// among them), applied whole or not at all; the serial bumped per the zone's
    /// `serialPolicy`. Returns the new serial.
    pub async fn update(
        &self,
        apex: &[u8],
        removed: Vec<Record>,
        added: Vec<Record>,
    ) -> Result<u32, ZoneError> {
        let (reply, answer) = oneshot::channel();
        self.ask(
            Command::Update {
                apex: apex.into(),
                removed,
                added,
                reply,
            },
            answer,
        )
        .await?
    }

    async fn ask<T>(&self, command: Command, answer: oneshot::Receiver<T>) -> Result<T, ZoneError> {
        let stopped = || ZoneError {
            origin: None,
            kind: ZoneErrorKind::NotServed("the zone manager has stopped".into()),
        };
        self.commands.send(command).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())
    }
}

#[cfg(test)]
mod tests;
