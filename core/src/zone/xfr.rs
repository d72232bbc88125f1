//! Zone transfers served from the snapshot: AXFR (RFC 5936) and IXFR (RFC 1995) as a sequence
//! of messages, who may ask (addresses, TSIG, RFC 8945), and the journal IXFR answers from.
//!
//! ```text
//! request ─▶ Transfer::start ─┬ client not in allowTransfer ─────────────▶ Err(REFUSED)
//!                             ├ TSIG: bad key/sig/time ──────────────────▶ Err(NOTAUTH + TSIG error)
//!                             ├ key required, request unsigned ───────────▶ Err(REFUSED)
//!                             └ Ok(Transfer) ─ next_message() ─▶ message, message, … (each signed
//!                                                                when the request was)
//! AXFR: SOA, every other record, SOA
//! IXFR: client current ─▶ SOA;  journal reaches the client's serial ─▶ SOA, old SOA, removed,
//!       new SOA, added, SOA (one condensed diff);  otherwise the AXFR-style answer
//! ```
//!
//! Messages are built with `domain`'s message builder (its TSIG signer signs a builder) and
//! hold records up to [`MESSAGE_TARGET`] bytes. An AXFR (and an AXFR-style IXFR) is streamed
//! from the compiled zone: a [`TransferCursor`] walks its stored records and each message is
//! built only when the connection asks for it, so a transfer in flight holds one message, not
//! the zone. Owner names are compressed within each message ([`Compressor`]: the previous
//! owner, or a pointer to the apex); names inside rdata are sent as stored, uncompressed.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use domain::base::iana::{Class, Rcode, Rtype};
use domain::base::message_builder::{AdditionalBuilder, MessageBuilder};
use domain::base::{Message, Name, Serial, ToName, Ttl};
use domain::rdata::Soa;
use domain::rdata::tsig::Time48;
use domain::tsig::{Algorithm, Key, KeyStore, ServerError, ServerSequence};

use domain::base::record::ComposeRecord;
use domain::base::wire::Composer;
use domain::dep::octseq::{OctetsBuilder, Truncate};

use crate::limiter::{address_bits, mask};
use crate::wire::rtype;
use crate::zone::data::Record;
use crate::zone::tree::{TransferCursor, Zone};

/// A transfer message is closed once its records pass this size (RFC 5936 §2.2 leaves it to
/// the server; 16 KiB as BIND and Knot use keeps a message well inside TCP's 64 KiB frame).
pub const MESSAGE_TARGET: usize = 16 * 1024;

/// Who may transfer a zone.
#[derive(Debug, Clone, Default)]
pub struct TransferPolicy {
    /// Addresses and prefixes allowed (`allowTransfer`); empty: nobody.
    pub allow: Vec<(IpAddr, u8)>,
    /// The TSIG key a request must be signed with, if any (resolved from `zones.tsigKeyFile`
    /// when the zones are built).
    pub key: Option<Arc<Key>>,
}

impl TransferPolicy {
    /// Whether `client` is inside one of the allowed prefixes (an IPv4-mapped IPv6 address
    /// counts as its IPv4 address).
    pub fn allows(&self, client: IpAddr) -> bool {
        let bits = address_bits(client);
        self.allow.iter().any(|&(net, len)| {
            let len = match net {
                IpAddr::V4(_) => len.min(32) + 96,
                IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => len.min(128),
                IpAddr::V6(_) => len.min(128),
            };
            let m = mask(len);
            bits & m == address_bits(net) & m
        })
    }
}

/// One change of a zone: the records removed and added between two serials (RFC 1995 §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// Serial before.
    pub from: u32,
    /// Serial after.
    pub to: u32,
    /// Records removed (the old SOA included).
    pub removed: Vec<Record>,
    /// Records added (the new SOA included).
    pub added: Vec<Record>,
}

/// A zone's recent changes, oldest first, bounded.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    /// The diffs, each `to` the next one's `from`.
    pub diffs: Vec<Diff>,
}

impl Journal {
    /// The changes from serial `from` to the last one, condensed into one diff (a record
    /// added then removed again appears in neither list; SOAs left out of both), with the SOA
    /// record the client holds. `None` when the journal does not reach back to `from`.
    pub fn since(&self, from: u32) -> Option<(Record, Diff)> {
        let start = self.diffs.iter().position(|d| d.from == from)?;
        let first = &self.diffs[start];
        let old_soa = first
            .removed
            .iter()
            .find(|r| r.rtype == rtype::SOA)?
            .clone();
        // Sets, so a large diff condenses in linear time; sorted after, for a stable order.
        let mut removed: HashSet<&Record> = HashSet::new();
        let mut added: HashSet<&Record> = HashSet::new();
        for diff in &self.diffs[start..] {
            for record in diff.removed.iter().filter(|r| r.rtype != rtype::SOA) {
                if !added.remove(record) {
                    removed.insert(record);
                }
            }
            for record in diff.added.iter().filter(|r| r.rtype != rtype::SOA) {
                if !removed.remove(record) {
                    added.insert(record);
                }
            }
        }
        let sorted = |set: HashSet<&Record>| {
            let mut records: Vec<Record> = set.into_iter().cloned().collect();
            records.sort_unstable();
            records
        };
        let (removed, added) = (sorted(removed), sorted(added));
        let to = self.diffs.last().map_or(from, |d| d.to);
        Some((
            old_soa,
            Diff {
                from,
                to,
                removed,
                added,
            },
        ))
    }
}

/// Whether serial `a` is older than `b` in RFC 1982 arithmetic (undefined pairs are not).
pub fn serial_older(a: u32, b: u32) -> bool {
    Serial(a) < Serial(b)
}

/// Which transfer a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferKind {
    /// A whole zone (RFC 5936).
    Axfr,
    /// An incremental transfer (RFC 1995), answered in one of its three shapes.
    Ixfr(IxfrShape),
}

/// How an IXFR is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IxfrShape {
    /// The client is current: one SOA.
    Current,
    /// One condensed diff from the client's serial.
    Incremental,
    /// The whole zone, AXFR-style (the journal does not reach the client's serial).
    Full,
}

/// A transfer being served: its messages, produced one at a time.
pub struct Transfer {
    kind: TransferKind,
    /// The request's ID, flags (RD), and question in wire form.
    id: u16,
    recursion_desired: bool,
    question: Option<(Vec<u8>, u16)>,
    /// What is left to send.
    body: Body,
    /// Signs every message when the request was signed.
    signer: Option<ServerSequence<Arc<Key>>>,
    now: u64,
    first: bool,
}

impl std::fmt::Debug for Transfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transfer")
            .field("kind", &self.kind)
            .field("remaining", &self.remaining())
            .field("signed", &self.signer.is_some())
            .finish()
    }
}

/// The records a transfer sends.
enum Body {
    /// Listed, in order, SOAs included (an IXFR diff, a current client's SOA).
    List { records: Vec<Record>, next: usize },
    /// The whole zone straight from its compiled form: `soa`, every other record from the
    /// cursor on, `soa` again.
    Zone {
        zone: Arc<Zone>,
        soa: Record,
        stage: Stage,
        cursor: TransferCursor,
        /// Records sent so far (SOAs included), for [`Transfer::remaining`].
        sent: usize,
    },
}

/// Where a streamed AXFR is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    FirstSoa,
    Records,
    LastSoa,
    Done,
}

