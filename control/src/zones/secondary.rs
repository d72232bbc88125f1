//! Secondary zones on the control thread: one task per zone that keeps it current from its
//! primaries (RFC 1034 §4.3.5, RFC 1995, RFC 5936), and the NOTIFY handler (RFC 1996).
//!
//! ```text
//! shared.secondaries() (watch) ─▶ a task per zone ─┬ SOA query (UDP, TCP on TC) to each primary
//!                                                  ├ newer serial ─▶ IXFR over TCP (our SOA) ─▶
//!                                                  │   fails ─▶ AXFR ─▶ ZoneHandle::transferred
//!                                                  ├ sleep refresh (success) / retry (failure),
//!                                                  │   woken early by a NOTIFY from a primary
//!                                                  └ no success for `expire` ─▶ set_expired(true)
//! ```
//!
//! Every exchange is bounded: a UDP answer in [`QUERY_TIMEOUT`], a TCP connect in
//! [`CONNECT_TIMEOUT`], each transfer message in [`READ_TIMEOUT`], the whole transfer in
//! [`TRANSFER_TIMEOUT`], and its size by `zones.maxRecords` (the manager refuses more) and
//! [`MAX_TRANSFER_RECORDS`]. The answer stream is interpreted by
//! `kudurru_core::zone::xfr::Incoming` (sans-IO, fuzzed); TSIG by `domain`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use domain::base::iana::{Class, Opcode, Rcode, Rtype};
use domain::base::message_builder::{AdditionalBuilder, MessageBuilder};
use domain::base::{Message, Name, ToName, Ttl};
use domain::rdata::tsig::Time48;
use domain::tsig::{ClientSequence, ClientTransaction, Key, ServerTransaction};
use kudurru_core::zone::xfr::{
    Incoming, IncomingError, Progress, Received, serial_older, soa_serial,
};
use kudurru_core::zone::{Record, ZoneData, ZoneError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{SecondaryZone, Transferred, ZoneHandle, zone_text};
use crate::objects::kinds::PrimaryServer;

/// How long an SOA query waits for its answer.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a TCP connect to a primary may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one message of a transfer may take to arrive.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a whole transfer may take.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(600);
/// The most records a transfer may bring (the manager's `zones.maxRecords` applies after).
pub const MAX_TRANSFER_RECORDS: usize = 50_000_000;
/// Bounds on the SOA timers a primary gives (RFC 1912 §2.2 suggests far larger; a test
/// zone's seconds are allowed).
const MIN_TIMER: u32 = 1;
const MAX_TIMER: u32 = 7 * 86_400;
/// The timers used before any SOA is known (RFC 1912 §2.2's suggestions).
const DEFAULT_TIMERS: Timers = Timers {
    refresh: 3600,
    retry: 600,
    expire: 1_209_600,
};

/// Why a refresh from one primary failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RefreshError {
    /// A socket error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// No answer in time.
    #[error("timed out")]
    Timeout,
    /// The primary names a TSIG key the key file does not hold.
    #[error("tsigKey {0} is not in zones.tsigKeyFile")]
    NoKey(String),
    /// The answer's TSIG did not verify, or the request could not be signed.
    #[error("TSIG: {0}")]
    Tsig(String),
    /// The SOA answer was an error or held no SOA.
    #[error("SOA query: {0}")]
    Soa(String),
    /// The transfer stream was refused or malformed.
    #[error("transfer: {0}")]
    Transfer(#[from] IncomingError),
    /// The manager refused the data.
    #[error("zone refused: {0}")]
    Zone(#[from] ZoneError),
}

/// A zone's SOA timers, seconds.
#[derive(Debug, Clone, Copy)]
struct Timers {
    refresh: u32,
    retry: u32,
    expire: u32,
}

/// The running secondary zones (cheap to clone).
#[derive(Clone)]
pub struct Secondaries {
    inner: Arc<Mutex<HashMap<Box<[u8]>, Running>>>,
    /// In a fleet: transfers run only while this is true.
    leading: Option<tokio::sync::watch::Receiver<bool>>,
}

struct Running {
    primaries: Vec<PrimaryServer>,
    refresh: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn time48() -> Time48 {
    Time48::from_u64(unix_now() & 0xFFFF_FFFF_FFFF)
}

impl Secondaries {
    /// Follows the manager's secondary zones: a task per zone, restarted when its primaries
    /// change, stopped when the zone goes. Call on the control thread's runtime.
    pub fn start(zones: ZoneHandle) -> Self {
        Self::start_gated(zones, None)
    }

    /// [`Secondaries::start`] in a fleet: zones are transferred only while `leading` is true
    /// (the leader stores each transfer; the others serve what it stored).
    pub fn start_gated(
        zones: ZoneHandle,
        leading: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> Self {
        let this = Self {
            inner: Arc::new(Mutex::new(HashMap::new())),
            leading,
        };
        let mut watch = zones.shared().secondaries();
        let following = this.clone();
        tokio::spawn(async move {
            loop {
                let list = watch.borrow_and_update().clone();
                following.follow(&zones, &list);
                if watch.changed().await.is_err() {
                    break;
                }
            }
        });
        this
    }

    fn follow(&self, zones: &ZoneHandle, list: &[SecondaryZone]) {
        let mut running = lock(&self.inner);
        running.retain(|apex, _| list.iter().any(|z| &z.apex == apex));
        for zone in list {
            if running
                .get(&zone.apex)
                .is_some_and(|r| r.primaries == zone.spec.primaries)
            {
                continue;
            }
            let refresh = Arc::new(Notify::new());
            let task = tokio::spawn(run_zone(
                zones.clone(),
                zone.apex.clone(),
                zone.spec.primaries.clone(),
                refresh.clone(),
                self.leading.clone(),
            ));
            running.insert(
                zone.apex.clone(),
                Running {
                    primaries: zone.spec.primaries.clone(),
                    refresh,
                    task,
                },
            );
        }
    }

    /// The answer to a NOTIFY (RFC 1996 §3): from one of the zone's primaries (signed with
    /// its key when it has one) NOERROR with AA, and the zone refreshes at once; for a zone
    /// that is not a secondary here, or from anyone else, REFUSED; a bad signature NOTAUTH.
    pub fn notify(
        &self,
        request: &[u8],
        client: SocketAddr,
        keys: &super::keys::TsigKeys,
    ) -> Vec<u8> {
        let Ok(mut message) = Message::from_octets(request.to_vec()) else {
            return header_error(request, Rcode::FORMERR);
        };
        let Ok(question) = message.sole_question() else {
            return answer(&message, Rcode::FORMERR, None);
        };
        let mut apex = Vec::new();
        if question.qname().compose(&mut apex).is_err() || question.qtype() != Rtype::SOA {
            return answer(&message, Rcode::FORMERR, None);
        }
        apex.make_ascii_lowercase();
        let running = lock(&self.inner);
        let Some(zone) = running.get(apex.as_slice()) else {
            return answer(&message, Rcode::REFUSED, None);
        };
        let Some(primary) = zone
            .primaries
            .iter()
            .find(|p| p.address.ip().to_canonical() == client.ip().to_canonical())
        else {
            tracing::debug!(zone = %zone_text(&apex), %client, "NOTIFY from an address that is not a primary: refused");
            return answer(&message, Rcode::REFUSED, None);
        };
        let mut signer = None;
        if let Some(name) = &primary.tsig_key {
            let Some(key) = keys.get(name) else {
                return answer(&message, Rcode::REFUSED, None);
            };
            let original = message.clone();
            match ServerTransaction::request(&key, &mut message, time48()) {
                Ok(Some(transaction)) => signer = Some(transaction),
                Ok(None) => return answer(&message, Rcode::REFUSED, None),
                Err(error) => {
                    return error
                        .build_message(&original, MessageBuilder::new_vec())
                        .map_or_else(
                            |_| answer(&original, Rcode::SERVFAIL, None),
                            AdditionalBuilder::finish,
                        );
                }
            }
        }
        zone.refresh.notify_one();
        tracing::info!(zone = %zone_text(&apex), %client, "NOTIFY from a primary: refreshing");
        answer(&message, Rcode::NOERROR, signer)
    }
}

/// An answer to `request` with `rcode`, AA set, signed by `signer`.
fn answer(
    request: &Message<Vec<u8>>,
    rcode: Rcode,
    signer: Option<ServerTransaction<Arc<Key>>>,
) -> Vec<u8> {
    let Ok(mut builder) = MessageBuilder::new_vec().start_answer(request, rcode) else {
        return header_error(request.as_slice(), rcode);
    };
    builder.header_mut().set_aa(rcode == Rcode::NOERROR);
    let mut additional = builder.additional();
    if let Some(signer) = signer
        && signer.answer(&mut additional, time48()).is_err()
    {
        return header_error(request.as_slice(), Rcode::SERVFAIL);
    }
    additional.finish()
}

fn header_error(request: &[u8], rcode: Rcode) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    kudurru_core::wire::write_header_error(request, rcode.to_int(), &mut out);
    out
}

/// One secondary zone, until its task is aborted.
async fn run_zone(
    zones: ZoneHandle,
    apex: Box<[u8]>,
    primaries: Vec<PrimaryServer>,
    refresh: Arc<Notify>,
    mut leading: Option<tokio::sync::watch::Receiver<bool>>,
) {
    let zone = zone_text(&apex);
    // A copy restored from storage counts as fresh at start: it expires a full `expire`
    // after the start if no primary answers.
    let mut last_success = Instant::now();
    let mut expired = false;
    loop {
        // In a fleet only the leader transfers; a node that becomes leader checks at once.
        if let Some(leading) = &mut leading
            && leading.wait_for(|leads| *leads).await.is_err()
        {
            return;
        }
        let current = current_soa(&zones, &apex);
        let result = refresh_once(&zones, &apex, &primaries, current.as_ref()).await;
        let timers = current_soa(&zones, &apex)
            .as_ref()
            .and_then(timers_of)
            .unwrap_or(DEFAULT_TIMERS);
        let wait = match result {
            Ok(transferred) => {
                zones.shared().count_refresh(&apex, true, unix_now());
                last_success = Instant::now();
                if expired {
                    zones.set_expired(&apex, false).await;
                    expired = false;
                }
                if transferred {
                    tracing::info!(%zone, serial = current_soa(&zones, &apex).as_ref().and_then(soa_serial), "zone transferred");
                }
                Duration::from_secs(timers.refresh.into())
            }
            Err(error) => {
                zones.shared().count_refresh(&apex, false, unix_now());
                tracing::warn!(%zone, %error, "zone refresh failed");
                let expire = Duration::from_secs(timers.expire.into());
                let since = last_success.elapsed();
                if current.is_some() && since >= expire && !expired {
                    tracing::warn!(%zone, "zone expired: answering SERVFAIL until a transfer succeeds");
                    zones.set_expired(&apex, true).await;
                    expired = true;
                }
                let retry = Duration::from_secs(timers.retry.into());
                if expired {
                    retry
                } else {
                    retry
                        .min(expire.saturating_sub(since))
                        .max(Duration::from_secs(1))
                }
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = refresh.notified() => {}
        }
    }
}

/// The SOA record the zone serves now, if it serves one.
fn current_soa(zones: &ZoneHandle, apex: &[u8]) -> Option<Record> {
    let view = zones.shared().served()?;
    let zone = view.iter().find(|z| &*z.apex == apex)?;
    Some(zone.zone.soa())
}

/// Refresh, retry and expire of an SOA record, bounded.
fn timers_of(soa: &Record) -> Option<Timers> {
    let serial_at = {
        let mut at = 0;
        for _ in 0..2 {
            loop {
                let len = usize::from(*soa.rdata.get(at)?);
                at += len + 1;
                if len == 0 {
                    break;
                }
            }
        }
        at
    };
    let field = |i: usize| {
        let b = soa.rdata.get(serial_at + 4 * i..serial_at + 4 * i + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]).clamp(MIN_TIMER, MAX_TIMER))
    };
    Some(Timers {
        refresh: field(1)?,
        retry: field(2)?,
        expire: field(3)?,
    })
}

/// Tries each primary in order; `Ok(true)` when a transfer changed the zone, `Ok(false)`
/// when it is current; the last primary's error when none answered.
async fn refresh_once(
    zones: &ZoneHandle,
    apex: &[u8],
    primaries: &[PrimaryServer],
    current: Option<&Record>,
) -> Result<bool, RefreshError> {
    let mut last = RefreshError::Soa("no primaries".into());
    for primary in primaries {
        match refresh_from(zones, apex, primary, current).await {
            Ok(changed) => return Ok(changed),
            Err(error) => {
                tracing::debug!(zone = %zone_text(apex), primary = %primary.address, %error, "primary failed");
                last = error;
            }
        }
    }
    Err(last)
}

async fn refresh_from(
    zones: &ZoneHandle,
    apex: &[u8],
    primary: &PrimaryServer,
    current: Option<&Record>,
) -> Result<bool, RefreshError> {
    let key = match &primary.tsig_key {
        Some(name) => Some(
            zones
                .shared()
                .keys()
                .get(name)
                .ok_or_else(|| RefreshError::NoKey(name.clone()))?,
        ),
        None => None,
    };
    let theirs = soa_query(primary.address, apex, key.as_ref()).await?;
    let ours = current.and_then(soa_serial);
    if let Some(ours) = ours
        && !serial_older(ours, theirs)
    {
        return Ok(false);
    }
    let received = match current {
        Some(soa) => match transfer(primary.address, apex, key.as_ref(), Some(soa)).await {
            Ok(received) => received,
            Err(error) => {
                tracing::info!(zone = %zone_text(apex), primary = %primary.address, %error, "IXFR failed; trying AXFR");
                transfer(primary.address, apex, key.as_ref(), None).await?
            }
        },
        None => transfer(primary.address, apex, key.as_ref(), None).await?,
    };
    let data = match received {
        Received::UpToDate => return Ok(false),
        Received::Full(records) => Transferred::Full(ZoneData {
            apex: apex.into(),
            records,
            origins: Vec::new(),
        }),
        Received::Diffs(diffs) => Transferred::Diffs(diffs),
    };
    zones.transferred(apex, data).await?;
    Ok(true)
}

/// A request for `apex`: SOA query, AXFR, or IXFR with our SOA in authority.
fn request(
    apex: &[u8],
    qtype: Rtype,
    ours: Option<&Record>,
    id: u16,
) -> Result<AdditionalBuilder<Vec<u8>>, RefreshError> {
    let bad = |_| RefreshError::Soa("cannot build the request".into());
    let name = Name::from_slice(apex).map_err(|_| RefreshError::Soa("bad apex".into()))?;
    let mut builder = MessageBuilder::new_vec();
    builder.header_mut().set_id(id);
    builder.header_mut().set_opcode(Opcode::QUERY);
    let mut question = builder.question();
    question.push((name, qtype, Class::IN)).map_err(bad)?;
    let mut authority = question.authority();
    if let Some(soa) = ours {
        let data = domain::base::rdata::UnknownRecordData::from_octets(Rtype::SOA, &soa.rdata[..])
            .map_err(|_| RefreshError::Soa("bad SOA".into()))?;
        authority
            .push((name, Class::IN, Ttl::from_secs(soa.ttl), data))
            .map_err(bad)?;
    }
    Ok(authority.additional())
}

/// The primary's SOA serial: over UDP, again over TCP when truncated.
async fn soa_query(
    primary: SocketAddr,
    apex: &[u8],
    key: Option<&Arc<Key>>,
) -> Result<u32, RefreshError> {
    let id = rand::random();
    let mut builder = request(apex, Rtype::SOA, None, id)?;
    let transaction = match key {
        Some(key) => Some(
            ClientTransaction::request(key.clone(), &mut builder, time48())
                .map_err(|e| RefreshError::Tsig(e.to_string()))?,
        ),
        None => None,
    };
    let query = builder.finish();
    let local: SocketAddr = if primary.is_ipv4() {
        "0.0.0.0:0".parse().expect("a literal address")
    } else {
        "[::]:0".parse().expect("a literal address")
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(primary).await?;
    socket.send(&query).await?;
    let mut buffer = vec![0; 65535];
    let deadline = Instant::now() + QUERY_TIMEOUT;
    let answer = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, socket.recv(&mut buffer))
            .await
            .map_err(|_| RefreshError::Timeout)??;
        let bytes = &buffer[..n];
        // Answers to another ID (a late one) are skipped.
        if bytes.len() >= 12 && bytes[..2] == id.to_be_bytes() && bytes[2] & 0x80 != 0 {
            break bytes.to_vec();
        }
    };
    let answer = if answer[2] & 0x02 != 0 {
        let mut stream = connect(primary).await?;
        write_frame(&mut stream, &query).await?;
        read_frame(&mut stream).await?
    } else {
        answer
    };
    let mut message =
        Message::from_octets(answer).map_err(|_| RefreshError::Soa("short answer".into()))?;
    if message.header().id() != id {
        return Err(RefreshError::Soa("an answer to another query".into()));
    }
    if let Some(transaction) = transaction {
        transaction
            .answer(&mut message, time48())
            .map_err(|e| RefreshError::Tsig(e.to_string()))?;
    }
    if message.header().rcode() != Rcode::NOERROR {
        return Err(RefreshError::Soa(format!(
            "rcode {}",
            message.header().rcode()
        )));
    }
    let answers = message
        .answer()
        .map_err(|_| RefreshError::Soa("malformed".into()))?;
    let record = answers
        .limit_to::<domain::rdata::Soa<_>>()
        .next()
        .ok_or_else(|| RefreshError::Soa("no SOA in the answer".into()))?
        .map_err(|_| RefreshError::Soa("malformed SOA".into()))?;
    Ok(record.data().serial().into_int())
}

/// An AXFR (`ours` none) or an IXFR from `ours`, over TCP.
async fn transfer(
    primary: SocketAddr,
    apex: &[u8],
    key: Option<&Arc<Key>>,
    ours: Option<&Record>,
) -> Result<Received, RefreshError> {
    tokio::time::timeout(TRANSFER_TIMEOUT, transfer_inner(primary, apex, key, ours))
        .await
        .map_err(|_| RefreshError::Timeout)?
}

async fn transfer_inner(
    primary: SocketAddr,
    apex: &[u8],
    key: Option<&Arc<Key>>,
    ours: Option<&Record>,
) -> Result<Received, RefreshError> {
    let id = rand::random();
    let qtype = if ours.is_some() {
        Rtype::IXFR
    } else {
        Rtype::AXFR
    };
    let mut builder = request(apex, qtype, ours, id)?;
    let mut sequence = match key {
        Some(key) => Some(
            ClientSequence::request(key.clone(), &mut builder, time48())
                .map_err(|e| RefreshError::Tsig(e.to_string()))?,
        ),
        None => None,
    };
    let mut stream = connect(primary).await?;
    write_frame(&mut stream, &builder.finish()).await?;
    let mut incoming = Incoming::new(apex, id, ours.and_then(soa_serial), MAX_TRANSFER_RECORDS);
    loop {
        let bytes = read_frame(&mut stream).await?;
        let bytes = match sequence.as_mut() {
            Some(sequence) => {
                let mut message = Message::from_octets(bytes)
                    .map_err(|_| RefreshError::Tsig("a message too short to verify".into()))?;
                sequence
                    .answer(&mut message, time48())
                    .map_err(|e| RefreshError::Tsig(e.to_string()))?;
                message.into_octets()
            }
            None => bytes,
        };
        if let Progress::Done(received) = incoming.message(&bytes)? {
            if let Some(sequence) = sequence {
                sequence
                    .done()
                    .map_err(|e| RefreshError::Tsig(e.to_string()))?;
            }
            return Ok(received);
        }
    }
}

async fn connect(primary: SocketAddr) -> Result<TcpStream, RefreshError> {
    tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(primary))
        .await
        .map_err(|_| RefreshError::Timeout)?
        .map_err(RefreshError::Io)
}

