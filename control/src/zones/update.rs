//! Dynamic updates (RFC 2136) on the control thread: an UPDATE a core received (over UDP or
//! TCP) and handed to the control thread's inbox is checked against the zone's `allowUpdate`
//! (client prefixes and/or a TSIG key, RFC 8945), its prerequisites and changes worked out by
//! `kudurru_core::zone::update`, and the changes applied through the zone manager, which bumps
//! the serial, persists, publishes and sends NOTIFY.
//!
//! ```text
//! core inbox ─▶ handle ─▶ Update::parse ─── FORMERR, NOTZONE ──────────────────┐
//!                  ├─▶ zone: a primary we serve? ─ no: NOTAUTH ─────────────────┤
//!                  ├─▶ allowUpdate: client prefix, TSIG (domain::tsig) ─ REFUSED, NOTAUTH (BADKEY/BADSIG)
//!                  ├─▶ check prerequisites ─ NXDOMAIN, YXDOMAIN, NXRRSET, YXRRSET ┤
//!                  └─▶ apply ─▶ ZoneUpdates::update ─ NOERROR (or SERVFAIL) ─────┴▶ answer (signed
//!                                                                                  when the
//!                                                                                  request was)
//! ```
//!
//! Updates are applied one after another: the inbox runs one handler at a time, and each reads
//! the zone the previous one left ([`ZoneUpdates::target`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use domain::base::iana::Rcode;
use domain::base::name::ToName;
use domain::base::{Message, MessageBuilder};
use domain::rdata::tsig::Time48;
use domain::tsig::{Algorithm, Key, KeyStore, ServerTransaction};
use kudurru_core::Prefix;
use kudurru_core::zone::update::{RecordIndex, Update, rcode};
use kudurru_core::zone::{Record, ZoneData, ZoneError};

use kudurru_transports::inbox::InboxTransport;

use crate::zones::ZoneHandle;
use crate::zones::keys::TsigKeys;

/// An UPDATE as the inbox hands it over.
#[derive(Clone, Copy)]
pub struct UpdateRequest<'a> {
    /// The message as received.
    pub message: &'a [u8],
    /// Who sent it.
    pub client: SocketAddr,
    /// How.
    pub transport: InboxTransport,
    /// The zone manager (zones, their `allowUpdate`, the TSIG keys in `shared().keys()`).
    pub zones: &'a ZoneHandle,
}

/// The answer to an UPDATE from the inbox (see [`respond`]).
pub async fn handle(request: UpdateRequest<'_>) -> Vec<u8> {
    let keys = request.zones.shared().keys();
    respond(request.message, request.client.ip(), request.zones, &keys).await
}

/// Who may update a zone (the Zone object's `allowUpdate`): both conditions that are given
/// must hold; with neither, nobody may.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowUpdate {
    /// The TSIG key an update must be signed with.
    pub tsig_key: Option<String>,
    /// The client prefixes an update must come from.
    pub clients: Vec<Prefix>,
}

/// What the update handler needs to know of a zone.
#[derive(Debug)]
pub enum UpdateTarget {
    /// No zone at this apex, or one that is not a primary (secondary, forward, built-in):
    /// NOTAUTH (RFC 2136 §3.1.2; forwarding updates to the primary is not done).
    NotPrimary,
    /// A primary zone: who may update it, and its records now.
    Primary {
        /// `allowUpdate`, `None` when the zone has none (REFUSED).
        allow: Option<AllowUpdate>,
        /// The zone's records as the last update left them.
        records: Arc<ZoneData>,
    },
}

/// The zone manager as the update handler reaches it (the manager's handle implements it;
/// tests use a fake).
pub trait ZoneUpdates {
    /// The zone at `apex` (lowercase wire form).
    fn target(&self, apex: &[u8]) -> impl Future<Output = UpdateTarget>;

