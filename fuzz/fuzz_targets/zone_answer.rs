//! Arbitrary query bytes against a fixed compiled zone (wildcards, a CNAME chain and a loop,
//! a delegation with glue, empty non-terminals, RRSIG and NSEC records), through the zone
//! stage (`Zones::answer`, over a datagram or a stream) and `Zone::answer` directly.
//! On every output: the response parses record by record, carries the query's ID and
//! question as the client wrote it, and fits the UDP limit.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};

use domain::base::iana::Class;
use domain::base::rdata::ComposeRecordData;
use domain::base::{Message, ToName};
use domain::zonefile::inplace::{Entry, Zonefile};
use kudurru_core::wire::{self, Query, ReplyOptions};
use kudurru_core::zone::{Record, ServedZone, Zone, ZoneAnswer, ZoneData, ZoneKind, Zones};
use libfuzzer_sys::fuzz_target;

const ZONE: &str = r#"$ORIGIN corp.example.
$TTL 300
@ 3600 SOA ns1 hostmaster 42 3600 600 604800 60
@ NS ns1
@ NS ns2.other.example.
@ NSEC *.corp.example. SOA NS RRSIG NSEC
@ RRSIG SOA 13 2 300 20300101000000 20200101000000 1 corp.example. AAAA
@ RRSIG NSEC 13 2 300 20300101000000 20200101000000 1 corp.example. AAAA
* TXT "apex wildcard"
* NSEC alias.corp.example. TXT RRSIG NSEC
* RRSIG TXT 13 2 300 20300101000000 20200101000000 1 corp.example. AAAA
ns1 A 192.0.2.53
www A 192.0.2.1
www A 192.0.2.2
www AAAA 2001:db8::1
www RRSIG A 13 3 300 20300101000000 20200101000000 1 corp.example. AAAA
mail MX 10 mx1
mail SRV 0 0 25 mx1
mx1 A 192.0.2.25
*.wild A 192.0.2.99
*.wild TXT "x"
alias CNAME www
chain1 CNAME chain2
chain2 CNAME alias
gone CNAME nothere
wildcname CNAME x.wild
out CNAME www.elsewhere.example.
loop1 CNAME loop2
loop2 CNAME loop1
a.b.c A 192.0.2.3
sub NS ns.sub
sub NS ns.other.example.
sub DS 12345 13 2 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF
ns.sub A 192.0.2.54
ns.sub AAAA 2001:db8::54
*.sub A 192.0.2.55
"#;

fn zone() -> &'static (Arc<Zone>, Zones) {
    static ZONES: OnceLock<(Arc<Zone>, Zones)> = OnceLock::new();
    ZONES.get_or_init(|| {
        let text = ZONE;
        let mut file = Zonefile::new();
        file.set_default_class(Class::IN);
        file.extend_from_slice(text.as_bytes());
        let mut data = ZoneData {
            apex: b"\x04corp\x07example\x00"[..].into(),
            ..ZoneData::default()
        };
        while let Some(entry) = file.next_entry().expect("the fuzz zone parses") {
            let Entry::Record(record) = entry else {
                continue;
            };
            let mut owner = Vec::new();
            record.owner().compose(&mut owner).unwrap();
            owner.make_ascii_lowercase();
            let mut rdata = Vec::new();
            record.data().compose_rdata(&mut rdata).unwrap();
            data.records.push(Record {
                owner: owner.into(),
                rtype: record.rtype().to_int(),
                ttl: record.ttl().as_secs(),
                rdata: rdata.into(),
            });
        }
        let zone =
            Arc::new(Zone::compile(&data, ZoneKind::Primary).expect("the fuzz zone compiles"));
        let zones = Zones::new(vec![ServedZone::new(zone.clone())], Vec::new());
        (zone, zones)
    })
}

/// Checks a response to `q`: it parses record by record, echoes ID and question, fits.
fn check(q: &Query<'_>, out: &[u8], limit: Option<usize>) {
    let parsed = Message::from_slice(out).expect("responses parse");
    assert!(parsed.header().qr());
    assert_eq!(wire::message_id(out), Some(q.id()));
    let question = q.question_wire();
    assert_eq!(
        &out[12..12 + question.len()],
        question,
        "the question as sent"
    );
    for section in [parsed.answer(), parsed.authority(), parsed.additional()] {
        for record in section.expect("sections parse") {
            record.expect("records parse");
        }
    }
    if let Some(limit) = limit {
        assert!(out.len() <= limit, "{} > {limit}", out.len());
    }
}

// The input: one byte of settings (bit 0: a stream transport; the rest: our EDNS payload in
// units of 32 from 512), then the query as the client sends it (seeds in fuzz/seeds).
fuzz_target!(|data: &[u8]| {
    let Some((&settings, query)) = data.split_first() else {
        return;
    };
    let Ok(q) = Query::parse(query) else {
        return;
    };
    let stream = settings & 1 != 0;
    let (zone, zones) = zone();
    let options = ReplyOptions::udp(512 + 32 * u16::from(settings >> 1));
    let limit = (!stream).then(|| q.udp_limit(options.payload));
    let mut out = Vec::new();
    let client = IpAddr::V4(Ipv4Addr::LOCALHOST);
    match zones.answer(&q, client, stream, &options, &mut out) {
        ZoneAnswer::Pass => assert!(out.is_empty()),
        ZoneAnswer::Answered => check(&q, &out, limit),
        ZoneAnswer::Transfer(index) => {
            // Over UDP only IXFR goes to the transfer stage (answered with the SOA alone,
            // RFC 1995 §2); AXFR is refused there.
            assert!(
                stream || q.qtype() == 251,
                "AXFR over UDP went to the transfer stage"
            );
            assert_eq!(zones.served()[index].zone.apex(), zone.apex());
        }
    }
    zone.answer(&q, limit, &options, &mut out);
    check(&q, &out, limit);
});
