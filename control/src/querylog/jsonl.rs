//! The JSON-lines sink (`querylog.sink = "jsonl"`): one JSON object per logged query,
//! appended to `querylog.file` (created 0600), for shippers that tail files (vector, fluent
//! bit, promtail) and for `jq`.
//!
//! ```text
//! writer ─offer─▶ bounded queue (full: dropped and counted) ─▶ writing thread: JSON, append,
//!                                                              flush when the queue is empty
//! SIGHUP ─reopen()─▶ the thread closes and reopens the file (after logrotate moved it)
//! ```
//!
//! The thread is a plain thread, not a tokio blocking task: it lives as long as the sink and
//! would hold one of the blocking pool's threads forever. A line is what the API shows for an
//! entry (`GET /api/v1/querylog`, its NDJSON export): the same names and values.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use kudurru_core::querylog::{Privacy, flags};

use super::{Event, EventSink};

/// Events the queue holds by default (`querylog.jsonl.bufferEvents`).
pub const DEFAULT_BUFFER_EVENTS: usize = 10_000;

/// How often the thread looks at the reopen flag when no event comes.
const TICK: Duration = Duration::from_millis(250);

/// The JSON-lines sink.
pub struct JsonlSink {
    queue: Option<mpsc::SyncSender<Arc<Event>>>,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    dropped: AtomicU64,
    written: AtomicU64,
    reopen: AtomicBool,
}

impl JsonlSink {
    /// Opens (creates 0600, or appends to) `path` and starts the writing thread; the error
    /// names the file when it cannot be opened.
    pub fn open(path: &Path, buffer_events: usize) -> io::Result<Self> {
        let file = open_append(path)?;
        let (queue, receiver) = mpsc::sync_channel(buffer_events.max(1));
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("querylog-jsonl".into())
            .spawn({
                let shared = Arc::clone(&shared);
                let path = path.to_path_buf();
                move || write_loop(path, file, &receiver, &shared)
            })?;
        Ok(Self {
            queue: Some(queue),
            shared,
            thread: Some(thread),
        })
    }

    /// Closes and reopens the file before the next line (SIGHUP, after logrotate).
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Relaxed);
    }

    /// Lines written so far.
    pub fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }
}

