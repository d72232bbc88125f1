//! All zones a node serves, as the snapshot holds them: the longest-match lookup from a qname
//! to its zone, answered there or routed to the forward zone's upstreams.
//!
//! ```text
//! qname ─▶ class IN? ─▶ top-level label among the zones'? ─ no ─▶ Pass (AXFR/IXFR: REFUSED)
//!                              │ yes
//!              deepest apex (hash lookups, deepest first, bounded by the zones' depth)
//!                 ├─ served zone ─────────▶ Answered (SERVFAIL when expired), Transfer
//!                 ├─ forward zone ────────▶ Pass (the miss goes to Zones::route)
//!                 └─ delegation (implicit) ─ RD=1 ─▶ Pass (forwarded to the child's glue)
//!                                          └ RD=0 ─▶ Answered (referral from the parent)
//! ```
//!
//! Delegations: a served primary or secondary zone's cut whose name servers have in-zone
//! glue addresses becomes an implicit forward zone at the cut, with `udp://glue:53`
//! upstreams (TCP on truncation), built here in [`Zones::new`] and listed after the
//! configured forward zones in [`Zones::forwards`]. A recursive query (RD=1) below the cut is
//! forwarded to the child's servers as Unbound's stub-zone does; a non-recursive one gets the
//! referral; DS at the cut is the parent's and always answered. A cut already covered by a
//! configured zone or forward zone at the same name is left to that one.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hashbrown::HashMap;

use crate::upstream::{UpstreamProtocol, UpstreamSpec};
use crate::wire::{self, Query, ReplyOptions, class, rcode, rtype};
use crate::zone::data::{Record, ZoneData};
use crate::zone::tree::{Zone, ZoneKind, label_starts, to_wire};
use crate::zone::xfr::{Journal, Transfer, TransferPolicy};

/// DS, the one type at a cut that the parent answers (RFC 4035 §3.1.4.1).
const DS: u16 = 43;

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

impl ServedZone {
    /// A zone served with no transfers allowed and no journal.
    pub fn new(zone: Arc<Zone>) -> Self {
        Self {
            zone,
            expired: false,
            transfer: Arc::default(),
            journal: Arc::default(),
        }
    }
}

impl ServedZone {
    /// An AXFR or IXFR of this zone requested over a stream by `client` at `now` (Unix
    /// seconds): checked and planned ([`Transfer::plan`]), or the error message to send.
    pub fn transfer(&self, request: &[u8], client: IpAddr, now: u64) -> Result<Transfer, Vec<u8>> {
        Transfer::plan_zone(
            &self.transfer,
            &self.journal,
            &self.zone,
            request,
            client,
            now,
        )
    }

    /// An IXFR over UDP: the current SOA alone, or the error message ([`Transfer::plan_datagram`]).
    pub fn transfer_datagram(&self, request: &[u8], client: IpAddr, now: u64) -> Vec<u8> {
        let soa = self.zone.records().next().filter(|r| r.rtype == rtype::SOA);
        match Transfer::plan_datagram(
            &self.transfer,
            self.zone.serial(),
            soa,
            request,
            client,
            now,
        ) {
            Ok(answer) | Err(answer) => answer,
        }
    }
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

/// What an apex in the lookup table is.
#[derive(Debug, Clone, Copy)]
enum Target {
    Served(u32),
    Forward(u32),
    /// A cut of served zone `served` forwarded (RD=1) to the implicit forward zone `forward`.
    Delegation {
        served: u32,
        forward: u32,
    },
}

/// A top-level label some zone ends in, and the label counts of those zones' apexes.
#[derive(Debug, Clone)]
struct TopLevel {
    label: Box<[u8]>,
    /// Most labels of an apex under it (the root label not counted).
    max_labels: usize,
}

/// Every zone the node serves: one `Arc` in the settings snapshot, one copy for all cores.
///
/// `Zones::default()` holds no zone at all, not even the built-in ones ([`Zones::builtin`]).
#[derive(Debug, Default)]
pub struct Zones {
    served: Vec<ServedZone>,
    forwards: Vec<ForwardZone>,
    apexes: HashMap<Box<[u8]>, Target, foldhash::fast::FixedState>,
    top_levels: Vec<TopLevel>,
    /// Whether a zone is at the root: then every name is looked up.
    root: bool,
}

impl Zones {
    /// The built-in zones only (RFC 6761, RFC 6303 as Unbound serves them).
    pub fn builtin() -> Self {
        Self::new(Vec::new(), Vec::new())
    }

