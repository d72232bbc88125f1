//! Crash safety of the object store: a `kudurru serve` under a loop of acknowledged writes is
//! killed with SIGKILL at a random moment, again and again on one data directory. After each
//! restart every acknowledged write is there, a write in flight at the kill is there fully or
//! not at all, the audit log holds exactly one record per write that landed, and the audit
//! chain verifies.
//!
//! ```text
//!  4 writers ──POST/PUT (one in flight each)──▶ kudurru serve ──▶ objects.redb
//!      │ acked versions + the one in flight            ▲ SIGKILL after 50–500 ms
//!      └──────────▶ after restart: list, audit per name, verify_audit_file ◀── restart
//! ```
//! An acknowledged write is a 200 or 201 answer read completely; anything else (a reset, a
//! cut-off body) leaves the write in flight, and its writer stops for the round so that it
//! never has more than one.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream};
use rand::Rng as _;
use serde_json::{Value, json};

/// Kill-and-restart rounds.
const ROUNDS: usize = 20;
/// Concurrent writers; each owns its objects, so writes never conflict.
const WRITERS: usize = 4;
/// How long the writes run before the kill, in milliseconds (uniform).
const WRITE_WINDOW_MS: std::ops::RangeInclusive<u64> = 50..=500;
const BASE: &str = "/api/v1/clientgroups";

/// A minimal HTTP/1.1 exchange over a fresh connection (`Connection: close`): the status and
/// the JSON body, or an error when the answer did not arrive whole.
fn exchange(
    api: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> std::io::Result<(u16, Value)> {
    let broken = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut stream = TcpStream::connect_timeout(&api, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: kudurru\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8(raw).map_err(|_| broken("answer is not UTF-8"))?;
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| broken("no end of headers"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| broken("no status"))?;
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    };
    let content = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest).ok_or_else(|| broken("cut-off chunked body"))?
    } else {
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| broken("no content-length"))?;
        if rest.len() != length {
            return Err(broken("cut-off body"));
        }
        rest.to_owned()
    };
    let value = serde_json::from_str(&content).map_err(|_| broken("body is not JSON"))?;
    Ok((status, value))
}

/// The content of a chunked body; `None` when it ends before its last chunk.
fn dechunk(mut rest: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// The only client of write number `n`, unique per write: 198.18.0.0/15 (RFC 2544's
/// benchmarking range) has room for 131,072.
fn address(n: u32) -> String {
    format!("198.{}.{}.{}/32", 18 + n / 65_536, n / 256 % 256, n % 256)
}

/// One object as the test knows it.
#[derive(Debug, Default)]
struct Tracked {
    name: String,
    /// Every acknowledged write (and every write in flight at a kill that turned out to have
    /// landed): (the client it wrote, the resourceVersion it got), oldest first.
    landed: Vec<(String, u64)>,
    /// The write whose answer did not arrive before the kill.
    in_flight: Option<String>,
}

impl Tracked {
    fn named(name: String) -> Self {
        Self {
            name,
            ..Self::default()
        }
    }
}

/// Writes to `objects` in turn until `stop` or the first write without an answer.
fn write_loop(
    api: SocketAddr,
    token: &str,
    objects: &mut [Tracked],
    counter: &AtomicU32,
    stop: &AtomicBool,
) -> usize {
    let mut acknowledged = 0;
    for turn in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let object = &mut objects[turn % objects.len()];
        let client = address(counter.fetch_add(1, Ordering::Relaxed));
        let mut body = json!({
            "metadata": { "name": object.name, "labels": { "test": "crash" } },
            "spec": { "clients": [client] },
        });
        let (method, path, created) = match object.landed.last() {
            None => ("POST", BASE.to_owned(), true),
            Some((_, version)) => {
                body["metadata"]["resourceVersion"] = version.to_string().into();
                ("PUT", format!("{BASE}/{}", object.name), false)
            }
        };
        object.in_flight = Some(client.clone());
        // The list manager writes a group's status after each spec change, which moves its
        // resourceVersion on: an update that lost that race retries from the version the 409
        // names (the spec there is still this test's last write).
        let mut answered = None;
        for _ in 0..10 {
            let Ok((status, answer)) = exchange(api, method, &path, token, Some(&body.to_string()))
            else {
                break;
            };
            match answer["currentResourceVersion"].as_str() {
                Some(current) if status == 409 && !created => {
                    body["metadata"]["resourceVersion"] = current.into();
                }
                _ => {
                    answered = Some((status, answer));
                    break;
                }
            }
        }
        let Some((status, answer)) = answered else {
            break;
        };
        assert_eq!(
            status,
            if created { 201 } else { 200 },
            "{method} {path}: {answer}"
        );
        let version = resource_version(&answer);
        assert_eq!(clients(&answer), Some(client.clone()), "{answer}");
        if let Some((_, before)) = object.landed.last() {
            assert!(version > *before, "{answer}");
        }
        object.landed.push((client, version));
        object.in_flight = None;
        acknowledged += 1;
    }
    acknowledged
}

fn resource_version(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {object}"))
}

/// The one client of a spec this test wrote; `None` for any other shape.
fn clients(object: &Value) -> Option<String> {
    let spec = object["spec"].as_object()?;
    let list = spec.get("clients")?.as_array()?;
    match (spec.len(), list.as_slice()) {
        (1, [Value::String(client)]) => Some(client.clone()),
        _ => None,
    }
}

