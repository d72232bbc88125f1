//! All zones a node serves, as the snapshot holds them: the longest-match lookup from a qname
//! to its zone, answered there or routed to the forward zone's upstreams.

use std::net::IpAddr;
use std::sync::Arc;

use crate::upstream::UpstreamSpec;
use crate::wire::{Query, ReplyOptions};
use crate::zone::tree::Zone;
use crate::zone::xfr::{Journal, TransferPolicy};

/// A zone the node answers from, with what serving it needs besides its data.
#[derive(Debug, Clone)]
pub struct ServedZone {
    /// The compiled data.
    pub zone: Arc<Zone>,
    /// A secondary past its SOA expire: answered SERVFAIL until a transfer succeeds.
    pub expired: bool,
    /// Who may transfer it.
    pub transfer: Arc<TransferPolicy>,
    /// Its recent changes, for IXFR.
    pub journal: Arc<Journal>,
}

/// A domain sent to its own upstreams.
#[derive(Debug, Clone)]
pub struct ForwardZone {
    /// The domain, lowercase wire form.
    pub apex: Box<[u8]>,
    /// Where its queries go, in order.
    pub upstreams: Arc<[UpstreamSpec]>,
}

/// What the zone stage did with a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneAnswer {
    /// Not in any authoritative zone: go on (cache, then upstream, [`Zones::route`]).
    Pass,
    /// An answer (or error) is in `out`.
    Answered,
    /// An AXFR or IXFR the client may have, over a stream transport: serve it with
    /// [`crate::zone::xfr::Transfer`] from the zone at this index.
    Transfer(usize),
}

/// Which upstreams a cache miss goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The global upstreams (`upstreams`).
    Global,
    /// The forward zone at this index (`Zones::forward`).
    Forward(usize),
}

/// Every zone the node serves: one `Arc` in the settings snapshot, one copy for all cores.
#[derive(Debug, Default)]
pub struct Zones {
    served: Vec<ServedZone>,
    forwards: Vec<ForwardZone>,
}

impl Zones {
    /// The built-in zones only (RFC 6761, RFC 6303 as Unbound serves them).
    pub fn builtin() -> Self {
        Self::default()
    }

    /// `served` and `forwards` with the built-in zones under them: a configured zone (of any
    /// type) at a built-in zone's apex replaces it.
    pub fn new(served: Vec<ServedZone>, forwards: Vec<ForwardZone>) -> Self {
        let _ = (served, forwards);
        unimplemented!("zones")
    }

    /// The zone stage: answers `query` from the deepest authoritative zone holding its
    /// name, or passes. `stream` is whether the transport is a stream (transfers need one);
    /// `client` is asked for by transfer ACLs.
    pub fn answer(
        &self,
        query: &Query<'_>,
        client: IpAddr,
        stream: bool,
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) -> ZoneAnswer {
        let _ = (query, client, stream, options, out);
        ZoneAnswer::Pass
    }

    /// Where a miss for `qname` (lowercase wire) goes: the deepest forward zone holding it.
    pub fn route(&self, qname: &[u8]) -> Route {
        let _ = qname;
        Route::Global
    }

    /// The forward zone `index` names.
    pub fn forward(&self, index: usize) -> Option<&ForwardZone> {
        self.forwards.get(index)
    }

    /// The authoritative zones served (built-in ones included; their kind says so).
    pub fn served(&self) -> &[ServedZone] {
        &self.served
    }

    /// The forward zones.
    pub fn forwards(&self) -> &[ForwardZone] {
        &self.forwards
    }
}
