//! The dnstap sink (`querylog.sink = "dnstap"`): every logged query as dnstap messages
//! (<https://dnstap.info>, `dnstap.proto`) in a Frame Streams connection to a collector
//! (`fstrm_capture`, `dnstap-ldns`, vector, dnscollector), over a unix socket or TCP.
//!
//! ```text
//! writer ─offer─▶ encode CLIENT_QUERY (+ CLIENT_RESPONSE) ─try_send─▶ bounded queue
//!                  (omit: skipped; dropped queries: the query only)    │ full or collector away:
//!                                                                      │ dropped and counted
//!                       tokio task: connect ─ READY/ACCEPT/START ─ data frames ─ STOP/FINISH
//!                       (reconnects 1 s, 2 s … 30 s after the collector goes away)
//! ```
//!
//! Privacy as the writer applied it: `query_address` is the address in `full` mode, the
//! network address (host bits zero, no port) in `truncate` mode, and left out in
//! `pseudonymize` and `none` (dnstap has no field for a pseudonym). The messages are the wire
//! messages as they went: a query carrying an EDNS Client Subnet option still carries it.
//!
//! The protobuf is written by hand: the sink writes only two small messages of a stable
//! proto2 schema, and a code generator with its build step would be the larger part.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kudurru_core::querylog::{Source, Transport};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::{ClientView, Event, EventSink};
use crate::config::DnstapAddress;

/// The Frame Streams content type of dnstap.
pub const CONTENT_TYPE: &[u8] = b"protobuf:dnstap.Dnstap";

/// The first wait before reconnecting; it doubles up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);

/// The longest wait between two connection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How long the handshake may take before the connection is given up.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// At shutdown: how long the queued events and STOP may take to write, and then how long the
/// collector's FINISH is waited for, before the connection is closed anyway.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Most bytes of a control frame read from the collector (its content types are short).
const CONTROL_MAX: usize = 512;

/// How the sink is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the collector listens (`querylog.dnstap.address`).
    pub target: DnstapAddress,
    /// Events the queue holds while the collector is slow (`bufferEvents`).
    pub buffer_events: usize,
    /// The `identity` of every message (the node's name); empty leaves it out.
    pub identity: String,
    /// The `version` of every message.
    pub version: String,
}

