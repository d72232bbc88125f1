//! DNS over QUIC (RFC 9250) and DNS over HTTPS on HTTP/3 upstreams: one stream per query on
//! one QUIC connection per core per upstream (quinn on the core's executor, [`crate::quic`]),
//! from one client endpoint per core and address family.
//!
//! ```text
//! ask ─▶ connection (reuse, or open one: one opening at a time; handshake with the
//!        upstream.tls configuration for ALPN doq / h3, idle timeout upstream.idleTimeout)
//!   ─▶ open_bi (waits while the peer's stream limit is reached)
//!   ─┬ quic: 2-octet length ‖ query (ID 0, RFC 9250 §4.2.1) ─ FIN ─▶ read to FIN ─▶ doq::reply
//!    └ h3:   HEADERS ‖ DATA (POST application/dns-message to the path) ─ FIN ─▶ read to FIN
//!            ─▶ http3::client::response ─▶ 200 + body
//!   ─▶ CachedAnswer::from_reply (ID 0, the exact question)
//! ```
//! A connection that ends (the upstream closed it, idled out, reset it after a restart) is
//! replaced on the next query; one on which an attempt timed out is retired from new queries
//! ([`QuicPool::retire`]), as TCP and DoT connections are. An attempt given up on resets its
//! stream (DOQ_REQUEST_CANCELLED, H3_REQUEST_CANCELLED), so the upstream stops working on it.
//!
//! No 0-RTT: see docs/operations.md ("Encrypted upstreams"). Session tickets from the shared
//! client configuration still make reconnects resumed 1-RTT handshakes.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Instant;

use glommio::sync::Semaphore;
use kudurru_core::wire::{write_padded_upstream_query, write_upstream_query};
use kudurru_core::{
    CacheKey, CachedAnswer, TtlPolicy, UpstreamProtocol, UpstreamSpec, UpstreamTls, doq, http3,
};
use quinn::VarInt;

use super::Attempt;
use super::tls::{Alpn, client_config, server_name};
use crate::metrics::{CoreMetrics, UpstreamCounters, UpstreamError};
use crate::settings::SharedSettings;

/// Most bytes an HTTP/3 response stream may carry: a maximum-size message and room for its
/// HEADERS and frame headers.
const MAX_H3_RESPONSE: usize = doq::MAX_STREAM + 4096;

/// One core's connection to one DoQ or DoH3 upstream.
pub(super) struct QuicPool {
    spec: UpstreamSpec,
    metrics: Arc<CoreMetrics>,
    settings: SharedSettings,
    slot: usize,
    /// The `:authority` of DoH3 requests (the TLS name, else the address).
    authority: String,
    /// The connection new queries go to.
    connection: RefCell<Option<Rc<Connection>>>,
    /// Held while a connection is being opened: a burst of misses waits for that one.
    opening: Semaphore,
    /// The serial number of the next connection opened (from 1).
    serials: Cell<u64>,
    /// The client configuration and the `upstream.tls` / idle timeout it was made from.
    config: RefCell<Option<Made>>,
    /// The last handshake failure logged, so a failing upstream logs once per new reason.
    last_failure: RefCell<Option<String>>,
}

/// A client configuration, and what it was made from.
struct Made {
    tls: Arc<UpstreamTls>,
    idle: std::time::Duration,
    config: quinn::ClientConfig,
    endpoint: Rc<quinn::Endpoint>,
}

struct Connection {
    serial: u64,
    quic: quinn::Connection,
    /// The HTTP/3 control stream, open for the connection's life (closing it is a
    /// connection error, RFC 9114 §6.2.1).
    _control: Option<quinn::SendStream>,
    /// Keeps the endpoint alive while the connection is.
    _endpoint: Rc<quinn::Endpoint>,
}

impl Connection {
    fn usable(&self) -> bool {
        self.quic.close_reason().is_none()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Nothing holds it any more: close now rather than at the idle timeout.
        self.quic.close(VarInt::from_u32(0), b"");
    }
}

