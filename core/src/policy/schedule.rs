//! Policy schedules: weekly time windows in a named time zone (`Policy.spec.schedule`),
//! resolved on the control thread when the index is built, never on a core.
//!
//! ```text
//! schedule:
//!   timeZone: Europe/Berlin          IANA name (the system's tzdata)
//!   windows:
//!     - days: [mon, tue, wed, thu, fri]
//!       from: "08:00"                local wall-clock time
//!       to: "17:30"                  a window with to <= from runs past midnight
//! ```

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {}

impl Schedule {
    /// Whether the schedule is in effect at `at`.
    pub fn active_at(&self, at: jiff::Timestamp) -> bool {
        let _ = at;
        unimplemented!("Schedule::active_at")
    }

    /// The first instant after `at` at which [`Self::active_at`] changes (within 8 days), so
    /// the control thread knows when to rebuild the index.
    pub fn next_change(&self, at: jiff::Timestamp) -> Option<jiff::Timestamp> {
        let _ = at;
        unimplemented!("Schedule::next_change")
    }
}