impl Options {
    /// The defaults for `target`: a `querylog.dnstap.bufferEvents` default queue, no identity, and
    /// `kudurru <version>`.
    pub fn new(target: DnstapAddress) -> Self {
        Self {
            target,
            buffer_events: crate::config::DEFAULT_DNSTAP_BUFFER_EVENTS,
            identity: String::new(),
            version: format!("kudurru {}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// The dnstap sink: encodes on the writer's thread and queues; a tokio task writes.
pub struct DnstapSink {
    queue: mpsc::Sender<Vec<u8>>,
    state: Arc<State>,
    identity: Vec<u8>,
    version: Vec<u8>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Turns true at shutdown (a watch, not a `Notify`: every waiter sees it, and one that
    /// starts waiting later still does).
    closing: watch::Sender<bool>,
}

/// What the sink and its task share.
#[derive(Default)]
struct State {
    connected: AtomicBool,
    dropped: AtomicU64,
    sent: AtomicU64,
    connects: AtomicU64,
}

impl DnstapSink {
    /// Starts the sink and its writing task (on the current tokio runtime); it connects to
    /// the collector in the background and keeps reconnecting.
    pub fn start(options: Options) -> Self {
        let (queue, receiver) = mpsc::channel(options.buffer_events.max(1));
        let state = Arc::new(State::default());
        let (closing, closed) = watch::channel(false);
        let task = tokio::spawn(run(options.target, receiver, Arc::clone(&state), closed));
        Self {
            queue,
            state,
            identity: options.identity.into_bytes(),
            version: options.version.into_bytes(),
            task: std::sync::Mutex::new(Some(task)),
            closing,
        }
    }

    /// Whether a collector is connected (handshake done) now.
    pub fn is_connected(&self) -> bool {
        self.state.connected.load(Ordering::Relaxed)
    }

    /// Events written to a collector so far.
    pub fn sent(&self) -> u64 {
        self.state.sent.load(Ordering::Relaxed)
    }

    /// Successful connections (handshakes) so far: more than one means the sink reconnected.
    pub fn connects(&self) -> u64 {
        self.state.connects.load(Ordering::Relaxed)
    }

    /// Writes what is queued, ends the stream with STOP, waits for the collector's FINISH
    /// and closes the connection (each step bounded by [`CLOSE_TIMEOUT`]), and stops the task;
    /// events offered afterwards are dropped and counted.
    pub async fn shutdown(&self) {
        self.closing.send_replace(true);
        let task = self.task.lock().ok().and_then(|mut task| task.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Drop for DnstapSink {
    fn drop(&mut self) {
        self.closing.send_replace(true);
    }
}

impl EventSink for DnstapSink {
    fn name(&self) -> &'static str {
        "dnstap"
    }

    fn delivered(&self) -> Option<u64> {
        Some(self.sent())
    }

    fn connected(&self) -> Option<bool> {
        Some(self.is_connected())
    }

    fn close(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.shutdown())
    }

    fn offer(&self, events: &[Arc<Event>]) {
        for event in events {
            if event.privacy == kudurru_core::querylog::Privacy::Omit {
                continue;
            }
            if !self.is_connected() {
                self.state.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let frames = encode_frames(event, &self.identity, &self.version);
            if self.queue.try_send(frames).is_err() {
                self.state.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn dropped(&self) -> u64 {
        self.state.dropped.load(Ordering::Relaxed)
    }
}

/// Waits until `closing` turns true (or its sender is gone, which is the same).
async fn closed(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|closing| *closing).await;
}

/// The task: connect, handshake, write until the collector goes away, wait, again. Shutdown
/// interrupts a connection attempt or a wait; a connected stream ends itself ([`stream`]),
/// so its queued events and STOP are written first.
async fn run(
    target: DnstapAddress,
    mut queue: mpsc::Receiver<Vec<u8>>,
    state: Arc<State>,
    mut closing: watch::Receiver<bool>,
) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let outcome = match &target {
            DnstapAddress::Unix(path) => {
                let connect = async {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    handshake(stream).await
                };
                match connected(connect, &mut closing).await {
                    Some(Ok((reader, writer))) => {
                        stream(reader, writer, &mut queue, &state, &mut closing).await
                    }
                    Some(Err(error)) => Err(error),
                    None => return,
                }
            }
            DnstapAddress::Tcp(address) => {
                let connect = async {
                    let stream = tokio::net::TcpStream::connect(address).await?;
                    let _ = stream.set_nodelay(true);
                    handshake(stream).await
                };
                match connected(connect, &mut closing).await {
                    Some(Ok((reader, writer))) => {
                        stream(reader, writer, &mut queue, &state, &mut closing).await
                    }
                    Some(Err(error)) => Err(error),
                    None => return,
                }
            }
        };
        state.connected.store(false, Ordering::Relaxed);
        match outcome {
            Ok(Ended::Closing) => return,
            Ok(Ended::Collector) => {
                tracing::warn!(target = ?target, "dnstap collector ended the stream; reconnecting");
                backoff = BACKOFF_MIN;
            }
            Err(error) => {
                tracing::warn!(target = ?target, %error, retry_in = ?backoff, "dnstap collector unreachable");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = closed(&mut closing) => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// `connect` (a connection and its handshake), or `None` when shutdown came first.
async fn connected<T>(
    connect: impl Future<Output = io::Result<T>>,
    closing: &mut watch::Receiver<bool>,
) -> Option<io::Result<T>> {
    tokio::select! {
        outcome = connect => Some(outcome),
        () = closed(closing) => None,
    }
}

/// How a session ended without an I/O error.
enum Ended {
    /// The sink is shutting down (STOP sent).
    Closing,
    /// The collector closed the connection or sent FINISH.
    Collector,
}

/// The two halves of a connection, the writer buffered.
type Halves<S> = (
    tokio::io::ReadHalf<S>,
    tokio::io::BufWriter<tokio::io::WriteHalf<S>>,
);

/// The bidirectional handshake: READY, the collector's ACCEPT naming dnstap, START.
async fn handshake<S>(stream: S) -> io::Result<Halves<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut reader, writer) = tokio::io::split(stream);
    let mut writer = tokio::io::BufWriter::with_capacity(64 * 1024, writer);
    tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        writer.write_all(&control_frame(Control::Ready)).await?;
        writer.flush().await?;
        let accept = read_control(&mut reader).await?;
        if accept.kind != Control::Accept as u32 || !accept.offers_dnstap() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "collector answered READY with control frame {} without {}",
                    accept.kind,
                    String::from_utf8_lossy(CONTENT_TYPE)
                ),
            ));
        }
        writer.write_all(&control_frame(Control::Start)).await?;
        writer.flush().await
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "dnstap handshake timed out"))??;
    Ok((reader, writer))
}

/// Data frames until an error, the collector's end, or shutdown (the queued events, then STOP).
async fn stream<R, W>(
    mut reader: R,
    mut writer: W,
    queue: &mut mpsc::Receiver<Vec<u8>>,
    state: &State,
    closing: &mut watch::Receiver<bool>,
) -> io::Result<Ended>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    state.connected.store(true, Ordering::Relaxed);
    state.connects.fetch_add(1, Ordering::Relaxed);
    tracing::info!("dnstap collector connected");
    let mut scratch = [0u8; 64];
    loop {
        tokio::select! {
            frames = queue.recv() => {
                let Some(frames) = frames else {
                    return stop(&mut reader, &mut writer).await;
                };
                writer.write_all(&frames).await?;
                let mut written = 1;
                while let Ok(frames) = queue.try_recv() {
                    writer.write_all(&frames).await?;
                    written += 1;
                }
                writer.flush().await?;
                state.sent.fetch_add(written, Ordering::Relaxed);
            }
            // The collector sends nothing after ACCEPT but FINISH; a read that returns means
            // it is going away.
            read = reader.read(&mut scratch) => {
                return match read {
                    Ok(_) => Ok(Ended::Collector),
                    Err(error) => Err(error),
                };
            }
            () = closed(closing) => {
                // No new events reach the queue once this is seen as disconnected.
                state.connected.store(false, Ordering::Relaxed);
                let flushed = tokio::time::timeout(CLOSE_TIMEOUT, async {
                    while let Ok(frames) = queue.try_recv() {
                        writer.write_all(&frames).await?;
                        state.sent.fetch_add(1, Ordering::Relaxed);
                    }
                    writer.flush().await
                })
                .await;
                return match flushed {
                    Ok(Ok(())) => stop(&mut reader, &mut writer).await,
                    Ok(Err(error)) => Err(error),
                    Err(_) => Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "dnstap collector did not take the last events in time",
                    )),
                };
            }
        }
    }
}