    /// `served` and `forwards` with the built-in zones under them: a configured zone (of any
    /// type) at a built-in zone's apex replaces it. Two configured zones at one apex: the
    /// first served one wins, then the first forward one (the manager refuses duplicates).
    pub fn new(mut served: Vec<ServedZone>, mut forwards: Vec<ForwardZone>) -> Self {
        let mut zones = Self::default();
        let configured: Vec<Box<[u8]>> = served
            .iter()
            .map(|s| Box::from(s.zone.apex()))
            .chain(forwards.iter().map(|f| f.apex.clone()))
            .collect();
        for zone in builtin_zones() {
            if !configured.iter().any(|apex| **apex == *zone.apex()) {
                served.push(ServedZone::new(Arc::new(zone)));
            }
        }
        for (i, zone) in served.iter().enumerate() {
            zones.insert(zone.zone.apex(), Target::Served(i as u32));
        }
        for (i, forward) in forwards.iter().enumerate() {
            zones.insert(&forward.apex, Target::Forward(i as u32));
        }
        // Delegations with glue become implicit forward zones (module docs).
        for (i, zone) in served.iter().enumerate() {
            if zone.zone.kind() == ZoneKind::BuiltIn || zone.expired {
                continue;
            }
            for (cut, addrs) in zone.zone.delegations() {
                if zones.apexes.contains_key(cut) {
                    continue;
                }
                let upstreams: Arc<[UpstreamSpec]> = addrs
                    .iter()
                    .map(|&ip| UpstreamSpec::plain(UpstreamProtocol::Udp, SocketAddr::new(ip, 53)))
                    .collect();
                let forward = forwards.len() as u32;
                forwards.push(ForwardZone {
                    apex: cut.into(),
                    upstreams,
                });
                zones.insert(
                    cut,
                    Target::Delegation {
                        served: i as u32,
                        forward,
                    },
                );
            }
        }
        zones.served = served;
        zones.forwards = forwards;
        zones
    }

    fn insert(&mut self, apex: &[u8], target: Target) {
        if self.apexes.contains_key(apex) {
            return;
        }
        self.apexes.insert(apex.into(), target);
        let mut starts = [0u8; 128];
        let labels = label_starts(apex, &mut starts).saturating_sub(1);
        if labels == 0 {
            self.root = true;
            return;
        }
        let top = last_label(apex);
        match self.top_levels.iter_mut().find(|t| *t.label == *top) {
            Some(t) => t.max_labels = t.max_labels.max(labels),
            None => self.top_levels.push(TopLevel {
                label: top.into(),
                max_labels: labels,
            }),
        }
    }

    /// The deepest zone apex holding `qname` (lowercase wire).
    #[inline]
    fn find<'q>(&self, qname: &'q [u8]) -> Option<(Target, &'q [u8])> {
        let top = last_label(qname);
        let max_labels = match self.top_levels.iter().find(|t| *t.label == *top) {
            Some(t) => t.max_labels,
            None if self.root => 0,
            None => return None,
        };
        let mut starts = [0u8; 128];
        let count = label_starts(qname, &mut starts);
        let labels = count.saturating_sub(1);
        // Deepest first: the suffix with `max_labels` labels, then shorter ones.
        let first = labels.saturating_sub(max_labels);
        for &at in &starts[first..count] {
            let suffix = &qname[usize::from(at)..];
            if let Some(&target) = self.apexes.get(suffix) {
                return Some((target, suffix));
            }
        }
        None
    }

