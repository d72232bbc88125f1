//! The ingress and rate-limit stages: bytes in, a decision out.
//!
//! ```text
//! client ─▶ access list (acl) ─ refused ─▶ Refused: REFUSED answer, or nothing (aclAction)
//!   │ served
//! bytes ─▶ scan (wire) ─┬─ garbage / QR=1 ─────────────▶ Drop (send nothing)
//!                       ├─ FORMERR / NOTIMP / BADVERS ─▶ Respond (error written to `out`)
//!                       ├─ Refusal (meta qtype, ─────▶ Respond (FORMERR)
//!                       │   malformed COOKIE or ECS)
//!                       ├─ health.kudurru.internal. ───▶ Respond (SERVFAIL in lameduck)
//!                       ├─ rate limit ─ over ─┬─ slip (datagram) ─▶ Respond (empty, TC=1)
//!                       │                     └─ otherwise ───────▶ Drop
//!                       ├─ policy (groups, policies, ──▶ Blocked (block answer or rewrite
//!                       │   lists)                        in `out`, or nothing: RPZ drop)
//!                       ├─ zones (zone::Zones) ─┬─ authoritative answer, ─▶ Respond
//!                       │                       │  referral, SERVFAIL (expired),
//!                       │                       │  REFUSED (AXFR/IXFR not served)
//!                       │                       ├─ AXFR/IXFR at a served ─▶ Transfer
//!                       │                       │  apex over a stream
//!                       │                       └─ not ours, forward zone, ─▶ (go on)
//!                       │                          RD=1 below a glued cut
//!                       ├─ CHAOS, other classes (local) ─▶ Respond (answer written to `out`)
//!                       └─ otherwise ──────────────────▶ Resolve(query): cache, then upstream
//!                                                        (Zones::route picks the upstreams)
//! ```
//!
//! The access list comes first, before the message is even scanned: a refused client costs
//! one prefix lookup, and learns nothing else (not even lameduck). Error answers and the
//! health name come before the limiter: an error answer is never larger
//! than the query that caused it, and a health checker must see lameduck whatever its rate.

use std::net::IpAddr;
use std::time::Instant;

use crate::acl::{AccessList, AclAction};
use crate::limiter::{Limiter, RateLimit, Verdict};
use crate::policy::{Blocked, PolicyDecision, PolicyIndex};
use crate::settings::Settings;
use crate::wire::{self, ControlOpcode, Query, QueryError, ReplyOptions, class, rcode, rtype};
use crate::zone::{ZoneAnswer, Zones};
use crate::{CacheKey, CachedAnswer, LocalNames};

/// The name health checkers ask (dnsdist `checkName`, `mustResolve`): NOERROR normally, SERVFAIL
/// while the node is in lameduck, so load balancers drain it while every other name resolves.
pub const HEALTH_NAME: &str = "health.kudurru.internal.";
const HEALTH_NAME_WIRE: &[u8] = b"\x06health\x07kudurru\x08internal\x00";

