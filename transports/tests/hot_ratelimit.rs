//! `ratelimit.qps`, `ratelimit.burst` and `ratelimit.slip` apply to a running data plane as soon
//! as a new settings snapshot is published: no restart, no lost state elsewhere. The settings
//! reload of the control plane publishes the same way; here the test swaps the snapshot itself.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use kudurru_core::wire::{self, rtype};
use kudurru_core::{LocalNames, RateLimit, ServerIdentity, TtlPolicy};
use kudurru_transports::{ListenerSpec, Protocol, ServerSpec, Settings};

fn settings(ratelimit: RateLimit) -> Settings {
    Settings {
        upstreams: vec!["udp://127.0.0.1:9".parse().unwrap()].into(),
        upstream_strategy: Default::default(),
        upstream_tls: Default::default(),
        upstream_idle_timeout: Duration::from_secs(30),
        upstream_health_interval: Duration::from_secs(5),
        stale: Default::default(),
        prefetch: true,
        ttl: TtlPolicy::default(),
        cache_max_entries: 1000,
        local: LocalNames::new(ServerIdentity {
            identity: "test".into(),
            version: "test".into(),
        }),
        edns_payload: 1232,
        upstream_timeout: Duration::from_millis(200),
        resolve_timeout: Duration::from_millis(500),
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
        zones: Default::default(),
        acl: Default::default(),
    }
}

/// `localhost. A` query with `id`.
fn query(id: u16) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 9]);
    m.extend_from_slice(b"localhost\0");
    m.extend_from_slice(&rtype::A.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m
}

/// (answered, truncated, silent) for `count` queries sent one by one.
fn tally(socket: &UdpSocket, server: SocketAddr, count: u16) -> (u32, u32, u32) {
    let mut t = (0, 0, 0);
    let mut buf = [0u8; 512];
    for id in 0..count {
        socket.send_to(&query(id), server).unwrap();
        let reply = loop {
            match socket.recv_from(&mut buf) {
                Ok((n, _)) if wire::message_id(&buf[..n]) == Some(id) => break Some(n),
                Ok(_) => continue,
                Err(_) => break None,
            }
        };
        match reply {
            Some(n) if wire::is_truncated(&buf[..n]) => t.1 += 1,
            Some(_) => t.0 += 1,
            None => t.2 += 1,
        }
    }
    t
}

#[test]
fn qps_burst_and_slip_apply_when_the_snapshot_changes() {
    let shared = Arc::new(ArcSwap::from_pointee(settings(RateLimit::default())));
    let server = kudurru_transports::start(ServerSpec {
        cpus: vec![kudurru_transports::sys::available_cpus()[0]],
        listeners: vec![ListenerSpec {
            addr: "127.0.0.1:0".parse().unwrap(),
            protocol: Protocol::Dns {
                udp: true,
                tcp: false,
            },
        }],
        settings: shared.clone(),
        lameduck: Arc::new(AtomicBool::new(false)),
        tls: None,
        inbox: None,
        querylog: None,
    })
    .expect("data plane starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.is_ready() {
        assert!(Instant::now() < deadline, "ready in time");
        std::thread::sleep(Duration::from_millis(10));
    }
    let addr = server.bound()[0].1;
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();

    assert_eq!(tally(&socket, addr, 30), (30, 0, 0), "off: nothing limited");

    let tight = RateLimit {
        qps: 1,
        burst: 5,
        slip: 0,
        ..RateLimit::default()
    };
    shared.store(Arc::new(settings(tight.clone())));
    let (answered, truncated, silent) = tally(&socket, addr, 20);
    assert!(
        (5..=6).contains(&answered),
        "burst 5 then 1 qps: {answered}"
    );
    assert_eq!((truncated, silent), (0, 20 - answered), "slip 0 drops all");

    shared.store(Arc::new(settings(RateLimit {
        slip: 1,
        ..tight.clone()
    })));
    let (answered, truncated, _) = tally(&socket, addr, 10);
    assert!(answered <= 1, "still limited: {answered}");
    assert_eq!(
        truncated,
        10 - answered,
        "slip 1 truncates every limited query"
    );

    shared.store(Arc::new(settings(RateLimit {
        qps: 1000,
        burst: 1000,
        ..tight
    })));
    std::thread::sleep(Duration::from_millis(50)); // 50 ms at 1000 qps refills 50 tokens
    let (answered, _, _) = tally(&socket, addr, 40);
    assert_eq!(
        answered, 40,
        "a larger rate and burst apply to the existing bucket"
    );
    server.stop();
}
