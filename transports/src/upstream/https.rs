//! DNS over HTTPS on HTTP/2 (RFC 8484): concurrent streams on one TLS connection (ALPN `h2`)
//! per core per upstream, each query a `POST` of `application/dns-message` to the URL's path
//! with `:authority` its host. The HTTP/2 side is [`kudurru_core::http2::client`] (shared with
//! kudurru-bench): it keeps to the server's SETTINGS_MAX_CONCURRENT_STREAMS (queries over it
//! wait for a stream) and flow-control windows, and sends again a stream refused unprocessed.
//!
//! ```text
//! ask ─▶ connection (reuse, or open one: TCP, TLS with ALPN h2, preface + SETTINGS)
//!   ─▶ random free ID ─▶ register waiter ─▶ Client::send(query, ID) ─▶ wake the writer task
//! reader task: TLS bytes ─▶ Client::receive ─▶ Answer(ID, body) ─▶ waiter ID (validates it)
//!                                          └▶ Failed(ID, status) ─▶ waiter ID: a bad reply
//!   end of stream, error, GOAWAY, idle (upstream.idleTimeout) ─▶ every waiter fails over,
//!   the next query opens a new connection
//! ```
//!
//! A response other than `200` (or a reset stream) fails the attempt as a bad reply; the
//! query's DNS ID is random (not 0 as RFC 8484 §4.1 suggests for HTTP caches: there is no
//! cache between kudurru and its upstream, and the ID lets the reply be checked as every
//! other upstream reply is).

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::sync::Semaphore;
use glommio::task::JoinHandle;
use kudurru_core::http2::client::{Client, Method, Outcome};
use kudurru_core::http2::frame;
use kudurru_core::wire::{write_padded_upstream_query, write_upstream_query};
use kudurru_core::{CacheKey, CachedAnswer, TtlPolicy, UpstreamSpec};

use super::dot::TlsDial;
use super::tls::Alpn;
use super::waiters::Waiters;
use super::{Attempt, judge};
use crate::deadline::within;
use crate::metrics::{CoreMetrics, UpstreamCounters, UpstreamError};
use crate::settings::SharedSettings;

/// A connection nothing was asked on for this long is closed when `upstream.idleTimeout` is
/// zero.
const IDLE_CLOSE: Duration = Duration::from_secs(10);

/// The reply a waiter gets when the server answered its stream with a status other than 200
/// or reset it: one byte, which no DNS message is.
const HTTP_FAILURE: [u8; 1] = [0];

/// One core's connection to one upstream.
pub(super) struct HttpsPool {
    dialer: TlsDial,
    /// `https://AUTHORITY/PATH` for the HTTP/2 client.
    uri: String,
    connection: RefCell<Option<Rc<Connection>>>,
    /// Held while a connection is being opened: queries that find none wait for that one.
    opening: Semaphore,
    serials: Cell<u64>,
}

/// What the pool, the reader task and the writer task of one connection share.
struct State {
    client: Client<u16>,
    /// The writer task waits for output here.
    writer: Option<Waker>,
    /// The connection is done (ended, failed or went idle): no new queries.
    ended: bool,
}

struct Connection {
    serial: u64,
    state: Rc<RefCell<State>>,
    waiters: Waiters,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Connection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.cancel();
        }
    }
}

impl State {
    /// Ends the connection: every waiting query fails over, the writer task stops.
    fn end(&mut self, waiters: &Waiters) {
        self.ended = true;
        waiters.fail_all();
        if let Some(writer) = self.writer.take() {
            writer.wake();
        }
    }
}

/// The `:authority` of `spec`: its host name (or address), with the port when it is not 443.
fn authority(spec: &UpstreamSpec) -> String {
    let port = spec.addr.port();
    let host = match spec.host.as_deref() {
        Some(host) => host.to_owned(),
        None => match spec.addr.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        },
    };
    if port == 443 {
        host
    } else {
        format!("{host}:{port}")
    }
}

impl HttpsPool {
    /// A pool for `spec` with no connection yet, counted in `slot`.
    pub(super) fn new(
        spec: UpstreamSpec,
        metrics: Arc<CoreMetrics>,
        settings: SharedSettings,
        slot: usize,
    ) -> Self {
        let uri = format!(
            "https://{}{}",
            authority(&spec),
            spec.path.as_deref().unwrap_or("/dns-query")
        );
        Self {
            dialer: TlsDial {
                spec,
                alpn: Alpn::H2,
                metrics,
                settings,
                slot,
            },
            uri,
            connection: RefCell::new(None),
            opening: Semaphore::new(1),
            serials: Cell::new(1),
        }
    }

    /// One query for `key`; the connection's serial number goes to `connection`.
    pub(super) async fn ask(
        &self,
        key: &CacheKey,
        policy: &TtlPolicy,
        counters: &UpstreamCounters,
        connection: &Cell<u64>,
    ) -> Result<(CachedAnswer, Instant), Attempt> {
        let open = match self.current() {
            Some(open) => open,
            None => Box::pin(self.open())
                .await
                .map_err(|_| Attempt::Failed(UpstreamError::Network))?,
        };
        connection.set(open.serial);
        let registration = open.waiters.register();
        let mut query = Vec::with_capacity(key.question().len() + 24);
        if self.dialer.settings.load().upstream_tls.padding {
            write_padded_upstream_query(key, registration.id(), &mut query);
        } else {
            write_upstream_query(key, registration.id(), &mut query);
        }
        {
            let mut state = open.state.borrow_mut();
            if state.client.send(query, registration.id()).is_err() {
                // Stream identifiers used up (after ~10^9 queries): a new connection next.
                state.end(&open.waiters);
                self.retire(open.serial);
                return Err(Attempt::Failed(UpstreamError::Network));
            }
            if let Some(writer) = state.writer.take() {
                writer.wake();
            }
        }
        loop {
            let reply = registration.reply().await;
            if reply.is_empty() {
                return Err(Attempt::Failed(UpstreamError::Network));
            }
            if reply[..] == HTTP_FAILURE {
                return Err(Attempt::Failed(UpstreamError::BadReply));
            }
            if let Some(judged) = judge(&reply, registration.id(), key, policy, counters, true) {
                return judged;
            }
        }
    }

