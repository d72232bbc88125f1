//! The typed specs of the blocking kinds, as the control thread hands them to
//! [`super::PolicyIndex::build`] after checking their JSON (`kudurru-control`'s
//! `objects::kinds`, where every error names its field). Plain data: no serde in `core`.

use std::net::IpAddr;
use std::time::Duration;

use crate::limiter::Prefix;

use super::blocklist::Format;
use super::matcher::ListMode;
use super::name::{self, NameError};
pub use super::schedule::{Schedule, ScheduleError, Weekdays, Window, parse_time, parse_weekday};

/// Where a list's body comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListSource {
    /// `http://` or `https://`, fetched on the control thread.
    Url(String),
    /// A local file, watched.
    File(std::path::PathBuf),
    /// Lines written in the spec.
    Inline(Vec<String>),
}

/// `BlockList.spec`.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockListSpec {
    /// Its sources, concatenated in order.
    pub sources: Vec<ListSource>,
    /// Their syntax.
    pub format: Format,
    /// Whether its rules block or allow.
    pub mode: ListMode,
    /// How often URL sources are fetched again (`None`: `blocking.refreshInterval`).
    pub refresh_interval: Option<Duration>,
    /// Most bytes one source may have (`None`: `blocking.maxListBytes`).
    pub max_bytes: Option<u64>,
    /// Most rules the list keeps (`None`: `blocking.maxListEntries`).
    pub max_entries: Option<u64>,
}

/// `ClientGroup.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientGroupSpec {
    /// Addresses and prefixes.
    pub clients: Vec<Prefix>,
    /// Client IDs: the DoH path segment or the TLS SNI's first label.
    pub client_ids: Vec<String>,
    /// `spec.queryLog`: the group's own query-log privacy and retention.
    pub query_log: GroupQueryLog,
}

/// `ClientGroup.spec.queryLog`: what the query log keeps of the group's clients, overriding
/// `querylog.privacy` and `querylog.retention` (a client in several groups gets the strictest
/// privacy and the shortest retention of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupQueryLog {
    /// `privacy`; `None`: `querylog.privacy`.
    pub privacy: Option<crate::querylog::Privacy>,
    /// `retention`; `None`: `querylog.retention`; zero: kept by age forever.
    pub retention: Option<Duration>,
}

/// What a blocked query gets (`Policy.spec.blockResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BlockResponse {
    /// NXDOMAIN, with an SOA for negative caching (RFC 2308) and Extended DNS Error 15
    /// "Blocked" (RFC 8914) for EDNS clients.
    #[default]
    Nxdomain,
    /// NOERROR with no records (and the SOA).
    Nodata,
    /// REFUSED.
    Refused,
    /// A/AAAA 0.0.0.0 and ::, NODATA for other types (Pi-hole's and Blocky's "zero IP").
    Null,
    /// These addresses for A/AAAA (a block page), NODATA for other types.
    Addresses(Vec<IpAddr>),
}

impl BlockResponse {
    /// The spelling in specs (`nxdomain`, `nodata`, `refused`, `null`; `addresses` for a
    /// list of addresses).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Nxdomain => "nxdomain",
            Self::Nodata => "nodata",
            Self::Refused => "refused",
            Self::Null => "null",
            Self::Addresses(_) => "addresses",
        }
    }

    /// The response spelled `label` (all but `addresses`, which carries its list).
    pub fn from_label(label: &str) -> Option<Self> {
        match label {
            "nxdomain" => Some(Self::Nxdomain),
            "nodata" => Some(Self::Nodata),
            "refused" => Some(Self::Refused),
            "null" => Some(Self::Null),
            _ => None,
        }
    }
}

/// What a rewrite answers for its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewriteTarget {
    /// These addresses (A for IPv4, AAAA for IPv6; the other type gets NODATA).
    Addresses(Vec<IpAddr>),
    /// A CNAME to this lowercase wire name (the target resolved as any other query).
    Cname(Box<[u8]>),
}

/// One rewrite of `Policy.spec.rewrites`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The lowercase wire name it answers (exactly; no wildcards).
    pub name: Box<[u8]>,
    /// What it answers.
    pub target: RewriteTarget,
}

impl Rewrite {
    /// A rewrite of the text name `name` (IDNA allowed) to `target`.
    pub fn new(name: &str, target: RewriteTarget) -> Result<Self, NameError> {
        Ok(Self {
            name: name::to_wire(name)?.into(),
            target,
        })
    }
}

impl RewriteTarget {
    /// A CNAME rewrite to the text name `target` (IDNA allowed).
    pub fn cname(target: &str) -> Result<Self, NameError> {
        Ok(Self::Cname(name::to_wire(target)?.into()))
    }
}

/// `Policy.spec`.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySpec {
    /// The client groups it applies to (`default`: clients in no group).
    pub client_groups: Vec<String>,
    /// Lists whose rules act as written.
    pub deny_lists: Vec<String>,
    /// Lists any of whose rules allow.
    pub allow_lists: Vec<String>,
    /// What a blocked query gets.
    pub block_response: BlockResponse,
    /// TTL of block answers and rewrites (`None`: `blocking.blockTTL`).
    pub block_ttl: Option<Duration>,
    /// Names answered by the policy itself, before any list.
    pub rewrites: Vec<Rewrite>,
    /// When it applies (`None`: always).
    pub schedule: Option<Schedule>,
}