    /// Applies `removed` and `added` to the primary at `apex`, whole or not at all: the
    /// serial bumped per `serialPolicy`, persisted, published, NOTIFY sent. The new serial.
    fn update(
        &self,
        apex: &[u8],
        removed: Vec<Record>,
        added: Vec<Record>,
    ) -> impl Future<Output = Result<u32, ZoneError>>;
}

/// Handles one UPDATE message from `client` and returns the answer to send (empty when the
/// message is too short to answer: no header to echo).
pub async fn respond(
    message: &[u8],
    client: IpAddr,
    zones: &impl ZoneUpdates,
    keys: &TsigKeys,
) -> Vec<u8> {
    let Ok(mut request) = Message::from_octets(message.to_vec()) else {
        return Vec::new();
    };
    let update = match Update::parse(request.as_slice()) {
        Ok(update) => update,
        Err(error) => {
            tracing::debug!(%client, %error, "update refused");
            return answer(&request, error.rcode(), None);
        }
    };
    let zone = kudurru_core::key::name_to_text(&update.apex);
    let (allow, records) = match zones.target(&update.apex).await {
        UpdateTarget::NotPrimary => {
            tracing::debug!(%client, %zone, "update for a zone that is not a primary here");
            return answer(&request, rcode::NOTAUTH, None);
        }
        UpdateTarget::Primary { allow, records } => (allow, records),
    };
    let Some(allow) = allow.filter(|a| a.tsig_key.is_some() || !a.clients.is_empty()) else {
        tracing::info!(%client, %zone, "update refused: the zone has no allowUpdate");
        return answer(&request, rcode::REFUSED, None);
    };
    if !allow.clients.is_empty() && !allow.clients.iter().any(|p| p.contains(client)) {
        tracing::info!(%client, %zone, "update refused: client not in allowUpdate.clients");
        return answer(&request, rcode::REFUSED, None);
    }
    let key = allow.tsig_key.as_deref().and_then(|name| {
        let key = keys.get(name);
        if key.is_none() {
            tracing::warn!(%zone, key = name, "allowUpdate.tsigKey is not in zones.tsigKeyFile");
        }
        key
    });
    let now = Time48::now();
    let transaction = match ServerTransaction::request(&ZoneKey(key), &mut request, now) {
        Ok(transaction) => transaction,
        Err(error) => {
            tracing::info!(%client, %zone, error = %error.error(), "update refused: TSIG");
            let builder = MessageBuilder::new_vec();
            return error
                .build_message(&request, builder)
                .map(|additional| additional.finish())
                .unwrap_or_default();
        }
    };
    if allow.tsig_key.is_some() && transaction.is_none() {
        tracing::info!(%client, %zone, "update refused: not signed with allowUpdate.tsigKey");
        return answer(&request, rcode::REFUSED, None);
    }
    let records = RecordIndex::touched_by(&update, &records.records);
    let rcode = apply(&update, &records, zones, client, &zone).await;
    answer(&request, rcode, transaction)
}

/// Checks the prerequisites and applies the changes; the rcode to answer.
async fn apply(
    update: &Update,
    records: &RecordIndex,
    zones: &impl ZoneUpdates,
    client: IpAddr,
    zone: &str,
) -> u8 {
    if let Err(error) = update.check(records) {
        tracing::debug!(%client, %zone, %error, "update not applied");
        return error.rcode();
    }
    let changes = update.apply(records);
    if changes.is_empty() {
        return rcode::NOERROR;
    }
    let (removed, added) = (changes.removed.len(), changes.added.len());
    match zones
        .update(&update.apex, changes.removed, changes.added)
        .await
    {
        Ok(serial) => {
            tracing::info!(%client, %zone, serial, removed, added, "zone updated");
            rcode::NOERROR
        }
        Err(error) => {
            // The whole update is refused and the zone left as it was (a CNAME beside other
            // data the records could not show, a store failure).
            tracing::warn!(%client, %zone, %error, "update failed");
            rcode::SERVFAIL
        }
    }
}

