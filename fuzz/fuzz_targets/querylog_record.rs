//! The query log's record format (`kudurru_core::querylog`): arbitrary bytes as a batch never
//! panic `RecordRef::decode` or `Records` (each record decoded takes bytes of the batch, the
//! iterator ends after an error); and arbitrary fields encoded then decoded come back as
//! written, strings cut at 255 bytes on a character boundary, messages at `MESSAGE_MAX` with
//! `CLIPPED` set. The first byte chooses: even, a batch; odd, fields.
#![no_main]

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use kudurru_core::querylog::{MESSAGE_MAX, RecordRef, Records, Source, Transport, flags};
use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Fields<'a> {
    time_ns: u64,
    address: [u8; 16],
    v4: bool,
    port: u16,
    transport: u8,
    source: u8,
    flags: u8,
    client_id: &'a str,
    policy: &'a str,
    list: &'a str,
    upstream: &'a str,
    upstream_latency_us: u32,
    query: &'a [u8],
    response: &'a [u8],
    long_query: Option<u16>,
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        batch(rest);
    } else if let Ok(fields) = Fields::arbitrary(&mut Unstructured::new(rest)) {
        round_trip(&fields);
    }
});

fn batch(bytes: &[u8]) {
    // The smallest record: its length, the fixed part, four empty strings, two empty messages.
    const SMALLEST: usize = 4 + 34 + 4 + 4;
    let mut seen = 0usize;
    let mut failed = false;
    for record in Records::new(bytes) {
        assert!(!failed, "the iterator went on after an error");
        match record {
            Ok(record) => {
                seen += SMALLEST + record.query.len() + record.response.len();
                assert!(seen <= bytes.len(), "records of more bytes than the batch");
            }
            Err(_) => failed = true,
        }
    }
    if let Ok((_, used)) = RecordRef::decode(bytes) {
        assert!(used <= bytes.len());
    }
}

fn round_trip(fields: &Fields<'_>) {
    let address = if fields.v4 {
        IpAddr::from([
            fields.address[0],
            fields.address[1],
            fields.address[2],
            fields.address[3],
        ])
    } else {
        IpAddr::V6(Ipv6Addr::from(fields.address))
    };
    let long;
    let query = match fields.long_query {
        Some(extra) => {
            long = [
                fields.query,
                &vec![0x55; MESSAGE_MAX + usize::from(extra % 512)],
            ]
            .concat();
            &long[..]
        }
        None => fields.query,
    };
    let record = RecordRef {
        time_ns: fields.time_ns,
        client: SocketAddr::new(address, fields.port),
        transport: Transport::ALL[usize::from(fields.transport) % Transport::ALL.len()],
        source: Source::ALL[usize::from(fields.source) % Source::ALL.len()],
        flags: fields.flags,
        client_id: fields.client_id,
        policy: fields.policy,
        list: fields.list,
        upstream: fields.upstream,
        upstream_latency_us: fields.upstream_latency_us,
        query,
        response: fields.response,
    };
    let mut batch = Vec::new();
    record.encode(&mut batch);
    record.encode(&mut batch);
    let decoded: Vec<_> = Records::new(&batch)
        .collect::<Result<_, _>>()
        .expect("what encode wrote decodes");
    assert_eq!(decoded.len(), 2);
    let back = decoded[0];
    assert_eq!(back, decoded[1]);
    // An IPv4-mapped IPv6 address comes back as IPv4: the record stores IPv4 that way.
    let expected_ip = match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    };
    assert_eq!(back.client, SocketAddr::new(expected_ip, fields.port));
    assert_eq!(back.time_ns, record.time_ns);
    assert_eq!(back.transport, record.transport);
    assert_eq!(back.source, record.source);
    assert_eq!(back.upstream_latency_us, record.upstream_latency_us);
    for (written, read) in [
        (record.client_id, back.client_id),
        (record.policy, back.policy),
        (record.list, back.list),
        (record.upstream, back.upstream),
    ] {
        assert!(read.len() <= 255 && written.starts_with(read));
        assert!(
            written.len() <= 255 || read.len() + 4 > 255,
            "cut more than a character"
        );
        assert_eq!(read.len() == written.len(), written.len() <= 255);
    }
    let clipped = query.len() > MESSAGE_MAX || record.response.len() > MESSAGE_MAX;
    assert_eq!(back.query, &query[..query.len().min(MESSAGE_MAX)]);
    assert_eq!(
        back.response,
        &record.response[..record.response.len().min(MESSAGE_MAX)]
    );
    assert_eq!(
        back.flags,
        record.flags | if clipped { flags::CLIPPED } else { 0 }
    );
}
