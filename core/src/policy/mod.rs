//! Blocking: block lists, client groups and policies, compiled once on the control thread and
//! read by every core from the settings snapshot.
//!
//! ```text
//! control thread (kudurru-control)                      every core (one snapshot per query)
//! ─────────────────────────────────                     ───────────────────────────────────
//! list body ─▶ blocklist::parse ─▶ ParsedList            client (address, client ID)
//!                 │                                         ▼ groups (prefix table, ID map)
//!                 ▼                                       plan (policies active for those groups)
//! Matcher::with_list (replace one list's entries)           ▼ rewrites, then matcher.lookup
//!                 ▼                                       allow ─▶ pass │ deny ─▶ block answer
//! PolicyIndex::build(matcher, groups, policies, now) ─▶ Arc in Settings
//! ```
//!
//! Sans-IO like the rest of `core`: a body in, a matcher out; a query and a client in, a
//! decision and an answer out. Schedules are resolved when the index is built (the control
//! thread rebuilds it at the next schedule change), so a core never reads a clock or a time
//! zone to decide.

pub mod answer;
pub mod blocklist;
pub mod index;
pub mod matcher;
pub mod name;
pub mod schedule;
pub mod spec;

/// The instant type of schedules and [`BuildInputs::now`] (jiff's), so callers need not name
/// jiff themselves.
pub use jiff::Timestamp;

pub use blocklist::{
    Action, Format, INVALID_SAMPLES, InvalidLine, LocalData, ParseStats, ParsedList, Rule, Scope,
    parse,
};
pub use index::{
    Blocked, BuildInputs, BuildReport, DEFAULT_GROUP, Explanation, GroupSpec, MAX_GROUPS,
    PolicyDecision, PolicyIndex, PolicySource,
};
pub use matcher::{Hit, ListId, ListMode, MAX_LISTS, Matcher, Role};
pub use name::NameError;
pub use schedule::{Schedule, ScheduleError, Weekdays, Window};
pub use spec::{
    BlockListSpec, BlockResponse, ClientGroupSpec, GroupQueryLog, ListSource, PolicySpec, Rewrite,
    RewriteTarget,
};