/// Ends the stream: STOP, then FINISH from the collector (each within [`CLOSE_TIMEOUT`]),
/// then closes the connection.
async fn stop<R, W>(reader: &mut R, writer: &mut W) -> io::Result<Ended>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    tokio::time::timeout(CLOSE_TIMEOUT, async {
        writer.write_all(&control_frame(Control::Stop)).await?;
        writer.flush().await
    })
    .await
    .map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "dnstap STOP could not be written in time",
        )
    })??;
    match tokio::time::timeout(CLOSE_TIMEOUT, read_control(reader)).await {
        Ok(Ok(frame)) if frame.kind == Control::Finish as u32 => {
            tracing::info!("dnstap stream ended (STOP, FINISH)");
        }
        Ok(Ok(frame)) => {
            tracing::warn!(
                frame = frame.kind,
                "dnstap collector answered STOP without FINISH"
            );
        }
        Ok(Err(error)) => tracing::warn!(%error, "dnstap collector closed without FINISH"),
        Err(_) => {
            tracing::warn!(timeout = ?CLOSE_TIMEOUT, "dnstap collector sent no FINISH in time; closing")
        }
    }
    let _ = writer.shutdown().await;
    Ok(Ended::Closing)
}

/// Frame Streams control frame types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Control {
    /// The receiver accepts the stream (bidirectional handshake).
    Accept = 1,
    /// The sender starts the stream.
    Start = 2,
    /// The sender ends the stream.
    Stop = 3,
    /// The sender is ready (bidirectional handshake).
    Ready = 4,
    /// The receiver acknowledges STOP.
    Finish = 5,
}