/// Where [`Transfer::plan_with`] takes the zone's records from.
enum Source<F> {
    /// A closure returning the SOA and the other records.
    List(F),
    /// A compiled zone.
    Zone(Arc<Zone>),
}

/// A key store with no keys: a signed request to a zone without a key is BADKEY.
struct NoKeys;

impl KeyStore for NoKeys {
    type Key = Arc<Key>;

    fn get_key<N: ToName>(&self, _: &N, _: Algorithm) -> Option<Self::Key> {
        None
    }
}

/// A request checked against the policy: who signed it, if anyone.
type Checked = (Message<Vec<u8>>, Option<ServerSequence<Arc<Key>>>);

impl Transfer {
    /// Checks `request` (an AXFR or IXFR for the zone's apex) from `client` at `now` (Unix
    /// seconds) against the zone's `policy` and plans the answer from the zone's `serial`,
    /// its `journal`, and `soa_and_records`, which returns the SOA record and the other
    /// records (called once, when they are needed). `Err` holds the one error message to send
    /// instead (REFUSED, FORMERR, or NOTAUTH with the TSIG error).
    /// [`crate::zone::set::ServedZone::transfer`] calls it for a served zone.
    pub fn plan(
        policy: &TransferPolicy,
        journal: &Journal,
        serial: u32,
        soa_and_records: impl FnOnce() -> (Option<Record>, Vec<Record>),
        request: &[u8],
        client: IpAddr,
        now: u64,
    ) -> Result<Self, Vec<u8>> {
        let source = Source::List(soa_and_records);
        Self::plan_with(policy, journal, serial, source, request, client, now)
    }

    /// [`Transfer::plan`] for a compiled zone: an AXFR (or AXFR-style IXFR) is then streamed
    /// from `zone`, one message at a time, without collecting its records.
    /// [`crate::zone::set::ServedZone::transfer`] calls it for a served zone.
    pub fn plan_zone(
        policy: &TransferPolicy,
        journal: &Journal,
        zone: &Arc<Zone>,
        request: &[u8],
        client: IpAddr,
        now: u64,
    ) -> Result<Self, Vec<u8>> {
        let source = Source::<fn() -> (Option<Record>, Vec<Record>)>::Zone(Arc::clone(zone));
        Self::plan_with(policy, journal, zone.serial(), source, request, client, now)
    }

    fn plan_with<F: FnOnce() -> (Option<Record>, Vec<Record>)>(
        policy: &TransferPolicy,
        journal: &Journal,
        serial: u32,
        source: Source<F>,
        request: &[u8],
        client: IpAddr,
        now: u64,
    ) -> Result<Self, Vec<u8>> {
        let (message, signer) = check(policy, request, client, now)?;
        let question = message
            .sole_question()
            .map_err(|_| error(&message, Rcode::FORMERR))?;
        let qtype = question.qtype();
        let mut question_wire = Vec::new();
        question
            .qname()
            .compose(&mut question_wire)
            .map_err(|_| error(&message, Rcode::FORMERR))?;
        let (soa, whole) = match source {
            Source::List(soa_and_records) => {
                let (soa, others) = soa_and_records();
                (soa, Source::List(others))
            }
            Source::Zone(zone) => (Some(zone.soa()), Source::Zone(zone)),
        };
        let Some(soa) = soa else {
            return Err(error(&message, Rcode::SERVFAIL));
        };
        let list = |records| Body::List { records, next: 0 };
        let whole = move |soa: Record| match whole {
            Source::List(others) => list(whole_list(soa, others)),
            Source::Zone(zone) => Body::Zone {
                zone,
                soa,
                stage: Stage::FirstSoa,
                cursor: TransferCursor::default(),
                sent: 0,
            },
        };
        let (kind, body) = if qtype == Rtype::AXFR {
            (TransferKind::Axfr, whole(soa))
        } else if qtype == Rtype::IXFR {
            let client_serial =
                ixfr_serial(&message).ok_or_else(|| error(&message, Rcode::FORMERR))?;
            if !serial_older(client_serial, serial) {
                (TransferKind::Ixfr(IxfrShape::Current), list(vec![soa]))
            } else if let Some((old_soa, diff)) = journal
                .since(client_serial)
                .filter(|(_, diff)| diff.to == serial)
            {
                let mut records = Vec::with_capacity(diff.removed.len() + diff.added.len() + 4);
                records.push(soa.clone());
                records.push(old_soa);
                records.extend(diff.removed);
                records.push(soa.clone());
                records.extend(diff.added);
                records.push(soa);
                (TransferKind::Ixfr(IxfrShape::Incremental), list(records))
            } else {
                (TransferKind::Ixfr(IxfrShape::Full), whole(soa))
            }
        } else {
            return Err(error(&message, Rcode::REFUSED));
        };
        Ok(Self {
            kind,
            id: message.header().id(),
            recursion_desired: message.header().rd(),
            question: Some((question_wire, qtype.to_int())),
            body,
            signer,
            now,
            first: true,
        })
    }

    /// An IXFR over UDP (RFC 1995 §2): checked as over TCP, answered with the current `soa`
    /// alone (the client then asks over TCP).
    pub fn plan_datagram(
        policy: &TransferPolicy,
        serial: u32,
        soa: Option<Record>,
        request: &[u8],
        client: IpAddr,
        now: u64,
    ) -> Result<Vec<u8>, Vec<u8>> {
        let mut transfer = Self::plan(
            policy,
            &Journal::default(),
            serial,
            || (soa, Vec::new()),
            request,
            client,
            now,
        )?;
        if let Body::List { records, .. } = &mut transfer.body {
            records.truncate(1);
        }
        Ok(transfer.next_message().unwrap_or_default())
    }

    /// Which transfer this is.
    pub fn kind(&self) -> TransferKind {
        self.kind
    }

    /// The records still to send.
    pub fn remaining(&self) -> usize {
        match &self.body {
            Body::List { records, next } => records.len() - next,
            Body::Zone { zone, sent, .. } => (zone.record_count() + 1).saturating_sub(*sent),
        }
    }

    /// Whether every record has been sent.
    fn exhausted(&self) -> bool {
        match &self.body {
            Body::List { records, next } => *next >= records.len(),
            Body::Zone { stage, .. } => *stage == Stage::Done,
        }
    }

    /// Ends the transfer: nothing more is sent.
    fn abandon(&mut self) {
        match &mut self.body {
            Body::List { records, next } => *next = records.len(),
            Body::Zone { stage, .. } => *stage = Stage::Done,
        }
    }

    /// The next message, or `None` when all are sent. A record that cannot be written (a
    /// message past 64 KiB) ends the transfer with SERVFAIL in place of the rest.
    pub fn next_message(&mut self) -> Option<Vec<u8>> {
        if self.exhausted() && !self.first {
            return None;
        }
        match self.build() {
            Some(message) => Some(message),
            None => {
                self.abandon();
                self.first = false;
                let mut builder = self.builder()?;
                self.header(&mut builder, Rcode::SERVFAIL);
                let additional = builder.additional();
                self.sign(additional)
            }
        }
    }

    /// An empty message whose owner names compress against the zone's apex.
    fn builder(&self) -> Option<MessageBuilder<Compressor>> {
        let apex = self.question.as_ref().map_or(&[0u8][..], |(q, _)| &q[..]);
        MessageBuilder::from_target(Compressor::new(apex)).ok()
    }

