//! Names kudurru answers itself outside the zones: the CHAOS identification names (RFC 4892),
//! and REFUSED for classes other than IN and CHAOS. The special-use and locally served zones
//! (RFC 6761, RFC 7686, RFC 8375, RFC 6303) are built-in zones of the zone machinery
//! (`zone::Zones::builtin`), answered in the zone stage before this one.

use crate::wire::{self, Query, ReplyOptions, class, rcode, rtype};

/// The CHAOS TXT strings (`id.server`, `version.server`); an empty string refuses that name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    /// Answered to `id.server` and `hostname.bind` (`server.identity`).
    pub identity: String,
    /// Answered to `version.server` and `version.bind` (`server.version`).
    pub version: String,
}

/// The CHAOS names and the class refusal.
#[derive(Debug, Clone)]
pub struct LocalNames {
    identity: ServerIdentity,
}

impl LocalNames {
    /// The CHAOS names answering with `identity`.
    pub fn new(identity: ServerIdentity) -> Self {
        Self { identity }
    }

    /// Writes the answer for a CHAOS query or a class other than IN into `out`, or returns
    /// `false` for class IN (answered by the zones, the cache or upstream).
    pub fn answer(&self, query: &Query<'_>, options: &ReplyOptions, out: &mut Vec<u8>) -> bool {
        match query.qclass() {
            class::IN => false,
            class::CH => {
                self.answer_chaos(query, options, out);
                true
            }
            _ => {
                wire::write_error(query, rcode::REFUSED, options, out);
                true
            }
        }
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

#[cfg(test)]
mod tests {

    use super::*;

    fn ask(name: &str, qtype: u16, qclass: u16) -> Option<Vec<u8>> {
        let mut m = vec![0, 7, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.push(0);
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
        assert!(ask("example.com", rtype::A, class::IN).is_none());
    }
}
