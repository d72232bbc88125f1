//! Names kudurru answers itself and never forwards: special-use domains (RFC 6761, RFC 7686,
//! RFC 8375), the locally served reverse zones of RFC 6303, and the CHAOS identification names
//! (RFC 4892), as Unbound does by default.

use crate::wire::{self, Query, ReplyOptions, class, rcode, rtype};

/// The SOA RFC 6303 §3 recommends for locally served zones, as rdata:
/// `localhost. nobody.invalid. 1 3600 1200 604800 10800`.
const LOCAL_SOA_MINIMUM: u32 = 10_800;
const LOCALHOST_WIRE: &[u8] = b"\x09localhost\x00";

/// Zones answered locally. `localhost.` answers loopback addresses for itself and every name below
/// it (RFC 6761 §6.3); the others are empty zones: NXDOMAIN below the apex, SOA and NS at it.
const LOCAL_ZONES: &[&str] = &[
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

/// Converts `a.b.c` to lowercase wire form.
fn to_wire(dotted: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(dotted.len() + 2);
    for label in dotted.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    out.push(0);
    out
}

/// The CHAOS TXT strings (`id.server`, `version.server`); an empty string refuses that name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    /// Answered to `id.server` and `hostname.bind` (`server.identity`).
    pub identity: String,
    /// Answered to `version.server` and `version.bind` (`server.version`).
    pub version: String,
}

/// The compiled set of locally answered names.
#[derive(Debug, Clone)]
pub struct LocalNames {
    zones: Vec<Vec<u8>>,
    loopback_v6: Vec<u8>,
    identity: ServerIdentity,
}

impl LocalNames {
    /// The built-in zone set with the given CHAOS identity.
    pub fn new(identity: ServerIdentity) -> Self {
        Self {
            zones: LOCAL_ZONES.iter().map(|z| to_wire(z)).collect(),
            loopback_v6: to_wire(LOOPBACK_V6_REVERSE),
            identity,
        }
    }

    /// Writes a local answer for `query` into `out`, or returns `false` to resolve it normally.
    pub fn answer(&self, query: &Query<'_>, options: &ReplyOptions, out: &mut Vec<u8>) -> bool {
        let qname = query.key().qname();
        match query.qclass() {
            class::IN => {}
            class::CH => {
                self.answer_chaos(query, options, out);
                return true;
            }
            _ => {
                wire::write_error(query, rcode::REFUSED, options, out);
                return true;
            }
        }
        if matches!(query.qtype(), rtype::AXFR | rtype::IXFR) {
            wire::write_error(query, rcode::REFUSED, options, out);
            return true;
        }
        // Cheap filter first: every local zone ends in one of these labels.
        let last = last_label(qname);
        if !matches!(
            last,
            b"arpa" | b"localhost" | b"invalid" | b"test" | b"onion"
        ) {
            return false;
        }
        let Some((apex_at, zone)) = self.find_zone(qname) else {
            return false;
        };
        self.answer_zone(query, apex_at, zone, options, out);
        true
    }

    /// The longest local zone containing `qname`, with the offset of its apex inside `qname`.
    fn find_zone(&self, qname: &[u8]) -> Option<(usize, &[u8])> {
        let mut at = 0;
        while at < qname.len() {
            let suffix = &qname[at..];
            if let Some(zone) = self.zones.iter().find(|z| z.as_slice() == suffix) {
                return Some((at, zone));
            }
            at += 1 + usize::from(qname[at]);
        }
        None
    }

    fn answer_zone(
        &self,
        query: &Query<'_>,
        apex_at: usize,
        zone: &[u8],
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) {
        let qtype = query.qtype();
        let qname = query.key().qname();
        let at_apex = apex_at == 0;
        let question_at = wire::HEADER_LEN;
        let apex_ptr = question_at + apex_at;
        let is_localhost = zone == LOCALHOST_WIRE;
        let loopback_ptr = qname == LOOPBACK_V4_REVERSE || qname == self.loopback_v6.as_slice();

        wire::start_response(query, rcode::NOERROR, true, out);
        let answered = if is_localhost && qtype == rtype::A {
            wire::push_record(
                out,
                question_at,
                rtype::A,
                LOCAL_SOA_MINIMUM,
                &[127, 0, 0, 1],
            );
            true
        } else if is_localhost && qtype == rtype::AAAA {
            let mut v6 = [0u8; 16];
            v6[15] = 1;
            wire::push_record(out, question_at, rtype::AAAA, LOCAL_SOA_MINIMUM, &v6);
            true
        } else if loopback_ptr && qtype == rtype::PTR {
            wire::push_record(
                out,
                question_at,
                rtype::PTR,
                LOCAL_SOA_MINIMUM,
                LOCALHOST_WIRE,
            );
            true
        } else if at_apex && qtype == rtype::SOA {
            wire::push_record(
                out,
                question_at,
                rtype::SOA,
                LOCAL_SOA_MINIMUM,
                &local_soa_rdata(),
            );
            true
        } else if at_apex && qtype == rtype::NS {
            wire::push_record(
                out,
                question_at,
                rtype::NS,
                LOCAL_SOA_MINIMUM,
                LOCALHOST_WIRE,
            );
            true
        } else {
            false
        };
        if answered {
            wire::count_answer(out);
        } else {
            let exists = at_apex || is_localhost || loopback_ptr;
            if !exists {
                out[3] = (out[3] & 0xf0) | rcode::NXDOMAIN;
            }
            wire::push_record(
                out,
                apex_ptr,
                rtype::SOA,
                LOCAL_SOA_MINIMUM,
                &local_soa_rdata(),
            );
            wire::count_authority(out);
        }
        wire::finish_response(query, out, options);
    }