    fn header(&self, builder: &mut MessageBuilder<Compressor>, rcode: Rcode) {
        let header = builder.header_mut();
        header.set_id(self.id);
        header.set_qr(true);
        header.set_aa(true);
        header.set_rd(self.recursion_desired);
        header.set_rcode(rcode);
    }

    fn build(&mut self) -> Option<Vec<u8>> {
        let mut builder = self.builder()?;
        self.header(&mut builder, Rcode::NOERROR);
        let mut question = builder.question();
        if self.first {
            self.first = false;
            if let Some((qname, qtype)) = &self.question {
                let name = Name::from_slice(qname).ok()?;
                question
                    .push((name, Rtype::from_int(*qtype), Class::IN))
                    .ok()?;
            }
        }
        let mut answer = question.answer();
        let mut count = 0;
        let full = |count: usize, len: usize| count > 0 && len >= MESSAGE_TARGET;
        match &mut self.body {
            Body::List { records, next } => {
                while let Some(record) = records.get(*next) {
                    if full(count, answer.as_slice().len()) {
                        break;
                    }
                    answer.push(listed(record)?).ok()?;
                    *next += 1;
                    count += 1;
                }
            }
            Body::Zone {
                zone,
                soa,
                stage,
                cursor,
                sent,
            } => {
                while *stage != Stage::Done && !full(count, answer.as_slice().len()) {
                    match *stage {
                        Stage::FirstSoa | Stage::LastSoa => {
                            answer.push(listed(soa)?).ok()?;
                            *stage = if *stage == Stage::FirstSoa {
                                Stage::Records
                            } else {
                                Stage::Done
                            };
                        }
                        Stage::Records => match zone.transfer_next(cursor) {
                            Some((owner, stored)) => {
                                answer.push(Stored { owner, stored }).ok()?;
                            }
                            None => {
                                *stage = Stage::LastSoa;
                                continue;
                            }
                        },
                        Stage::Done => break,
                    }
                    *sent += 1;
                    count += 1;
                }
            }
        }
        if answer.as_slice().len() > usize::from(u16::MAX) - 512 {
            return None;
        }
        self.sign(answer.additional())
    }

    fn sign(&mut self, mut additional: AdditionalBuilder<Compressor>) -> Option<Vec<u8>> {
        if let Some(signer) = self.signer.as_mut() {
            signer.answer(&mut additional, time48(self.now)).ok()?;
        }
        Some(additional.finish().out)
    }
}

/// A listed record in the form `domain` composes.
type Listed<'r> = (
    &'r Name<[u8]>,
    Class,
    Ttl,
    domain::base::rdata::UnknownRecordData<&'r [u8]>,
);

/// A listed record as `domain` composes it (its owner compressed by the target).
fn listed(record: &Record) -> Option<Listed<'_>> {
    let owner = Name::from_slice(&record.owner).ok()?;
    let data = domain::base::rdata::UnknownRecordData::from_octets(
        Rtype::from_int(record.rtype),
        &record.rdata[..],
    )
    .ok()?;
    Some((owner, Class::IN, Ttl::from_secs(record.ttl), data))
}

/// A record as the compiled zone stores it: its owner, then its wire form after the owner,
/// copied as is.
struct Stored<'z> {
    owner: &'z [u8],
    stored: &'z [u8],
}

impl ComposeRecord for Stored<'_> {
    fn compose_record<T: Composer + ?Sized>(&self, target: &mut T) -> Result<(), T::AppendError> {
        match Name::from_slice(self.owner) {
            Ok(owner) => target.append_compressed_name(owner)?,
            // Unreachable: a compiled zone holds valid names.
            Err(_) => target.append_slice(self.owner)?,
        }
        target.append_slice(self.stored)
    }
}

/// A transfer message's bytes, compressing owner names (RFC 1035 §4.1.4) the cheap way a
/// transfer allows: owners come in canonical order, so a name is most often the previous
/// owner (another RRset of the same node), one label below it (its child), or one label
/// below the apex. Each is written as its leading labels and one pointer; any other name is
/// written as its labels above the apex and a pointer to where the apex was first written.
/// Names outside the zone (the TSIG key's) go uncompressed. No table, nothing allocated per
/// name; `domain`'s `StaticCompressor` stops compressing after 24 names, far fewer than a
/// 16 KiB message holds.
struct Compressor {
    out: Vec<u8>,
    /// The zone's apex (the transfer's question name), lowercase or as asked.
    apex: Box<[u8]>,
    /// Where the apex was written in this message.
    apex_at: Option<u16>,
    /// The last name written and where it starts.
    previous: Vec<u8>,
    previous_at: Option<u16>,
    /// Where a name that is not one flat slice is flattened.
    scratch: Vec<u8>,
}

/// The largest offset a compression pointer can hold.
const MAX_POINTER: usize = 0x3fff;

impl Compressor {
    fn new(apex: &[u8]) -> Self {
        Self {
            out: Vec::with_capacity(MESSAGE_TARGET + 1024),
            apex: apex.to_ascii_lowercase().into(),
            apex_at: None,
            previous: Vec::with_capacity(256),
            previous_at: None,
            scratch: Vec::new(),
        }
    }

    fn pointer(&mut self, at: u16) {
        self.out.extend_from_slice(&(0xc000 | at).to_be_bytes());
    }

    /// Writes a valid wire name, compressed when it is the previous name, below it, or below
    /// the apex.
    fn name(&mut self, name: &[u8]) {
        let start = self.out.len();
        if let Some(at) = self.previous_at {
            if name.eq_ignore_ascii_case(&self.previous) {
                self.pointer(at);
                return;
            }
            if let Some(head) = below(name, &self.previous) {
                self.out.extend_from_slice(&name[..head]);
                self.pointer(at);
                self.remember(name, start);
                return;
            }
        }
        if self.apex.len() > 1
            && let Some(head) = below(name, &self.apex)
        {
            self.out.extend_from_slice(&name[..head]);
            match self.apex_at {
                Some(at) => self.pointer(at),
                None => {
                    let at = self.out.len();
                    self.out.extend_from_slice(&name[head..]);
                    if at <= MAX_POINTER {
                        self.apex_at = Some(at as u16);
                    }
                }
            }
            self.remember(name, start);
            return;
        }
        self.out.extend_from_slice(name);
    }

    fn remember(&mut self, name: &[u8], at: usize) {
        if at <= MAX_POINTER {
            self.previous.clear();
            self.previous.extend_from_slice(name);
            self.previous_at = Some(at as u16);
        }
    }
}

impl AsRef<[u8]> for Compressor {
    fn as_ref(&self) -> &[u8] {
        &self.out
    }
}

impl AsMut<[u8]> for Compressor {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.out
    }
}

impl OctetsBuilder for Compressor {
    type AppendError = std::convert::Infallible;

    fn append_slice(&mut self, slice: &[u8]) -> Result<(), Self::AppendError> {
        self.out.extend_from_slice(slice);
        Ok(())
    }
}

impl Truncate for Compressor {
    fn truncate(&mut self, len: usize) {
        self.out.truncate(len);
        if self.apex_at.is_some_and(|at| usize::from(at) >= len) {
            self.apex_at = None;
        }
        if self.previous_at.is_some_and(|at| usize::from(at) >= len) {
            self.previous_at = None;
        }
    }
}