/// What to do with one incoming message.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // the query stays on the stack: boxing it would allocate per query
pub enum Decision<'a> {
    /// Send the response now in `out`.
    Respond,
    /// Send nothing: UDP sends no reply, stream transports close the connection or stream.
    Drop,
    /// Answer from the cache or upstream.
    Resolve(Query<'a>),
    /// The client is outside `server.allow`/`server.deny`. With `answered`, a REFUSED answer
    /// is in `out`: send it as for [`Decision::Respond`]; without (`server.aclAction = drop`,
    /// or a message not worth an answer), send nothing as for [`Decision::Drop`]. The shell
    /// counts it apart (`kudurru_acl_refused_total`).
    Refused {
        /// Whether `out` holds an answer to send.
        answered: bool,
    },
    /// A policy decided (`kudurru_blocked_total`): with `answered`, a block answer or a
    /// rewrite is in `out`, sent as for [`Decision::Respond`]; without (RPZ `rpz-drop.`),
    /// nothing is sent. The shell counts `blocked` on its core
    /// ([`crate::policy::PolicyIndex::count`]).
    Blocked {
        /// The policy and list that decided.
        blocked: Blocked,
        /// Whether `out` holds an answer to send.
        answered: bool,
    },
    /// A policy rewrote the name to a CNAME: resolve `target` (cache, then upstream), then
    /// answer with [`crate::policy::answer::write_chased`]. Counted like `Blocked`.
    Chase {
        /// The query being answered.
        query: Query<'a>,
        /// The policy (and list) that rewrote it.
        blocked: Blocked,
        /// The CNAME's target, with the query's type and class.
        target: CacheKey,
        /// The CNAME record's TTL.
        ttl: u32,
    },
    /// A NOTIFY or UPDATE from a client the ACL admits: the control thread answers it
    /// (transports hand the message to it through their inbox; others answer NOTIMP).
    Control(ControlOpcode),
    /// An AXFR or IXFR over a stream for the apex of a served primary or secondary zone:
    /// serve it from `settings.zones.served()[zone]` (the transfer checks the client against
    /// the zone's ACL and TSIG).
    Transfer {
        /// The transfer request.
        query: Query<'a>,
        /// Index of the zone in [`Zones::served`].
        zone: usize,
    },
}

/// What the stages read besides the message: all of it from the settings snapshot and the
/// node's state, none of it mutable.
#[derive(Debug, Clone, Copy)]
pub struct Stage<'s> {
    /// Which clients are served.
    pub acl: &'s AccessList,
    /// Client groups, policies and block lists.
    pub policy: &'s PolicyIndex,
    /// Authoritative, built-in and forward zones.
    pub zones: &'s Zones,
    /// The CHAOS names and the class refusal.
    pub local: &'s LocalNames,
    /// How answers on this transport are shaped.
    pub options: &'s ReplyOptions,
    /// The limiter's settings.
    pub ratelimit: &'s RateLimit,
    /// Whether the node is draining (the health name answers SERVFAIL).
    pub lameduck: bool,
}

impl<'s> Stage<'s> {
    /// The stages as `settings` configures them, answering as `options` shape answers on the
    /// transport: the one place a stage is built from a snapshot, so every transport reads the
    /// same parts of it.
    #[inline]
    pub fn new(settings: &'s Settings, options: &'s ReplyOptions, lameduck: bool) -> Self {
        Self {
            acl: &settings.acl,
            policy: &settings.policy,
            zones: &settings.zones,
            local: &settings.local,
            options,
            ratelimit: &settings.ratelimit,
            lameduck,
        }
    }
}

/// Who sent a message.
#[derive(Debug, Clone, Copy)]
pub struct Client<'c> {
    /// The peer's address.
    pub addr: IpAddr,
    /// Whether it came as a datagram (UDP): only datagrams slip.
    pub datagram: bool,
    /// The client ID a DoH request's path carried (`/dns-query/{id}`), for client groups.
    pub id: Option<&'c str>,
    /// The TLS server name (SNI) of an encrypted connection: its first label is the client ID
    /// when the rest is one of `blocking.clientIdDomains` and the path carried none. Resolved
    /// per query (only while a policy is in effect), so a connection opened before a change
    /// of policies or domains follows it.
    pub sni: Option<&'c str>,
}