    /// The zone stage: answers `query` from the deepest authoritative zone holding its
    /// name, or passes. `stream` is whether the transport is a stream (transfers need one);
    /// `client` is for transfer ACLs (the transfer itself checks them). AXFR and IXFR are
    /// never passed: outside a served zone's apex, over UDP, or for a built-in zone, they are
    /// REFUSED (RFC 5936 §4.2: no AXFR over UDP); IXFR over UDP is a Transfer the datagram
    /// transport answers with the current SOA (RFC 1995 §2).
    pub fn answer(
        &self,
        query: &Query<'_>,
        client: IpAddr,
        stream: bool,
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) -> ZoneAnswer {
        let _ = client;
        if query.qclass() != class::IN {
            return ZoneAnswer::Pass;
        }
        let qtype = query.qtype();
        let transfer = matches!(qtype, rtype::AXFR | rtype::IXFR);
        let qname = query.key().qname();
        let served = match self.find(qname) {
            Some((Target::Served(i), _)) => i,
            Some((Target::Delegation { served, .. }, cut))
                if transfer
                    || !query.recursion_desired()
                    || (qtype == DS && qname.len() == cut.len()) =>
            {
                served
            }
            Some((Target::Delegation { .. } | Target::Forward(_), _)) | None => {
                if transfer {
                    wire::write_error(query, rcode::REFUSED, options, out);
                    return ZoneAnswer::Answered;
                }
                return ZoneAnswer::Pass;
            }
        };
        let Some(zone) = self.served.get(served as usize) else {
            return ZoneAnswer::Pass;
        };
        if zone.expired {
            wire::write_error(query, rcode::SERVFAIL, options, out);
            return ZoneAnswer::Answered;
        }
        if transfer {
            // IXFR over UDP too: answered with the current SOA alone (RFC 1995 §2).
            if (stream || qtype == rtype::IXFR)
                && qname == zone.zone.apex()
                && zone.zone.kind() != ZoneKind::BuiltIn
            {
                return ZoneAnswer::Transfer(served as usize);
            }
            wire::write_error(query, rcode::REFUSED, options, out);
            return ZoneAnswer::Answered;
        }
        let udp_limit = (!stream).then(|| query.udp_limit(options.payload));
        zone.zone.answer(query, udp_limit, options, out);
        ZoneAnswer::Answered
    }

    /// Where a miss for `qname` (lowercase wire) goes: the deepest forward zone holding it
    /// (an implicit one for a delegation, module docs), else the global upstreams.
    pub fn route(&self, qname: &[u8]) -> Route {
        match self.find(qname) {
            Some((Target::Forward(i) | Target::Delegation { forward: i, .. }, _)) => {
                Route::Forward(i as usize)
            }
            Some((Target::Served(_), _)) | None => Route::Global,
        }
    }

    /// The forward zone `index` names.
    pub fn forward(&self, index: usize) -> Option<&ForwardZone> {
        self.forwards.get(index)
    }

    /// The authoritative zones served (built-in ones included; their kind says so).
    pub fn served(&self) -> &[ServedZone] {
        &self.served
    }

    /// The forward zones: the configured ones in order, then the implicit ones of
    /// delegations with glue.
    pub fn forwards(&self) -> &[ForwardZone] {
        &self.forwards
    }
}

/// The last (top-level) label of a valid wire name, empty for the root.
#[inline]
fn last_label(name: &[u8]) -> &[u8] {
    let mut at = 0;
    let mut last: &[u8] = &[];
    while let Some(&len) = name.get(at) {
        if len == 0 {
            break;
        }
        last = name.get(at + 1..at + 1 + usize::from(len)).unwrap_or(&[]);
        at += 1 + usize::from(len);
    }
    last
}

/// The TTL of every built-in record: the SOA MINIMUM RFC 6303 §3 recommends.
const LOCAL_TTL: u32 = 10_800;
const LOCALHOST_WIRE: &[u8] = b"\x09localhost\x00";