/// The control frame of `kind` with dnstap's content type (none on STOP), escape included.
pub fn control_frame(kind: Control) -> Vec<u8> {
    let mut body = (kind as u32).to_be_bytes().to_vec();
    if kind != Control::Stop {
        body.extend_from_slice(&1u32.to_be_bytes()); // CONTENT_TYPE field
        body.extend_from_slice(&(CONTENT_TYPE.len() as u32).to_be_bytes());
        body.extend_from_slice(CONTENT_TYPE);
    }
    let mut frame = 0u32.to_be_bytes().to_vec();
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// A control frame read from the collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlFrame {
    /// Its type (a [`Control`] value, or another number).
    pub kind: u32,
    /// The content types it names.
    pub content_types: Vec<Vec<u8>>,
}

impl ControlFrame {
    /// Whether one of the content types is dnstap's.
    pub fn offers_dnstap(&self) -> bool {
        self.content_types.iter().any(|t| t == CONTENT_TYPE)
    }

    /// The control frame whose body (after the escape and the length) is `body`.
    pub fn decode(body: &[u8]) -> Result<Self, ControlError> {
        let kind = be_u32(body, 0).ok_or(ControlError::Short)?;
        let mut content_types = Vec::new();
        let mut at = 4;
        while at < body.len() {
            let field = be_u32(body, at).ok_or(ControlError::Short)?;
            let length = be_u32(body, at + 4).ok_or(ControlError::Short)? as usize;
            let value = body
                .get(at + 8..(at + 8).saturating_add(length))
                .ok_or(ControlError::Short)?;
            if field != 1 {
                return Err(ControlError::Field(field));
            }
            content_types.push(value.to_vec());
            at += 8 + length;
        }
        Ok(Self {
            kind,
            content_types,
        })
    }
}

/// Why a control frame from the collector does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// A data frame where a control frame was due.
    #[error("frame streams: a data frame of {0} bytes where a control frame was due")]
    NotControl(u32),
    /// A control frame longer than [`CONTROL_MAX`].
    #[error("frame streams: a control frame of {0} bytes, more than 512")]
    Long(u32),
    /// Fewer bytes than the lengths say.
    #[error("frame streams: a control frame cut short")]
    Short,
    /// A field other than CONTENT_TYPE.
    #[error("frame streams: control field {0}, expected CONTENT_TYPE (1)")]
    Field(u32),
}

impl From<ControlError> for io::Error {
    fn from(error: ControlError) -> Self {
        Self::new(io::ErrorKind::InvalidData, error)
    }
}

/// Reads one control frame (escape, length, body).
async fn read_control<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<ControlFrame> {
    let mut head = [0u8; 8];
    reader.read_exact(&mut head).await?;
    let escape = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if escape != 0 {
        return Err(ControlError::NotControl(escape).into());
    }
    let length = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    if length as usize > CONTROL_MAX {
        return Err(ControlError::Long(length).into());
    }
    let mut body = vec![0u8; length as usize];
    reader.read_exact(&mut body).await?;
    Ok(ControlFrame::decode(&body)?)
}

fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// dnstap `Message.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum MessageType {
    /// A query received from a client.
    ClientQuery = 5,
    /// A response sent to a client.
    ClientResponse = 6,
}