/// Runs the stages on `msg` from `client`, writing any immediate response into `out`.
pub fn ingress<'a>(
    msg: &'a [u8],
    stage: &Stage<'_>,
    client: Client<'_>,
    limiter: &mut Limiter,
    now: Instant,
    out: &mut Vec<u8>,
) -> Decision<'a> {
    if !stage.acl.allows(client.addr) {
        return refuse(msg, stage, out);
    }
    if let Some(opcode) = ControlOpcode::of(msg) {
        return Decision::Control(opcode);
    }
    let query = match Query::parse(msg) {
        Ok(query) => query,
        Err(QueryError::Ignore) => return Decision::Drop,
        Err(QueryError::FormErr) => {
            return respond_if(wire::write_header_error(msg, rcode::FORMERR, out));
        }
        Err(QueryError::NotImp) => {
            return respond_if(wire::write_header_error(msg, rcode::NOTIMP, out));
        }
        Err(QueryError::BadVers) => {
            return respond_if(
                wire::write_badvers(msg, stage.options.payload, out)
                    || wire::write_header_error(msg, rcode::FORMERR, out),
            );
        }
    };
    if let Some(refusal) = query.refusal() {
        wire::write_error(&query, refusal.rcode(), stage.options, out);
        return Decision::Respond;
    }
    if is_health_name(query.key()) {
        answer_health(&query, stage, out);
        return Decision::Respond;
    }
    match limiter.check(stage.ratelimit, client.addr, now) {
        Verdict::Allow => {}
        Verdict::Slip if client.datagram => {
            wire::write_truncated(&query, stage.options, out);
            return Decision::Respond;
        }
        Verdict::Slip | Verdict::Drop => return Decision::Drop,
    }
    if !stage.policy.is_empty() {
        let mut label = [0; 63];
        let id = client_id(stage.policy, &client, &mut label);
        match stage
            .policy
            .decide(&query, client.addr, id, stage.options, out)
        {
            PolicyDecision::Pass => {}
            PolicyDecision::Answer(blocked) => {
                return Decision::Blocked {
                    blocked,
                    answered: true,
                };
            }
            PolicyDecision::Drop(blocked) => {
                return Decision::Blocked {
                    blocked,
                    answered: false,
                };
            }
            PolicyDecision::Chase {
                blocked,
                target,
                ttl,
            } => {
                return Decision::Chase {
                    query,
                    blocked,
                    target,
                    ttl,
                };
            }
        }
    }
    match stage
        .zones
        .answer(&query, client.addr, !client.datagram, stage.options, out)
    {
        ZoneAnswer::Pass => {}
        ZoneAnswer::Answered => return Decision::Respond,
        ZoneAnswer::Transfer(zone) => return Decision::Transfer { query, zone },
    }
    if stage.local.answer(&query, stage.options, out) {
        Decision::Respond
    } else {
        Decision::Resolve(query)
    }
}

/// The client ID of `client` for `policy`: the DoH path's, else the one its TLS server name
/// carries under `blocking.clientIdDomains` (lowercased into `label`).
fn client_id<'c>(
    policy: &PolicyIndex,
    client: &Client<'c>,
    label: &'c mut [u8; 63],
) -> Option<&'c str> {
    match (client.id, client.sni) {
        (Some(id), _) => Some(id),
        (None, Some(sni)) => policy.client_id_from_sni(sni, label),
        (None, None) => None,
    }
}

/// CNAME cloaking, on the way back: whether `answer` (from the cache or upstream), about to
/// be served to `client` for `query`, reaches through its CNAME chain a name the client's
/// policies block. If so the block answer is in `out` (or, for an RPZ drop, nothing is to be
/// sent); `Pass` means serve `answer`. One branch while no policy is in effect, one flag test
/// for an answer without a CNAME.
#[inline]
pub fn cloaked(
    policy: &PolicyIndex,
    client: Client<'_>,
    query: &Query<'_>,
    answer: &CachedAnswer,
    options: &ReplyOptions,
    out: &mut Vec<u8>,
) -> PolicyDecision {
    if policy.is_empty() {
        return PolicyDecision::Pass;
    }
    let mut label = [0; 63];
    let id = client_id(policy, &client, &mut label);
    policy.cloaked(answer, query, client.addr, id, options, out)
}