/// Zones answered locally, as Unbound does by default. `localhost.` answers loopback
/// addresses for itself and every name below it (RFC 6761 §6.3); the loopback reverse names
/// answer PTR `localhost.`; the others are empty zones: NXDOMAIN below the apex, SOA and NS at
/// it.
const BUILTIN_ZONES: &[&str] = &[
    "localhost",
    "invalid",
    "test",
    "onion",
    "home.arpa",
    // RFC 6303 §4.1-4.3, RFC 6598 (shared address space), as Unbound's defaults.
    "10.in-addr.arpa",
    "16.172.in-addr.arpa",
    "17.172.in-addr.arpa",
    "18.172.in-addr.arpa",
    "19.172.in-addr.arpa",
    "20.172.in-addr.arpa",
    "21.172.in-addr.arpa",
    "22.172.in-addr.arpa",
    "23.172.in-addr.arpa",
    "24.172.in-addr.arpa",
    "25.172.in-addr.arpa",
    "26.172.in-addr.arpa",
    "27.172.in-addr.arpa",
    "28.172.in-addr.arpa",
    "29.172.in-addr.arpa",
    "30.172.in-addr.arpa",
    "31.172.in-addr.arpa",
    "168.192.in-addr.arpa",
    "0.in-addr.arpa",
    "127.in-addr.arpa",
    "254.169.in-addr.arpa",
    "2.0.192.in-addr.arpa",
    "100.51.198.in-addr.arpa",
    "113.0.203.in-addr.arpa",
    "255.255.255.255.in-addr.arpa",
    "0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa",
    LOOPBACK_V6_REVERSE,
    "d.f.ip6.arpa",
    "8.e.f.ip6.arpa",
    "9.e.f.ip6.arpa",
    "a.e.f.ip6.arpa",
    "b.e.f.ip6.arpa",
    "8.b.d.0.1.0.0.2.ip6.arpa",
];

/// `1.0.0.127.in-addr.arpa.` and the `::1` nibble name answer PTR `localhost.` (as Unbound).
const LOOPBACK_V4_REVERSE: &str = "1.0.0.127.in-addr.arpa";
const LOOPBACK_V6_REVERSE: &str =
    "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa";

/// The SOA RFC 6303 §3 recommends for locally served zones:
/// `localhost. nobody.invalid. 1 3600 1200 604800 10800`.
fn local_soa_rdata() -> Box<[u8]> {
    let mut rdata = LOCALHOST_WIRE.to_vec();
    rdata.extend_from_slice(b"\x06nobody\x07invalid\x00");
    for value in [1u32, 3600, 1200, 604_800, LOCAL_TTL] {
        rdata.extend_from_slice(&value.to_be_bytes());
    }
    rdata.into()
}

/// The built-in zones, compiled by the same machinery as configured ones.
fn builtin_zones() -> impl Iterator<Item = Zone> {
    BUILTIN_ZONES.iter().filter_map(|dotted| {
        let apex: Box<[u8]> = to_wire(dotted).into();
        let record = |owner: &[u8], rtype: u16, rdata: &[u8]| Record {
            owner: owner.into(),
            rtype,
            ttl: LOCAL_TTL,
            rdata: rdata.into(),
        };
        let mut records = vec![
            record(&apex, rtype::SOA, &local_soa_rdata()),
            record(&apex, rtype::NS, LOCALHOST_WIRE),
        ];
        if *dotted == "localhost" {
            let wild = to_wire("*.localhost");
            for owner in [&apex[..], &wild] {
                records.push(record(owner, rtype::A, &[127, 0, 0, 1]));
                records.push(record(
                    owner,
                    rtype::AAAA,
                    &std::net::Ipv6Addr::LOCALHOST.octets(),
                ));
            }
        } else if *dotted == "127.in-addr.arpa" {
            let owner = to_wire(LOOPBACK_V4_REVERSE);
            records.push(record(&owner, rtype::PTR, LOCALHOST_WIRE));
        } else if *dotted == LOOPBACK_V6_REVERSE {
            records.push(record(&apex, rtype::PTR, LOCALHOST_WIRE));
        }
        let data = ZoneData {
            apex,
            records,
            origins: Vec::new(),
        };
        // The built-in data is fixed and valid; a failure here is a bug the tests catch.
        Zone::compile(&data, ZoneKind::BuiltIn).ok()
    })
}