thread_local! {
    /// This core's client endpoints (IPv4, IPv6), shared by its QUIC upstream pools and
    /// dropped, on this core, with the last connection that uses it.
    static ENDPOINTS: RefCell<[Weak<quinn::Endpoint>; 2]> = const {
        RefCell::new([Weak::new(), Weak::new()])
    };
}

/// This core's client endpoint for `target`'s address family, bound on first use.
fn endpoint(target: SocketAddr) -> std::io::Result<Rc<quinn::Endpoint>> {
    let family = usize::from(target.is_ipv6());
    ENDPOINTS.with(|endpoints| {
        let mut endpoints = endpoints.borrow_mut();
        if let Some(endpoint) = endpoints[family].upgrade() {
            return Ok(endpoint);
        }
        let bind: SocketAddr = if target.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let endpoint = Rc::new(crate::quic::client_endpoint(bind)?);
        endpoints[family] = Rc::downgrade(&endpoint);
        Ok(endpoint)
    })
}

impl QuicPool {
    /// A pool for `spec` with no connection yet, counted in `slot`.
    pub(super) fn new(
        spec: UpstreamSpec,
        metrics: Arc<CoreMetrics>,
        settings: SharedSettings,
        slot: usize,
    ) -> Self {
        // The certificate's name (`#name`, the host, else the address), with the port when
        // it is not 443.
        let name = server_name(&spec)
            .map_or_else(|_| spec.addr.ip().to_string(), |n| n.to_str().into_owned());
        let authority = match (spec.addr.port(), spec.addr.ip()) {
            (443, _) => name,
            (port, std::net::IpAddr::V6(_)) if spec.tls_name.is_none() && spec.host.is_none() => {
                format!("[{name}]:{port}")
            }
            (port, _) => format!("{name}:{port}"),
        };
        Self {
            spec,
            metrics,
            settings,
            slot,
            authority,
            connection: RefCell::new(None),
            opening: Semaphore::new(1),
            serials: Cell::new(1),
            config: RefCell::new(None),
            last_failure: RefCell::new(None),
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
        let current = match self.current() {
            Some(current) => current,
            // Boxed: opening is rare and its state would widen every query's future.
            None => Box::pin(self.open()).await?,
        };
        let mut query = Vec::with_capacity(key.question().len() + 24);
        if self.settings.load().upstream_tls.padding {
            write_padded_upstream_query(key, 0, &mut query);
        } else {
            write_upstream_query(key, 0, &mut query);
        }
        let h3 = self.spec.protocol == UpstreamProtocol::H3;
        let request = if h3 {
            let path = self.spec.path.as_deref().unwrap_or("/dns-query");
            http3::client::post_request(&self.authority, path, &query)
        } else {
            doq::framed(query)
        };
        // Waits while the peer's limit of concurrent streams is reached.
        let (send, recv) = current.quic.open_bi().await.map_err(|e| self.lost(e))?;
        // Named only once the query is on the wire: an attempt that timed out waiting for
        // stream credit says nothing about the connection being dead, and does not retire it.
        connection.set(current.serial);
        let mut stream = Stream {
            send,
            recv,
            done: false,
            cancel: VarInt::from_u32(if h3 {
                http3::code::H3_REQUEST_CANCELLED as u32
            } else {
                doq::ErrorCode::RequestCancelled.code()
            }),
        };
        stream
            .send
            .write_all(&request)
            .await
            .map_err(|e| self.failed("write", e))?;
        // Already reset or stopped by the peer when this fails; the read says why.
        let _ = stream.send.finish();
        let limit = if h3 { MAX_H3_RESPONSE } else { doq::MAX_STREAM };
        let data = stream.recv.read_to_end(limit).await;
        stream.done = true;
        let data = match data {
            Ok(data) => data,
            Err(quinn::ReadToEndError::TooLong) => {
                tracing::debug!(upstream = %self.spec, "reply stream too long");
                return Err(Attempt::Failed(UpstreamError::BadReply));
            }
            Err(e) => return Err(self.failed("read", e)),
        };
        let message = if h3 {
            match http3::client::response(&data) {
                Ok((200, body)) => body,
                Ok((status, _)) => {
                    tracing::debug!(upstream = %self.spec, status, "DoH3 upstream answered an error status");
                    return Err(Attempt::Failed(UpstreamError::BadReply));
                }
                Err(e) => return Err(self.bad(&e)),
            }
        } else {
            match doq::reply(&data) {
                Ok(message) => message.to_vec(),
                Err(e) => return Err(self.bad(&e)),
            }
        };
        let now = Instant::now();
        match CachedAnswer::from_reply(&message, key, 0, now, policy) {
            Ok(answer) => Ok((answer, now)),
            Err(e) => {
                // Nothing can inject into a QUIC stream: a reply to another question (or with
                // an ID other than 0) is the upstream's error, counted as a mismatch too.
                if e.is_foreign() {
                    CoreMetrics::bump(&counters.mismatched);
                }
                Err(self.bad(&e))
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
        let mut slot = self.connection.borrow_mut();
        if slot.as_ref().is_some_and(|c| !c.usable()) {
            *slot = None;
        }
        slot.clone()
    }

    /// A reply that is not an answer to the query: logged, counted as a bad reply.
    fn bad(&self, error: &dyn std::fmt::Display) -> Attempt {
        tracing::debug!(upstream = %self.spec, error = %error, "bad reply");
        Attempt::Failed(UpstreamError::BadReply)
    }

    /// A stream that failed: the connection is dropped from the pool if it ended.
    fn failed(&self, what: &str, error: impl std::fmt::Display) -> Attempt {
        tracing::debug!(upstream = %self.spec, error = %error, "stream {what} failed");
        self.current();
        Attempt::Failed(UpstreamError::Network)
    }

    /// The connection ended under a query: the next one opens a new connection.
    fn lost(&self, error: quinn::ConnectionError) -> Attempt {
        tracing::debug!(upstream = %self.spec, error = %error, "connection lost");
        self.current();
        Attempt::Failed(UpstreamError::Network)
    }

    /// The client configuration under the current `upstream.tls` and idle timeout, made
    /// again when either changed.
    fn config(&self) -> Result<(quinn::ClientConfig, Rc<quinn::Endpoint>), String> {
        let settings = self.settings.load();
        let mut made = self.config.borrow_mut();
        if let Some(made) = made.as_ref()
            && Arc::ptr_eq(&made.tls, &settings.upstream_tls)
            && made.idle == settings.upstream_idle_timeout
        {
            return Ok((made.config.clone(), made.endpoint.clone()));
        }
        let alpn = match self.spec.protocol {
            UpstreamProtocol::H3 => Alpn::H3,
            _ => Alpn::Doq,
        };
        let tls = client_config(&settings.upstream_tls, alpn)?;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
            .map_err(|e| format!("QUIC TLS configuration: {e}"))?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        let mut transport = quinn::TransportConfig::default();
        let idle = quinn::IdleTimeout::try_from(settings.upstream_idle_timeout)
            .unwrap_or(quinn::IdleTimeout::from(VarInt::MAX));
        transport
            .max_idle_timeout(Some(idle))
            // The server opens no request streams; HTTP/3 servers open three uni streams.
            .max_concurrent_bidi_streams(VarInt::from_u32(0))
            .max_concurrent_uni_streams(VarInt::from_u32(8));
        config.transport_config(Arc::new(transport));
        let endpoint = endpoint(self.spec.addr).map_err(|e| format!("QUIC socket: {e}"))?;
        *made = Some(Made {
            tls: settings.upstream_tls.clone(),
            idle: settings.upstream_idle_timeout,
            config: config.clone(),
            endpoint: endpoint.clone(),
        });
        Ok((config, endpoint))
    }

    /// Opens a connection, or waits for the one another query is opening.
    async fn open(&self) -> Result<Rc<Connection>, Attempt> {
        let _opening = self
            .opening
            .acquire_permit(1)
            .await
            .map_err(|_| Attempt::Failed(UpstreamError::Network))?;
        if let Some(connection) = self.current() {
            return Ok(connection);
        }
        let counters = self.metrics.upstream(self.slot);
        let (config, endpoint) = self.config().map_err(|e| {
            self.log_failure(&e);
            Attempt::Failed(UpstreamError::Network)
        })?;
        let server_name = match server_name(&self.spec) {
            Ok(name) => name.to_str().into_owned(),
            Err(e) => {
                self.log_failure(&e);
                return Err(Attempt::Failed(UpstreamError::Network));
            }
        };
        CoreMetrics::bump(&counters.quic_connections);
        let connected = match endpoint.connect_with(config, self.spec.addr, &server_name) {
            Ok(connecting) => connecting.await,
            Err(e) => {
                self.log_failure(&format!("QUIC connect: {e}"));
                return Err(Attempt::Failed(UpstreamError::Network));
            }
        };
        let quic = match connected {
            Ok(quic) => quic,
            Err(e) => {
                if certificate_refused(&e) {
                    CoreMetrics::bump(&counters.tls_failures);
                }
                self.log_failure(&format!("QUIC handshake: {e}"));
                return Err(Attempt::Failed(UpstreamError::Network));
            }
        };
        // quinn does not say whether the TLS session was resumed: not counted in tls_resumed.
        CoreMetrics::bump(&counters.tls_handshakes);
        *self.last_failure.borrow_mut() = None;
        let control = if self.spec.protocol == UpstreamProtocol::H3 {
            // HTTP/3 (RFC 9114 §6.2.1): the client's control stream with an empty SETTINGS.
            let mut control = quic.open_uni().await.map_err(|e| self.lost(e))?;
            control
                .write_all(&http3::client::CONTROL_STREAM)
                .await
                .map_err(|e| self.failed("control stream write", e))?;
            Some(control)
        } else {
            None
        };
        let serial = self.serials.get();
        self.serials.set(serial + 1);
        let connection = Rc::new(Connection {
            serial,
            quic,
            _control: control,
            _endpoint: endpoint,
        });
        *self.connection.borrow_mut() = Some(connection.clone());
        Ok(connection)
    }

    /// Logs a connection failure at warn level when its reason differs from the last one
    /// logged (a misconfigured upstream fails every attempt the same way), else at debug.
    fn log_failure(&self, reason: &str) {
        let mut last = self.last_failure.borrow_mut();
        if last.as_deref() == Some(reason) {
            tracing::debug!(upstream = %self.spec, error = reason, "upstream connection failed");
            return;
        }
        tracing::warn!(upstream = %self.spec, error = reason, "upstream connection failed");
        *last = Some(reason.to_owned());
    }
}

/// Whether a failed handshake is this side refusing the upstream's certificate or key (the
/// TLS alert rustls sends for a failed verification or an SPKI pin mismatch), not the network.
fn certificate_refused(error: &quinn::ConnectionError) -> bool {
    // bad_certificate … certificate_unknown (42–46), unknown_ca (48), decrypt_error (51: a
    // signature that does not verify under the trusted key).
    const ALERTS: [u8; 7] = [42, 43, 44, 45, 46, 48, 51];
    match error {
        quinn::ConnectionError::TransportError(e) => ALERTS
            .iter()
            .any(|&alert| u64::from(e.code) == u64::from(quinn::TransportErrorCode::crypto(alert))),
        _ => false,
    }
}

/// A query's stream: reset and stopped with the protocol's cancel code when dropped before
/// its reply was read (the attempt was given up on).
struct Stream {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    done: bool,
    cancel: VarInt,
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.send.reset(self.cancel);
            let _ = self.recv.stop(self.cancel);
        }
    }
}
