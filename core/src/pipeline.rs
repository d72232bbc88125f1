//! The ingress stage: bytes in, a decision out.
//!
//! ```text
//! bytes ─▶ scan (wire) ─┬─ garbage / QR=1 ─────────────▶ Drop (send nothing)
//!                       ├─ FORMERR / NOTIMP / BADVERS ─▶ Respond (error written to `out`)
//!                       ├─ local name (local) ─────────▶ Respond (answer written to `out`)
//!                       └─ otherwise ──────────────────▶ Resolve(query): cache, then upstream
//! ```

use crate::LocalNames;
use crate::wire::{self, Query, QueryError, ReplyOptions, rcode};

/// What to do with one incoming message.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // the query stays on the stack: boxing it would allocate per query
pub enum Decision<'a> {
    /// Send the response now in `out`.
    Respond,
    /// Send nothing (RFC-conformant silence for non-queries; later also policy drops).
    Drop,
    /// Answer from the cache or upstream.
    Resolve(Query<'a>),
}

/// Runs the ingress stage on `msg`, writing any immediate response into `out`.
pub fn ingress<'a>(
    msg: &'a [u8],
    local: &LocalNames,
    options: &ReplyOptions,
    out: &mut Vec<u8>,
) -> Decision<'a> {
    match Query::parse(msg) {
        Ok(query) => {
            if local.answer(&query, options, out) {
                Decision::Respond
            } else {
                Decision::Resolve(query)
            }
        }
        Err(QueryError::Ignore) => Decision::Drop,
        Err(QueryError::FormErr) => respond_if(wire::write_header_error(msg, rcode::FORMERR, out)),
        Err(QueryError::NotImp) => respond_if(wire::write_header_error(msg, rcode::NOTIMP, out)),
        Err(QueryError::BadVers) => respond_if(
            wire::write_badvers(msg, options.payload, out)
                || wire::write_header_error(msg, rcode::FORMERR, out),
        ),
    }
}

fn respond_if(written: bool) -> Decision<'static> {
    if written {
        Decision::Respond
    } else {
        Decision::Drop
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerIdentity;

    fn local() -> LocalNames {
        LocalNames::new(ServerIdentity {
            identity: "x".into(),
            version: "v".into(),
        })
    }

    #[test]
    fn decisions_per_input_class() {
        let mut out = Vec::new();
        assert!(matches!(
            ingress(&[0; 5], &local(), &ReplyOptions::udp(1232), &mut out),
            Decision::Drop
        ));
        let mut formerr = vec![0, 1, 0x01, 0, 0, 2, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            ingress(&formerr, &local(), &ReplyOptions::udp(1232), &mut out),
            Decision::Respond
        ));
        assert_eq!(wire::header_rcode(&out), Some(rcode::FORMERR));
        assert_eq!(wire::message_id(&out), Some(1));
        formerr[2] = 0x81; // QR=1: a reply is never answered
        assert!(matches!(
            ingress(&formerr, &local(), &ReplyOptions::udp(1232), &mut out),
            Decision::Drop
        ));
        let q = b"\x00\x02\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01";
        assert!(matches!(
            ingress(q, &local(), &ReplyOptions::udp(1232), &mut out),
            Decision::Resolve(_)
        ));
        let lh =
            b"\x00\x02\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x09localhost\x00\x00\x01\x00\x01";
        assert!(matches!(
            ingress(lh, &local(), &ReplyOptions::udp(1232), &mut out),
            Decision::Respond
        ));
    }
}
