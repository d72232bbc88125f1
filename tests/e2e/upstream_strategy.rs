//! Upstream strategies, health probes and bootstrap resolution end to end: several upstreams
//! on loopback that can be stopped (they stop answering) and started again, each answering
//! with an address of its own so the client sees who answered.
//!
//! - `ordered` asks the first upstream while it is up, fails over when it stops, takes it out
//!   of rotation, and probes it back in (no client traffic) once it answers again;
//! - `random` spreads queries over every upstream;
//! - `parallel` asks two at once and answers with the faster;
//! - an upstream named by a host (`udp://upstream.test.example:PORT`) is resolved through a
//!   bootstrap resolver on loopback.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use kudurru_core::wire::{self, Query, ReplyOptions, rcode, rtype};
use kudurru_e2e::{Kudurru, dig, unique_name};

use crate::zones::{call, eventually};

const UDP: ReplyOptions = ReplyOptions {
    payload: 1232,
    tcp_keepalive: None,
    padding: false,
};

/// A UDP upstream on loopback answering every A query with `address` (TTL 300) after `delay`,
/// counting queries by name; while stopped it answers nothing. A thread per query, so a slow
/// one holds up nothing.
struct Upstream {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    seen: Arc<Mutex<HashMap<String, usize>>>,
    quit: Arc<AtomicBool>,
}

impl Upstream {
    fn start(address: [u8; 4], delay: Duration) -> Self {
        Self::serving(move |query: &Query<'_>, out: &mut Vec<u8>| {
            wire::start_response(query, rcode::NOERROR, false, out);
            if query.qtype() == rtype::A {
                wire::push_record(out, wire::HEADER_LEN, rtype::A, 300, &address);
                wire::count_answer(out);
            }
            wire::finish_response(query, out, &UDP);
            delay
        })
    }

    /// An upstream replying as `reply` says (which returns how long to wait first).
    fn serving(
        reply: impl Fn(&Query<'_>, &mut Vec<u8>) -> Duration + Send + Sync + 'static,
    ) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("a read timeout");
        let addr = socket.local_addr().expect("a bound address");
        let up = Arc::new(AtomicBool::new(true));
        let quit = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let reply = Arc::new(reply);
        {
            let (up, quit, seen) = (up.clone(), quit.clone(), seen.clone());
            thread::spawn(move || {
                let socket = Arc::new(socket);
                let mut buffer = [0u8; 1500];
                while !quit.load(Ordering::Relaxed) {
                    let Ok((n, peer)) = socket.recv_from(&mut buffer) else {
                        continue;
                    };
                    if !up.load(Ordering::Relaxed) {
                        continue;
                    }
                    let message = buffer[..n].to_vec();
                    let (socket, seen, reply) = (socket.clone(), seen.clone(), reply.clone());
                    thread::spawn(move || {
                        let Ok(query) = Query::parse(&message) else {
                            return;
                        };
                        *seen
                            .lock()
                            .unwrap()
                            .entry(query.key().qname_text())
                            .or_insert(0) += 1;
                        let mut out = Vec::new();
                        let delay = reply(&query, &mut out);
                        thread::sleep(delay);
                        let _ = socket.send_to(&out, peer);
                    });
                }
            });
        }
        Self {
            addr,
            up,
            seen,
            quit,
        }
    }

    fn url(&self) -> String {
        format!("udp://{}", self.addr)
    }

    /// Queries for names under `suffix` (presentation form, trailing dot).
    fn asked_under(&self, suffix: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(name, _)| name.ends_with(suffix))
            .map(|(_, n)| n)
            .sum()
    }

    /// Queries for `name` exactly.
    fn asked(&self, name: &str) -> usize {
        self.seen.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    fn stop(&self) {
        self.up.store(false, Ordering::Relaxed);
    }

    fn resume(&self) {
        self.up.store(true, Ordering::Relaxed);
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.quit.store(true, Ordering::Relaxed);
    }
}

fn healthy(k: &Kudurru, upstream: &Upstream) -> Option<f64> {
    k.metric(&format!(
        "kudurru_upstream_healthy{{upstream=\"{}\"}}",
        upstream.url()
    ))
}

/// The A address of `name` as kudurru answers it.
fn address_of(k: &Kudurru, name: &str) -> String {
    let answer = dig(k.addr, &[name, "A"]);
    assert_eq!(answer.status, "NOERROR", "{}", answer.raw);
    answer
        .answers
        .first()
        .map(|a| a.3.clone())
        .unwrap_or_default()
}