/// Checks the restarted server against what the writers know, and settles each write that was
/// in flight: landed (fully) or not at all.
fn check_after_restart(k: &Kudurru, token: &str, objects: &mut [Tracked], written: &[String]) {
    let (status, list) = exchange(k.api, "GET", BASE, token, None).expect("list answers");
    assert_eq!(status, 200, "{list}");
    let list_version: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("list resourceVersion");
    let mut stored: HashMap<String, (String, u64)> = HashMap::new();
    for item in list["items"].as_array().expect("items") {
        let name = item["metadata"]["name"].as_str().expect("name").to_owned();
        let client = clients(item).unwrap_or_else(|| panic!("a half-written spec: {item}"));
        let version = resource_version(item);
        assert!(version <= list_version, "{item} is newer than its list");
        assert_eq!(item["metadata"]["labels"], json!({ "test": "crash" }));
        stored.insert(name, (client, version));
    }
    if let Some(stray) = stored
        .keys()
        .find(|name| !objects.iter().any(|o| &o.name == *name))
    {
        panic!("the list holds {stray}, which no writer wrote");
    }
    for object in objects.iter_mut() {
        let in_flight = object.in_flight.take();
        let last = object.landed.last().cloned();
        match (stored.get(&object.name), last) {
            (None, None) => {}
            (None, Some(lost)) => panic!("{}: acknowledged {lost:?} is gone", object.name),
            (Some(now), Some(last)) if *now == last => {}
            (Some((client, version)), last)
                if Some(client) == in_flight.as_ref()
                    && last.as_ref().is_none_or(|(_, before)| version > before) =>
            {
                object.landed.push((client.clone(), *version));
            }
            (Some(now), last) => panic!(
                "{}: stored {now:?}, but the last acknowledged write is {last:?} and the one \
                 in flight {in_flight:?}",
                object.name
            ),
        }
    }
    // The audit records of the objects written this round: one per landed write, in order,
    // each with the write's content; nothing for a write that did not land.
    for object in objects.iter().filter(|o| written.contains(&o.name)) {
        let path = format!(
            "/api/v1/audit?kind=ClientGroup&name={}&limit=10000",
            object.name
        );
        let (status, answer) = exchange(k.api, "GET", &path, token, None).expect("audit answers");
        assert_eq!(status, 200, "{answer}");
        let records = answer["records"].as_array().expect("records");
        assert_eq!(
            records.len(),
            object.landed.len(),
            "{}: audit records {records:?} for writes {:?}",
            object.name,
            object.landed
        );
        let mut before = 0;
        for (record, (client, version)) in records.iter().zip(&object.landed) {
            let verb = if before == 0 { "create" } else { "update" };
            assert_eq!(record["verb"], verb, "{record}");
            assert_eq!(record["resourceVersionBefore"], before, "{record}");
            assert_eq!(record["resourceVersionAfter"], *version, "{record}");
            assert_eq!(
                record["patch"]["spec"]["clients"],
                json!([client]),
                "{record}"
            );
            before = *version;
        }
    }
    // The whole chain, read from the file as `kudurru audit verify` would: every record
    // hashes to the next, and there is one record per write that landed.
    let report = kudurru_storage::verify_audit_file(&k.data_dir.join(kudurru_storage::FILE_NAME))
        .expect("the audit chain verifies");
    let landed: usize = objects.iter().map(|o| o.landed.len()).sum();
    assert_eq!(report.records, landed as u64, "{report:?}");
    assert_eq!(report.last_seq, landed as u64, "{report:?}");
}

#[test]
fn store_keeps_every_acknowledged_write_across_sigkill() {
    let started = Instant::now();
    let upstream = TestUpstream::start();
    let scratch = Scratch::new("crash");
    let data_dir = scratch.join("data");
    let start = || {
        Kudurru::builder(&[upstream.udp_url()])
            .data_dir(&data_dir)
            .start()
    };
    let mut k = start();
    let token = Arc::new(k.token("operator", None));
    let counter = Arc::new(AtomicU32::new(0));
    // Every object ever written; the first WRITERS are `steady-W`, which writer W updates in
    // every round beside the `round-R-W` it creates in round R.
    let mut all: Vec<Tracked> = (0..WRITERS)
        .map(|w| Tracked::named(format!("steady-{w}")))
        .collect();
    let (mut acknowledged, mut landed_in_flight) = (0, 0);
    let mut rng = rand::rng();
    for round in 0..ROUNDS {
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let mut pair = [
                    std::mem::take(&mut all[w]),
                    Tracked::named(format!("round-{round}-{w}")),
                ];
                let (token, counter, stop, api) =
                    (token.clone(), counter.clone(), stop.clone(), k.api);
                thread::spawn(move || {
                    let acked = write_loop(api, &token, &mut pair, &counter, &stop);
                    (pair, acked)
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(rng.random_range(WRITE_WINDOW_MS)));
        k.kill();
        stop.store(true, Ordering::Relaxed);
        let mut written = Vec::new();
        for (w, writer) in writers.into_iter().enumerate() {
            let ([steady, new], acked) = writer.join().expect("a writer panicked");
            acknowledged += acked;
            written.extend([steady.name.clone(), new.name.clone()]);
            all[w] = steady;
            all.push(new);
        }
        let in_flight = all.iter().filter(|o| o.in_flight.is_some()).count();
        let landed_before: usize = all.iter().map(|o| o.landed.len()).sum();
        k = start();
        check_after_restart(&k, &token, &mut all, &written);
        let landed: usize = all.iter().map(|o| o.landed.len()).sum::<usize>() - landed_before;
        landed_in_flight += landed;
        eprintln!(
            "round {round}: {acknowledged} acknowledged so far; {in_flight} in flight at the \
             kill, {landed} of them landed"
        );
    }
    assert!(
        acknowledged > ROUNDS * WRITERS,
        "too few writes to mean anything"
    );
    eprintln!(
        "{ROUNDS} kills, {acknowledged} writes acknowledged, {landed_in_flight} unacknowledged \
         writes landed whole, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
