//! The client side of DNS over HTTPS on HTTP/3, sans-IO: a request stream's bytes out, a
//! response stream (read to its FIN) in. Shared by kudurru's DoH3 upstreams
//! (kudurru-transports) and kudurru-bench's h3 flows.
//!
//! ```text
//! request:  HEADERS (static QPACK refs and raw literals) ‖ DATA (POST) ─▶ FIN
//! response: HEADERS (:status) ‖ DATA… ‖ [trailers] ─▶ response() ─▶ (status, body)
//! ```
//! The client advertises no QPACK dynamic table (its control stream carries an empty
//! SETTINGS, [`CONTROL_STREAM`]), so a server's field sections may use only the static table,
//! and the client never opens QPACK encoder or decoder streams.

use super::{frame_type, qpack, read_varint, write_frame};

/// The client's control stream: its type (0x00) and an empty SETTINGS frame (RFC 9114 §6.2.1,
/// §7.2.4), held open for the connection's life.
pub const CONTROL_STREAM: [u8; 3] = [0x00, 0x04, 0x00];

/// Static table entries (RFC 9204 Appendix A) the requests use.
mod static_index {
    pub(super) const AUTHORITY: u8 = 0;
    pub(super) const PATH: u8 = 1;
    pub(super) const METHOD_GET: u8 = 17;
    pub(super) const METHOD_POST: u8 = 20;
    pub(super) const SCHEME_HTTPS: u8 = 23;
    pub(super) const ACCEPT_DNS_MESSAGE: u8 = 30;
    pub(super) const CONTENT_TYPE_DNS_MESSAGE: u8 = 44;
}

/// A request's field section, a POST (with `content-type`) or a GET: static references and
/// raw literals only.
pub fn request_fields(post: bool, authority: &str, path: &str) -> Vec<u8> {
    use static_index::*;
    let mut fields = vec![0, 0]; // Required Insert Count 0, Base 0
    let index = if post { METHOD_POST } else { METHOD_GET };
    for index in [index, SCHEME_HTTPS] {
        fields.push(0xc0 | index); // indexed, static
    }
    for (index, value) in [(AUTHORITY, authority), (PATH, path)] {
        fields.push(0x50 | index); // literal with a static name reference
        crate::http::integer::write(&mut fields, 0x00, 7, value.len() as u64);
        fields.extend_from_slice(value.as_bytes());
    }
    fields.push(0xc0 | ACCEPT_DNS_MESSAGE);
    if post {
        fields.push(0xc0 | CONTENT_TYPE_DNS_MESSAGE);
    }
    fields
}

/// The whole request stream of a DoH POST of `message` to `path` at `authority` (send it, then
/// FIN).
pub fn post_request(authority: &str, path: &str, message: &[u8]) -> Vec<u8> {
    let fields = request_fields(true, authority, path);
    let mut request = Vec::with_capacity(fields.len() + message.len() + 16);
    write_frame(&mut request, frame_type::HEADERS, &fields);
    write_frame(&mut request, frame_type::DATA, message);
    request
}

/// Why a response stream is not a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseError {
    /// The stream ends inside a frame.
    #[error("HTTP/3 response stream ends inside a frame")]
    Truncated,
    /// No HEADERS frame before the stream's end.
    #[error("HTTP/3 response has no HEADERS")]
    NoHeaders,
    /// DATA before the response's HEADERS (RFC 9114 §4.1).
    #[error("HTTP/3 DATA before HEADERS")]
    DataFirst,
    /// The field section does not decode.
    #[error("HTTP/3 response field section: {0}")]
    Fields(qpack::DecodeError),
    /// No `:status`, or one that is not a three-digit number.
    #[error("HTTP/3 response has no valid :status")]
    Status,
    /// A frame a response stream may not carry (SETTINGS, GOAWAY… or an HTTP/2-only type).
    #[error("HTTP/3 frame not allowed on a response stream")]
    UnexpectedFrame,
}

