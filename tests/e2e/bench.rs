//! kudurru-bench against a scripted responder (exact counts) and against the real server
//! (its counts agree with the server's own metrics and the upstream's log).

use std::process::Command;

use kudurru_e2e::{
    Kudurru, Scratch, Script, ScriptedResponder, TestUpstream, bench_bin, cert_pair,
};
use serde_json::Value;

/// Runs kudurru-bench with `args` and returns its JSON report (stdout holds only the JSON with
/// `--json -`) and its standard error.
fn bench(args: &[&str]) -> (Value, String) {
    let output = Command::new(bench_bin("kudurru-bench"))
        .args(args)
        .args(["--json", "-"])
        .output()
        .expect("kudurru-bench runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "kudurru-bench failed: {stderr}");
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    (report, stderr)
}

fn count(report: &Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {report}"))
}

fn count_error(report: &Value, kind: &str) -> u64 {
    report["errors"][kind]
        .as_u64()
        .unwrap_or_else(|| panic!("errors.{kind} in {report}"))
}

fn errors(report: &Value) -> u64 {
    report["errors"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum()
}

/// Open loop at 400 queries/s for 1.5 s: exactly 600 queries on the schedule.
const OPEN_LOOP: [&str; 6] = ["--rate", "400", "--duration", "1500ms", "--timeout", "1s"];

fn every_other_unanswered(scheme: &str) {
    let responder = ScriptedResponder::start(Script::AnswerEvery(2));
    let target = format!("{scheme}://{}", responder.addr);
    // 200 queries/s per connection, half of them waiting out the 1 s timeout: room for 100
    // in flight and more.
    let mut args = vec![target.as_str(), "--connections", "2", "--streams", "300"];
    args.extend(OPEN_LOOP);
    let (report, stderr) = bench(&args);
    // The schedule is 600; a writer that wakes after the run's end on a loaded machine counts
    // what was still due as backlog.
    let sent = count(&report, "sent");
    let backlog = count_error(&report, "backlog");
    assert_eq!(sent + backlog, 600, "the open-loop schedule: {report}");
    assert!(sent >= 500, "{report}");
    assert_eq!(
        sent as usize,
        responder.received(),
        "every query sent arrived"
    );
    let answered = count(&report, "answered");
    assert_eq!(answered as usize, responder.answered());
    assert_eq!(answered, sent / 2, "every other query answered: {report}");
    assert_eq!(count(&report, "timeouts"), sent - sent / 2, "{report}");
    assert_eq!(report["rcodes"]["NOERROR"].as_u64(), Some(sent / 2));
    assert_eq!(errors(&report), backlog, "no other errors: {report}");
    assert_eq!(report["mismatches"]["unknown_id"], 0);
    assert_eq!(report["mismatches"]["question"], 0);
    assert!(
        !stderr.contains('\r'),
        "no progress line when stderr is not a terminal"
    );
}

#[test]
fn bench_udp_every_other_query_unanswered_is_half_timeouts() {
    every_other_unanswered("udp");
}

#[test]
fn bench_tcp_every_other_query_unanswered_is_half_timeouts() {
    every_other_unanswered("tcp");
}

#[test]
fn bench_cores_split_the_schedule_and_merge_their_counts() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let responder = ScriptedResponder::start(Script::AnswerEvery(1));
    let target = format!("udp://{}", responder.addr);
    let cores_arg = cores.to_string();
    let (report, _) = bench(&[
        &target,
        "--cores",
        &cores_arg,
        "--connections",
        "3",
        "--rate",
        "600",
        "--duration",
        "1s",
    ]);
    assert_eq!(report["cores"], cores);
    assert_eq!(count(&report, "sent"), 600, "{report}");
    assert_eq!(responder.received(), 600);
    assert_eq!(count(&report, "answered"), 600);
    assert_eq!(count(&report, "timeouts") + errors(&report), 0);
}

#[test]
fn bench_counts_replies_with_the_wrong_question_and_never_accepts_them() {
    let responder = ScriptedResponder::start(Script::WrongQuestionEvery(3));
    let target = format!("udp://{}", responder.addr);
    let (report, _) = bench(&[
        &target,
        "--rate",
        "300",
        "--duration",
        "1s",
        "--timeout",
        "1s",
    ]);
    assert_eq!(count(&report, "sent"), 300);
    assert_eq!(report["mismatches"]["question"], 100, "{report}");
    assert_eq!(count(&report, "answered"), 200);
    assert_eq!(
        count(&report, "timeouts"),
        100,
        "the mangled ones stay unanswered"
    );
}

#[test]
fn bench_counts_replies_with_an_unknown_id_and_never_accepts_them() {
    let responder = ScriptedResponder::start(Script::WrongIdEvery(4));
    let target = format!("tcp://{}", responder.addr);
    let (report, _) = bench(&[
        &target,
        "--rate",
        "400",
        "--duration",
        "1s",
        "--timeout",
        "1s",
        "--connections",
        "1",
        "--streams",
        "500",
    ]);
    // The schedule is 400; on a loaded machine the writer can wake after the run's end with
    // some still due, and those are counted as backlog, never lost.
    let sent = count(&report, "sent");
    assert_eq!(sent + count_error(&report, "backlog"), 400, "{report}");
    assert!(sent >= 300, "{report}");
    assert_eq!(sent as usize, responder.received());
    let m = &report["mismatches"];
    // A flipped ID usually matches nothing in flight; if it hits another query in flight,
    // that query's question differs. Either way it is a mismatch, never an answer.
    let mismatched = m["unknown_id"].as_u64().unwrap() + m["question"].as_u64().unwrap();
    assert_eq!(mismatched, sent / 4, "every fourth reply: {report}");
    assert_eq!(count(&report, "answered"), sent - sent / 4);
    assert_eq!(count(&report, "timeouts"), sent / 4);
}

fn against_kudurru(scheme: &str, transport: &str) {
    let upstream = TestUpstream::start();
    let certs = Scratch::new(&format!("bench-{scheme}"));
    let (cert, key) = cert_pair(&certs, "a");
    let k = Kudurru::builder(&[upstream.udp_url()])
        .tls(&cert, &key)
        .start();
    // DoT: verified against the generated certificate, for the name it carries.
    let (target, verify) = match scheme {
        "tls" => (
            format!("tls://{}#localhost", k.tls.unwrap()),
            vec!["--ca", cert.to_str().unwrap()],
        ),
        "https" => (
            format!("https://{}/dns-query#localhost", k.https.unwrap()),
            vec!["--ca", cert.to_str().unwrap()],
        ),
        "quic" => (
            format!("quic://{}#localhost", k.quic.unwrap()),
            vec!["--ca", cert.to_str().unwrap()],
        ),
        "h3" => (
            format!("h3://{}/dns-query#localhost", k.h3.unwrap()),
            vec!["--ca", cert.to_str().unwrap()],
        ),
        _ => (format!("{scheme}://{}", k.addr), vec![]),
    };
    let suffix = format!("{transport}.bench-e2e.example.");
    let mut args = verify;
    args.extend([
        target.as_str(),
        "--concurrency",
        "8",
        "--connections",
        "2",
        "--streams",
        "4",
        "--duration",
        "1s",
        "--pool",
        "40",
        "--suffix",
        &suffix,
    ]);
    let (report, _) = bench(&args);
    let sent = count(&report, "sent");
    assert!(sent > 100, "{report}");
    assert_eq!(count(&report, "answered"), sent, "{report}");
    assert_eq!(report["rcodes"]["NOERROR"].as_u64(), Some(sent));
    assert_eq!(count(&report, "timeouts") + errors(&report), 0, "{report}");
    let series = format!("kudurru_dns_queries_total{{transport=\"{transport}\",core=\"0\"}}");
    assert_eq!(
        k.metric(&series),
        Some(sent as f64),
        "the server counted exactly the queries the bench sent"
    );
    assert_eq!(
        upstream.names_under(&suffix),
        40,
        "each pool name went upstream"
    );
    for i in [0, 17, 39] {
        assert_eq!(
            upstream.total(&format!("p{i}.{suffix}")),
            1,
            "asked upstream once"
        );
    }
}

#[test]
fn bench_udp_counts_agree_with_the_server() {
    against_kudurru("udp", "udp");
}

#[test]
fn bench_tcp_counts_agree_with_the_server() {
    against_kudurru("tcp", "tcp");
}

#[test]
fn bench_dot_counts_agree_with_the_server() {
    against_kudurru("tls", "dot");
}

#[test]
fn bench_doh_counts_agree_with_the_server() {
    against_kudurru("https", "doh");
}

#[test]
fn bench_doq_counts_agree_with_the_server() {
    against_kudurru("quic", "doq");
}

#[test]
fn bench_doh3_counts_agree_with_the_server() {
    against_kudurru("h3", "doh3");
}

#[test]
fn bench_doh3_get_on_a_wrong_path_counts_every_404_and_doq_a_wrong_name_is_a_tls_error() {
    let certs = Scratch::new("bench-quic-errors");
    let (cert, key) = cert_pair(&certs, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let ca = cert.to_str().unwrap();
    let target = format!("h3://{}/elsewhere#localhost", k.h3.unwrap());
    let (report, _) = bench(&[
        &target,
        "--ca",
        ca,
        "--method",
        "get",
        "--rate",
        "100",
        "--duration",
        "1s",
        "--timeout",
        "500ms",
        "--connections",
        "1",
    ]);
    let sent = count(&report, "sent");
    assert!(sent >= 90, "{report}");
    assert_eq!(count(&report, "answered"), 0, "{report}");
    assert_eq!(
        report["http_failures"]["404"].as_u64(),
        Some(sent),
        "{report}"
    );
    assert_eq!(
        k.metric("kudurru_doh_rejected_total{status=\"404\"}"),
        Some(sent as f64)
    );
    let target = format!("quic://{}#other.example", k.quic.unwrap());
    let (report, stderr) = bench(&[
        &target,
        "--ca",
        ca,
        "--rate",
        "50",
        "--duration",
        "1s",
        "--connections",
        "1",
    ]);
    assert_eq!(count(&report, "sent"), 0, "{report}");
    assert!(count_error(&report, "tls") > 0, "{report}");
    assert!(stderr.contains("QUIC handshake"), "{stderr}");
}

#[test]
fn bench_doh_resends_streams_refused_over_the_servers_limit() {
    let certs = Scratch::new("bench-doh-refused");
    let (cert, key) = cert_pair(&certs, "a");
    // 8 streams per connection; the bench opens 32 at once before it sees the SETTINGS.
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .env("KUDURRU_TCP__MAXPIPELINED", "8")
        .start();
    let localhost = certs.join("localhost.txt");
    std::fs::write(&localhost, "localhost A\n").unwrap();
    let target = format!("https://{}#localhost", k.https.unwrap());
    let (report, _) = bench(&[
        &target,
        "--ca",
        cert.to_str().unwrap(),
        "--queries",
        localhost.to_str().unwrap(),
        "--concurrency",
        "32",
        "--connections",
        "1",
        "--streams",
        "32",
        "--duration",
        "1s",
    ]);
    let sent = count(&report, "sent");
    assert!(sent > 100, "{report}");
    assert_eq!(count(&report, "answered"), sent, "{report}");
    assert_eq!(
        count(&report, "timeouts"),
        0,
        "refused streams were sent again: {report}"
    );
}

#[test]
fn bench_doh_get_on_a_wrong_path_counts_every_404_and_never_an_answer() {
    let certs = Scratch::new("bench-doh-404");
    let (cert, key) = cert_pair(&certs, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let target = format!("https://{}/elsewhere#localhost", k.https.unwrap());
    let (report, _) = bench(&[
        &target,
        "--ca",
        cert.to_str().unwrap(),
        "--method",
        "get",
        "--rate",
        "100",
        "--duration",
        "1s",
        "--timeout",
        "500ms",
        "--connections",
        "1",
    ]);
    let sent = count(&report, "sent");
    assert!(sent >= 90, "{report}");
    assert_eq!(count(&report, "answered"), 0, "{report}");
    assert_eq!(count(&report, "timeouts"), sent, "{report}");
    assert_eq!(
        report["http_failures"]["404"].as_u64(),
        Some(sent),
        "{report}"
    );
    assert_eq!(
        k.metric("kudurru_doh_rejected_total{status=\"404\"}"),
        Some(sent as f64)
    );
}

#[test]
fn bench_dot_refuses_a_certificate_for_another_name_and_counts_tls_errors() {
    let certs = Scratch::new("bench-tls-name");
    let (cert, key) = cert_pair(&certs, "a");
    let k = Kudurru::builder(&["udp://127.0.0.1:9".into()])
        .tls(&cert, &key)
        .start();
    let target = format!("tls://{}#other.example", k.tls.unwrap());
    let ca = cert.to_str().unwrap();
    let (report, stderr) = bench(&[
        &target,
        "--ca",
        ca,
        "--rate",
        "50",
        "--duration",
        "1s",
        "--connections",
        "1",
    ]);
    assert_eq!(count(&report, "sent"), 0, "{report}");
    assert!(count_error(&report, "tls") > 0, "{report}");
    assert_eq!(
        count_error(&report, "backlog"),
        50,
        "every query was due and unsent"
    );
    assert!(
        stderr.contains("not valid for name \"other.example\""),
        "the reason is shown: {stderr}"
    );
    // --insecure accepts the same certificate for any name.
    let localhost = certs.join("localhost.txt");
    std::fs::write(&localhost, "localhost A\n").unwrap();
    let (report, _) = bench(&[
        &target,
        "--insecure",
        "--queries",
        localhost.to_str().unwrap(),
        "--rate",
        "50",
        "--duration",
        "1s",
        "--connections",
        "1",
    ]);
    let sent = count(&report, "sent");
    assert_eq!(sent + count_error(&report, "backlog"), 50, "{report}");
    assert_eq!(count(&report, "answered"), sent, "{report}");
    assert_eq!(count_error(&report, "tls"), 0, "{report}");
}

#[test]
fn bench_fresh_names_are_cache_misses() {
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()]).start();
    let target = format!("udp://{}", k.addr);
    let suffix = "fresh.bench-e2e.example.";
    let (report, _) = bench(&[
        &target,
        "--rate",
        "400",
        "--duration",
        "1s",
        "--pool",
        "5",
        "--suffix",
        suffix,
        "--miss-ratio",
        "0.5",
    ]);
    let (sent, fresh) = (count(&report, "sent"), count(&report, "fresh"));
    assert_eq!(count(&report, "answered"), sent, "{report}");
    assert!((140..=260).contains(&fresh), "about half of 400: {report}");
    // Every fresh name went upstream once, the five pool names once each.
    assert_eq!(report["rcodes"]["NOERROR"].as_u64(), Some(sent), "{report}");
    assert_eq!(upstream.names_under(suffix) as u64, fresh + 5, "{report}");
}

#[test]
fn bench_unreachable_tcp_target_counts_connect_errors() {
    // A port from below the ephemeral range that nothing here binds.
    let addr = format!("tcp://127.0.0.1:{}", kudurru_e2e::free_port());
    let (report, _) = bench(&[&addr, "--rate", "100", "--duration", "500ms"]);
    assert_eq!(count(&report, "sent"), 0);
    assert!(
        report["errors"]["connect"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(
        report["errors"]["backlog"], 50,
        "every scheduled query is accounted for"
    );
}

#[test]
fn bench_refuses_bad_arguments_with_specific_errors() {
    let dir = std::env::temp_dir().join(format!("kudurru-bench-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("queries.txt");
    std::fs::write(&file, "a.example A\nb.example NOPE\n").unwrap();
    let cases: [(&[&str], &str); 6] = [
        (
            &["quic://127.0.0.1/path"],
            "unexpected `/path` after the address",
        ),
        (
            &["udp://127.0.0.1:9", "--cores", "1000"],
            "--cores 1000: only",
        ),
        (&["udp:127.0.0.1"], "has no scheme"),
        (
            &["udp://127.0.0.1:9", "--queries", file.to_str().unwrap()],
            "queries.txt:2: unknown query type `NOPE`",
        ),
        (
            &["udp://127.0.0.1:9", "--miss-ratio", "2"],
            "--miss-ratio 2 is outside 0..1",
        ),
        (
            &[
                "udp://127.0.0.1:9",
                "--concurrency",
                "1",
                "--connections",
                "4",
            ],
            "--concurrency 1 is below the 4 flows",
        ),
    ];
    for (args, expected) in cases {
        let output = Command::new(bench_bin("kudurru-bench"))
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} should fail");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bench_compare_prints_ratios_of_two_reports() {
    let responder = ScriptedResponder::start(Script::AnswerEvery(1));
    let target = format!("udp://{}", responder.addr);
    let dir = std::env::temp_dir().join(format!("kudurru-bench-cmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |rate: &str, name: &str| {
        let path = dir.join(name);
        let status = Command::new(bench_bin("kudurru-bench"))
            .args([&target, "--rate", rate, "--duration", "1s", "--json"])
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        path
    };
    let (a, b) = (run("100", "a.json"), run("300", "b.json"));
    let output = Command::new(bench_bin("kudurru-bench"))
        .arg("--compare")
        .args([&a, &b])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    let ratio = |row: &str| -> f64 {
        text.lines()
            .find(|l| l.trim_start().starts_with(row))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no {row} row in {text}"))
    };
    assert_eq!(ratio("sent"), 3.0, "{text}");
    assert!((ratio("answered/s") - 3.0).abs() < 0.01, "{text}");
    assert!(text.contains(&a.display().to_string()));
    let not_a_report = dir.join("x.json");
    std::fs::write(&not_a_report, "{}").unwrap();
    let output = Command::new(bench_bin("kudurru-bench"))
        .arg("--compare")
        .args([&a, &not_a_report])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a kudurru-bench report"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A running `kudurru-echo`, killed when dropped.
struct Echo(std::process::Child);

impl Echo {
    /// Starts `kudurru-echo --mode echo` with `flag` (`--tcp`, `--glommio`) on a free loopback
    /// port, and returns it with the port.
    fn start(flag: &str) -> (Self, u16) {
        let port = kudurru_e2e::free_port();
        let child = Command::new(bench_bin("kudurru-echo"))
            .args(["--mode", "echo", flag, "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kudurru-echo starts");
        (Self(child), port)
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `example.com. A` with `id`, as a client sends it.
fn echo_query(id: u16) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
    m
}

/// The TCP ceiling (`kudurru-echo --mode echo --tcp`) answers every frame of a pipelined
/// stream, however it is split, in order, with QR and RA set and nothing else changed; the
/// UDP side on the same port still answers; a frame that is not a query closes only its own
/// connection.
#[test]
fn echo_ceiling_answers_pipelined_tcp_frames_split_anywhere() {
    use std::io::{Read, Write};
    use std::net::{TcpStream, UdpSocket};
    use std::time::{Duration, Instant};

    let (_echo, port) = Echo::start("--tcp");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("kudurru-echo does not listen on TCP: {e}"),
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut wire = Vec::new();
    for id in 1..=5u16 {
        let query = echo_query(id);
        wire.extend_from_slice(&(query.len() as u16).to_be_bytes());
        wire.extend_from_slice(&query);
    }
    // Split inside the second length prefix and inside the fourth message.
    let frame = wire.len() / 5;
    for part in [
        &wire[..frame + 1],
        &wire[frame + 1..3 * frame + 7],
        &wire[3 * frame + 7..],
    ] {
        stream.write_all(part).unwrap();
        stream.flush().unwrap();
        std::thread::sleep(Duration::from_millis(30));
    }
    for id in 1..=5u16 {
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).expect("a reply per query");
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut reply).unwrap();
        let mut expected = echo_query(id);
        expected[2] |= 0x80;
        expected[3] |= 0x80;
        assert_eq!(reply, expected, "reply {id}");
    }

    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    udp.send_to(&echo_query(9), ("127.0.0.1", port)).unwrap();
    let mut buf = [0u8; 512];
    let (n, _) = udp.recv_from(&mut buf).expect("a UDP reply");
    assert_eq!(&buf[..2], &9u16.to_be_bytes());
    assert_eq!(n, echo_query(9).len());

    // A reply (QR set) instead of a query: that connection is closed, the first still works.
    let mut other = TcpStream::connect(("127.0.0.1", port)).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut bad = echo_query(7);
    bad[2] |= 0x80;
    other.write_all(&(bad.len() as u16).to_be_bytes()).unwrap();
    other.write_all(&bad).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        other.read(&mut byte).unwrap_or(0),
        0,
        "closed without a reply"
    );
    let query = echo_query(11);
    stream
        .write_all(&(query.len() as u16).to_be_bytes())
        .unwrap();
    stream.write_all(&query).unwrap();
    let mut len = [0u8; 2];
    stream
        .read_exact(&mut len)
        .expect("the first connection still answers");
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..2], &11u16.to_be_bytes());
}

/// The glommio floor (`kudurru-echo --mode echo --glommio`) answers every datagram of a burst
/// larger than one receive batch (64), then sleeps on its poll and wakes for a lone query
/// later; a datagram with QR set gets no reply.
#[test]
fn glommio_floor_echoes_bursts_and_wakes_for_a_lone_query() {
    use std::collections::BTreeSet;
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    let (_echo, port) = Echo::start("--glommio");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        udp.send_to(&echo_query(0), ("127.0.0.1", port)).unwrap();
        if udp.recv_from(&mut buf).is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kudurru-echo --glommio never answered"
        );
    }
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();

    let burst = 150u16;
    for id in 1..=burst {
        udp.send_to(&echo_query(id), ("127.0.0.1", port)).unwrap();
    }
    let mut seen = BTreeSet::new();
    for _ in 1..=burst {
        let (n, _) = udp
            .recv_from(&mut buf)
            .expect("a reply per query of the burst");
        let id = u16::from_be_bytes([buf[0], buf[1]]);
        let mut expected = echo_query(id);
        expected[2] |= 0x80;
        expected[3] |= 0x80;
        assert_eq!(&buf[..n], &expected[..], "reply {id}");
        seen.insert(id);
    }
    assert_eq!(seen, (1..=burst).collect::<BTreeSet<_>>());

    // A response is not answered; a lone query after a pause (the server asleep) is.
    let mut response = echo_query(500);
    response[2] |= 0x80;
    udp.send_to(&response, ("127.0.0.1", port)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    udp.send_to(&echo_query(501), ("127.0.0.1", port)).unwrap();
    let (_, _) = udp.recv_from(&mut buf).expect("a reply after the pause");
    assert_eq!(
        &buf[..2],
        &501u16.to_be_bytes(),
        "the response got no reply"
    );
}