    /// Takes connection `serial` out of use for new queries (an attempt on it timed out).
    pub(super) fn retire(&self, serial: u64) {
        let mut slot = self.connection.borrow_mut();
        if slot.as_ref().is_some_and(|c| c.serial == serial) {
            *slot = None;
        }
    }

    fn current(&self) -> Option<Rc<Connection>> {
        self.connection
            .borrow()
            .as_ref()
            .filter(|c| !c.state.borrow().ended)
            .cloned()
    }

    /// Opens a connection, or waits for the one another query is opening.
    async fn open(&self) -> io::Result<Rc<Connection>> {
        let _opening = self
            .opening
            .acquire_permit(1)
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        if let Some(connection) = self.current() {
            return Ok(connection);
        }
        let stream = self.dialer.connect().await?;
        if stream.get_ref().1.alpn_protocol() != Some(Alpn::H2.id()) {
            tracing::warn!(upstream = %self.dialer.spec, "the DoH upstream did not negotiate HTTP/2 (ALPN h2)");
            return Err(io::Error::other("no HTTP/2"));
        }
        let idle = match self.dialer.settings.load().upstream_idle_timeout {
            Duration::ZERO => IDLE_CLOSE,
            idle => idle,
        };
        let (reader, writer) = futures_lite::io::split(stream);
        let state = Rc::new(RefCell::new(State {
            client: Client::new(&self.uri, Method::Post),
            writer: None,
            ended: false,
        }));
        let waiters = Waiters::default();
        let read =
            glommio::spawn_local(read_responses(reader, state.clone(), waiters.clone(), idle))
                .detach();
        let write =
            glommio::spawn_local(write_requests(writer, state.clone(), waiters.clone())).detach();
        let serial = self.serials.get();
        self.serials.set(serial + 1);
        let connection = Rc::new(Connection {
            serial,
            state,
            waiters,
            tasks: [read, write],
        });
        let counters = self.dialer.metrics.upstream(self.dialer.slot);
        CoreMetrics::bump(&counters.tcp_connections);
        *self.connection.borrow_mut() = Some(connection.clone());
        Ok(connection)
    }
}

/// The reader task: hands each finished stream to its waiter until the connection ends, fails
/// (a protocol error of the server's, GOAWAY), or sits idle with nothing asked for `idle`.
async fn read_responses<R: AsyncRead + Unpin>(
    mut reader: R,
    state: Rc<RefCell<State>>,
    waiters: Waiters,
    idle: Duration,
) {
    let mut buffer = vec![0u8; 4 * (frame::HEADER_LEN + frame::DEFAULT_MAX_FRAME_SIZE as usize)];
    let mut filled = 0;
    loop {
        let n = match within(idle, reader.read(&mut buffer[filled..])).await {
            Some(Ok(0)) | Some(Err(_)) => break,
            Some(Ok(n)) => n,
            None if waiters.is_empty() => break,
            None => continue,
        };
        filled += n;
        let mut state = state.borrow_mut();
        let used = state
            .client
            .receive(&buffer[..filled], &mut |outcome| match outcome {
                Outcome::Answer(id, body) => {
                    waiters.deliver_to(id, body);
                }
                Outcome::Failed(id, status) => {
                    tracing::debug!(status, "DoH upstream refused a query");
                    waiters.deliver_to(id, HTTP_FAILURE.to_vec());
                }
            });
        let used = match used {
            Ok(used) => used,
            Err(error) => {
                tracing::debug!(%error, "DoH upstream connection ended");
                break;
            }
        };
        buffer.copy_within(used..filled, 0);
        filled -= used;
        if !state.client.output().is_empty()
            && let Some(writer) = state.writer.take()
        {
            writer.wake();
        }
    }
    state.borrow_mut().end(&waiters);
}

/// The writer task: writes whatever the client has for the server, until the connection ends.
async fn write_requests<W: AsyncWrite + Unpin>(
    mut writer: W,
    state: Rc<RefCell<State>>,
    waiters: Waiters,
) {
    let mut chunk = Vec::new();
    loop {
        let open = std::future::poll_fn(|cx| {
            let mut state = state.borrow_mut();
            if state.ended {
                return Poll::Ready(false);
            }
            if state.client.output().is_empty() {
                state.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            state.client.take_output(&mut chunk);
            Poll::Ready(true)
        })
        .await;
        if !open || writer.write_all(&chunk).await.is_err() || writer.flush().await.is_err() {
            break;
        }
    }
    state.borrow_mut().end(&waiters);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_is_the_host_with_a_port_other_than_443() {
        let spec: UpstreamSpec = "https://dns.example/dns-query".parse().unwrap();
        assert_eq!(authority(&spec), "dns.example");
        let spec: UpstreamSpec = "https://127.0.0.1:8443/q".parse().unwrap();
        assert_eq!(authority(&spec), "127.0.0.1:8443");
        let spec: UpstreamSpec = "https://[::1]:8443/q".parse().unwrap();
        assert_eq!(authority(&spec), "[::1]:8443");
    }
}