/// The answer to `request`: its header and zone section with `rcode`, signed by
/// `transaction` when the request was signed.
fn answer(
    request: &Message<Vec<u8>>,
    rcode: u8,
    transaction: Option<ServerTransaction<Arc<Key>>>,
) -> Vec<u8> {
    let rcode = Rcode::checked_from_int(rcode).unwrap_or(Rcode::SERVFAIL);
    let builder = MessageBuilder::new_vec();
    let Ok(answer) = builder.start_answer(request, rcode) else {
        return Vec::new();
    };
    let mut additional = answer.additional();
    if let Some(transaction) = transaction
        && transaction.answer(&mut additional, Time48::now()).is_err()
    {
        return Vec::new();
    }
    additional.finish()
}

/// The one key a zone accepts updates signed with (none: any signed update is BADKEY).
struct ZoneKey(Option<Arc<Key>>);

impl KeyStore for ZoneKey {
    type Key = Arc<Key>;

    fn get_key<N: ToName>(&self, name: &N, algorithm: Algorithm) -> Option<Self::Key> {
        self.0
            .as_ref()
            .filter(|key| key.name().name_eq(name) && key.algorithm() == algorithm)
            .cloned()
    }
}

impl ZoneUpdates for ZoneHandle {
    fn target(&self, apex: &[u8]) -> impl Future<Output = UpdateTarget> {
        self.update_target(apex)
    }