#[cfg(test)]
mod tests {
    use domain::base::iana::Rtype;

    use super::*;
    use crate::zone::tree::tests::{Parsed, parse, query};

    /// The zone stage's answer to `name`/`qtype`, as a datagram or over a stream.
    fn ask(zones: &Zones, name: &str, qtype: u16, rd: bool, stream: bool) -> (ZoneAnswer, Vec<u8>) {
        let m = query(name, qtype, Some((1232, false)), rd);
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        let client = "127.0.0.1".parse().unwrap();
        let verdict = zones.answer(&q, client, stream, &ReplyOptions::udp(1232), &mut out);
        (verdict, out)
    }

    fn answered(zones: &Zones, name: &str, qtype: u16) -> Parsed {
        let (verdict, out) = ask(zones, name, qtype, true, false);
        assert_eq!(verdict, ZoneAnswer::Answered, "{name}");
        Parsed::new(out)
    }

    fn corp() -> ServedZone {
        let text = "$ORIGIN corp.example.\n@ 300 SOA ns1 h 5 2 3 4 60\n@ 300 NS ns1\n\
                    ns1 300 A 192.0.2.53\nwww 300 A 192.0.2.1\n\
                    sub 300 NS ns.sub\nns.sub 300 A 192.0.2.54\nns.sub 300 AAAA 2001:db8::54\n";
        let zone = Zone::compile(&parse("corp.example", text), ZoneKind::Primary).unwrap();
        ServedZone::new(Arc::new(zone))
    }

    #[test]
    fn rfc6761_6_3_localhost_answers_loopback() {
        let zones = Zones::builtin();
        let p = answered(&zones, "LocalHost", rtype::A);
        assert!(p.aa());
        assert_eq!(
            p.section(0),
            vec![("LocalHost".into(), Rtype::A, LOCAL_TTL)]
        );
        let p = answered(&zones, "foo.localhost", rtype::AAAA);
        assert_eq!(
            p.section(0),
            vec![("foo.localhost".into(), Rtype::AAAA, LOCAL_TTL)]
        );
        let p = answered(&zones, "a.b.localhost", rtype::A);
        assert_eq!(p.types(0), vec![Rtype::A]);
        let p = answered(&zones, "localhost", 15);
        assert_eq!(p.rcode(), rcode::NOERROR);
        assert_eq!(p.types(1), vec![Rtype::SOA]);
        let p = answered(&zones, "localhost", rtype::NS);
        assert_eq!(p.types(0), vec![Rtype::NS]);
    }

    #[test]
    fn rfc6303_private_reverse_is_nxdomain_with_soa() {
        let zones = Zones::builtin();
        let p = answered(&zones, "1.1.168.192.in-addr.arpa", rtype::PTR);
        assert_eq!(p.rcode(), rcode::NXDOMAIN);
        assert_eq!(
            p.section(1),
            vec![("168.192.in-addr.arpa".into(), Rtype::SOA, LOCAL_TTL)]
        );
        let p = answered(&zones, "10.in-addr.arpa", rtype::SOA);
        assert_eq!(p.types(0), vec![Rtype::SOA]);
        let p = answered(&zones, "1.0.0.127.in-addr.arpa", rtype::PTR);
        assert_eq!(p.rcode(), rcode::NOERROR);
        assert_eq!(p.types(0), vec![Rtype::PTR]);
        let p = answered(&zones, LOOPBACK_V6_REVERSE, rtype::PTR);
        assert_eq!(p.types(0), vec![Rtype::PTR]);
        for name in [
            "8.8.8.8.in-addr.arpa",
            "1.32.172.in-addr.arpa",
            "example.com",
            "arpa",
        ] {
            assert_eq!(
                ask(&zones, name, rtype::A, true, false).0,
                ZoneAnswer::Pass,
                "{name}"
            );
        }
        assert_eq!(zones.served().len(), BUILTIN_ZONES.len());
    }