#[test]
fn ordered_uses_the_first_upstream_fails_over_when_it_stops_and_probes_it_back_in() {
    let first = Upstream::start([192, 0, 2, 1], Duration::ZERO);
    let second = Upstream::start([192, 0, 2, 2], Duration::ZERO);
    let k = Kudurru::builder(&[first.url(), second.url()])
        .env("KUDURRU_UPSTREAM__STRATEGY", "ordered")
        .env("KUDURRU_UPSTREAM__TIMEOUT", "300ms")
        .env("KUDURRU_UPSTREAM__RESOLVETIMEOUT", "2s")
        .env("KUDURRU_UPSTREAM__HEALTHCHECKINTERVAL", "300ms")
        .start();
    for _ in 0..10 {
        let name = unique_name("ordered-");
        assert_eq!(address_of(&k, &name), "192.0.2.1");
    }
    assert_eq!(first.asked_under("kudurru-e2e.example."), 10);
    assert_eq!(
        second.asked_under("kudurru-e2e.example."),
        0,
        "the second is not asked while the first answers"
    );
    assert_eq!(healthy(&k, &first), Some(1.0));

    // The first stops: answers come from the second, and after three failures in a row the
    // first is out of rotation (doctor says so).
    first.stop();
    for _ in 0..4 {
        let name = unique_name("failover-");
        assert_eq!(address_of(&k, &name), "192.0.2.2");
    }
    eventually("the stopped upstream is marked down", || {
        healthy(&k, &first) == Some(0.0)
    });
    let token = k.token("admin", None);
    let (_, doctor) = call(&k, "GET", "/api/v1/doctor", &token, None);
    let check = doctor["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == format!("upstream {}", first.url()))
        .cloned()
        .unwrap_or_default();
    assert_eq!(check["status"], "fail", "{doctor}");
    let before = first.asked_under("kudurru-e2e.example.");
    let name = unique_name("while-down-");
    assert_eq!(address_of(&k, &name), "192.0.2.2");
    assert_eq!(
        first.asked_under("kudurru-e2e.example."),
        before,
        "a down upstream is not asked by clients"
    );
    eventually("probes are sent to the down upstream", || {
        k.metric(&format!(
            "kudurru_upstream_health_probes_total{{upstream=\"{}\"}}",
            first.url()
        ))
        .unwrap_or(0.0)
            >= 1.0
    });

    // It comes back: a probe (`. NS`) puts it back without client traffic, and the order is
    // the configured one again.
    first.resume();
    eventually("the upstream is probed back in", || {
        healthy(&k, &first) == Some(1.0)
    });
    let name = unique_name("back-");
    assert_eq!(address_of(&k, &name), "192.0.2.1");
}

#[test]
fn random_spreads_queries_over_every_upstream() {
    let upstreams: Vec<Upstream> = (1..=3)
        .map(|i| Upstream::start([192, 0, 2, i], Duration::ZERO))
        .collect();
    let urls: Vec<String> = upstreams.iter().map(Upstream::url).collect();
    let k = Kudurru::builder(&urls)
        .env("KUDURRU_UPSTREAM__STRATEGY", "random")
        .start();
    for _ in 0..60 {
        dig(k.addr, &[&unique_name("random-"), "A"]);
    }
    let counts: Vec<usize> = upstreams
        .iter()
        .map(|u| u.asked_under("kudurru-e2e.example."))
        .collect();
    assert_eq!(counts.iter().sum::<usize>(), 60, "{counts:?}");
    // Uniform would be 20 each; 5 is far below any plausible draw (p < 1e-4 each).
    assert!(counts.iter().all(|&n| n >= 5), "{counts:?}");
}

#[test]
fn parallel_asks_two_upstreams_and_answers_with_the_faster() {
    let slow = Upstream::start([192, 0, 2, 9], Duration::from_millis(1500));
    let fast = Upstream::start([192, 0, 2, 1], Duration::ZERO);
    let k = Kudurru::builder(&[slow.url(), fast.url()])
        .env("KUDURRU_UPSTREAM__STRATEGY", "parallel")
        // Long enough that no second attempt is sent one after the other.
        .env("KUDURRU_UPSTREAM__TIMEOUT", "3s")
        .start();
    let names: Vec<String> = (0..5).map(|_| unique_name("parallel-")).collect();
    for name in &names {
        assert_eq!(
            address_of(&k, name),
            "192.0.2.1",
            "the faster upstream's answer"
        );
        assert_eq!(fast.asked(name), 1);
    }
    eventually("the slow upstream got each query too", || {
        names.iter().all(|name| slow.asked(name) == 1)
    });
}

/// A bootstrap resolver on loopback: `upstream.test.example` is 127.0.0.1 (A, TTL 60) and
/// has no AAAA; every other name is NXDOMAIN.
fn bootstrap_resolver() -> Upstream {
    Upstream::serving(|query: &Query<'_>, out: &mut Vec<u8>| {
        if query.key().qname_text() == "upstream.test.example." {
            wire::start_response(query, rcode::NOERROR, false, out);
            if query.qtype() == rtype::A {
                wire::push_record(out, wire::HEADER_LEN, rtype::A, 60, &[127, 0, 0, 1]);
                wire::count_answer(out);
            }
        } else {
            wire::start_response(query, rcode::NXDOMAIN, false, out);
        }
        wire::finish_response(query, out, &UDP);
        Duration::ZERO
    })
}

#[test]
fn a_host_name_upstream_resolves_through_the_bootstrap_resolver() {
    let bootstrap = bootstrap_resolver();
    let upstream = Upstream::start([192, 0, 2, 7], Duration::ZERO);
    let named = format!("udp://upstream.test.example:{}", upstream.addr.port());
    let k = Kudurru::builder(std::slice::from_ref(&named))
        .env(
            "KUDURRU_UPSTREAM__BOOTSTRAP",
            &format!("127.0.0.1:{}", bootstrap.addr.port()),
        )
        .start();
    eventually("the named upstream answers", || {
        let answer = dig(k.addr, &[&unique_name("named-"), "A"]);
        answer.answers.first().is_some_and(|a| a.3 == "192.0.2.7")
    });
    assert!(bootstrap.asked("upstream.test.example.") >= 1);
    assert_eq!(
        bootstrap.asked_under("kudurru-e2e.example."),
        0,
        "client names never reach the bootstrap resolver"
    );
    // Metrics and doctor name it by its URL; doctor shows the address it resolved to.
    assert!(
        k.metric(&format!(
            "kudurru_upstream_queries_total{{upstream=\"{named}\"}}"
        ))
        .unwrap_or(0.0)
            >= 1.0
    );
    let token = k.token("admin", None);
    let (_, doctor) = call(&k, "GET", "/api/v1/doctor", &token, None);
    let check = doctor["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "bootstrap upstream.test.example")
        .cloned()
        .unwrap_or_default();
    assert_eq!(check["status"], "ok", "{doctor}");
    assert!(
        check["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("127.0.0.1"),
        "{doctor}"
    );
}
