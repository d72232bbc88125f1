//! The cores' side of the query log on a running data plane: every answered or dropped query
//! over UDP and TCP becomes one record in its core's batch, handed to the control thread's
//! receiver within the flush interval, with the transport, the client, where the answer came
//! from (cache, upstream, local, dropped), the upstream that answered a miss and its time and the two messages as
//! sent; a channel nobody drains drops batches and counts their records.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use kudurru_core::querylog::{Records, Source, Transport, summarize};
use kudurru_core::wire::rtype;
use kudurru_core::{LocalNames, RateLimit, ServerIdentity, TtlPolicy};
use kudurru_transports::querylog::{QueryLogReceiver, channel, channel_with_room};
use kudurru_transports::{ListenerSpec, Protocol, Server, ServerSpec, Settings};

fn settings(upstream: SocketAddr, ratelimit: RateLimit) -> Settings {
    Settings {
        upstreams: vec![
            format!("udp://{upstream}")
                .parse()
                .expect("an upstream URL"),
        ]
        .into(),
        upstream_strategy: Default::default(),
        upstream_tls: Default::default(),
        upstream_idle_timeout: Duration::from_secs(30),
        upstream_health_interval: Duration::from_secs(5),
        stale: Default::default(),
        prefetch: false,
        ttl: TtlPolicy::default(),
        cache_max_entries: 1000,
        local: LocalNames::new(ServerIdentity {
            identity: "test".into(),
            version: "test".into(),
        }),
        edns_payload: 1232,
        upstream_timeout: Duration::from_millis(500),
        resolve_timeout: Duration::from_secs(2),
        tcp_idle_timeout: Duration::from_secs(2),
        tcp_max_connections: 16,
        tcp_max_connections_per_client: 16,
        quic_max_connections_per_client: 16,
        tcp_max_pipelined: 8,
        tls_handshake_timeout: Duration::from_secs(2),
        shutdown_grace: Duration::from_millis(100),
        ratelimit,
        ratelimit_table_size: 1024,
        policy: Default::default(),
        // The built-in zones: `localhost.` is answered here.
        zones: Arc::new(kudurru_core::zone::Zones::builtin()),
        acl: Default::default(),
    }
}

/// An upstream on loopback answering every query with one A record, 192.0.2.1, TTL 3600.
fn upstream() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    let addr = socket.local_addr().expect("a bound address");
    std::thread::spawn(move || {
        let mut buffer = [0u8; 512];
        while let Ok((n, peer)) = socket.recv_from(&mut buffer) {
            let query = &buffer[..n];
            let mut at = 12;
            while at < n && query[at] != 0 {
                at += 1 + usize::from(query[at]);
            }
            let mut reply = query[..(at + 5).min(n)].to_vec();
            reply[2..12].copy_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
            reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4]);
            reply.extend_from_slice(&[192, 0, 2, 1]);
            let _ = socket.send_to(&reply, peer);
        }
    });
    addr
}

/// A recursive `name A` query with `id` (labels without the root).
fn query(id: u16, name: &[&str]) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&rtype::A.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m
}

fn start(
    settings: Arc<ArcSwap<Settings>>,
    querylog: kudurru_transports::querylog::QueryLogSender,
) -> Server {
    let server = kudurru_transports::start(ServerSpec {
        cpus: vec![kudurru_transports::sys::available_cpus()[0]],
        listeners: vec![ListenerSpec {
            addr: "127.0.0.1:0".parse().expect("an address"),
            protocol: Protocol::Dns {
                udp: true,
                tcp: true,
            },
        }],
        settings,
        lameduck: Arc::new(AtomicBool::new(false)),
        tls: None,
        inbox: None,
        querylog: Some(querylog),
    })
    .expect("data plane starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.is_ready() {
        assert!(Instant::now() < deadline, "ready in time");
        std::thread::sleep(Duration::from_millis(10));
    }
    server
}