/// The final status and body of a response stream read to its end. Interim (1xx) responses
/// are skipped, unknown frame types ignored (RFC 9114 §9), trailers ignored.
pub fn response(mut stream: &[u8]) -> Result<(u16, Vec<u8>), ResponseError> {
    let mut status = None;
    let mut body = Vec::new();
    while !stream.is_empty() {
        let kind = read_varint(&mut stream).ok_or(ResponseError::Truncated)?;
        let len = read_varint(&mut stream).ok_or(ResponseError::Truncated)?;
        let len = usize::try_from(len).map_err(|_| ResponseError::Truncated)?;
        let payload = stream.get(..len).ok_or(ResponseError::Truncated)?;
        stream = stream.get(len..).ok_or(ResponseError::Truncated)?;
        match kind {
            frame_type::HEADERS if status.is_none() => {
                let mut code: Option<u16> = None;
                let mut seen = false;
                qpack::decode(payload, |name, value| {
                    if name == b":status" && !seen {
                        seen = true;
                        code = std::str::from_utf8(value)
                            .ok()
                            .filter(|v| v.len() == 3)
                            .and_then(|v| v.parse().ok())
                            .filter(|c| (100..600).contains(c));
                    }
                })
                .map_err(ResponseError::Fields)?;
                let code = code.ok_or(ResponseError::Status)?;
                // An interim response: the final one follows in another HEADERS.
                if code >= 200 {
                    status = Some(code);
                }
            }
            frame_type::DATA if status.is_some() => body.extend_from_slice(payload),
            frame_type::HEADERS => {} // trailers
            frame_type::DATA => return Err(ResponseError::DataFirst),
            frame_type::CANCEL_PUSH
            | frame_type::SETTINGS
            | frame_type::GOAWAY
            | frame_type::MAX_PUSH_ID
            | frame_type::PUSH_PROMISE => return Err(ResponseError::UnexpectedFrame),
            kind if frame_type::http2_only(kind) => return Err(ResponseError::UnexpectedFrame),
            _ => {}
        }
    }
    status
        .map(|status| (status, body))
        .ok_or(ResponseError::NoHeaders)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(section: &[u8]) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        qpack::decode(section, |name, value| {
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
        let post = decoded(&request_fields(true, "dns.example:8443", "/q"));
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
        let get = decoded(&request_fields(false, "localhost", &long_path));
        assert_eq!(get[0], field(":method", "GET"));
        assert_eq!(get[3], field(":path", &long_path));
        assert_eq!(get.len(), 5, "no content-type on a GET");
    }

    #[test]
    fn a_post_request_is_a_request_the_server_side_reads() {
        let stream = post_request("dns.example", "/dns-query", b"\x00\x00query");
        let mut request = super::super::RequestStream::new(4096, 65_535);
        let request = request
            .receive(&stream, true)
            .expect("a valid request")
            .expect("complete");
        assert_eq!(request.body, Ok(b"\x00\x00query".to_vec()));
    }

    #[test]
    fn responses_give_their_status_and_body_and_refuse_what_is_not_one() {
        let mut head = Vec::new();
        qpack::encode_response(
            200,
            &[(b"content-type", b"application/dns-message")],
            &mut head,
        );
        let mut stream = Vec::new();
        write_frame(&mut stream, frame_type::HEADERS, &head);
        write_frame(&mut stream, 0x21, b"reserved frame type, skipped");
        write_frame(&mut stream, frame_type::DATA, b"\x12\x34");
        write_frame(&mut stream, frame_type::DATA, b"\x56");
        assert_eq!(response(&stream), Ok((200, vec![0x12, 0x34, 0x56])));

        let mut interim = Vec::new();
        let mut early = Vec::new();
        qpack::encode_response(103, &[], &mut early);
        write_frame(&mut interim, frame_type::HEADERS, &early);
        interim.extend_from_slice(&stream);
        assert_eq!(response(&interim), Ok((200, vec![0x12, 0x34, 0x56])));

        let mut not_found = Vec::new();
        let mut head = Vec::new();
        qpack::encode_response(404, &[], &mut head);
        write_frame(&mut not_found, frame_type::HEADERS, &head);
        assert_eq!(response(&not_found), Ok((404, Vec::new())));

        let mut data_first = Vec::new();
        write_frame(&mut data_first, frame_type::DATA, b"x");
        assert_eq!(response(&data_first), Err(ResponseError::DataFirst));
        assert_eq!(
            response(&stream[..stream.len() - 1]),
            Err(ResponseError::Truncated)
        );
        assert_eq!(response(&[]), Err(ResponseError::NoHeaders));
        let mut settings = not_found.clone();
        write_frame(&mut settings, frame_type::SETTINGS, b"");
        assert_eq!(response(&settings), Err(ResponseError::UnexpectedFrame));
        let mut no_status = Vec::new();
        write_frame(&mut no_status, frame_type::HEADERS, &[0, 0]);
        assert_eq!(response(&no_status), Err(ResponseError::Status));
    }
}