    fn answer_chaos(&self, query: &Query<'_>, options: &ReplyOptions, out: &mut Vec<u8>) {
        let text = match query.key().qname() {
            b"\x02id\x06server\x00" | b"\x08hostname\x04bind\x00" => &self.identity.identity,
            b"\x07version\x06server\x00" | b"\x07version\x04bind\x00" => &self.identity.version,
            _ => "",
        };
        if query.qtype() != rtype::TXT || text.is_empty() {
            wire::write_error(query, rcode::REFUSED, options, out);
            return;
        }
        wire::start_response(query, rcode::NOERROR, true, out);
        let mut rdata = Vec::with_capacity(text.len() + 1);
        let bytes = &text.as_bytes()[..text.len().min(255)];
        rdata.push(bytes.len() as u8);
        rdata.extend_from_slice(bytes);
        let start = out.len();
        wire::push_record(out, wire::HEADER_LEN, rtype::TXT, 0, &rdata);
        // CHAOS records carry class CH.
        out[start + 4..start + 6].copy_from_slice(&class::CH.to_be_bytes());
        wire::count_answer(out);
        wire::finish_response(query, out, options);
    }
}

fn last_label(qname: &[u8]) -> &[u8] {
    let mut at = 0;
    let mut last: &[u8] = &[];
    while let Some(&len) = qname.get(at) {
        if len == 0 {
            break;
        }
        last = qname.get(at + 1..at + 1 + usize::from(len)).unwrap_or(&[]);
        at += 1 + usize::from(len);
    }
    last
}

/// `1.0.0.127.in-addr.arpa.` and the `::1` nibble name answer PTR `localhost.` (as Unbound).
const LOOPBACK_V4_REVERSE: &[u8] = b"\x011\x010\x010\x03127\x07in-addr\x04arpa\x00";
const LOOPBACK_V6_REVERSE: &str =
    "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa";

fn local_soa_rdata() -> Vec<u8> {
    let mut rdata = LOCALHOST_WIRE.to_vec();
    rdata.extend_from_slice(b"\x06nobody\x07invalid\x00");
    for value in [1u32, 3600, 1200, 604_800, LOCAL_SOA_MINIMUM] {
        rdata.extend_from_slice(&value.to_be_bytes());
    }
    rdata
}

#[cfg(test)]
mod tests {
    use domain::base::Message;

    use super::*;

    fn ask(name: &str, qtype: u16, qclass: u16) -> Option<Vec<u8>> {
        let mut m = vec![0, 7, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&to_wire(name));
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&qclass.to_be_bytes());
        let q = Query::parse(&m).unwrap();
        let names = LocalNames::new(ServerIdentity {
            identity: "edge-1".into(),
            version: String::new(),
        });
        let mut out = Vec::new();
        names
            .answer(&q, &ReplyOptions::udp(1232), &mut out)
            .then_some(out)
    }

    fn rcode_of(out: &[u8]) -> u8 {
        wire::header_rcode(out).unwrap()
    }

    #[test]
    fn rfc6761_6_3_localhost_answers_loopback() {
        let out = ask("LocalHost", rtype::A, class::IN).unwrap();
        let msg = Message::from_slice(&out).unwrap();
        assert!(msg.header().aa());
        assert_eq!(msg.header_counts().ancount(), 1);
        assert_eq!(&out[out.len() - 4..], &[127, 0, 0, 1]);
        let out = ask("foo.localhost", rtype::AAAA, class::IN).unwrap();
        assert_eq!(out[out.len() - 1], 1);
        let out = ask("localhost", 15, class::IN).unwrap();
        assert_eq!(rcode_of(&out), rcode::NOERROR);
        assert_eq!(
            Message::from_slice(&out).unwrap().header_counts().nscount(),
            1
        );
    }

    #[test]
    fn rfc6303_private_reverse_is_nxdomain_with_soa() {
        let out = ask("1.1.168.192.in-addr.arpa", rtype::PTR, class::IN).unwrap();
        assert_eq!(rcode_of(&out), rcode::NXDOMAIN);
        let msg = Message::from_slice(&out).unwrap();
        let soa = msg.authority().unwrap().next().unwrap().unwrap();
        assert_eq!(soa.owner().to_string(), "168.192.in-addr.arpa");
        let out = ask("10.in-addr.arpa", rtype::SOA, class::IN).unwrap();
        assert_eq!(
            Message::from_slice(&out).unwrap().header_counts().ancount(),
            1
        );
        let out = ask("1.0.0.127.in-addr.arpa", rtype::PTR, class::IN).unwrap();
        assert_eq!(rcode_of(&out), rcode::NOERROR);
        assert!(out.ends_with(LOCALHOST_WIRE));
        assert!(ask("8.8.8.8.in-addr.arpa", rtype::PTR, class::IN).is_none());
        assert!(ask("1.32.172.in-addr.arpa", rtype::PTR, class::IN).is_none());
        assert!(ask("example.com", rtype::A, class::IN).is_none());
    }

    #[test]
    fn rfc4892_chaos_identity_and_refusals() {
        let out = ask("id.server", rtype::TXT, class::CH).unwrap();
        assert!(out.ends_with(b"\x06edge-1"));
        assert_eq!(
            rcode_of(&ask("version.server", rtype::TXT, class::CH).unwrap()),
            rcode::REFUSED
        );
        assert_eq!(
            rcode_of(&ask("other.server", rtype::TXT, class::CH).unwrap()),
            rcode::REFUSED
        );
        assert_eq!(
            rcode_of(&ask("example.com", rtype::A, 4).unwrap()),
            rcode::REFUSED
        );
        assert_eq!(
            rcode_of(&ask("example.com", rtype::AXFR, class::IN).unwrap()),
            rcode::REFUSED
        );
    }
}