/// Sends `message` over UDP and returns the reply, `None` when none came.
fn udp(socket: &UdpSocket, server: SocketAddr, message: &[u8]) -> Option<Vec<u8>> {
    socket.send_to(message, server).expect("sent");
    let mut buffer = [0u8; 1500];
    match socket.recv_from(&mut buffer) {
        Ok((n, _)) => Some(buffer[..n].to_vec()),
        Err(_) => None,
    }
}

/// One decoded record, owned.
#[derive(Debug)]
struct Logged {
    transport: Transport,
    source: Source,
    client: SocketAddr,
    qname: String,
    rcode: Option<u16>,
    upstream: String,
    upstream_latency_us: u32,
    query: Vec<u8>,
    response: Vec<u8>,
}

/// Collects records from `receiver` until `count` arrived (or 10 s passed).
fn collect(receiver: &mut QueryLogReceiver, count: usize) -> Vec<Logged> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.len() < count && Instant::now() < deadline {
        match receiver.try_recv() {
            Ok(batch) => {
                let mut n = 0;
                for record in Records::new(&batch.bytes) {
                    let record = record.expect("a record the core wrote decodes");
                    let summary = summarize(record.query, record.response);
                    out.push(Logged {
                        transport: record.transport,
                        source: record.source,
                        client: record.client,
                        qname: summary.qname,
                        rcode: summary.rcode,
                        upstream: record.upstream.to_string(),
                        upstream_latency_us: record.upstream_latency_us,
                        query: record.query.to_vec(),
                        response: record.response.to_vec(),
                    });
                    n += 1;
                }
                assert_eq!(n, batch.records, "the batch counts its records");
            }
            Err(futures_channel::mpsc::TryRecvError::Closed) => {
                panic!("the query-log channel closed")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    out
}

#[test]
fn every_udp_and_tcp_query_is_one_record_with_its_source_and_messages() {
    let upstream = upstream();
    let shared = Arc::new(ArcSwap::from_pointee(settings(
        upstream,
        RateLimit::default(),
    )));
    let (sender, mut receiver) = channel(1);
    let server = start(shared.clone(), sender);
    let addr = server.bound()[0].1;
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a client socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("a read timeout");
    let client = socket.local_addr().expect("bound");

    // A miss to the fake upstream, then the same name from the cache.
    let miss = udp(&socket, addr, &query(1, &["www", "example"])).expect("answered");
    let hit = udp(&socket, addr, &query(2, &["www", "example"])).expect("answered");
    // A local name, and a message with a header and no question: FORMERR.
    let local = udp(&socket, addr, &query(3, &["localhost"])).expect("answered");
    let mut bad = query(4, &["www", "example"]);
    bad.truncate(14);
    let formerr = udp(&socket, addr, &bad).expect("answered");
    assert_eq!(formerr[3] & 0x0f, 1, "FORMERR");
    // Over TCP: the cached name again.
    let mut stream = TcpStream::connect(addr).expect("a TCP connection");
    let message = query(5, &["www", "example"]);
    let mut framed = (message.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&message);
    stream.write_all(&framed).expect("written");
    let mut length = [0u8; 2];
    stream.read_exact(&mut length).expect("a length");
    let mut tcp = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut tcp).expect("an answer");
    let tcp_client = stream.local_addr().expect("bound");
    drop(stream);

    let records = collect(&mut receiver, 5);
    assert_eq!(records.len(), 5, "{records:#?}");
    let (udp_records, tcp_records): (Vec<_>, Vec<_>) =
        records.iter().partition(|r| r.transport == Transport::Udp);
    assert_eq!(udp_records.len(), 4);
    for r in &udp_records {
        assert_eq!(r.client, client, "the client's address and port");
    }
    let by_id = |id: u16| {
        udp_records
            .iter()
            .find(|r| r.query.get(..2) == Some(&id.to_be_bytes()[..]))
            .unwrap_or_else(|| panic!("a record of query {id}"))
    };
    let first = by_id(1);
    assert_eq!(first.source, Source::Upstream);
    assert_eq!(first.qname, "www.example.");
    assert_eq!(first.rcode, Some(0));
    assert_eq!(first.response, miss, "the response as sent");
    assert_eq!(
        first.upstream,
        format!("udp://{upstream}"),
        "the upstream that answered"
    );
    assert!(
        first.upstream_latency_us > 0,
        "the exchange's time is recorded"
    );
    let second = by_id(2);
    assert_eq!(second.source, Source::Cache);
    assert_eq!(second.response, hit);
    assert_eq!(
        (second.upstream.as_str(), second.upstream_latency_us),
        ("", 0)
    );
    let third = by_id(3);
    assert_eq!(
        (third.source, third.qname.as_str()),
        (Source::Local, "localhost.")
    );
    assert_eq!(third.response, local);
    let fourth = by_id(4);
    assert_eq!((fourth.source, fourth.rcode), (Source::Local, Some(1)));
    assert_eq!(fourth.query, bad);
    assert_eq!(fourth.response, formerr);
    let [over_tcp] = tcp_records.as_slice() else {
        panic!("one TCP record: {tcp_records:#?}");
    };
    assert_eq!(over_tcp.transport, Transport::Tcp);
    assert_eq!(over_tcp.source, Source::Cache);
    assert_eq!(over_tcp.client, tcp_client);
    assert_eq!(over_tcp.response, tcp);
    assert_eq!(over_tcp.query, message);

    // A rate-limited query: dropped, recorded with no response.
    shared.store(Arc::new(settings(
        upstream,
        RateLimit {
            qps: 1,
            burst: 1,
            slip: 0,
            ..RateLimit::default()
        },
    )));
    let mut silent = 0;
    for id in 10..14 {
        if udp(&socket, addr, &query(id, &["www", "example"])).is_none() {
            silent += 1;
        }
    }
    assert!(silent >= 2, "the limiter dropped queries: {silent}");
    let records = collect(&mut receiver, 4);
    assert_eq!(records.len(), 4, "a record per query, answered or not");
    let dropped: Vec<_> = records
        .iter()
        .filter(|r| r.source == Source::Dropped)
        .collect();
    assert_eq!(dropped.len(), silent);
    for r in dropped {
        assert!(r.response.is_empty() && r.rcode.is_none(), "{r:?}");
        assert_eq!(r.qname, "www.example.");
    }
    let metrics = &server.metrics()[0];
    assert_eq!(metrics.querylog_records.load(Ordering::Relaxed), 9);
    assert_eq!(metrics.querylog_dropped.load(Ordering::Relaxed), 0);
    server.stop();
}

#[test]
fn a_channel_nobody_drains_drops_batches_and_counts_their_records() {
    let upstream = upstream();
    let shared = Arc::new(ArcSwap::from_pointee(settings(
        upstream,
        RateLimit::default(),
    )));
    // Room for no batch but the core's own slot: the first batch waits, the next are dropped.
    let (sender, receiver) = channel_with_room(0);
    let server = start(shared, sender);
    let addr = server.bound()[0].1;
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a client socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("a read timeout");
    udp(&socket, addr, &query(1, &["localhost"])).expect("answered");
    let metrics = server.metrics()[0].clone();
    let settle = |records: u64| {
        let deadline = Instant::now() + Duration::from_secs(5);
        // The timer hands the batch over within 100 ms of its first record.
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(150));
            if metrics.querylog_records.load(Ordering::Relaxed) == records {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    settle(1);
    for id in 2..5 {
        udp(&socket, addr, &query(id, &["localhost"])).expect("answered while dropping");
    }
    settle(4);
    assert_eq!(metrics.querylog_records.load(Ordering::Relaxed), 4);
    assert_eq!(
        metrics.querylog_dropped.load(Ordering::Relaxed),
        3,
        "the second batch's three records"
    );
    drop(receiver);
    server.stop();
}