async fn write_frame(stream: &mut TcpStream, message: &[u8]) -> Result<(), RefreshError> {
    let len =
        u16::try_from(message.len()).map_err(|_| RefreshError::Soa("request too large".into()))?;
    let mut frame = Vec::with_capacity(message.len() + 2);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(message);
    tokio::time::timeout(READ_TIMEOUT, stream.write_all(&frame))
        .await
        .map_err(|_| RefreshError::Timeout)??;
    Ok(())
}

async fn read_frame(stream: &mut TcpStream) -> Result<Vec<u8>, RefreshError> {
    let read = async {
        let mut len = [0; 2];
        stream.read_exact(&mut len).await?;
        let mut message = vec![0; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut message).await?;
        Ok::<_, std::io::Error>(message)
    };
    Ok(tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .map_err(|_| RefreshError::Timeout)??)
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use domain::tsig::{Algorithm, KeyName};

    use super::*;
    use crate::zones::keys::TsigKeys;

    const KEYS: &str = "key \"xfr-key\" { algorithm hmac-sha256; secret \"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAxMjM=\"; };";

    fn apex() -> Vec<u8> {
        b"\x04corp\x07example\x00".to_vec()
    }

    /// A NOTIFY for corp.example with `opcode`, signed with `key` if given.
    fn notify_message(key: Option<Arc<Key>>) -> Vec<u8> {
        let mut builder = MessageBuilder::new_vec();
        builder.header_mut().set_id(77);
        builder.header_mut().set_opcode(Opcode::NOTIFY);
        builder.header_mut().set_aa(true);
        let mut question = builder.question();
        question
            .push((Name::from_slice(&apex()).unwrap(), Rtype::SOA, Class::IN))
            .unwrap();
        let mut additional = question.additional();
        if let Some(key) = key {
            ClientTransaction::request(key, &mut additional, time48()).unwrap();
        }
        additional.finish()
    }

    fn secondaries(tsig_key: Option<&str>) -> (Secondaries, Arc<Notify>) {
        let refresh = Arc::new(Notify::new());
        let task = tokio::spawn(async {});
        let running = Running {
            primaries: vec![PrimaryServer {
                address: "127.0.0.1:5300".parse().unwrap(),
                tsig_key: tsig_key.map(str::to_owned),
            }],
            refresh: refresh.clone(),
            task,
        };
        let secondaries = Secondaries {
            inner: Arc::new(Mutex::new(HashMap::from([(apex().into(), running)]))),
            leading: None,
        };
        (secondaries, refresh)
    }

    fn rcode_aa(answer: &[u8]) -> (Rcode, bool) {
        let msg = Message::from_octets(answer).unwrap();
        (msg.header().rcode(), msg.header().aa())
    }

    #[tokio::test]
    async fn rfc1996_3_notify_from_a_primary_refreshes_others_refused() {
        let keys = TsigKeys::empty();
        let (secondaries, refresh) = secondaries(None);
        let from_primary = "127.0.0.1:40000".parse().unwrap();
        let answer = secondaries.notify(&notify_message(None), from_primary, &keys);
        assert_eq!(rcode_aa(&answer), (Rcode::NOERROR, true));
        tokio::time::timeout(Duration::from_secs(1), refresh.notified())
            .await
            .expect("the zone was told to refresh");
        let stranger = "127.0.0.2:40000".parse().unwrap();
        let answer = secondaries.notify(&notify_message(None), stranger, &keys);
        assert_eq!(rcode_aa(&answer), (Rcode::REFUSED, false));
        let mut other_zone = notify_message(None);
        other_zone[13] = b'k'; // \x04korp: another zone
        let answer = secondaries.notify(&other_zone, from_primary, &keys);
        assert_eq!(rcode_aa(&answer).0, Rcode::REFUSED);
        assert_eq!(
            secondaries.notify(&[1, 2, 3], from_primary, &keys),
            Vec::<u8>::new(),
            "no header: nothing to answer"
        );
    }

    #[tokio::test]
    async fn rfc8945_notify_from_a_keyed_primary_must_be_signed_with_its_key() {
        let keys = TsigKeys::parse(KEYS).unwrap();
        let (secondaries, _) = secondaries(Some("xfr-key"));
        let from_primary = "127.0.0.1:40000".parse().unwrap();
        let good = keys.get("xfr-key").unwrap();
        let answer = secondaries.notify(&notify_message(Some(good.clone())), from_primary, &keys);
        assert_eq!(rcode_aa(&answer), (Rcode::NOERROR, true));
        let signed = Message::from_octets(answer).unwrap();
        assert!(
            signed
                .additional()
                .unwrap()
                .limit_to::<domain::rdata::Tsig<_, _>>()
                .next()
                .is_some(),
            "the answer is signed"
        );
        let unsigned = secondaries.notify(&notify_message(None), from_primary, &keys);
        assert_eq!(rcode_aa(&unsigned).0, Rcode::REFUSED);
        let wrong = Arc::new(
            Key::new(
                Algorithm::Sha256,
                b"another secret, another secret!!",
                KeyName::from_str("xfr-key.").unwrap(),
                None,
                None,
            )
            .unwrap(),
        );
        let forged = secondaries.notify(&notify_message(Some(wrong)), from_primary, &keys);
        assert_eq!(rcode_aa(&forged).0, Rcode::NOTAUTH);
    }
}
