//! DNS over QUIC (RFC 9250) and DNS over HTTPS on HTTP/3 for the stream flow, as carriers of a
//! [`crate::pipe::Pipe`]: one bidirectional stream per query, on quinn driven by the flow's
//! own glommio executor (kudurru's runtime adapter, [`kudurru_transports::quic`]).
//!
//! ```text
//! flow ─▶ connect (one client endpoint per flow, handshake bounded by --timeout)
//!   ─┬ quic://: stream ─ 2-octet length ‖ query (ID 0) ─ FIN ─▶ read to FIN ─▶ answer (ID restored)
//!    └ h3://:   stream ─ HEADERS (static QPACK) ‖ DATA ─ FIN ─▶ read to FIN ─▶ 200 + body ─▶ answer
//! ```
//! DoQ sends every query with ID 0 (RFC 9250 §4.2.1) and puts the flow's ID back on an answer
//! that came back with ID 0; an answer with another ID keeps it, so the flow counts it as a
//! mismatch, as it would any reply that does not match its query.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use kudurru_core::http3::{client, frame_type, write_frame};

use crate::doh::{Method, split_uri};
use crate::pipe::{Carrier, Inbox, SharedInbox};
use crate::target::Protocol;

/// Most bytes a DoQ answer stream may carry: the length and a maximum-size message.
const MAX_STREAM: usize = 2 + 65_535;

/// What a QUIC flow connects with.
pub(crate) struct QuicClient {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
}

impl QuicClient {
    /// A client endpoint for `target` (on the current executor) offering `tls`'s configuration.
    pub(crate) fn new(target: SocketAddr, tls: &Arc<rustls::ClientConfig>) -> Result<Self, String> {
        let bind: SocketAddr = if target.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let endpoint = kudurru_transports::quic::client_endpoint(bind)
            .map_err(|e| format!("QUIC socket: {e}"))?;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls.clone())
            .map_err(|e| format!("QUIC TLS configuration: {e}"))?;
        Ok(Self {
            endpoint,
            config: quinn::ClientConfig::new(Arc::new(crypto)),
        })
    }

    /// Connects to `target` as `server_name` and starts `protocol` (DoQ or HTTP/3) on the
    /// connection; the connection's driver closes `inbox` when it ends.
    pub(crate) async fn connect(
        &self,
        target: SocketAddr,
        server_name: &str,
        protocol: Protocol,
        uri: Rc<str>,
        method: Method,
        inbox: &SharedInbox,
    ) -> Result<Carrier, String> {
        let connection = self
            .endpoint
            .connect_with(self.config.clone(), target, server_name)
            .map_err(|e| format!("QUIC connect: {e}"))?
            .await
            .map_err(|e| format!("QUIC handshake: {e}"))?;
        if protocol == Protocol::Quic {
            let (inbox, closed) = (inbox.clone(), connection.clone());
            glommio::spawn_local(async move {
                closed.closed().await;
                Inbox::close(&inbox);
            })
            .detach();
            return Ok(Carrier::Doq(connection));
        }
        // HTTP/3 (RFC 9114) with kudurru's own framing: the client's control stream with an
        // empty SETTINGS (no QPACK dynamic table, so no encoder or decoder streams), held open
        // for the connection's life; the server's uni streams are left unread.
        let mut control = connection
            .open_uni()
            .await
            .map_err(|e| format!("HTTP/3 setup: {e}"))?;
        control
            .write_all(&kudurru_core::http3::client::CONTROL_STREAM)
            .await
            .map_err(|e| format!("HTTP/3 setup: {e}"))?;
        let (inbox, closed) = (inbox.clone(), connection.clone());
        glommio::spawn_local(async move {
            closed.closed().await;
            drop(control);
            Inbox::close(&inbox);
        })
        .detach();
        let (authority, path) = split_uri(&uri);
        Ok(Carrier::H3(H3 {
            connection,
            authority: authority.into(),
            path: path.into(),
            method,
        }))
    }
}

/// One DoQ query on a stream of its own: its answer with the query's ID, or `Err(0)`.
pub(crate) async fn doq_exchange(
    connection: &quinn::Connection,
    mut message: Vec<u8>,
) -> Result<Vec<u8>, u16> {
    if message.len() < 2 {
        return Err(0);
    }
    let id = [message[0], message[1]];
    message[..2].copy_from_slice(&[0, 0]);
    let mut stream = (message.len() as u16).to_be_bytes().to_vec();
    stream.extend_from_slice(&message);
    let (mut send, mut recv) = connection.open_bi().await.map_err(|_| 0u16)?;
    send.write_all(&stream).await.map_err(|_| 0u16)?;
    send.finish().map_err(|_| 0u16)?;
    let data = recv.read_to_end(MAX_STREAM).await.map_err(|_| 0u16)?;
    let mut answer = match kudurru_core::doq::reply(&data) {
        Ok(answer) if answer.len() >= 2 => answer.to_vec(),
        _ => return Err(0),
    };
    if answer[..2] == [0, 0] {
        answer[..2].copy_from_slice(&id);
    }
    Ok(answer)
}

/// An HTTP/3 connection's request side, for [`Carrier::H3`].
#[derive(Clone)]
pub(crate) struct H3 {
    connection: quinn::Connection,
    authority: Rc<str>,
    path: Rc<str>,
    method: Method,
}

impl H3 {
    /// One query as one request: its answer, or `Err(status)` (0 for a reset or a connection
    /// error).
    pub(crate) async fn exchange(self, message: Vec<u8>) -> Result<Vec<u8>, u16> {
        let target;
        let path = match self.method {
            Method::Post => &*self.path,
            Method::Get => {
                use base64::Engine;
                let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&message);
                target = format!("{}?dns={encoded}", self.path);
                &target
            }
        };
        let mut request = Vec::with_capacity(message.len() + 96);
        write_frame(
            &mut request,
            frame_type::HEADERS,
            &client::request_fields(self.method == Method::Post, &self.authority, path),
        );
        if self.method == Method::Post {
            write_frame(&mut request, frame_type::DATA, &message);
        }
        let (mut send, mut recv) = self.connection.open_bi().await.map_err(|_| 0u16)?;
        send.write_all(&request).await.map_err(|_| 0u16)?;
        send.finish().map_err(|_| 0u16)?;
        let data = recv
            .read_to_end(MAX_STREAM + 1024)
            .await
            .map_err(|_| 0u16)?;
        match client::response(&data) {
            Ok((200, answer)) => Ok(answer),
            Ok((status, _)) => Err(status),
            Err(_) => Err(0),
        }
    }
}