    #[test]
    fn configured_zones_replace_built_in_ones_at_their_apex() {
        let test = "$ORIGIN test.\n@ 300 SOA ns h 1 2 3 4 5\n@ 300 NS ns\nhost 300 A 192.0.2.7\n";
        let test = Zone::compile(&parse("test", test), ZoneKind::Primary).unwrap();
        let forward = ForwardZone {
            apex: to_wire("home.arpa").into(),
            upstreams: Arc::from(vec![
                "udp://127.0.0.1:5301".parse::<UpstreamSpec>().unwrap(),
            ]),
        };
        let zones = Zones::new(vec![ServedZone::new(Arc::new(test))], vec![forward]);
        let p = answered(&zones, "host.test", rtype::A);
        assert_eq!(p.types(0), vec![Rtype::A]);
        assert_eq!(
            ask(&zones, "printer.home.arpa", rtype::A, true, false).0,
            ZoneAnswer::Pass
        );
        assert_eq!(
            zones.route(&to_wire("printer.home.arpa")),
            Route::Forward(0)
        );
        assert_eq!(zones.route(&to_wire("host.test")), Route::Global);
        assert_eq!(zones.route(&to_wire("example.com")), Route::Global);
        assert_eq!(zones.served().len(), BUILTIN_ZONES.len() - 1);
        // Other built-ins stay.
        assert_eq!(
            answered(&zones, "x.invalid", rtype::A).rcode(),
            rcode::NXDOMAIN
        );
    }

    #[test]
    fn the_deepest_zone_wins_and_forward_zones_below_served_ones_pass() {
        let forward = ForwardZone {
            apex: to_wire("lab.corp.example").into(),
            upstreams: Arc::from(vec![
                "udp://127.0.0.1:5301".parse::<UpstreamSpec>().unwrap(),
            ]),
        };
        let zones = Zones::new(vec![corp()], vec![forward]);
        assert_eq!(
            answered(&zones, "www.corp.example", rtype::A).types(0),
            vec![Rtype::A]
        );
        assert_eq!(
            ask(&zones, "a.lab.corp.example", rtype::A, true, false).0,
            ZoneAnswer::Pass
        );
        assert_eq!(
            zones.route(&to_wire("a.lab.corp.example")),
            Route::Forward(0)
        );
    }

    #[test]
    fn delegations_with_glue_are_forwarded_for_recursive_queries() {
        let zones = Zones::new(vec![corp()], Vec::new());
        let (verdict, _) = ask(&zones, "host.sub.corp.example", rtype::A, true, false);
        assert_eq!(
            verdict,
            ZoneAnswer::Pass,
            "RD=1: forwarded to the child (stub zone)"
        );
        let Route::Forward(i) = zones.route(&to_wire("host.sub.corp.example")) else {
            panic!("a delegation routes to its glue");
        };
        let forward = zones.forward(i).unwrap();
        assert_eq!(*forward.apex, *to_wire("sub.corp.example"));
        let upstreams: Vec<String> = forward.upstreams.iter().map(ToString::to_string).collect();
        assert_eq!(
            upstreams,
            ["udp://192.0.2.54:53", "udp://[2001:db8::54]:53"]
        );
        let (verdict, out) = ask(&zones, "host.sub.corp.example", rtype::A, false, false);
        assert_eq!(verdict, ZoneAnswer::Answered, "RD=0: the referral");
        let p = Parsed::new(out);
        assert!(!p.aa());
        assert_eq!(p.types(1), vec![Rtype::NS]);
        assert_eq!(p.types(2), vec![Rtype::A, Rtype::AAAA]);
        // DS at the cut is the parent's, whatever RD says.
        let (verdict, out) = ask(&zones, "sub.corp.example", DS, true, false);
        assert_eq!(verdict, ZoneAnswer::Answered);
        assert!(Parsed::new(out).aa());
    }

