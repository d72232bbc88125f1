//! Reply scrubbing: which records of an upstream reply belong in a cached answer.
//!
//! A cached answer is served to every client that asks its question for as long as it lives, so a
//! record the upstream added that does not answer the question (an A record in a reply to an
//! AAAA question, an address for some other name) must not ride along. As Unbound's scrubber
//! (`iterator/iter_scrub.c`) does, only the records on the way from the question to its answer
//! are kept:
//!
//! ```text
//! answer      qname ──CNAME──▶ target ──CNAME──▶ … ──▶ final name: records of the qtype
//!               └─ DNAME at a proper ancestor of a name on the chain (RFC 6672), and RRSIGs
//!                  over whatever of these is kept
//! authority   SOA and NS owned by an ancestor (or self) of a name on the chain: the zone;
//!             NSEC, NSEC3 in that zone (or under the signer of a kept answer RRSIG), their RRSIGs
//! additional  A and AAAA (and their RRSIGs) of a name a kept NS, MX, SRV, SVCB or HTTPS record
//!             names, or of a name on the chain
//! ```
//!
//! Everything else is dropped. Names compare ignoring ASCII case. The work is linear in the
//! number of records: the chain is followed at most [`MAX_CHAIN_LINKS`] times (one pass over the
//! answer section each), and the lists a record is checked against are bounded
//! ([`MAX_ZONES`], [`MAX_REFERENCED`]).

use domain::base::{Message, ParsedName, Record, RecordData, Rtype};
use domain::rdata::{AllRecordData, Cname};
use smallvec::SmallVec;

/// A name as parsed from the reply, borrowing it.
pub type ReplyName<'a> = ParsedName<&'a [u8]>;

/// A record as parsed from the reply, rdata included.
pub type ReplyRecord<'a> = Record<ReplyName<'a>, AllRecordData<&'a [u8], ReplyName<'a>>>;

/// CNAME links followed from the qname (Unbound restarts at most 11 times; BIND follows 16).
/// Records past the last link followed are dropped.
pub const MAX_CHAIN_LINKS: usize = 16;
/// Zone apexes (SOA or NS owners, RRSIG signers) remembered for the authority section.
pub const MAX_ZONES: usize = 8;
/// Names remembered from kept rdata for the additional section.
pub const MAX_REFERENCED: usize = 32;

/// The sections of a message that hold records (RFC 1035 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The answer section.
    Answer,
    /// The authority section.
    Authority,
    /// The additional section.
    Additional,
}

