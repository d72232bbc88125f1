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

use kudurru_core::http3::{frame_type, write_frame};

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
            .write_all(&[0x00, 0x04, 0x00])
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
    let len = data
        .get(..2)
        .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])));
    let mut answer = match len {
        Some(len) if data.len() == 2 + len && len >= 2 => data[2..].to_vec(),
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

/// Static table entries (RFC 9204 Appendix A) the requests use.
mod qpack_static {
    pub(super) const AUTHORITY: u8 = 0;
    pub(super) const PATH: u8 = 1;
    pub(super) const METHOD_GET: u8 = 17;
    pub(super) const METHOD_POST: u8 = 20;
    pub(super) const SCHEME_HTTPS: u8 = 23;
    pub(super) const ACCEPT_DNS_MESSAGE: u8 = 30;
    pub(super) const CONTENT_TYPE_DNS_MESSAGE: u8 = 44;
}

/// A request's field section: static references and raw literals only (the server advertises
/// no dynamic table).
fn request_fields(method: Method, authority: &str, path: &str) -> Vec<u8> {
    use qpack_static::*;
    let mut fields = vec![0, 0]; // Required Insert Count 0, Base 0
    let method = if method == Method::Post {
        METHOD_POST
    } else {
        METHOD_GET
    };
    for index in [method, SCHEME_HTTPS] {
        fields.push(0xc0 | index); // indexed, static
    }
    for (index, value) in [(AUTHORITY, authority), (PATH, path)] {
        fields.push(0x50 | index); // literal with a static name reference
        kudurru_core::http::integer::write(&mut fields, 0x00, 7, value.len() as u64);
        fields.extend_from_slice(value.as_bytes());
    }
    fields.push(0xc0 | ACCEPT_DNS_MESSAGE);
    if method == METHOD_POST {
        fields.push(0xc0 | CONTENT_TYPE_DNS_MESSAGE);
    }
    fields
}

/// The status and body of a response stream read to its end; `None` when it is not one.
fn parse_response(mut stream: &[u8]) -> Option<(u16, Vec<u8>)> {
    use kudurru_core::http3::read_varint;
    let mut status = None;
    let mut body = Vec::new();
    while !stream.is_empty() {
        let kind = read_varint(&mut stream)?;
        let len = usize::try_from(read_varint(&mut stream)?).ok()?;
        let payload = stream.get(..len)?;
        stream = &stream[len..];
        match kind {
            frame_type::HEADERS if status.is_none() => {
                let mut code = None;
                kudurru_core::http3::qpack::decode(payload, |name, value| {
                    if name == b":status" {
                        code = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
                    }
                })
                .ok()?;
                status = Some(code?);
            }
            frame_type::DATA if status.is_some() => body.extend_from_slice(payload),
            frame_type::HEADERS => {} // trailers
            frame_type::DATA => return None,
            _ => {} // unknown frame types are skipped (RFC 9114 §9)
        }
    }
    Some((status?, body))
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
            &request_fields(self.method, &self.authority, path),
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
        match parse_response(&data) {
            Some((200, answer)) => Ok(answer),
            Some((status, _)) => Err(status),
            None => Err(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(section: &[u8]) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        kudurru_core::http3::qpack::decode(section, |name, value| {
            fields.push((
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            ))
        })
        .expect("the request's field section decodes");
        fields
    }

    #[test]
    fn requests_decode_with_kudurrus_qpack_to_the_doh_fields() {
        let long_path = format!("/dns-query?dns={}", "A".repeat(300));
        let post = decoded(&request_fields(Method::Post, "dns.example:8443", "/q"));
        let field = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            post,
            [
                field(":method", "POST"),
                field(":scheme", "https"),
                field(":authority", "dns.example:8443"),
                field(":path", "/q"),
                field("accept", "application/dns-message"),
                field("content-type", "application/dns-message"),
            ]
        );
        // A path past the 7-bit length prefix takes continuation octets.
        let get = decoded(&request_fields(Method::Get, "localhost", &long_path));
        assert_eq!(get[0], field(":method", "GET"));
        assert_eq!(get[3], field(":path", &long_path));
        assert_eq!(get.len(), 5, "no content-type on a GET");
    }

    #[test]
    fn responses_give_their_status_and_body_and_refuse_what_is_not_one() {
        let mut head = Vec::new();
        kudurru_core::http3::qpack::encode_response(
            200,
            &[(b"content-type", b"application/dns-message")],
            &mut head,
        );
        let mut stream = Vec::new();
        write_frame(&mut stream, frame_type::HEADERS, &head);
        write_frame(&mut stream, 0x21, b"reserved frame type, skipped");
        write_frame(&mut stream, frame_type::DATA, b"\x12\x34");
        write_frame(&mut stream, frame_type::DATA, b"\x56");
        assert_eq!(parse_response(&stream), Some((200, vec![0x12, 0x34, 0x56])));

        let mut not_found = Vec::new();
        let mut head = Vec::new();
        kudurru_core::http3::qpack::encode_response(404, &[], &mut head);
        write_frame(&mut not_found, frame_type::HEADERS, &head);
        assert_eq!(parse_response(&not_found), Some((404, Vec::new())));

        let mut data_first = Vec::new();
        write_frame(&mut data_first, frame_type::DATA, b"x");
        assert_eq!(parse_response(&data_first), None, "DATA before HEADERS");
        assert_eq!(
            parse_response(&stream[..stream.len() - 1]),
            None,
            "truncated frame"
        );
        assert_eq!(parse_response(&[]), None, "no HEADERS at all");
    }
}