impl Composer for Compressor {
    fn append_compressed_name<N: ToName + ?Sized>(
        &mut self,
        name: &N,
    ) -> Result<(), Self::AppendError> {
        match name.as_flat_slice() {
            Some(wire) => {
                self.name(wire);
                Ok(())
            }
            None => {
                // A name in pieces (or behind a reference): flattened into the scratch buffer.
                let mut scratch = std::mem::take(&mut self.scratch);
                scratch.clear();
                let _ = name.compose(&mut scratch);
                self.name(&scratch);
                self.scratch = scratch;
                Ok(())
            }
        }
    }

    fn can_compress(&self) -> bool {
        true
    }
}

/// When valid wire name `name` is at or below `suffix` (ASCII case ignored), the length of
/// its labels above it.
fn below(name: &[u8], suffix: &[u8]) -> Option<usize> {
    let head = name.len().checked_sub(suffix.len())?;
    if !name[head..].eq_ignore_ascii_case(suffix) {
        return None;
    }
    let mut at = 0;
    while at < head {
        at += 1 + usize::from(name[at]);
    }
    (at == head).then_some(head)
}

/// AXFR order: SOA, the rest, SOA.
fn whole_list(soa: Record, others: Vec<Record>) -> Vec<Record> {
    let mut records = Vec::with_capacity(others.len() + 2);
    records.push(soa.clone());
    records.extend(others.into_iter().filter(|r| r.rtype != rtype::SOA));
    records.push(soa);
    records
}

/// The serial of the SOA an IXFR request carries in its authority section (RFC 1995 §3).
fn ixfr_serial(message: &Message<Vec<u8>>) -> Option<u32> {
    let authority = message.authority().ok()?;
    let record = authority.limit_to::<Soa<_>>().next()?.ok()?;
    Some(record.data().serial().into_int())
}

fn time48(now: u64) -> Time48 {
    Time48::from_u64(now & 0xFFFF_FFFF_FFFF)
}

/// The address check, then TSIG (RFC 8945 §5.2): a signed request is verified against the
/// zone's key (BADKEY for another key, BADSIG for a bad MAC, BADTIME outside the fudge); an
/// unsigned one is refused when the zone has a key.
fn check(
    policy: &TransferPolicy,
    request: &[u8],
    client: IpAddr,
    now: u64,
) -> Result<Checked, Vec<u8>> {
    let mut message = Message::from_octets(request.to_vec())
        .map_err(|_| header_error(request, Rcode::FORMERR))?;
    if !policy.allows(client) {
        return Err(error(&message, Rcode::REFUSED));
    }
    let original = message.clone();
    let signer = match &policy.key {
        Some(key) => ServerSequence::request(key, &mut message, time48(now)),
        None => ServerSequence::request(&NoKeys, &mut message, time48(now)),
    };
    match signer {
        Ok(Some(signer)) => Ok((message, Some(signer))),
        Ok(None) if policy.key.is_some() => Err(error(&message, Rcode::REFUSED)),
        Ok(None) => Ok((message, None)),
        Err(err) => Err(tsig_error(err, &original)),
    }
}

/// The answer to a request TSIG refused. `domain` reports a MAC that does not verify as
/// TSIG error FORMERR; RFC 8945 §5.2.2 says BADSIG, which is what this patches in.
fn tsig_error(err: ServerError<Arc<Key>>, request: &Message<Vec<u8>>) -> Vec<u8> {
    let code = err.error();
    let Ok(builder) = err.build_message(request, MessageBuilder::new_vec()) else {
        return error(request, Rcode::SERVFAIL);
    };
    let mut out = builder.finish();
    let notauth = out.len() > 4 && out[3] & 0x0f == Rcode::NOTAUTH.to_int();
    if notauth && code == domain::base::iana::TsigRcode::FORMERR && out.len() >= 4 {
        // The unsigned error's TSIG record ends error(2) other-len(2) with no other data.
        let at = out.len() - 4;
        out[at..at + 2].copy_from_slice(&16u16.to_be_bytes());
    }
    out
}

/// An error answer with the question echoed.
fn error(request: &Message<Vec<u8>>, rcode: Rcode) -> Vec<u8> {
    match MessageBuilder::new_vec().start_answer(request, rcode) {
        Ok(builder) => builder.finish(),
        Err(_) => header_error(request.as_slice(), rcode),
    }
}

/// An error answer of a bare header, for a request that does not parse.
fn header_error(request: &[u8], rcode: Rcode) -> Vec<u8> {
    let mut out = vec![0; 12];
    if request.len() >= 2 {
        out[..2].copy_from_slice(&request[..2]);
    }
    out[2] = 0x80 | (request.get(2).copied().unwrap_or(0) & 0x79);
    out[3] = rcode.to_int() & 0x0f;
    out
}

/// What an incoming transfer brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// The primary's serial is not newer than ours (an IXFR answered with one SOA).
    UpToDate,
    /// The whole zone (AXFR, or an AXFR-style IXFR answer): SOA first, once.
    Full(Vec<Record>),
    /// Incremental changes, oldest first (each diff's SOAs in its removed and added lists).
    Diffs(Vec<Diff>),
}

/// Why an incoming transfer failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IncomingError {
    /// The primary answered with an error rcode.
    #[error("the primary answered rcode {0}")]
    Rcode(u8),
    /// A message that does not parse, or does not answer our request.
    #[error("malformed transfer: {0}")]
    Malformed(&'static str),
    /// More records than allowed.
    #[error("transfer larger than {0} records")]
    TooLarge(usize),
    /// A record whose owner is outside the zone.
    #[error("out-of-zone record in the transfer")]
    OutOfZone,
}

/// Whether the stream needs more messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Not complete: read the next message.
    More,
    /// Complete.
    Done(Received),
}

/// The secondary's side of a transfer: the answer messages of an AXFR or IXFR, fed in as
/// they arrive, interpreted into a whole zone or a list of diffs (RFC 5936 §2.2, RFC 1995
/// §4). Sans-IO: the control thread reads the messages and checks their TSIG.
///
/// The stream is complete when an SOA with the first SOA's serial closes it: the second SOA
/// of an AXFR-style stream, or in an incremental one the SOA where the next diff would start.
#[derive(Debug)]
pub struct Incoming {
    apex: Box<[u8]>,
    id: u16,
    /// Our serial when we asked for an IXFR.
    ixfr_from: Option<u32>,
    max_records: usize,
    records: Vec<Record>,
    /// The serial of the first SOA (the primary's current one).
    serial: Option<u32>,
    /// SOAs seen after the first.
    soas_after_first: usize,
    done: bool,
}

impl Incoming {
    /// A transfer of `apex` (lowercase wire form) asked for with message ID `id`: an IXFR
    /// from `ixfr_from`, or an AXFR; at most `max_records` records.
    pub fn new(apex: &[u8], id: u16, ixfr_from: Option<u32>, max_records: usize) -> Self {
        Self {
            apex: apex.to_ascii_lowercase().into(),
            id,
            ixfr_from,
            max_records,
            records: Vec::new(),
            serial: None,
            soas_after_first: 0,
            done: false,
        }
    }