    fn update(
        &self,
        apex: &[u8],
        removed: Vec<Record>,
        added: Vec<Record>,
    ) -> impl Future<Output = Result<u32, ZoneError>> {
        Self::update(self, apex, removed, added)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::str::FromStr;

    use domain::base::iana::{Class, Opcode, Rtype};
    use domain::base::{Name, Record as DomainRecord, Ttl};
    use domain::rdata::A;

    const APEX: &str = "corp.example.";

    /// A primary `corp.example.` holding `www A 192.0.2.1`, counting the updates applied.
    struct FakeZones {
        allow: Option<AllowUpdate>,
        records: RefCell<Vec<Record>>,
        applied: RefCell<Vec<(Vec<Record>, Vec<Record>)>>,
    }

    fn wire(name: &str) -> Box<[u8]> {
        Name::<Vec<u8>>::from_str(name)
            .expect("a test name")
            .as_slice()
            .into()
    }

    impl FakeZones {
        fn new(allow: Option<AllowUpdate>) -> Self {
            Self {
                allow,
                records: RefCell::new(vec![Record {
                    owner: wire("www.corp.example."),
                    rtype: 1,
                    ttl: 300,
                    rdata: vec![192, 0, 2, 1].into(),
                }]),
                applied: RefCell::new(Vec::new()),
            }
        }
    }

    impl ZoneUpdates for FakeZones {
        async fn target(&self, apex: &[u8]) -> UpdateTarget {
            if *apex != *wire(APEX) {
                return UpdateTarget::NotPrimary;
            }
            UpdateTarget::Primary {
                allow: self.allow.clone(),
                records: Arc::new(ZoneData {
                    apex: apex.into(),
                    records: self.records.borrow().clone(),
                    origins: Vec::new(),
                }),
            }
        }

        async fn update(
            &self,
            _apex: &[u8],
            removed: Vec<Record>,
            added: Vec<Record>,
        ) -> Result<u32, ZoneError> {
            let mut records = self.records.borrow_mut();
            records.retain(|r| !removed.contains(r));
            records.extend(added.iter().cloned());
            self.applied.borrow_mut().push((removed, added));
            Ok(2)
        }
    }

    /// An UPDATE of `zone` (ID 99) adding `new A 192.0.2.9`, with `absent A` prerequisite on
    /// `prerequisite_owner` when given (class NONE: "RRset does not exist").
    fn add_message(zone: &str, prerequisite_owner: Option<&str>) -> Vec<u8> {
        add_builder(zone, prerequisite_owner).finish()
    }

    /// [`add_message`] before it is finished (for signing).
    fn add_builder(
        zone: &str,
        prerequisite_owner: Option<&str>,
    ) -> domain::base::message_builder::AdditionalBuilder<Vec<u8>> {
        let mut builder = MessageBuilder::new_vec();
        builder.header_mut().set_opcode(Opcode::UPDATE);
        builder.header_mut().set_id(99);
        let mut zone_section = builder.question();
        zone_section
            .push((Name::<Vec<u8>>::from_str(zone).expect("a name"), Rtype::SOA))
            .expect("room");
        let mut prerequisites = zone_section.answer();
        if let Some(owner) = prerequisite_owner {
            let record = DomainRecord::new(
                Name::<Vec<u8>>::from_str(owner).expect("a name"),
                Class::NONE,
                Ttl::from_secs(0),
                domain::base::rdata::UnknownRecordData::from_octets(Rtype::A, Vec::new())
                    .expect("empty rdata"),
            );
            prerequisites.push(record).expect("room");
        }
        let mut updates = prerequisites.authority();
        updates
            .push((
                Name::<Vec<u8>>::from_str("new.corp.example.").expect("a name"),
                Class::IN,
                Ttl::from_secs(60),
                A::from_octets(192, 0, 2, 9),
            ))
            .expect("room");
        updates.additional()
    }

    const KEY_FILE: &str = r#"key "update-key" { algorithm hmac-sha256; secret "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA=="; };
key "other-key" { algorithm hmac-sha256; secret "b3RoZXItb3RoZXItb3RoZXItb3RoZXItb3RoZXItb3RoZXI="; };"#;

    /// The update [`add_message`] builds, signed with `key`, and the transaction that checks
    /// the answer.
    fn signed(key: Arc<Key>) -> (Vec<u8>, domain::tsig::ClientTransaction<Arc<Key>>) {
        let mut builder = add_builder(APEX, None);
        let transaction =
            domain::tsig::ClientTransaction::request(key, &mut builder, Time48::now())
                .expect("signed");
        (builder.finish(), transaction)
    }

    #[test]
    fn rfc8945_a_signed_update_is_applied_and_answered_signed() {
        let keys = TsigKeys::parse(KEY_FILE).expect("the key file parses");
        let zones = FakeZones::new(Some(AllowUpdate {
            tsig_key: Some("update-key".into()),
            clients: Vec::new(),
        }));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let client: IpAddr = "127.0.0.1".parse().expect("an address");
        // Signed with another key the file holds: NOTAUTH (BADKEY), nothing applied.
        let other = keys.get("other-key").expect("the other key");
        let (message, _) = signed(other);
        let answer = runtime.block_on(respond(&message, client, &zones, &keys));
        let answer = Message::from_octets(answer).expect("an answer");
        assert_eq!(answer.header().rcode().to_int(), rcode::NOTAUTH);
        assert!(zones.applied.borrow().is_empty());
        // Signed with the zone's key: applied, the answer signed and verified by the client.
        let key = keys.get("update-key").expect("the key");
        let (message, transaction) = signed(key);
        let answer = runtime.block_on(respond(&message, client, &zones, &keys));
        let mut answer = Message::from_octets(answer).expect("an answer");
        assert_eq!(answer.header().rcode().to_int(), rcode::NOERROR);
        transaction
            .answer(&mut answer, Time48::now())
            .expect("the answer's TSIG verifies");
        assert_eq!(zones.applied.borrow().len(), 1);
        // The same message again: its TSIG verifies once more (no replay protection beyond
        // the time window, as RFC 8945 §5.2.3 allows), and the add changes nothing.
        let answer = runtime.block_on(respond(&message, client, &zones, &keys));
        let answer = Message::from_octets(answer).expect("an answer");
        assert_eq!(answer.header().rcode().to_int(), rcode::NOERROR);
        assert_eq!(zones.applied.borrow().len(), 1);
    }

    fn run(message: &[u8], client: &str, zones: &FakeZones) -> (u16, u8) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let client: IpAddr = client.parse().expect("an address");
        let answer = runtime.block_on(respond(message, client, zones, &TsigKeys::empty()));
        let answer = Message::from_octets(answer).expect("an answer");
        assert!(answer.header().qr());
        assert_eq!(answer.header().opcode(), Opcode::UPDATE);
        (answer.header().id(), answer.header().rcode().to_int())
    }