    #[test]
    fn transfers_go_to_the_transfer_stage_over_streams_and_ixfr_over_udp() {
        let zones = Zones::new(vec![corp()], Vec::new());
        // RFC 1995 §2: an IXFR over UDP is answered (the current SOA) by the transfer stage.
        assert_eq!(
            ask(&zones, "corp.example", rtype::IXFR, false, false).0,
            ZoneAnswer::Transfer(0)
        );
        let (verdict, out) = ask(&zones, "corp.example", rtype::AXFR, false, false);
        assert_eq!(
            verdict,
            ZoneAnswer::Answered,
            "RFC 5936 §4.2: no AXFR over UDP"
        );
        assert_eq!(wire::header_rcode(&out), Some(rcode::REFUSED));
        for qtype in [rtype::AXFR, rtype::IXFR] {
            assert_eq!(
                ask(&zones, "corp.example", qtype, false, true).0,
                ZoneAnswer::Transfer(0)
            );
            for (name, stream) in [
                ("www.corp.example", true),
                ("example.com", true),
                ("localhost", true),
            ] {
                let (verdict, out) = ask(&zones, name, qtype, false, stream);
                assert_eq!(verdict, ZoneAnswer::Answered, "{name} {qtype}");
                assert_eq!(wire::header_rcode(&out), Some(rcode::REFUSED));
            }
        }
    }

    #[test]
    fn an_expired_zone_answers_servfail() {
        let mut zone = corp();
        zone.expired = true;
        let zones = Zones::new(vec![zone], Vec::new());
        let (verdict, out) = ask(&zones, "www.corp.example", rtype::A, true, false);
        assert_eq!(verdict, ZoneAnswer::Answered);
        assert_eq!(wire::header_rcode(&out), Some(rcode::SERVFAIL));
    }

    #[test]
    fn other_classes_pass_to_the_local_names() {
        let zones = Zones::builtin();
        let mut m = query("localhost", rtype::A, None, true);
        let at = m.len() - 2;
        m[at..].copy_from_slice(&class::CH.to_be_bytes());
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        let client = "127.0.0.1".parse().unwrap();
        let verdict = zones.answer(&q, client, false, &ReplyOptions::udp(1232), &mut out);
        assert_eq!(verdict, ZoneAnswer::Pass);
    }
}

#[cfg(test)]
mod scale {
    use std::time::Instant;

    use super::*;
    use crate::zone::tree::tests::{parse, query};

    /// The pass path (a name in no zone) and a built-in answer, per query. Run with
    /// `cargo test -p kudurru-core --release zone::set::scale -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, in release mode"]
    fn the_pass_path_costs_a_label_walk() {
        let configured: Vec<ServedZone> = (0..10)
            .map(|i| {
                let apex = format!("corp{i}.example");
                let text = format!("$ORIGIN {apex}.\n@ 300 SOA ns h 1 2 3 4 5\n@ 300 NS ns\n");
                let zone = Zone::compile(&parse(&apex, &text), ZoneKind::Primary).unwrap();
                ServedZone::new(Arc::new(zone))
            })
            .collect();
        for (what, zones) in [
            ("built-ins", Zones::builtin()),
            ("built-ins and 10 zones", Zones::new(configured, Vec::new())),
        ] {
            for name in ["www.example.com", "www.other.example", "localhost"] {
                let m = query(name, rtype::A, Some((1232, false)), true);
                let q = Query::parse(&m).unwrap();
                let client = "127.0.0.1".parse().unwrap();
                let options = ReplyOptions::udp(1232);
                let mut out = Vec::with_capacity(512);
                let rounds = 1_000_000u32;
                let started = Instant::now();
                for _ in 0..rounds {
                    std::hint::black_box(zones.answer(
                        std::hint::black_box(&q),
                        client,
                        false,
                        &options,
                        &mut out,
                    ));
                }
                println!("{what}: {name}: {:?} per query", started.elapsed() / rounds);
            }
        }
    }
}