    /// Takes the next answer message of the stream (its TSIG, if any, already checked).
    pub fn message(&mut self, bytes: &[u8]) -> Result<Progress, IncomingError> {
        if self.done {
            return Err(IncomingError::Malformed("a message after the last SOA"));
        }
        let msg =
            Message::from_slice(bytes).map_err(|_| IncomingError::Malformed("short message"))?;
        let header = msg.header();
        if !header.qr() || header.id() != self.id {
            return Err(IncomingError::Malformed("not an answer to the request"));
        }
        if header.rcode() != Rcode::NOERROR {
            return Err(IncomingError::Rcode(header.rcode().to_int()));
        }
        if header.tc() {
            return Err(IncomingError::Malformed("truncated"));
        }
        let answer = msg
            .answer()
            .map_err(|_| IncomingError::Malformed("bad question section"))?;
        for record in answer {
            let record = record.map_err(|_| IncomingError::Malformed("bad record"))?;
            if self.done {
                return Err(IncomingError::Malformed("records after the last SOA"));
            }
            if self.records.len() >= self.max_records {
                return Err(IncomingError::TooLarge(self.max_records));
            }
            let record = owned(&record)?;
            if !in_zone(&record.owner, &self.apex) {
                return Err(IncomingError::OutOfZone);
            }
            let soa = soa_serial(&record);
            match (self.serial, soa) {
                (None, Some(serial)) if record.owner == self.apex => self.serial = Some(serial),
                (None, _) => {
                    return Err(IncomingError::Malformed(
                        "the first record is not the apex SOA",
                    ));
                }
                (Some(first), Some(serial)) => {
                    self.soas_after_first += 1;
                    let incremental = self.is_incremental_with(serial);
                    if serial == first && (!incremental || self.soas_after_first % 2 == 1) {
                        self.done = true;
                    } else if !incremental {
                        return Err(IncomingError::Malformed(
                            "a second SOA inside a full transfer",
                        ));
                    }
                }
                (Some(_), None) => {}
            }
            self.records.push(record);
        }
        if self.done {
            return self.finish().map(Progress::Done);
        }
        // An IXFR answered with the single SOA: we are current (RFC 1995 §2).
        if let (Some(ours), Some(theirs), 1) = (self.ixfr_from, self.serial, self.records.len())
            && !serial_older(ours, theirs)
        {
            self.done = true;
            return Ok(Progress::Done(Received::UpToDate));
        }
        Ok(Progress::More)
    }

    /// Whether the stream is incremental, judged at its second record (an SOA of `serial`
    /// right after the first, other than the first's: the start of the first diff).
    fn is_incremental_with(&self, serial: u32) -> bool {
        match self.records.get(1) {
            Some(second) => {
                self.ixfr_from.is_some()
                    && soa_serial(second).is_some_and(|s| Some(s) != self.serial)
            }
            None => self.ixfr_from.is_some() && Some(serial) != self.serial,
        }
    }

    fn finish(&mut self) -> Result<Received, IncomingError> {
        let mut records = std::mem::take(&mut self.records);
        let first = self.serial.unwrap_or_default();
        let incremental = records
            .get(1)
            .and_then(soa_serial)
            .is_some_and(|s| s != first)
            && self.ixfr_from.is_some();
        if !incremental {
            records.pop(); // the closing SOA
            return Ok(Received::Full(records));
        }
        // SOA(new) [SOA(from) removed… SOA(to) added…]… SOA(new)
        let mut diffs: Vec<Diff> = Vec::new();
        let mut iter = records.into_iter().skip(1).peekable();
        while let Some(from_soa) = iter.next() {
            let Some(from) = soa_serial(&from_soa) else {
                return Err(IncomingError::Malformed(
                    "a diff does not start with an SOA",
                ));
            };
            if from == first && iter.peek().is_none() {
                break;
            }
            let mut removed = vec![from_soa];
            while let Some(r) = iter.next_if(|r| r.rtype != rtype::SOA) {
                removed.push(r);
            }
            let Some(to_soa) = iter.next() else {
                return Err(IncomingError::Malformed("a diff without its new SOA"));
            };
            let to = soa_serial(&to_soa).unwrap_or_default();
            let mut added = vec![to_soa];
            while let Some(r) = iter.next_if(|r| r.rtype != rtype::SOA) {
                added.push(r);
            }
            if diffs.last().is_some_and(|d| d.to != from) {
                return Err(IncomingError::Malformed(
                    "diffs that do not follow each other",
                ));
            }
            diffs.push(Diff {
                from,
                to,
                removed,
                added,
            });
        }
        if diffs.first().map(|d| d.from) != self.ixfr_from
            || diffs.last().map(|d| d.to) != Some(first)
        {
            return Err(IncomingError::Malformed(
                "diffs that do not lead from our serial to theirs",
            ));
        }
        Ok(Received::Diffs(diffs))
    }
}

/// A parsed record as kudurru keeps it: owner lowercased, rdata with its names uncompressed.
fn owned(record: &domain::base::ParsedRecord<'_, [u8]>) -> Result<Record, IncomingError> {
    let bad = |_| IncomingError::Malformed("bad record");
    if record.class() != Class::IN {
        return Err(IncomingError::Malformed(
            "a record of a class other than IN",
        ));
    }
    let parsed = record
        .to_any_record::<domain::rdata::AllRecordData<_, domain::base::ParsedName<_>>>()
        .map_err(|_| IncomingError::Malformed("rdata that does not parse"))?;
    let mut owner = Vec::with_capacity(32);
    parsed.owner().compose(&mut owner).map_err(bad)?;
    owner.make_ascii_lowercase();
    let mut rdata = Vec::with_capacity(usize::from(record.rdlen()));
    domain::base::rdata::ComposeRecordData::compose_rdata(parsed.data(), &mut rdata)
        .map_err(bad)?;
    Ok(Record {
        owner: owner.into(),
        rtype: record.rtype().to_int(),
        ttl: record.ttl().as_secs(),
        rdata: rdata.into(),
    })
}

/// Whether `owner` is `apex` or below it (both lowercase wire form).
fn in_zone(owner: &[u8], apex: &[u8]) -> bool {
    if !owner.ends_with(apex) {
        return false;
    }
    // The suffix must start at a label boundary.
    let start = owner.len() - apex.len();
    let mut at = 0;
    while at < start {
        at += usize::from(owner[at]) + 1;
    }
    at == start
}