    fn clients(prefix: &str) -> Option<AllowUpdate> {
        Some(AllowUpdate {
            tsig_key: None,
            clients: vec![Prefix::from_str(prefix).expect("a prefix")],
        })
    }

    #[test]
    fn an_update_from_an_allowed_client_is_applied() {
        let zones = FakeZones::new(clients("127.0.0.0/8"));
        assert_eq!(
            run(&add_message(APEX, None), "127.0.0.1", &zones),
            (99, rcode::NOERROR)
        );
        let applied = zones.applied.borrow();
        assert_eq!(applied.len(), 1);
        assert!(applied[0].0.is_empty());
        assert_eq!(applied[0].1.len(), 1);
        assert_eq!(*applied[0].1[0].rdata, [192, 0, 2, 9]);
        drop(applied);
        // The same again changes nothing: NOERROR, no second apply (no serial bump).
        assert_eq!(
            run(&add_message(APEX, None), "127.0.0.1", &zones).1,
            rcode::NOERROR
        );
        assert_eq!(zones.applied.borrow().len(), 1);
    }

    #[test]
    fn refused_updates_change_nothing() {
        // A client outside allowUpdate.clients.
        let zones = FakeZones::new(clients("127.0.0.0/8"));
        assert_eq!(
            run(&add_message(APEX, None), "::1", &zones).1,
            rcode::REFUSED
        );
        // No allowUpdate at all.
        let zones = FakeZones::new(None);
        assert_eq!(
            run(&add_message(APEX, None), "127.0.0.1", &zones).1,
            rcode::REFUSED
        );
        // A key required, the update unsigned.
        let zones = FakeZones::new(Some(AllowUpdate {
            tsig_key: Some("update-key".into()),
            clients: Vec::new(),
        }));
        assert_eq!(
            run(&add_message(APEX, None), "127.0.0.1", &zones).1,
            rcode::REFUSED
        );
        // A zone that is not a primary here.
        assert_eq!(
            run(&add_message("example.", None), "127.0.0.1", &zones).1,
            rcode::NOTAUTH
        );
        assert!(zones.applied.borrow().is_empty());
    }

    #[test]
    fn a_failed_prerequisite_answers_its_rcode_and_changes_nothing() {
        let zones = FakeZones::new(clients("127.0.0.1/32"));
        let message = add_message(APEX, Some("www.corp.example."));
        assert_eq!(run(&message, "127.0.0.1", &zones).1, rcode::YXRRSET);
        assert!(zones.applied.borrow().is_empty());
        let message = add_message(APEX, Some("new.corp.example."));
        assert_eq!(run(&message, "127.0.0.1", &zones).1, rcode::NOERROR);
    }

    #[test]
    fn a_malformed_update_is_formerr_and_a_runt_is_not_answered() {
        let zones = FakeZones::new(clients("127.0.0.0/8"));
        let mut message = add_message(APEX, None);
        // The zone section's type: A instead of SOA.
        let at = message.len();
        let zone_type = 12 + wire(APEX).len();
        message[zone_type + 1] = 1;
        assert_eq!(message.len(), at);
        assert_eq!(run(&message, "127.0.0.1", &zones), (99, rcode::FORMERR));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let client: IpAddr = "127.0.0.1".parse().expect("an address");
        assert!(
            runtime
                .block_on(respond(&[0; 5], client, &zones, &TsigKeys::empty()))
                .is_empty()
        );
    }
}