/// The data frames (length-prefixed dnstap messages) of one event: CLIENT_QUERY, and
/// CLIENT_RESPONSE unless the query was dropped.
pub fn encode_frames(event: &Event, identity: &[u8], version: &[u8]) -> Vec<u8> {
    let mut frames = Vec::with_capacity(2 * (64 + event.query.len()) + event.response.len());
    let mut kinds = vec![MessageType::ClientQuery];
    if event.source != Source::Dropped {
        kinds.push(MessageType::ClientResponse);
    }
    for kind in kinds {
        let at = frames.len();
        frames.extend_from_slice(&[0; 4]);
        encode_dnstap(event, kind, identity, version, &mut frames);
        let length = (frames.len() - at - 4) as u32;
        frames[at..at + 4].copy_from_slice(&length.to_be_bytes());
    }
    frames
}

/// Appends one `Dnstap` protobuf message of `kind` for `event` to `out`.
pub fn encode_dnstap(
    event: &Event,
    kind: MessageType,
    identity: &[u8],
    version: &[u8],
    out: &mut Vec<u8>,
) {
    let mut message = Vec::with_capacity(64 + event.query.len() + event.response.len());
    varint_field(&mut message, 1, kind as u64);
    let address = match &event.client {
        ClientView::Full(address) => Some(*address),
        ClientView::Truncated(network, _) => Some(*network),
        ClientView::Pseudonym(_) | ClientView::Hidden => None,
    };
    let octets = address.map(|address| match address {
        std::net::IpAddr::V4(v4) => (1, v4.octets().to_vec()),
        std::net::IpAddr::V6(v6) => (2, v6.octets().to_vec()),
    });
    if let Some((family, _)) = &octets {
        varint_field(&mut message, 2, *family);
    }
    let (protocol, http) = match event.transport {
        Transport::Udp => (1, None),
        Transport::Tcp => (2, None),
        Transport::Dot => (3, None),
        Transport::Doh => (4, None),
        Transport::Doq => (7, None),
        Transport::Doh3 => (4, Some(3)),
    };
    varint_field(&mut message, 3, protocol);
    if let Some((_, octets)) = &octets {
        bytes_field(&mut message, 4, octets);
        if matches!(event.client, ClientView::Full(_)) {
            varint_field(&mut message, 6, u64::from(event.port));
        }
    }
    let seconds = event.time_ns / 1_000_000_000;
    let nanos = (event.time_ns % 1_000_000_000) as u32;
    varint_field(&mut message, 8, seconds);
    fixed32_field(&mut message, 9, nanos);
    if kind == MessageType::ClientQuery || !event.query.is_empty() {
        bytes_field(&mut message, 10, &event.query);
    }
    if kind == MessageType::ClientResponse {
        varint_field(&mut message, 12, seconds);
        fixed32_field(&mut message, 13, nanos);
        bytes_field(&mut message, 14, &event.response);
    }
    if let Some(http) = http {
        varint_field(&mut message, 16, http);
    }
    if !identity.is_empty() {
        bytes_field(out, 1, identity);
    }
    if !version.is_empty() {
        bytes_field(out, 2, version);
    }
    bytes_field(out, 14, &message);
    varint_field(out, 15, 1); // Dnstap.Type MESSAGE
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn varint_field(out: &mut Vec<u8>, field: u64, value: u64) {
    varint(out, field << 3);
    varint(out, value);
}

fn bytes_field(out: &mut Vec<u8>, field: u64, value: &[u8]) {
    varint(out, (field << 3) | 2);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

fn fixed32_field(out: &mut Vec<u8>, field: u64, value: u32) {
    varint(out, (field << 3) | 5);
    out.extend_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use kudurru_core::querylog::Privacy;

    fn event(client: ClientView, source: Source, transport: Transport) -> Event {
        Event {
            source,
            transport,
            ..Event::sample(client)
        }
    }

    /// A protobuf field as the test reads it back.
    #[derive(Debug, PartialEq)]
    enum Value {
        Int(u64),
        Bytes(Vec<u8>),
    }

    fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let byte = bytes[*at];
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
        }
        value
    }

    fn fields(bytes: &[u8]) -> Vec<(u64, Value)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let key = read_varint(bytes, &mut at);
            let value = match key & 7 {
                0 => Value::Int(read_varint(bytes, &mut at)),
                2 => {
                    let n = read_varint(bytes, &mut at) as usize;
                    at += n;
                    Value::Bytes(bytes[at - n..at].to_vec())
                }
                5 => {
                    at += 4;
                    Value::Int(u64::from(u32::from_le_bytes(
                        bytes[at - 4..at].try_into().expect("4 bytes"),
                    )))
                }
                other => panic!("wire type {other}"),
            };
            out.push((key >> 3, value));
        }
        out
    }

    fn field(fields: &[(u64, Value)], number: u64) -> Option<&Value> {
        fields.iter().find(|(n, _)| *n == number).map(|(_, v)| v)
    }

    /// The `Message` fields of each dnstap message in `frames`.
    fn messages(frames: &[u8]) -> Vec<Vec<(u64, Value)>> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < frames.len() {
            let n = u32::from_be_bytes(frames[at..at + 4].try_into().expect("4")) as usize;
            let dnstap = fields(&frames[at + 4..at + 4 + n]);
            assert_eq!(field(&dnstap, 15), Some(&Value::Int(1)));
            assert_eq!(
                field(&dnstap, 2),
                Some(&Value::Bytes(b"kudurru test".to_vec()))
            );
            let Some(Value::Bytes(message)) = field(&dnstap, 14) else {
                panic!("no message")
            };
            out.push(fields(message));
            at += 4 + n;
        }
        out
    }

    #[test]
    fn a_full_privacy_udp_answer_is_a_client_query_and_a_client_response() {
        let e = event(
            ClientView::Full("192.0.2.7".parse().expect("v4")),
            Source::Cache,
            Transport::Udp,
        );
        let m = messages(&encode_frames(&e, b"", b"kudurru test"));
        assert_eq!(m.len(), 2);
        assert_eq!(field(&m[0], 1), Some(&Value::Int(5)));
        assert_eq!(field(&m[1], 1), Some(&Value::Int(6)));
        for message in &m {
            assert_eq!(field(message, 2), Some(&Value::Int(1)));
            assert_eq!(field(message, 3), Some(&Value::Int(1)));
            assert_eq!(field(message, 4), Some(&Value::Bytes(vec![192, 0, 2, 7])));
            assert_eq!(field(message, 6), Some(&Value::Int(53_000)));
            assert_eq!(field(message, 8), Some(&Value::Int(1_765_000_000)));
            assert_eq!(field(message, 9), Some(&Value::Int(123_456_789)));
            assert_eq!(
                field(message, 10),
                Some(&Value::Bytes(b"query-bytes".to_vec()))
            );
        }
        assert_eq!(field(&m[0], 14), None);
        assert_eq!(
            field(&m[1], 14),
            Some(&Value::Bytes(b"response-bytes".to_vec()))
        );
        assert_eq!(field(&m[1], 12), Some(&Value::Int(1_765_000_000)));
    }

    #[test]
    fn privacy_decides_the_query_address_and_drops_send_only_the_query() {
        let truncated = event(
            ClientView::Truncated("2001:db8:7::".parse().expect("v6"), 48),
            Source::Dropped,
            Transport::Doh3,
        );
        let m = messages(&encode_frames(&truncated, b"", b"kudurru test"));
        assert_eq!(m.len(), 1, "a dropped query has no response");
        assert_eq!(field(&m[0], 2), Some(&Value::Int(2)));
        let mut network = vec![0x20, 0x01, 0x0d, 0xb8, 0, 7];
        network.resize(16, 0);
        assert_eq!(field(&m[0], 4), Some(&Value::Bytes(network)));
        assert_eq!(field(&m[0], 6), None, "no port but in full mode");
        assert_eq!(field(&m[0], 3), Some(&Value::Int(4)));
        assert_eq!(field(&m[0], 16), Some(&Value::Int(3)), "HTTP/3");
        for client in [
            ClientView::Pseudonym("p-0123456789abcdef".into()),
            ClientView::Hidden,
        ] {
            let hidden = event(client, Source::Upstream, Transport::Doq);
            for message in messages(&encode_frames(&hidden, b"node-1", b"kudurru test")) {
                assert_eq!(field(&message, 2), None);
                assert_eq!(field(&message, 4), None);
                assert_eq!(field(&message, 6), None);
                assert_eq!(field(&message, 3), Some(&Value::Int(7)));
            }
        }
    }

    #[test]
    fn control_frames_round_trip_and_bad_ones_are_errors() {
        let ready = control_frame(Control::Ready);
        assert_eq!(&ready[..4], &[0, 0, 0, 0]);
        let frame = ControlFrame::decode(&ready[8..]).expect("decodes");
        assert_eq!(frame.kind, Control::Ready as u32);
        assert!(frame.offers_dnstap());
        let stop = ControlFrame::decode(&control_frame(Control::Stop)[8..]).expect("stop");
        assert!(stop.content_types.is_empty());
        for end in 0..ready.len() - 8 {
            if end != 4 {
                assert!(ControlFrame::decode(&ready[8..8 + end]).is_err(), "{end}");
            }
        }
        let mut other = ready[8..].to_vec();
        other[7] = 9;
        assert_eq!(ControlFrame::decode(&other), Err(ControlError::Field(9)));
    }

    /// A collector as fstrm_capture is: accepts READY, reads until STOP or EOF; hands each
    /// connection's data frames back.
    async fn collector(
        listener: &tokio::net::UnixListener,
        frames_wanted: usize,
    ) -> (tokio::net::UnixStream, Vec<u8>) {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let ready = read_control(&mut stream).await.expect("ready");
        assert_eq!(ready.kind, Control::Ready as u32);
        let mut accept = control_frame(Control::Accept);
        stream.write_all(&accept).await.expect("accept");
        accept.clear();
        let start = read_control(&mut stream).await.expect("start");
        assert_eq!(start.kind, Control::Start as u32);
        assert!(start.offers_dnstap());
        let mut data = Vec::new();
        for _ in 0..frames_wanted {
            let mut length = [0; 4];
            stream.read_exact(&mut length).await.expect("length");
            let n = u32::from_be_bytes(length) as usize;
            assert_ne!(n, 0, "a control frame in the data");
            let mut frame = vec![0; n];
            stream.read_exact(&mut frame).await.expect("frame");
            data.extend_from_slice(&length);
            data.extend_from_slice(&frame);
        }
        (stream, data)
    }

    async fn until(what: impl Fn() -> bool) {
        for _ in 0..500 {
            if what() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not reached in 5 s");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_sink_streams_reconnects_after_the_collector_goes_and_counts_drops_meanwhile() {
        let dir = std::env::temp_dir().join(format!("kudurru-dnstap-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("collector.sock");
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let mut options = Options::new(DnstapAddress::Unix(path.clone()));
        options.version = "kudurru test".into();
        options.buffer_events = 4;
        let sink = DnstapSink::start(options);
        let full = Arc::new(event(
            ClientView::Full("192.0.2.7".parse().expect("v4")),
            Source::Cache,
            Transport::Tcp,
        ));
        let mut omitted = event(ClientView::Hidden, Source::Cache, Transport::Udp);
        omitted.privacy = Privacy::Omit;
        let omitted = Arc::new(omitted);

        let (stream, data) = {
            let accepted = collector(&listener, 2);
            tokio::pin!(accepted);
            // Before the handshake the sink drops (and counts).
            sink.offer(std::slice::from_ref(&full));
            let stream_data = tokio::select! {
                done = &mut accepted => Some(done),
                () = until(|| sink.is_connected()) => None,
            };
            assert_eq!(sink.dropped(), 1);
            sink.offer(&[Arc::clone(&omitted), Arc::clone(&full)]);
            match stream_data {
                Some(done) => done,
                None => accepted.await,
            }
        };
        let m = messages(&data);
        assert_eq!(m.len(), 2);
        assert_eq!(field(&m[0], 3), Some(&Value::Int(2)), "TCP");
        assert_eq!(sink.dropped(), 1, "omit is skipped, not dropped");

        // The collector goes away: the sink notices, drops while away, and comes back.
        drop(stream);
        until(|| !sink.is_connected()).await;
        sink.offer(std::slice::from_ref(&full));
        assert_eq!(sink.dropped(), 2);
        let (_stream, data) = {
            let accepted = collector(&listener, 2);
            tokio::pin!(accepted);
            let early = tokio::select! {
                done = &mut accepted => Some(done),
                () = until(|| sink.is_connected()) => None,
            };
            sink.offer(std::slice::from_ref(&full));
            match early {
                Some(done) => done,
                None => accepted.await,
            }
        };
        assert_eq!(messages(&data).len(), 2);
        assert_eq!(sink.connects(), 2);
        sink.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn shutdown_writes_the_queue_then_stop_and_closes_on_finish_or_without_it() {
        let dir = std::env::temp_dir().join(format!("kudurru-dnstap-stop-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        for finish in [true, false] {
            let path = dir.join(format!("collector-{finish}.sock"));
            let _ = std::fs::remove_file(&path);
            let listener = tokio::net::UnixListener::bind(&path).expect("bind");
            let sink = DnstapSink::start(Options::new(DnstapAddress::Unix(path.clone())));
            let (mut stream, _) = collector(&listener, 0).await;
            until(|| sink.is_connected()).await;
            let full = Arc::new(event(
                ClientView::Full("192.0.2.7".parse().expect("v4")),
                Source::Cache,
                Transport::Udp,
            ));
            // Queued, then shutdown at once: the events go out before STOP.
            sink.offer(&[Arc::clone(&full), Arc::clone(&full), Arc::clone(&full)]);
            let collector = async {
                let mut data = 0;
                loop {
                    let mut length = [0; 4];
                    stream.read_exact(&mut length).await.expect("a frame");
                    let n = u32::from_be_bytes(length) as usize;
                    if n == 0 {
                        break;
                    }
                    let mut frame = vec![0; n];
                    stream.read_exact(&mut frame).await.expect("its body");
                    data += 1;
                }
                let mut length = [0; 4];
                stream
                    .read_exact(&mut length)
                    .await
                    .expect("the control length");
                let mut body = vec![0; u32::from_be_bytes(length) as usize];
                stream
                    .read_exact(&mut body)
                    .await
                    .expect("the control frame");
                let control = ControlFrame::decode(&body).expect("decodes");
                assert_eq!(control.kind, Control::Stop as u32);
                if finish {
                    stream
                        .write_all(&control_frame(Control::Finish))
                        .await
                        .expect("finish");
                }
                // The sink closes its end: EOF (with or without FINISH, after CLOSE_TIMEOUT).
                let mut rest = Vec::new();
                stream.read_to_end(&mut rest).await.expect("eof");
                assert!(rest.is_empty());
                data
            };
            let bounded = Duration::from_secs(30);
            let (data, ()) =
                tokio::time::timeout(bounded, async { tokio::join!(collector, sink.shutdown()) })
                    .await
                    .expect("shutdown ends within its bounds");
            assert_eq!(data, 6, "three events, a query and a response each");
            assert_eq!(sink.sent(), 3);
            assert!(!sink.is_connected());
            // Offered after the end: dropped and counted, never queued for nobody.
            sink.offer(std::slice::from_ref(&full));
            assert_eq!(sink.dropped(), 1);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