/// The serial of an SOA record (uncompressed rdata: two names, then the serial).
pub fn soa_serial(record: &Record) -> Option<u32> {
    if record.rtype != rtype::SOA {
        return None;
    }
    let mut at = 0;
    for _ in 0..2 {
        loop {
            let len = usize::from(*record.rdata.get(at)?);
            at += len + 1;
            if len == 0 {
                break;
            }
        }
    }
    let bytes = record.rdata.get(at..at + 4)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use domain::base::iana::TsigRcode;
    use domain::base::{MessageBuilder, Name};
    use domain::rdata::AllRecordData;
    use domain::tsig::{ClientSequence, KeyName};

    use super::*;

    const APEX: &str = "corp.example.";

    fn wire_name(name: &str) -> Box<[u8]> {
        Name::<Vec<u8>>::from_str(name)
            .unwrap()
            .as_slice()
            .to_vec()
            .into()
    }

    fn soa(serial: u32) -> Record {
        let soa = Soa::new(
            Name::<Vec<u8>>::from_str("ns1.corp.example.").unwrap(),
            Name::<Vec<u8>>::from_str("hostmaster.corp.example.").unwrap(),
            Serial(serial),
            Ttl::from_secs(3600),
            Ttl::from_secs(600),
            Ttl::from_secs(86400),
            Ttl::from_secs(300),
        );
        let mut rdata = Vec::new();
        domain::base::rdata::ComposeRecordData::compose_rdata(&soa, &mut rdata).unwrap();
        Record {
            owner: wire_name(APEX),
            rtype: rtype::SOA,
            ttl: 3600,
            rdata: rdata.into(),
        }
    }

    fn a(name: &str, last: u8) -> Record {
        Record {
            owner: wire_name(name),
            rtype: rtype::A,
            ttl: 300,
            rdata: vec![192, 0, 2, last].into(),
        }
    }

    fn zone_records(n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| a(&format!("host{i}.{APEX}"), (i % 250) as u8))
            .collect()
    }

    fn policy() -> TransferPolicy {
        TransferPolicy {
            allow: vec![("127.0.0.0".parse().unwrap(), 8)],
            key: None,
        }
    }

    fn request(qtype: Rtype, serial: Option<u32>) -> AdditionalBuilder<Vec<u8>> {
        let mut builder = MessageBuilder::new_vec();
        builder.header_mut().set_id(0x4242);
        let mut question = builder.question();
        question
            .push((Name::<Vec<u8>>::from_str(APEX).unwrap(), qtype, Class::IN))
            .unwrap();
        let mut authority = question.authority();
        if let Some(serial) = serial {
            let data = Soa::new(
                Name::<Vec<u8>>::from_str("ns1.corp.example.").unwrap(),
                Name::<Vec<u8>>::from_str("hostmaster.corp.example.").unwrap(),
                Serial(serial),
                Ttl::from_secs(3600),
                Ttl::from_secs(600),
                Ttl::from_secs(86400),
                Ttl::from_secs(300),
            );
            authority
                .push((Name::<Vec<u8>>::from_str(APEX).unwrap(), 3600, data))
                .unwrap();
        }
        authority.additional()
    }

    fn unsigned(qtype: Rtype, serial: Option<u32>) -> Vec<u8> {
        request(qtype, serial).finish()
    }

    fn plan(
        policy: &TransferPolicy,
        journal: &Journal,
        serial: u32,
        records: Vec<Record>,
        request: &[u8],
        client: &str,
    ) -> Result<Transfer, Vec<u8>> {
        Transfer::plan(
            policy,
            journal,
            serial,
            || (Some(soa(serial)), records),
            request,
            client.parse().unwrap(),
            1_700_000_000,
        )
    }

    /// Every message of a transfer, parsed back with `domain`: (rtype, owner, serial of SOAs).
    fn drain(transfer: &mut Transfer) -> (usize, Vec<(Rtype, String, Option<u32>)>) {
        let mut messages = 0;
        let mut records = Vec::new();
        while let Some(bytes) = transfer.next_message() {
            messages += 1;
            assert!(bytes.len() < 65535);
            let msg = Message::from_octets(bytes).unwrap();
            assert!(msg.header().qr() && msg.header().aa());
            assert_eq!(msg.header().id(), 0x4242);
            assert_eq!(msg.header().rcode(), Rcode::NOERROR);
            for record in msg.answer().unwrap() {
                let record = record.unwrap();
                let parsed = record.to_record::<AllRecordData<_, _>>().unwrap().unwrap();
                let serial = match parsed.data() {
                    AllRecordData::Soa(soa) => Some(soa.serial().into_int()),
                    _ => None,
                };
                records.push((record.rtype(), record.owner().to_string(), serial));
            }
        }
        (messages, records)
    }

    fn rcode_of(answer: &[u8]) -> Rcode {
        Message::from_octets(answer).unwrap().header().rcode()
    }

    #[test]
    fn rfc5936_2_2_axfr_soa_first_and_last_in_several_messages() {
        let records = zone_records(2000);
        let req = unsigned(Rtype::AXFR, None);
        let mut transfer = plan(
            &policy(),
            &Journal::default(),
            7,
            records,
            &req,
            "127.0.0.1",
        )
        .unwrap();
        assert_eq!(transfer.kind(), TransferKind::Axfr);
        let (messages, got) = drain(&mut transfer);
        assert!(
            messages > 1,
            "2000 records span messages of {MESSAGE_TARGET} bytes"
        );
        assert_eq!(got.len(), 2002);
        assert_eq!(got[0], (Rtype::SOA, "corp.example".into(), Some(7)));
        assert_eq!(got[2001], (Rtype::SOA, "corp.example".into(), Some(7)));
        assert!(got[1..2001].iter().all(|r| r.0 == Rtype::A));
        assert!(transfer.next_message().is_none());
    }

    #[test]
    fn refused_outside_allow_transfer_and_by_default() {
        let req = unsigned(Rtype::AXFR, None);
        let err = plan(&policy(), &Journal::default(), 1, vec![], &req, "192.0.2.1").unwrap_err();
        assert_eq!(rcode_of(&err), Rcode::REFUSED);
        let nobody = TransferPolicy::default();
        let err = plan(&nobody, &Journal::default(), 1, vec![], &req, "127.0.0.1").unwrap_err();
        assert_eq!(rcode_of(&err), Rcode::REFUSED);
        let v6 = TransferPolicy {
            allow: vec![("::1".parse().unwrap(), 128)],
            key: None,
        };
        assert!(v6.allows("::1".parse().unwrap()));
        assert!(!v6.allows("::2".parse().unwrap()));
        assert!(policy().allows("::ffff:127.0.0.9".parse().unwrap()));
    }

    fn journal() -> Journal {
        // 1 → 2: host1 192.0.2.1 replaced by .101; 2 → 3: new host9, host1's .101 removed again.
        let one = Diff {
            from: 1,
            to: 2,
            removed: vec![soa(1), a("host1.corp.example.", 1)],
            added: vec![soa(2), a("host1.corp.example.", 101)],
        };
        let two = Diff {
            from: 2,
            to: 3,
            removed: vec![soa(2), a("host1.corp.example.", 101)],
            added: vec![soa(3), a("host9.corp.example.", 9)],
        };
        Journal {
            diffs: vec![one, two],
        }
    }

    #[test]
    fn rfc1995_4_ixfr_condensed_from_the_journal() {
        let req = unsigned(Rtype::IXFR, Some(1));
        let mut transfer =
            plan(&policy(), &journal(), 3, zone_records(3), &req, "127.0.0.1").unwrap();
        assert_eq!(transfer.kind(), TransferKind::Ixfr(IxfrShape::Incremental));
        let (_, got) = drain(&mut transfer);
        let soa_serials: Vec<_> = got.iter().filter_map(|r| r.2).collect();
        assert_eq!(soa_serials, vec![3, 1, 3, 3]);
        // condensed: host1 .1 removed, host9 added, the intermediate .101 in neither.
        assert_eq!(got.len(), 6);
        assert_eq!(got[2].1, "host1.corp.example");
        assert_eq!(got[4].1, "host9.corp.example");
    }

    #[test]
    fn rfc1995_2_ixfr_current_client_gets_one_soa() {
        let req = unsigned(Rtype::IXFR, Some(3));
        let mut transfer =
            plan(&policy(), &journal(), 3, zone_records(3), &req, "127.0.0.1").unwrap();
        assert_eq!(transfer.kind(), TransferKind::Ixfr(IxfrShape::Current));
        let (messages, got) = drain(&mut transfer);
        assert_eq!((messages, got.len()), (1, 1));
    }

    #[test]
    fn rfc1995_4_ixfr_unknown_serial_gets_the_whole_zone() {
        let req = unsigned(Rtype::IXFR, Some(0));
        let mut transfer =
            plan(&policy(), &journal(), 3, zone_records(3), &req, "127.0.0.1").unwrap();
        assert_eq!(transfer.kind(), TransferKind::Ixfr(IxfrShape::Full));
        let (_, got) = drain(&mut transfer);
        assert_eq!(got.len(), 5);
        let req = unsigned(Rtype::IXFR, None);
        let err = plan(&policy(), &journal(), 3, vec![], &req, "127.0.0.1").unwrap_err();
        assert_eq!(
            rcode_of(&err),
            Rcode::FORMERR,
            "an IXFR without the client's SOA"
        );
    }

    fn key(name: &str, secret: &[u8]) -> Arc<Key> {
        Arc::new(
            Key::new(
                Algorithm::Sha256,
                secret,
                KeyName::from_str(name).unwrap(),
                None,
                None,
            )
            .unwrap(),
        )
    }

    fn signed(key: &Arc<Key>, now: u64) -> (Vec<u8>, ClientSequence<Arc<Key>>) {
        let mut additional = request(Rtype::AXFR, None);
        let seq = ClientSequence::request(key.clone(), &mut additional, time48(now)).unwrap();
        (additional.finish(), seq)
    }

    fn tsig_error_of(answer: &[u8]) -> (Rcode, Option<TsigRcode>) {
        let msg = Message::from_octets(answer).unwrap();
        let tsig = msg
            .additional()
            .unwrap()
            .limit_to::<domain::rdata::Tsig<_, _>>()
            .next()
            .map(|r| r.unwrap().data().error());
        (msg.header().rcode(), tsig)
    }

    #[test]
    fn rfc8945_signed_transfer_every_message_verifies() {
        let key = key("xfr-key.", b"0123456789abcdef0123456789abcdef");
        let policy = TransferPolicy {
            key: Some(key.clone()),
            ..policy()
        };
        let now = 1_700_000_000;
        let (req, mut client) = signed(&key, now);
        let mut transfer = Transfer::plan(
            &policy,
            &Journal::default(),
            5,
            || (Some(soa(5)), zone_records(1500)),
            &req,
            "127.0.0.1".parse().unwrap(),
            now,
        )
        .unwrap();
        let mut messages = 0;
        while let Some(bytes) = transfer.next_message() {
            let mut msg = Message::from_octets(bytes).unwrap();
            client.answer(&mut msg, time48(now)).unwrap();
            messages += 1;
        }
        assert!(messages > 1);
        client.done().unwrap();
    }

    #[test]
    fn rfc8945_5_2_unsigned_wrong_key_bad_mac_refused() {
        let good = key("xfr-key.", b"0123456789abcdef0123456789abcdef");
        let policy = TransferPolicy {
            key: Some(good.clone()),
            ..policy()
        };
        let now = 1_700_000_000;
        let try_plan = |req: &[u8]| {
            Transfer::plan(
                &policy,
                &Journal::default(),
                5,
                || (Some(soa(5)), vec![]),
                req,
                "127.0.0.1".parse().unwrap(),
                now,
            )
            .unwrap_err()
        };
        let err = try_plan(&unsigned(Rtype::AXFR, None));
        assert_eq!(rcode_of(&err), Rcode::REFUSED, "a key is required");
        let other = key("other-key.", b"0123456789abcdef0123456789abcdef");
        let (req, _) = signed(&other, now);
        assert_eq!(
            tsig_error_of(&try_plan(&req)),
            (Rcode::NOTAUTH, Some(TsigRcode::BADKEY))
        );
        let forged = key("xfr-key.", b"fedcba9876543210fedcba9876543210");
        let (req, _) = signed(&forged, now);
        assert_eq!(
            tsig_error_of(&try_plan(&req)),
            (Rcode::NOTAUTH, Some(TsigRcode::BADSIG))
        );
        let (req, _) = signed(&good, now - 3600);
        assert_eq!(tsig_error_of(&try_plan(&req)).1, Some(TsigRcode::BADTIME));
        // A signed request to a zone without a key: BADKEY.
        let (req, _) = signed(&good, now);
        let err = plan(
            &self::policy(),
            &Journal::default(),
            5,
            vec![],
            &req,
            "127.0.0.1",
        )
        .unwrap_err();
        assert_eq!(tsig_error_of(&err).1, Some(TsigRcode::BADKEY));
    }

    #[test]
    fn garbage_requests_never_panic() {
        for len in 0..40 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37) as u8).collect();
            let _ = plan(&policy(), &journal(), 3, vec![], &junk, "127.0.0.1");
        }
    }

    #[test]
    fn rfc1982_serials_wrap() {
        assert!(serial_older(u32::MAX, 1));
        assert!(serial_older(1, 2));
        assert!(!serial_older(2, 2));
        let journal = journal();
        assert!(
            journal.since(7).is_none(),
            "a serial the journal does not reach"
        );
    }

    /// A compiled zone of `n` names below `sub.corp.example.` (A, and every third an AAAA and
    /// a TXT), a delegation with glue, and the apex NS: several RRsets per node, children
    /// after parents, names four labels deep.
    fn compiled(n: usize, serial: u32) -> Arc<Zone> {
        let mut records = vec![
            soa(serial),
            Record {
                owner: wire_name(APEX),
                rtype: rtype::NS,
                ttl: 3600,
                rdata: wire_name("ns1.corp.example."),
            },
            a("ns1.corp.example.", 53),
            Record {
                owner: wire_name("child.corp.example."),
                rtype: rtype::NS,
                ttl: 3600,
                rdata: wire_name("ns.child.corp.example."),
            },
            a("ns.child.corp.example.", 54),
        ];
        for i in 0..n {
            let owner = format!("host{i}.sub.corp.example.");
            records.push(a(&owner, (i % 250) as u8));
            if i % 3 == 0 {
                records.push(Record {
                    owner: wire_name(&owner),
                    rtype: rtype::AAAA,
                    ttl: 300,
                    rdata: [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i as u8].into(),
                });
                records.push(Record {
                    owner: wire_name(&owner),
                    rtype: 16,
                    ttl: 300,
                    rdata: b"\x0bhello world".to_vec().into(),
                });
            }
        }
        let data = crate::zone::data::ZoneData {
            apex: wire_name(APEX),
            records,
            origins: Vec::new(),
        };
        Arc::new(Zone::compile(&data, crate::zone::tree::ZoneKind::Primary).unwrap())
    }

    fn plan_compiled(
        zone: &Arc<Zone>,
        policy: &TransferPolicy,
        request: &[u8],
        now: u64,
    ) -> Transfer {
        Transfer::plan_zone(
            policy,
            &Journal::default(),
            zone,
            request,
            "127.0.0.1".parse().unwrap(),
            now,
        )
        .unwrap()
    }

    #[test]
    fn rfc5936_streamed_axfr_is_exactly_the_compiled_zone_with_owners_compressed() {
        let zone = compiled(20_000, 9);
        let expected: Vec<Record> = zone.records().collect();
        let uncompressed: usize = expected
            .iter()
            .map(|r| r.owner.len() + 10 + r.rdata.len())
            .sum::<usize>()
            + expected[0].owner.len()
            + 10
            + expected[0].rdata.len();
        let req = unsigned(Rtype::AXFR, None);
        let mut transfer = plan_compiled(&zone, &policy(), &req, 1_700_000_000);
        assert_eq!(transfer.kind(), TransferKind::Axfr);
        assert_eq!(transfer.remaining(), expected.len() + 1);
        // Every message parses with `domain` on its own, records and rdata included.
        let mut messages = Vec::new();
        while let Some(bytes) = transfer.next_message() {
            assert!(bytes.len() <= MESSAGE_TARGET + 1024, "{}", bytes.len());
            let msg = Message::from_octets(bytes.clone()).unwrap();
            assert_eq!(msg.header().rcode(), Rcode::NOERROR);
            for record in msg.answer().unwrap() {
                record
                    .unwrap()
                    .to_record::<AllRecordData<_, _>>()
                    .unwrap()
                    .unwrap();
            }
            messages.push(bytes);
        }
        assert_eq!(transfer.remaining(), 0);
        assert!(messages.len() > 10, "{} messages", messages.len());
        let sent: usize = messages.iter().map(|m| m.len()).sum();
        // Owners of 24+ bytes go as one label and a pointer: well under two thirds.
        assert!(
            sent * 3 < uncompressed * 2,
            "{sent} bytes of {uncompressed}"
        );
        // Parsed back (owners decompressed), it is the zone, record for record, in order.
        let mut incoming = Incoming::new(&wire_name(APEX), 0x4242, None, 1_000_000);
        let mut received = None;
        for message in &messages {
            if let Progress::Done(done) = incoming.message(message).unwrap() {
                received = Some(done);
            }
        }
        let Some(Received::Full(got)) = received else {
            panic!("not a full zone");
        };
        assert_eq!(got, expected);
    }

    #[test]
    fn rfc1995_4_streamed_ixfr_falls_back_to_the_whole_compiled_zone() {
        let zone = compiled(3000, 9);
        let req = unsigned(Rtype::IXFR, Some(3));
        let mut transfer = plan_compiled(&zone, &policy(), &req, 1_700_000_000);
        assert_eq!(transfer.kind(), TransferKind::Ixfr(IxfrShape::Full));
        let Received::Full(got) = receive(&mut transfer, Some(3)).unwrap() else {
            panic!("not a full zone");
        };
        assert_eq!(got, zone.records().collect::<Vec<_>>());
        // A current client gets the SOA alone.
        let req = unsigned(Rtype::IXFR, Some(9));
        let mut transfer = plan_compiled(&zone, &policy(), &req, 1_700_000_000);
        assert_eq!(transfer.kind(), TransferKind::Ixfr(IxfrShape::Current));
        assert_eq!(receive(&mut transfer, Some(9)).unwrap(), Received::UpToDate);
    }

    #[test]
    fn rfc8945_streamed_axfr_every_message_verifies() {
        let key = key("xfr-key.", b"0123456789abcdef0123456789abcdef");
        let policy = TransferPolicy {
            key: Some(key.clone()),
            ..policy()
        };
        let now = 1_700_000_000;
        let zone = compiled(5000, 9);
        let (req, mut client) = signed(&key, now);
        let mut transfer = plan_compiled(&zone, &policy, &req, now);
        let mut incoming = Incoming::new(&wire_name(APEX), 0x4242, None, 1_000_000);
        let mut messages = 0;
        let mut received = None;
        while let Some(bytes) = transfer.next_message() {
            let mut msg = Message::from_octets(bytes).unwrap();
            client.answer(&mut msg, time48(now)).unwrap();
            messages += 1;
            let bytes = msg.into_octets();
            if let Progress::Done(done) = incoming.message(&bytes).unwrap() {
                received = Some(done);
            }
        }
        assert!(messages > 1);
        client.done().unwrap();
        let Some(Received::Full(got)) = received else {
            panic!("not a full zone");
        };
        assert_eq!(got, zone.records().collect::<Vec<_>>());
    }

    fn receive(transfer: &mut Transfer, ixfr_from: Option<u32>) -> Result<Received, IncomingError> {
        let mut incoming = Incoming::new(&wire_name(APEX), 0x4242, ixfr_from, 1_000_000);
        while let Some(message) = transfer.next_message() {
            if let Progress::Done(received) = incoming.message(&message)? {
                assert!(
                    transfer.next_message().is_none(),
                    "done at the last message"
                );
                return Ok(received);
            }
        }
        Err(IncomingError::Malformed("the stream ended early"))
    }

    #[test]
    fn incoming_axfr_round_trips() {
        let records = zone_records(2000);
        let req = unsigned(Rtype::AXFR, None);
        let mut transfer = plan(
            &policy(),
            &Journal::default(),
            7,
            records.clone(),
            &req,
            "127.0.0.1",
        )
        .unwrap();
        let Received::Full(got) = receive(&mut transfer, None).unwrap() else {
            panic!("not a full zone");
        };
        assert_eq!(got[0], soa(7));
        assert_eq!(&got[1..], &records[..]);
    }

    #[test]
    fn incoming_ixfr_shapes_round_trip() {
        let req = unsigned(Rtype::IXFR, Some(1));
        let mut transfer =
            plan(&policy(), &journal(), 3, zone_records(3), &req, "127.0.0.1").unwrap();
        let Received::Diffs(diffs) = receive(&mut transfer, Some(1)).unwrap() else {
            panic!("not diffs");
        };
        assert_eq!(diffs.len(), 1);
        assert_eq!((diffs[0].from, diffs[0].to), (1, 3));
        assert_eq!(diffs[0].removed, vec![soa(1), a("host1.corp.example.", 1)]);
        assert_eq!(diffs[0].added, vec![soa(3), a("host9.corp.example.", 9)]);

        let req = unsigned(Rtype::IXFR, Some(3));
        let mut transfer =
            plan(&policy(), &journal(), 3, zone_records(3), &req, "127.0.0.1").unwrap();
        assert_eq!(receive(&mut transfer, Some(3)).unwrap(), Received::UpToDate);

        let req = unsigned(Rtype::IXFR, Some(0));
        let mut transfer =
            plan(&policy(), &journal(), 3, zone_records(3), &req, "127.0.0.1").unwrap();
        let Received::Full(got) = receive(&mut transfer, Some(0)).unwrap() else {
            panic!("not AXFR-style");
        };
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn incoming_refuses_what_is_not_the_zone() {
        let req = unsigned(Rtype::AXFR, None);
        let mut transfer = plan(
            &policy(),
            &Journal::default(),
            7,
            zone_records(3),
            &req,
            "127.0.0.1",
        )
        .unwrap();
        let message = transfer.next_message().unwrap();
        let mut other = Incoming::new(&wire_name("other.example."), 0x4242, None, 100);
        assert_eq!(other.message(&message), Err(IncomingError::OutOfZone));
        let mut wrong_id = Incoming::new(&wire_name(APEX), 1, None, 100);
        assert!(matches!(
            wrong_id.message(&message),
            Err(IncomingError::Malformed(_))
        ));
        let mut small = Incoming::new(&wire_name(APEX), 0x4242, None, 2);
        assert_eq!(small.message(&message), Err(IncomingError::TooLarge(2)));
        let refused =
            plan(&policy(), &Journal::default(), 7, vec![], &req, "192.0.2.1").unwrap_err();
        let mut incoming = Incoming::new(&wire_name(APEX), 0x4242, None, 100);
        assert_eq!(incoming.message(&refused), Err(IncomingError::Rcode(5)));
    }
}
