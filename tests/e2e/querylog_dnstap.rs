//! The query log's stream sinks against real consumers: the dnstap sink into Debian's
//! `fstrm_capture` (Frame Streams over a unix socket and over TCP), read back with
//! `dnstap-ldns`; the collector going away and coming back; the JSON-lines sink's file, its
//! mode, and SIGHUP reopening it after a rotation.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, dig, free_port, signal, unique_name};

use crate::reload::{hangup, logged};

/// A running `fstrm_capture` writing the dnstap stream it accepts to a file.
struct Capture {
    child: Child,
    file: PathBuf,
}

impl Capture {
    /// Listens on the unix socket `socket` (removed first: a stale one refuses the bind).
    fn unix(socket: &Path, file: &Path) -> Self {
        let _ = std::fs::remove_file(socket);
        let child = Self::spawn(&["-u", &socket.display().to_string()], file);
        wait_for("fstrm_capture's socket", || socket.exists());
        Self {
            child,
            file: file.to_path_buf(),
        }
    }

    /// Listens on 127.0.0.1:`port`.
    fn tcp(port: u16, file: &Path) -> Self {
        let child = Self::spawn(&["-a", "127.0.0.1", "-p", &port.to_string()], file);
        wait_for("fstrm_capture's TCP port", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Self {
            child,
            file: file.to_path_buf(),
        }
    }

    fn spawn(listen: &[&str], file: &Path) -> Child {
        Self::spawn_logging(listen, file, Stdio::null())
    }

    /// As [`Capture::unix`], fstrm_capture's debug log (`-dd`: each connection's control
    /// frames) in `log`.
    fn unix_logging(socket: &Path, file: &Path, log: &Path) -> Self {
        let _ = std::fs::remove_file(socket);
        let stderr = std::fs::File::create(log).expect("the capture's log");
        let child = Self::spawn_logging(
            &["-dddd", "-u", &socket.display().to_string()],
            file,
            stderr.into(),
        );
        wait_for("fstrm_capture's socket", || socket.exists());
        Self {
            child,
            file: file.to_path_buf(),
        }
    }

    fn spawn_logging(listen: &[&str], file: &Path, stderr: Stdio) -> Child {
        Command::new("fstrm_capture")
            .args(["-t", "protobuf:dnstap.Dnstap"])
            .args(listen)
            .arg("-w")
            .arg(file)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("fstrm_capture is installed (apt-get install fstrm-bin)")
    }

    /// Stops the capture (SIGTERM closes its file) and returns `dnstap-ldns -r`'s lines.
    fn stop(mut self) -> Vec<String> {
        signal(&self.child, libc::SIGTERM);
        kudurru_e2e::wait_timeout(&mut self.child, Duration::from_secs(10))
            .expect("fstrm_capture stops on SIGTERM");
        let output = Command::new("dnstap-ldns")
            .arg("-r")
            .arg(&self.file)
            .output()
            .expect("dnstap-ldns is installed (apt-get install dnstap-ldns)");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `what` for up to 40 s (the sink's reconnect backoff reaches 30 s at most).
fn wait_for(label: &str, what: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while !what() {
        assert!(Instant::now() < deadline, "{label}: not reached in 40 s");
        thread::sleep(Duration::from_millis(20));
    }
}

fn metric(k: &Kudurru, series: &str) -> f64 {
    k.metric(series).unwrap_or(0.0)
}

const CONNECTED: &str = "kudurru_querylog_dnstap_connected";

fn delivered(k: &Kudurru, sink: &str) -> f64 {
    metric(
        k,
        &format!("kudurru_querylog_sink_delivered_total{{sink=\"{sink}\"}}"),
    )
}

fn sink_dropped(k: &Kudurru, sink: &str) -> f64 {
    metric(
        k,
        &format!("kudurru_querylog_sink_dropped_total{{sink=\"{sink}\"}}"),
    )
}

fn dnstap_server(upstream: &TestUpstream, address: &str, privacy: &str) -> Kudurru {
    Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .env("KUDURRU_QUERYLOG__SINK", "dnstap")
        .env("KUDURRU_QUERYLOG__DNSTAP__ADDRESS", address)
        .env("KUDURRU_QUERYLOG__PRIVACY", privacy)
        .start()
}

/// The dnstap-ldns lines about `name` (its quiet format: time, CQ/CR, address, protocol,
/// size, "name", class, type).
fn about<'a>(lines: &'a [String], name: &str) -> Vec<&'a str> {
    let quoted = format!("\"{name}\"");
    lines
        .iter()
        .filter(|l| l.contains(&quoted))
        .map(String::as_str)
        .collect()
}

#[test]
fn dnstap_over_a_unix_socket_reaches_fstrm_capture_and_follows_the_collector_away_and_back() {
    let d = Scratch::new("dnstap-unix");
    let socket = d.join("collector.sock");
    let upstream = TestUpstream::start();
    let capture = Capture::unix(&socket, &d.join("first.fstrm"));
    let k = dnstap_server(&upstream, &format!("unix:{}", socket.display()), "full");
    wait_for("the first connection", || metric(&k, CONNECTED) == 1.0);

    let (udp, tcp) = (unique_name("dnstap-udp-"), unique_name("dnstap-tcp-"));
    assert_eq!(dig(k.addr, &[&udp, "A"]).status, "NOERROR");
    assert_eq!(dig(k.addr, &[&tcp, "A", "+tcp"]).status, "NOERROR");
    wait_for("two events delivered", || delivered(&k, "dnstap") >= 2.0);
    let lines = capture.stop();
    for (name, protocol) in [(&udp, "UDP"), (&tcp, "TCP")] {
        let seen = about(&lines, name);
        assert_eq!(seen.len(), 2, "{name}: {lines:#?}");
        assert!(
            seen[0].contains(&format!(" CQ 127.0.0.1 {protocol} ")),
            "{seen:?}"
        );
        assert!(
            seen[1].contains(&format!(" CR 127.0.0.1 {protocol} ")),
            "{seen:?}"
        );
        assert!(seen[1].ends_with("IN A"), "{seen:?}");
    }

    // The collector is gone: the sink notices, drops and counts what comes meanwhile.
    wait_for("the sink seeing the collector gone", || {
        metric(&k, CONNECTED) == 0.0
    });
    let away = unique_name("dnstap-away-");
    dig(k.addr, &[&away, "A"]);
    wait_for("a drop counted while away", || {
        sink_dropped(&k, "dnstap") >= 1.0
    });

    // It comes back on the same socket: kudurru reconnects (backoff 1 s, 2 s, …).
    let capture = Capture::unix(&socket, &d.join("second.fstrm"));
    wait_for("the reconnection", || metric(&k, CONNECTED) == 1.0);
    let back = unique_name("dnstap-back-");
    let before = delivered(&k, "dnstap");
    dig(k.addr, &[&back, "A"]);
    wait_for("the event after the reconnection", || {
        delivered(&k, "dnstap") > before
    });
    let lines = capture.stop();
    assert_eq!(about(&lines, &back).len(), 2, "{lines:#?}");
    assert!(about(&lines, &away).is_empty(), "{lines:#?}");
}

/// SIGTERM right after a burst of queries: the last events (still in the cores' batches or
/// the sink's queue) reach the collector, then STOP; the collector's FINISH ends the stream
/// and fstrm_capture closes the connection; kudurru exits cleanly.
#[test]
fn dnstap_at_sigterm_sends_the_last_events_then_stop_and_waits_for_finish() {
    let d = Scratch::new("dnstap-shutdown");
    let socket = d.join("collector.sock");
    let capture_log = d.join("fstrm_capture.log");
    let upstream = TestUpstream::start();
    let capture = Capture::unix_logging(&socket, &d.join("capture.fstrm"), &capture_log);
    let log = d.join("kudurru.log");
    let mut k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .env("KUDURRU_QUERYLOG__SINK", "dnstap")
        .env(
            "KUDURRU_QUERYLOG__DNSTAP__ADDRESS",
            &format!("unix:{}", socket.display()),
        )
        .log_level(Some("info"))
        .stderr_to(&log)
        .start();
    wait_for("the connection", || metric(&k, CONNECTED) == 1.0);
    let names: Vec<String> = (0..10)
        .map(|i| unique_name(&format!("dnstap-last-{i}-")))
        .collect();
    for name in &names {
        assert_eq!(dig(k.addr, &[name, "A"]).status, "NOERROR");
    }
    // No wait for delivery: the last answers are at most 100 ms old, still in a core's batch.
    let exit = k.terminate();
    assert!(exit.success(), "kudurru exits cleanly: {exit:?}");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("dnstap stream ended (STOP, FINISH)"),
        "kudurru's log: {text}"
    );
    let lines = capture.stop();
    for name in &names {
        assert_eq!(about(&lines, name).len(), 2, "{name}: {lines:#?}");
    }
    let debug = std::fs::read_to_string(&capture_log).unwrap_or_default();
    // fstrm_capture -dddd: the stream ended with STOP, FINISH went back, the connection closed
    // with every data frame read (two per query), and the file was closed whole.
    let frames = 2 * names.len();
    for step in [
        "received FSTRM_CONTROL_STOP".to_owned(),
        "sending FSTRM_CONTROL_FINISH".to_owned(),
        format!("closing (read {frames} frames"),
        format!("(wrote {} frames", frames + 2),
    ] {
        assert!(
            debug.contains(&step),
            "{step}: fstrm_capture's log: {debug}"
        );
    }
}

#[test]
fn dnstap_over_tcp_sends_the_network_when_truncating_and_no_address_when_pseudonymizing() {
    let d = Scratch::new("dnstap-tcp");
    let upstream = TestUpstream::start();
    let port = free_port();
    let capture = Capture::tcp(port, &d.join("capture.fstrm"));
    let address = format!("tcp:127.0.0.1:{port}");
    let names = [
        unique_name("dnstap-truncate-"),
        unique_name("dnstap-pseudonym-"),
    ];
    for (privacy, name) in ["truncate", "pseudonymize"].iter().zip(&names) {
        let k = dnstap_server(&upstream, &address, privacy);
        wait_for("the connection", || metric(&k, CONNECTED) == 1.0);
        dig(k.addr, &[name, "AAAA", "+tcp"]);
        wait_for("the event delivered", || delivered(&k, "dnstap") >= 1.0);
    }
    let lines = capture.stop();
    let truncated = about(&lines, &names[0]);
    assert_eq!(truncated.len(), 2, "{lines:#?}");
    for line in &truncated {
        assert!(line.contains(" 127.0.0.0 TCP "), "the /24 network: {line}");
        assert!(!line.contains("127.0.0.1"), "{line}");
    }
    let hidden = about(&lines, &names[1]);
    assert_eq!(hidden.len(), 2, "{lines:#?}");
    for line in &hidden {
        assert!(line.contains(" MISSING_ADDRESS "), "no address: {line}");
    }
}

#[test]
fn jsonl_lines_match_the_queries_in_a_0600_file_reopened_on_sighup() {
    use std::os::unix::fs::PermissionsExt;
    let d = Scratch::new("querylog-jsonl");
    let file = d.join("querylog.jsonl");
    let log = d.join("kudurru.log");
    let upstream = TestUpstream::start();
    let k = Kudurru::builder(&[upstream.udp_url()])
        .env("KUDURRU_QUERYLOG__ENABLED", "true")
        .env("KUDURRU_QUERYLOG__SINK", "jsonl")
        .env("KUDURRU_QUERYLOG__FILE", &file.display().to_string())
        .log_level(Some("info"))
        .stderr_to(&log)
        .start();
    let (udp, tcp) = (unique_name("jsonl-udp-"), unique_name("jsonl-tcp-"));
    dig(k.addr, &[&udp, "A"]);
    dig(k.addr, &[&tcp, "AAAA", "+tcp"]);
    wait_for("two lines", || delivered(&k, "jsonl") >= 2.0);
    let mode = std::fs::metadata(&file)
        .expect("the file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let lines = json_lines(&file);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    for (line, (name, qtype, transport)) in lines
        .iter()
        .zip([(&udp, "A", "udp"), (&tcp, "AAAA", "tcp")])
    {
        assert_eq!(line["qname"], name.as_str());
        assert_eq!(line["qtype"], qtype);
        assert_eq!(line["transport"], transport);
        assert_eq!(line["client"], "127.0.0.1");
        assert_eq!(line["rcode"], "NOERROR");
        assert_eq!(line["source"], "upstream");
        assert_eq!(line["flags"]["recursionDesired"], true);
        assert!(line["timeUnixNs"].as_u64().is_some_and(|t| t > 0), "{line}");
        assert!(line["upstreamLatencyMs"].as_f64().is_some(), "{line}");
    }
    assert!(
        lines[0]["answer"]
            .as_str()
            .is_some_and(|a| a.starts_with("A ")),
        "{}",
        lines[0]
    );

    // logrotate: the file moves away, SIGHUP, and the next line starts a new file.
    let rotated = d.join("querylog.jsonl.1");
    std::fs::rename(&file, &rotated).expect("rotate");
    hangup(&k);
    logged(&log, "SIGHUP: re-reading", 1);
    let after = unique_name("jsonl-after-");
    dig(k.addr, &[&after, "A"]);
    wait_for("the line after SIGHUP", || delivered(&k, "jsonl") >= 3.0);
    assert_eq!(json_lines(&rotated).len(), 2);
    let fresh = json_lines(&file);
    assert_eq!(fresh.len(), 1, "{fresh:#?}");
    assert_eq!(fresh[0]["qname"], after.as_str());
    let mode = std::fs::metadata(&file)
        .expect("the file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is one JSON object"))
        .collect()
}