impl Drop for JsonlSink {
    /// Writes what is queued, flushes and stops the thread.
    fn drop(&mut self) {
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl EventSink for JsonlSink {
    fn name(&self) -> &'static str {
        "jsonl"
    }

    fn offer(&self, events: &[Arc<Event>]) {
        let Some(queue) = &self.queue else { return };
        for event in events {
            if event.privacy == Privacy::Omit {
                continue;
            }
            if queue.try_send(Arc::clone(event)).is_err() {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("query log file {}: {e}", path.display())))
}

/// The thread: lines out until the sink is dropped. A failed write or reopen is logged and
/// the events it held are counted as dropped; the file is tried again on the next reopen.
fn write_loop(path: PathBuf, file: File, queue: &mpsc::Receiver<Arc<Event>>, shared: &Shared) {
    let mut out = Some(BufWriter::with_capacity(64 * 1024, file));
    let mut line = Vec::with_capacity(512);
    loop {
        if shared.reopen.swap(false, Ordering::Relaxed) {
            if let Some(mut old) = out.take() {
                let _ = old.flush();
            }
            match open_append(&path) {
                Ok(file) => out = Some(BufWriter::with_capacity(64 * 1024, file)),
                Err(error) => tracing::warn!(%error, "query log file not reopened"),
            }
        }
        let event = match queue.recv_timeout(TICK) {
            Ok(event) => event,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut next = Some(event);
        while let Some(event) = next.take() {
            line.clear();
            write_line(&event, &mut line);
            let written = match &mut out {
                Some(out) => out.write_all(&line).is_ok(),
                None => false,
            };
            if written {
                shared.written.fetch_add(1, Ordering::Relaxed);
            } else {
                shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
            next = queue.try_recv().ok();
        }
        if let Some(writer) = &mut out
            && let Err(error) = writer.flush()
        {
            tracing::warn!(%error, file = %path.display(), "query log file write failed");
        }
    }
    if let Some(mut out) = out {
        let _ = out.flush();
    }
}

/// `event` as one JSON object and a newline.
pub fn write_line(event: &Event, out: &mut Vec<u8>) {
    let value = to_json(event);
    // Serializing a `Value` to a Vec cannot fail (no I/O, no non-string keys).
    let _ = serde_json::to_writer(&mut *out, &value);
    out.push(b'\n');
}

/// The object of one event, as the API shows an entry (`GET /api/v1/querylog`).
pub fn to_json(event: &Event) -> serde_json::Value {
    let summary = &event.summary;
    let flag = |bit: u8| event.record_flags & bit != 0;
    let mut answer = summary.answers.join(", ");
    if summary.more_answers > 0 {
        answer.push_str(&format!(", +{} more", summary.more_answers));
    }
    let time = jiff::Timestamp::from_nanosecond(i128::from(event.time_ns))
        .map_or_else(|_| event.time_ns.to_string(), |at| format!("{at:.9}"));
    serde_json::json!({
        "time": time,
        "timeUnixNs": event.time_ns,
        "client": text_or_null(&event.client.render()),
        "clientId": text_or_null(&event.client_id),
        "group": event.group,
        "transport": event.transport.label(),
        "source": event.source.label(),
        "qname": summary.qname,
        "qtype": domain::base::iana::Rtype::from_int(summary.qtype).to_string(),
        "rcode": summary.rcode.map(rcode_name),
        "flags": {
            "dnssecOk": summary.dnssec_ok,
            "truncated": summary.truncated,
            "recursionDesired": summary.recursion_desired,
            "blocked": flag(flags::BLOCKED),
            "cloaked": flag(flags::CLOAKED),
            "clipped": flag(flags::CLIPPED),
        },
        "answer": answer,
        "upstream": text_or_null(&event.upstream),
        "upstreamLatencyMs": if event.upstream.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::json!(f64::from(event.upstream_latency_us) / 1000.0)
        },
        "policy": text_or_null(&event.policy),
        "list": text_or_null(&event.list),
        "rule": text_or_null(&event.rule),
        "ede": summary.ede,
    })
}

fn text_or_null(text: &str) -> serde_json::Value {
    if text.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::Value::from(text)
    }
}

/// `NOERROR`, `NXDOMAIN`, `BADVERS`; a number past 4095.
fn rcode_name(rcode: u16) -> String {
    // Not `OptRcode::checked_from_int`: domain 0.12.3 inverts its check.
    if rcode < 0x1000 {
        domain::base::iana::OptRcode::masked_from_int(rcode).to_string()
    } else {
        rcode.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::querylog::ClientView;
    use kudurru_core::querylog::{Source, Transport};

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kudurru-jsonl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("each line is JSON"))
            .collect()
    }

    #[test]
    fn a_blocked_answer_becomes_one_line_with_the_api_field_names() {
        let mut event = Event::sample(ClientView::Truncated("192.0.2.0".parse().expect("v4"), 24));
        event.source = Source::Policy;
        event.record_flags = flags::BLOCKED;
        event.policy = "family".into();
        event.list = "ads".into();
        event.rule = "||ads.example^".into();
        event.summary.qname = "ads.example.".into();
        event.summary.qtype = 28;
        event.summary.rcode = Some(3);
        event.summary.ede = Some(15);
        event.summary.recursion_desired = true;
        event.summary.answers = vec!["A 0.0.0.0".into()];
        event.summary.more_answers = 2;
        let mut line = Vec::new();
        write_line(&event, &mut line);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        let value: serde_json::Value = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(value["time"], "2025-12-06T05:46:40.123456789Z");
        assert_eq!(value["timeUnixNs"], 1_765_000_000_123_456_789u64);
        assert_eq!(value["client"], "192.0.2.0/24");
        assert_eq!(value["transport"], "udp");
        assert_eq!(value["source"], "policy");
        assert_eq!(value["qname"], "ads.example.");
        assert_eq!(value["qtype"], "AAAA");
        assert_eq!(value["rcode"], "NXDOMAIN");
        assert_eq!(value["flags"]["blocked"], true);
        assert_eq!(value["flags"]["recursionDesired"], true);
        assert_eq!(value["flags"]["dnssecOk"], false);
        assert_eq!(value["upstreamLatencyMs"], serde_json::Value::Null);
        assert_eq!(value["clientId"], serde_json::Value::Null);
        assert_eq!(value["answer"], "A 0.0.0.0, +2 more");
        assert_eq!(value["policy"], "family");
        assert_eq!(value["rule"], "||ads.example^");
        assert_eq!(value["ede"], 15);
        let mut dropped = Event::sample(ClientView::Hidden);
        dropped.source = Source::Dropped;
        dropped.transport = Transport::Doq;
        let value = to_json(&dropped);
        assert_eq!(value["rcode"], serde_json::Value::Null);
        assert_eq!(value["client"], serde_json::Value::Null);
        assert_eq!(value["ede"], serde_json::Value::Null);
    }

    #[test]
    fn the_file_is_0600_appended_skips_omit_and_reopens_after_a_rename() {
        use std::os::unix::fs::PermissionsExt;
        let dir = dir("reopen");
        let path = dir.join("querylog.jsonl");
        let sink = JsonlSink::open(&path, 16).expect("opens");
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let event = Arc::new(Event::sample(ClientView::Full(
            "192.0.2.7".parse().expect("v4"),
        )));
        let mut omitted = Event::sample(ClientView::Hidden);
        omitted.privacy = Privacy::Omit;
        sink.offer(&[Arc::clone(&event), Arc::new(omitted), Arc::clone(&event)]);
        wait(|| sink.written() == 2);
        // logrotate moves the file away; until SIGHUP the sink writes to the moved one.
        let rotated = dir.join("querylog.jsonl.1");
        std::fs::rename(&path, &rotated).expect("rotate");
        sink.offer(std::slice::from_ref(&event));
        wait(|| sink.written() == 3);
        sink.reopen();
        std::thread::sleep(TICK * 3);
        sink.offer(std::slice::from_ref(&event));
        drop(sink);
        assert_eq!(lines(&rotated).len(), 3);
        let fresh = lines(&path);
        assert_eq!(fresh.len(), 1);
        assert_eq!(fresh[0]["client"], "192.0.2.7");
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_an_unopenable_file_is_an_error() {
        let dir = dir("full");
        let path = dir.join("querylog.jsonl");
        let sink = JsonlSink::open(&path, 1).expect("opens");
        let events: Vec<_> = (0..10_000)
            .map(|_| Arc::new(Event::sample(ClientView::Hidden)))
            .collect();
        sink.offer(&events);
        let dropped = sink.dropped();
        drop(sink);
        assert!(dropped > 0, "a one-event queue took 10000 events at once");
        assert_eq!(lines(&path).len() as u64 + dropped, 10_000);
        let error = JsonlSink::open(&dir.join("missing/querylog.jsonl"), 1)
            .err()
            .expect("no such directory");
        assert!(
            error.to_string().contains("missing/querylog.jsonl"),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn wait(what: impl Fn() -> bool) {
        for _ in 0..500 {
            if what() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("condition not reached in 5 s");
    }
}