/// The answer to a client the access list refuses: REFUSED with the question (as Unbound's
/// `refuse`), a bare header for a message that does not scan, nothing for garbage or a reply,
/// and nothing at all with `server.aclAction = drop`.
#[cold]
fn refuse<'a>(msg: &[u8], stage: &Stage<'_>, out: &mut Vec<u8>) -> Decision<'a> {
    let answered = match stage.acl.action() {
        AclAction::Drop => false,
        AclAction::Refuse => match Query::parse(msg) {
            Ok(query) => {
                wire::write_error(&query, rcode::REFUSED, stage.options, out);
                true
            }
            Err(QueryError::Ignore) => false,
            Err(_) => wire::write_header_error(msg, rcode::REFUSED, out),
        },
    };
    Decision::Refused { answered }
}

fn is_health_name(key: &CacheKey) -> bool {
    key.qclass() == class::IN && key.qname() == HEALTH_NAME_WIRE
}

/// NOERROR (A 127.0.0.1 for A, no records otherwise), TTL 0 so no cache keeps it; SERVFAIL in
/// lameduck.
fn answer_health(query: &Query<'_>, stage: &Stage<'_>, out: &mut Vec<u8>) {
    if stage.lameduck {
        wire::write_error(query, rcode::SERVFAIL, stage.options, out);
        return;
    }
    wire::start_response(query, rcode::NOERROR, true, out);
    if query.qtype() == rtype::A {
        wire::push_record(out, wire::HEADER_LEN, rtype::A, 0, &[127, 0, 0, 1]);
        wire::count_answer(out);
    }
    wire::finish_response(query, out, stage.options);
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

    struct Harness {
        acl: AccessList,
        zones: Zones,
        local: LocalNames,
        options: ReplyOptions,
        ratelimit: RateLimit,
        limiter: Limiter,
        now: Instant,
    }

    impl Harness {
        fn new(ratelimit: RateLimit) -> Self {
            let now = Instant::now();
            Self {
                acl: AccessList::new(&["192.0.2.0/24".parse().unwrap()], &[], AclAction::Refuse),
                zones: Zones::builtin(),
                local: local(),
                options: ReplyOptions::udp(1232),
                ratelimit,
                limiter: Limiter::new(64, 1, now),
                now,
            }
        }

        fn run<'m>(
            &mut self,
            msg: &'m [u8],
            lameduck: bool,
            datagram: bool,
            out: &mut Vec<u8>,
        ) -> Decision<'m> {
            self.run_from("192.0.2.1", msg, lameduck, datagram, out)
        }

        fn run_from<'m>(
            &mut self,
            from: &str,
            msg: &'m [u8],
            lameduck: bool,
            datagram: bool,
            out: &mut Vec<u8>,
        ) -> Decision<'m> {
            let policy = PolicyIndex::default();
            let stage = Stage {
                acl: &self.acl,
                policy: &policy,
                zones: &self.zones,
                local: &self.local,
                options: &self.options,
                ratelimit: &self.ratelimit,
                lameduck,
            };
            let client = Client {
                addr: from.parse().unwrap(),
                datagram,
                id: None,
                sni: None,
            };
            ingress(msg, &stage, client, &mut self.limiter, self.now, out)
        }
    }

    const EXAMPLE: &[u8] =
        b"\x00\x02\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01";
    const HEALTH: &[u8] = b"\x00\x03\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06HEALTH\x07kudurru\x08internal\x00\x00\x01\x00\x01";

    #[test]
    fn decisions_per_input_class() {
        let mut h = Harness::new(RateLimit::default());
        let mut out = Vec::new();
        assert!(matches!(
            h.run(&[0; 5], false, true, &mut out),
            Decision::Drop
        ));
        let mut formerr = vec![0, 1, 0x01, 0, 0, 2, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            h.run(&formerr, false, true, &mut out),
            Decision::Respond
        ));
        assert_eq!(wire::header_rcode(&out), Some(rcode::FORMERR));
        assert_eq!(wire::message_id(&out), Some(1));
        formerr[2] = 0x81; // QR=1: a reply is never answered
        assert!(matches!(
            h.run(&formerr, false, true, &mut out),
            Decision::Drop
        ));
        assert!(matches!(
            h.run(EXAMPLE, false, true, &mut out),
            Decision::Resolve(_)
        ));
        let lh =
            b"\x00\x02\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x09localhost\x00\x00\x01\x00\x01";
        assert!(matches!(
            h.run(lh, false, true, &mut out),
            Decision::Respond
        ));
    }

    #[test]
    fn the_health_name_answers_noerror_and_servfail_in_lameduck() {
        let mut h = Harness::new(RateLimit::default());
        let mut out = Vec::new();
        assert!(matches!(
            h.run(HEALTH, false, true, &mut out),
            Decision::Respond
        ));
        assert_eq!(wire::header_rcode(&out), Some(rcode::NOERROR));
        assert_eq!(wire::read_u16(&out, wire::ANCOUNT_AT), Some(1));
        assert!(out.ends_with(&[127, 0, 0, 1]));
        assert!(matches!(
            h.run(HEALTH, true, true, &mut out),
            Decision::Respond
        ));
        assert_eq!(wire::header_rcode(&out), Some(rcode::SERVFAIL));
        assert!(
            matches!(h.run(EXAMPLE, true, true, &mut out), Decision::Resolve(_)),
            "other names resolve in lameduck"
        );
    }

    #[test]
    fn limited_queries_slip_over_udp_and_drop_over_streams() {
        let mut h = Harness::new(RateLimit {
            qps: 1,
            burst: 1,
            slip: 1,
            ..RateLimit::default()
        });
        let mut out = Vec::new();
        assert!(matches!(
            h.run(EXAMPLE, false, true, &mut out),
            Decision::Resolve(_)
        ));
        assert!(matches!(
            h.run(EXAMPLE, false, true, &mut out),
            Decision::Respond
        ));
        assert!(wire::is_truncated(&out));
        assert_eq!(wire::read_u16(&out, wire::ANCOUNT_AT), Some(0));
        assert_eq!(&out[wire::HEADER_LEN..], &EXAMPLE[wire::HEADER_LEN..]);
        assert!(matches!(
            h.run(EXAMPLE, false, false, &mut out),
            Decision::Drop
        ));
        assert!(
            matches!(h.run(HEALTH, true, true, &mut out), Decision::Respond),
            "the health name is never limited"
        );
    }

    #[test]
    fn a_client_outside_the_access_list_is_refused_first_or_dropped() {
        let mut h = Harness::new(RateLimit {
            qps: 1,
            burst: 1,
            slip: 0,
            ..RateLimit::default()
        });
        let mut out = Vec::new();
        for msg in [EXAMPLE, HEALTH] {
            assert!(matches!(
                h.run_from("198.51.100.7", msg, false, true, &mut out),
                Decision::Refused { answered: true }
            ));
            assert_eq!(wire::header_rcode(&out), Some(rcode::REFUSED));
            assert_eq!(wire::message_id(&out), wire::message_id(msg));
            assert_eq!(&out[wire::HEADER_LEN..], &msg[wire::HEADER_LEN..]);
        }
        assert!(
            matches!(
                h.run_from("198.51.100.7", &[0; 5], false, true, &mut out),
                Decision::Refused { answered: false }
            ),
            "garbage from a refused client gets nothing"
        );
        // The limiter never saw the refused client: an allowed one still has its burst.
        assert!(matches!(
            h.run(EXAMPLE, false, true, &mut out),
            Decision::Resolve(_)
        ));
        h.acl = AccessList::new(&[], &[], AclAction::Drop);
        assert!(matches!(
            h.run(EXAMPLE, false, false, &mut out),
            Decision::Refused { answered: false }
        ));
    }
}
