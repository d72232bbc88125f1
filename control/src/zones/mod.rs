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
//! what it transferred, the UPDATE handler the changes a client asked for.

pub mod keys;
pub mod update;

use kudurru_core::zone::xfr::Diff;
use kudurru_core::zone::{Record, ZoneData, ZoneError};

/// What a transfer brought.
#[derive(Debug)]
pub enum Transferred {
    /// A whole zone (AXFR, or an IXFR answered with the whole zone).
    Full(ZoneData),
    /// Incremental changes, oldest first (IXFR).
    Diffs(Vec<Diff>),
}

/// The manager as the transfer, NOTIFY and UPDATE code reach it (cheap to clone).
#[derive(Clone)]
pub struct ZoneHandle {
    _private: (),
}

impl ZoneHandle {
    /// A secondary zone's new data from a transfer: compiled, kept in storage (a restart serves
    /// it at once), published, and NOTIFY sent on to its own secondaries.
    pub async fn transferred(&self, apex: &[u8], data: Transferred) -> Result<(), ZoneError> {
        let _ = (apex, data);
        unimplemented!("zone manager")
    }

    /// A secondary zone's SOA expire passed (`true`: SERVFAIL) or a transfer succeeded.
    pub async fn set_expired(&self, apex: &[u8], expired: bool) {
        let _ = (apex, expired);
        unimplemented!("zone manager")
    }

    /// What the UPDATE handler needs of the zone at `apex`: whether it is a primary here, its
    /// `allowUpdate` and its records now (`update::UpdateTarget`).
    pub fn update_target(&self, apex: &[u8]) -> update::UpdateTarget {
        let _ = apex;
        unimplemented!("zone manager")
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
        let _ = (apex, removed, added);
        unimplemented!("zone manager")
    }
}
