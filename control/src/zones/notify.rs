//! NOTIFY out (RFC 1996): on every published change of a zone with `notify` targets, a
//! NOTIFY with the new SOA to each, over UDP, retried with backoff until one answers, signed
//! with the zone's `tsigKey` when it has one.
//!
//! ```text
//! shared.changes() ─▶ per change and target: send ─▶ answer (same ID, QR, NOTIFY)? done
//!                                              └─ none in 1 s, 2 s, 4 s, 8 s, 16 s ─▶ given up (logged)
//! ```
//! A newer change of the same zone does not cancel an older NOTIFY still retrying: the
//! secondary asks for the SOA either way and finds the latest serial.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use domain::base::iana::{Class, Opcode, Rtype};
use domain::base::{Message, MessageBuilder, Name, Ttl};
use domain::rdata::tsig::Time48;
use domain::tsig::{ClientTransaction, Key};
use kudurru_core::zone::Record;
use tokio::net::UdpSocket;
use tokio::sync::broadcast::error::RecvError;

use super::{ZoneChanged, ZoneHandle, zone_text};

/// Sends per target before giving up.
pub const NOTIFY_ATTEMPTS: u32 = 5;
/// The wait for the first answer; doubled after each attempt.
pub const NOTIFY_FIRST_WAIT: Duration = Duration::from_secs(1);

/// Sends NOTIFY for every change the manager announces, until the runtime ends.
pub async fn run(zones: ZoneHandle) {
    let mut changes = zones.shared().changes();
    loop {
        let change = match changes.recv().await {
            Ok(change) => change,
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "NOTIFY fell behind the zone changes; the next change notifies again"
                );
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        if change.notify.is_empty() {
            continue;
        }
        let Some(soa) = soa_of(&zones, &change) else {
            continue;
        };
        let key = match &change.tsig_key {
            Some(name) => match zones.shared().keys().get(name) {
                Some(key) => Some(key),
                None => {
                    tracing::warn!(zone = %zone_text(&change.apex), key = name, "tsigKey is not in zones.tsigKeyFile: no NOTIFY sent");
                    continue;
                }
            },
            None => None,
        };
        for &target in &change.notify {
            let (apex, soa, key) = (change.apex.clone(), soa.clone(), key.clone());
            tokio::spawn(async move {
                match notify(target, &apex, &soa, key.as_ref()).await {
                    Ok(()) => tracing::debug!(zone = %zone_text(&apex), %target, "NOTIFY answered"),
                    Err(error) => {
                        tracing::warn!(zone = %zone_text(&apex), %target, %error, "NOTIFY not answered")
                    }
                }
            });
        }
    }
}

fn soa_of(zones: &ZoneHandle, change: &ZoneChanged) -> Option<Record> {
    let view = zones.shared().served()?;
    let zone = view.iter().find(|z| z.apex == change.apex)?;
    Some(zone.zone.soa())
}

/// Why a NOTIFY went unanswered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// A socket error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// No answer after every attempt.
    #[error("no answer after {NOTIFY_ATTEMPTS} attempts")]
    NoAnswer,
    /// The message could not be built or signed.
    #[error("cannot build the NOTIFY: {0}")]
    Build(String),
}

/// A NOTIFY ready to send: its bytes, its ID, and the transaction that checks the answer.
type Outgoing = (Vec<u8>, u16, Option<ClientTransaction<Arc<Key>>>);

/// The NOTIFY for `apex` with `soa` in the answer section, signed with `key`; its ID and the
/// transaction that checks the answer.
fn message(apex: &[u8], soa: &Record, key: Option<&Arc<Key>>) -> Result<Outgoing, NotifyError> {
    let bad = |e: &dyn std::fmt::Display| NotifyError::Build(e.to_string());
    let name = Name::from_slice(apex).map_err(|e| bad(&e))?;
    let id: u16 = rand::random();
    let mut builder = MessageBuilder::new_vec();
    builder.header_mut().set_id(id);
    builder.header_mut().set_opcode(Opcode::NOTIFY);
    builder.header_mut().set_aa(true);
    let mut question = builder.question();
    question
        .push((name, Rtype::SOA, Class::IN))
        .map_err(|e| bad(&e))?;
    let mut answer = question.answer();
    let data = domain::base::rdata::UnknownRecordData::from_octets(Rtype::SOA, &soa.rdata[..])
        .map_err(|e| bad(&e))?;
    answer
        .push((name, Class::IN, Ttl::from_secs(soa.ttl), data))
        .map_err(|e| bad(&e))?;
    let mut additional = answer.additional();
    let transaction = match key {
        Some(key) => Some(
            ClientTransaction::request(key.clone(), &mut additional, now48())
                .map_err(|e| bad(&e))?,
        ),
        None => None,
    };
    Ok((additional.finish(), id, transaction))
}

fn now48() -> Time48 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Time48::from_u64(now & 0xFFFF_FFFF_FFFF)
}

/// Sends one NOTIFY to `target` until it is answered (any rcode: the secondary heard it).
pub async fn notify(
    target: SocketAddr,
    apex: &[u8],
    soa: &Record,
    key: Option<&Arc<Key>>,
) -> Result<(), NotifyError> {
    let (request, id, transaction) = message(apex, soa, key)?;
    let local: SocketAddr = if target.is_ipv4() {
        "0.0.0.0:0".parse().expect("a literal address")
    } else {
        "[::]:0".parse().expect("a literal address")
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(target).await?;
    let mut buffer = vec![0; 4096];
    let mut wait = NOTIFY_FIRST_WAIT;
    for _ in 0..NOTIFY_ATTEMPTS {
        socket.send(&request).await?;
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(received) = tokio::time::timeout_at(deadline, socket.recv(&mut buffer)).await {
            let Ok(n) = received else { break };
            let Ok(mut answer) = Message::from_octets(buffer[..n].to_vec()) else {
                continue;
            };
            let header = answer.header();
            if header.id() != id || !header.qr() || header.opcode() != Opcode::NOTIFY {
                continue;
            }
            if let Some(transaction) = &transaction
                && let Err(error) = transaction.clone().answer(&mut answer, now48())
            {
                tracing::warn!(%target, %error, "NOTIFY answer's TSIG does not verify");
            }
            return Ok(());
        }
        wait *= 2;
    }
    Err(NotifyError::NoAnswer)
}