/// Decides, record by record and section by section in message order, what a cached answer
/// keeps of one reply.
#[derive(Debug)]
pub struct Scrubber<'a> {
    qtype: Rtype,
    /// The qname, then each CNAME target followed: never empty.
    chain: SmallVec<[ReplyName<'a>; 4]>,
    zones: SmallVec<[ReplyName<'a>; 4]>,
    referenced: SmallVec<[ReplyName<'a>; 8]>,
}

impl<'a> Scrubber<'a> {
    /// Follows the CNAME chain of `msg`'s answer section from its first question and notes the
    /// zones its authority section speaks for. `None` when the question or a record header does
    /// not parse.
    pub fn new(msg: &'a Message<[u8]>) -> Option<Self> {
        let question = msg.first_question()?;
        let qtype = question.qtype();
        let mut chain = SmallVec::new();
        chain.push(question.into_qname());
        // A CNAME or ANY question is answered by the CNAME itself: nothing to follow.
        if qtype != Rtype::CNAME && qtype != Rtype::ANY {
            'follow: while chain.len() <= MAX_CHAIN_LINKS {
                let sname: &ReplyName<'a> = chain.last()?;
                for record in msg.answer().ok()? {
                    let record = record.ok()?;
                    if record.rtype() != Rtype::CNAME || record.owner() != sname {
                        continue;
                    }
                    let Some(cname) = record.to_record::<Cname<ReplyName<'a>>>().ok()? else {
                        continue;
                    };
                    let target = *cname.data().cname();
                    if chain.iter().any(|name| name == &target) {
                        // A loop: the chain ends here.
                        break 'follow;
                    }
                    chain.push(target);
                    continue 'follow;
                }
                break;
            }
        }
        let mut zones: SmallVec<[ReplyName<'a>; 4]> = SmallVec::new();
        for record in msg.authority().ok()? {
            let record = record.ok()?;
            let owner = record.owner();
            if matches!(record.rtype(), Rtype::SOA | Rtype::NS)
                && zones.len() < MAX_ZONES
                && !zones.iter().any(|zone| zone == &owner)
                && chain.iter().any(|name| name.ends_with(&owner))
            {
                zones.push(owner);
            }
        }
        Some(Self {
            qtype,
            chain,
            zones,
            referenced: SmallVec::new(),
        })
    }

    /// Whether the cached answer keeps `record` of `section`. Call it for every record in
    /// message order: what a kept answer or authority record names decides what the additional
    /// section keeps.
    pub fn keep(&mut self, section: Section, record: &ReplyRecord<'a>) -> bool {
        let owner = record.owner();
        let data = record.data();
        let keep = match section {
            Section::Answer => self.keeps_in_answer(owner, data),
            Section::Authority => self.keeps_in_authority(owner, data),
            Section::Additional => self.keeps_in_additional(owner, data),
        };
        if keep && section != Section::Additional {
            self.note_references(owner, data);
        }
        keep
    }

    /// The last name of the chain: the one whose records of the qtype answer the question.
    fn final_name(&self) -> &ReplyName<'a> {
        // `new` pushes the qname first and never pops.
        &self.chain[self.chain.len() - 1]
    }

    fn on_chain(&self, owner: &ReplyName<'a>) -> bool {
        self.chain.iter().any(|name| name == owner)
    }

    /// Whether a DNAME at `owner` redirects a name on the chain: it owns a proper ancestor.
    fn redirects_chain(&self, owner: &ReplyName<'a>) -> bool {
        self.chain
            .iter()
            .any(|name| name.ends_with(owner) && name != owner)
    }

    /// Whether records of `rtype` at `owner` belong in the answer section.
    fn keeps_type_in_answer(&self, owner: &ReplyName<'a>, rtype: Rtype) -> bool {
        let answers = self.qtype == Rtype::ANY || rtype == self.qtype;
        (answers && owner == self.final_name())
            || (rtype == Rtype::CNAME
                && self.chain[..self.chain.len() - 1]
                    .iter()
                    .any(|name| name == owner))
            || (rtype == Rtype::DNAME && self.redirects_chain(owner))
    }

    fn keeps_in_answer(
        &self,
        owner: &ReplyName<'a>,
        data: &AllRecordData<&'a [u8], ReplyName<'a>>,
    ) -> bool {
        let rtype = data.rtype();
        if (self.qtype == Rtype::ANY || rtype == self.qtype) && owner == self.final_name() {
            return true;
        }
        match data {
            // Only the link followed: a second CNAME at the same owner is not the chain.
            AllRecordData::Cname(cname) => self
                .chain
                .windows(2)
                .any(|link| owner == &link[0] && cname.cname() == &link[1]),
            AllRecordData::Rrsig(rrsig) => self.keeps_type_in_answer(owner, rrsig.type_covered()),
            _ => self.keeps_type_in_answer(owner, rtype),
        }
    }

    fn in_zone(&self, owner: &ReplyName<'a>) -> bool {
        self.zones.iter().any(|zone| owner.ends_with(zone))
    }

    fn keeps_in_authority(
        &self,
        owner: &ReplyName<'a>,
        data: &AllRecordData<&'a [u8], ReplyName<'a>>,
    ) -> bool {
        let is_zone = |owner: &ReplyName<'a>| self.zones.iter().any(|zone| zone == owner);
        match data {
            AllRecordData::Soa(_) | AllRecordData::Ns(_) => is_zone(owner),
            AllRecordData::Nsec(_) | AllRecordData::Nsec3(_) => self.in_zone(owner),
            AllRecordData::Rrsig(rrsig) => match rrsig.type_covered() {
                Rtype::SOA | Rtype::NS => is_zone(owner),
                Rtype::NSEC | Rtype::NSEC3 => self.in_zone(owner),
                _ => false,
            },
            _ => false,
        }
    }

    fn keeps_in_additional(
        &self,
        owner: &ReplyName<'a>,
        data: &AllRecordData<&'a [u8], ReplyName<'a>>,
    ) -> bool {
        let address = match data {
            AllRecordData::A(_) | AllRecordData::Aaaa(_) => true,
            AllRecordData::Rrsig(rrsig) => {
                matches!(rrsig.type_covered(), Rtype::A | Rtype::AAAA)
            }
            _ => false,
        };
        address && (self.on_chain(owner) || self.referenced.iter().any(|name| name == owner))
    }

    /// Remembers the names a kept record points at (for the additional section) and the signer
    /// of a kept answer RRSIG (a zone, for the authority section's denial records).
    fn note_references(
        &mut self,
        owner: &ReplyName<'a>,
        data: &AllRecordData<&'a [u8], ReplyName<'a>>,
    ) {
        let name = match data {
            AllRecordData::Ns(ns) => ns.nsdname(),
            AllRecordData::Mx(mx) => mx.exchange(),
            AllRecordData::Srv(srv) => srv.target(),
            AllRecordData::Svcb(svcb) => svcb.target(),
            AllRecordData::Https(https) => https.target(),
            AllRecordData::Rrsig(rrsig) => {
                let signer = rrsig.signer_name();
                if self.zones.len() < MAX_ZONES
                    && owner.ends_with(signer)
                    && !self.zones.iter().any(|zone| zone == signer)
                {
                    self.zones.push(*signer);
                }
                return;
            }
            _ => return,
        };
        if self.referenced.len() < MAX_REFERENCED && !self.referenced.iter().any(|n| n == name) {
            self.referenced.push(*name);
        }
    }
}
