//! DNS over HTTPS request semantics (RFC 8484), sans-IO: which HTTP requests carry a DNS query,
//! the status of those that do not, and the freshness lifetime of an answer.
//!
//! ```text
//! method + target + content-type ─▶ request() ─┬ Get(message)   (`?dns=` base64url)
//!                                              ├ Post           (body: application/dns-message)
//!                                              └ RequestError ─▶ status() 400 / 404 / 405 / 413 / 415
//! message ─▶ check_message() ─▶ 400 unless it is a DNS query (header, QR clear)
//! answer  ─▶ max_age()       ─▶ Cache-Control: max-age (smallest TTL, RFC 8484 §5.1)
//! ```
//! HTTP/2, HTTP/1.1 and HTTP/3 share these rules; each transport only moves bytes.

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::wire::{self, HEADER_LEN, rtype};

/// The media type of a DNS message in HTTP (RFC 8484 §6).
pub const MEDIA_TYPE: &str = "application/dns-message";

/// The largest DNS message a request may carry (the two-byte length of RFC 1035 §4.2.2).
pub const MAX_MESSAGE: usize = 65_535;

/// The largest request head (request line and headers) accepted, on any HTTP version. A GET
/// carries a message of up to about 12 KB in it; larger ones need POST.
pub const MAX_HEAD: usize = 16 * 1024;
/// Headers an HTTP/1.1 request may have.
pub const MAX_HEADERS: usize = 64;

/// base64url without padding (RFC 8484 §4.1); padding that a client sends anyway is accepted.
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// What a valid request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// A GET whose `dns` parameter decoded to this message.
    Get(Vec<u8>),
    /// A POST; the message is its body.
    Post,
}

/// Why a request carries no DNS query, with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.reason())]
#[non_exhaustive]
pub enum RequestError {
    /// The path is not the listener's.
    NotFound,
    /// Neither GET nor POST.
    Method,
    /// A GET without a `dns` parameter.
    MissingParameter,
    /// A `dns` parameter that is not base64url.
    BadParameter,
    /// A POST whose body is not `application/dns-message`.
    MediaType,
    /// A message over 65535 bytes.
    TooLarge,
    /// Bytes that are not a DNS query (shorter than a header, or a response).
    NotAQuery,
    /// An HTTP/1.1 request head that does not parse (or has conflicting lengths).
    BadHead,
    /// An HTTP/1.1 request head over [`MAX_HEAD`] bytes or [`MAX_HEADERS`] headers.
    HeadTooLarge,
    /// An HTTP/1.1 request with a transfer coding other than `chunked`.
    TransferEncoding,
}

impl RequestError {
    /// The HTTP status code to answer with.
    pub fn status(self) -> u16 {
        match self {
            Self::NotFound => 404,
            Self::Method => 405,
            Self::MissingParameter | Self::BadParameter | Self::NotAQuery | Self::BadHead => 400,
            Self::MediaType => 415,
            Self::TooLarge => 413,
            Self::HeadTooLarge => 431,
            Self::TransferEncoding => 501,
        }
    }

    /// What is wrong, for the error body.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotFound => "no DNS endpoint at this path",
            Self::Method => "only GET and POST are allowed",
            Self::MissingParameter => "the dns query parameter is missing",
            Self::BadParameter => "the dns query parameter is not base64url",
            Self::MediaType => "the content type must be application/dns-message",
            Self::TooLarge => "the DNS message is longer than 65535 bytes",
            Self::NotAQuery => "the message is not a DNS query",
            Self::BadHead => "the request head is not valid HTTP/1.1",
            Self::HeadTooLarge => "the request head is over 16 KiB or 64 headers",
            Self::TransferEncoding => "the only transfer coding supported is chunked",
        }
    }
}

/// An HTTP error a DoH listener answers with, in every HTTP version: its status code and the
/// reason its JSON body carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The status code.
    pub code: u16,
    /// What was wrong, for the body.
    pub reason: &'static str,
}

impl From<RequestError> for Status {
    fn from(e: RequestError) -> Self {
        Self {
            code: e.status(),
            reason: e.reason(),
        }
    }
}

impl Status {
    /// 408: the request body did not arrive within the idle timeout.
    pub const TIMEOUT: Self = Self {
        code: 408,
        reason: "the request body did not arrive in time",
    };
    /// 411: an HTTP/1.1 POST with neither a length nor chunking.
    pub const LENGTH_REQUIRED: Self = Self {
        code: 411,
        reason: "a POST needs a Content-Length",
    };

    /// The JSON body of the error response.
    pub fn body(self) -> Vec<u8> {
        format!(
            "{{\"error\":\"{}\",\"status\":{}}}\n",
            self.reason, self.code
        )
        .into_bytes()
    }

    /// The HTTP/1.1 reason phrase of the status line (RFC 9110 §15).
    pub fn phrase(self) -> &'static str {
        match self.code {
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            411 => "Length Required",
            413 => "Content Too Large",
            415 => "Unsupported Media Type",
            431 => "Request Header Fields Too Large",
            501 => "Not Implemented",
            _ => "Error",
        }
    }
}

/// Classifies a request head: `method` and `target` (origin form, `/path?query`) as sent,
/// `path` the listener's endpoint, `content_type` the header's value if present.
pub fn request(
    method: &[u8],
    target: &[u8],
    path: &str,
    content_type: Option<&[u8]>,
) -> Result<Request, RequestError> {
    let (target_path, query) = match target.iter().position(|&b| b == b'?') {
        Some(at) => (&target[..at], Some(&target[at + 1..])),
        None => (target, None),
    };
    if match_path(target_path, path).is_none() {
        return Err(RequestError::NotFound);
    }
    match method {
        b"GET" => {
            let encoded = query
                .into_iter()
                .flat_map(|q| q.split(|&b| b == b'&'))
                .find_map(|pair| pair.strip_prefix(b"dns="))
                .ok_or(RequestError::MissingParameter)?;
            // base64 of 65535 bytes is 87380 characters; longer cannot fit.
            if encoded.len() > MAX_MESSAGE.div_ceil(3) * 4 {
                return Err(RequestError::TooLarge);
            }
            let message = BASE64URL
                .decode(encoded)
                .map_err(|_| RequestError::BadParameter)?;
            check_length(message.len())?;
            Ok(Request::Get(message))
        }
        b"POST" => {
            if !content_type.is_some_and(is_dns_message) {
                return Err(RequestError::MediaType);
            }
            Ok(Request::Post)
        }
        _ => Err(RequestError::Method),
    }
}

/// Whether a `Content-Type` value names `application/dns-message` (case-insensitive,
/// parameters allowed).
fn is_dns_message(value: &[u8]) -> bool {
    let essence = value.split(|&b| b == b';').next().unwrap_or_default();
    essence
        .trim_ascii()
        .eq_ignore_ascii_case(MEDIA_TYPE.as_bytes())
}

/// Refuses a message (or a declared body length) over [`MAX_MESSAGE`].
pub fn check_length(len: usize) -> Result<(), RequestError> {
    if len > MAX_MESSAGE {
        Err(RequestError::TooLarge)
    } else {
        Ok(())
    }
}

/// Refuses bytes that are not a DNS query at all: shorter than a header, or with QR set. (A
/// query that is malformed past its header gets FORMERR from the pipeline, inside a 200.)
pub fn check_message(message: &[u8]) -> Result<(), RequestError> {
    check_length(message.len())?;
    match wire::header_flags(message) {
        Some(flags) if message.len() >= HEADER_LEN && flags & 0x8000 == 0 => Ok(()),
        _ => Err(RequestError::NotAQuery),
    }
}

/// A client ID carried in a DoH path (`/dns-query/{id}`, as AdGuard Home's): a lowercase DNS
/// label (a-z, 0-9, `-`, at most 63 bytes), held inline so a request's ID costs no allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ClientId {
    bytes: [u8; 63],
    len: u8,
}

impl ClientId {
    /// `label` as a client ID, if it is a lowercase DNS label.
    pub fn from_label(label: &[u8]) -> Option<Self> {
        let valid = !label.is_empty()
            && label.len() <= 63
            && label
                .iter()
                .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && label[0] != b'-'
            && label[label.len() - 1] != b'-';
        if !valid {
            return None;
        }
        let mut bytes = [0; 63];
        bytes[..label.len()].copy_from_slice(label);
        Some(Self {
            bytes,
            len: label.len() as u8,
        })
    }

    /// The ID.
    pub fn as_str(&self) -> &str {
        // Only ASCII letters, digits and hyphens are ever stored.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Debug for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ClientId").field(&self.as_str()).finish()
    }
}

/// Whether `target_path` (a request target without its query) is the endpoint at `path`,
/// with the client ID a further segment carries: `Some(None)` for the path itself,
/// `Some(Some(id))` for `{path}/{id}`, `None` for anything else (404).
pub fn match_path(target_path: &[u8], path: &str) -> Option<Option<ClientId>> {
    let rest = target_path.strip_prefix(path.as_bytes())?;
    match rest {
        [] => Some(None),
        [b'/', id @ ..] => ClientId::from_label(id).map(Some),
        _ => None,
    }
}

/// The client ID in a request `target` for the endpoint at `path`, if it carries one.
pub fn client_id(target: &[u8], path: &str) -> Option<ClientId> {
    let target_path = match target.iter().position(|&b| b == b'?') {
        Some(at) => &target[..at],
        None => target,
    };
    match_path(target_path, path).flatten()
}

/// A complete HTTP/1.1 request head.
#[derive(Debug)]
pub struct Http1Head {
    /// Bytes of the head, the blank line included: the body (if any) starts here.
    pub len: usize,
    /// What the request asks for, or why it carries no query.
    pub request: Result<Request, RequestError>,
    /// The declared body length.
    pub content_length: Option<usize>,
    /// Whether the body is chunked (`Transfer-Encoding: chunked`; see [`chunked_body`]).
    pub chunked: bool,
    /// Whether the connection stays open after the answer (RFC 9112 §9.3).
    pub keep_alive: bool,
    /// The client ID of the target's path (`/dns-query/{id}`).
    pub client_id: Option<ClientId>,
}

/// Parses an HTTP/1.1 (or 1.0) request head at the start of `buffer` for the endpoint at
/// `path`: `Ok(None)` while it is incomplete; `Err` when the connection cannot go on (the head
/// is malformed, too large, or frames its body in a way kudurru does not take).
pub fn parse_http1_head(buffer: &[u8], path: &str) -> Result<Option<Http1Head>, RequestError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buffer) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buffer.len() >= MAX_HEAD => {
            return Err(RequestError::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::HeadTooLarge),
        Err(_) => return Err(RequestError::BadHead),
    };
    if len > MAX_HEAD {
        return Err(RequestError::HeadTooLarge);
    }
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        return Err(RequestError::BadHead);
    };
    let values = |name: &'static str| {
        request
            .headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let chunked = transfer_coding(values("transfer-encoding"))?;
    // Every Content-Length must agree (RFC 9112 §6.3: a conflict is unrecoverable).
    let mut content_length = None;
    for value in values("content-length") {
        let parsed = std::str::from_utf8(value)
            .ok()
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<usize>().ok())
            .ok_or(RequestError::BadHead)?;
        if content_length.is_some_and(|seen| seen != parsed) {
            return Err(RequestError::BadHead);
        }
        content_length = Some(parsed);
    }
    // Both framings at once is how requests are smuggled: refuse (RFC 9112 §6.1 allows it).
    if chunked && content_length.is_some() {
        return Err(RequestError::BadHead);
    }
    let has_token = |token: &str| {
        values("connection").any(|v| {
            v.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        })
    };
    // HTTP/1.1 keeps the connection unless told otherwise; HTTP/1.0 only when asked.
    let keep_alive = if version >= 1 {
        !has_token("close")
    } else {
        has_token("keep-alive")
    };
    let request = self::request(
        method.as_bytes(),
        target.as_bytes(),
        path,
        values("content-type").next(),
    );
    Ok(Some(Http1Head {
        len,
        request,
        content_length,
        chunked,
        keep_alive,
        client_id: client_id(target.as_bytes(), path),
    }))
}

/// Whether the `Transfer-Encoding` field values frame a chunked body (RFC 9112 §6.1, §7):
/// `chunked`, once and last; any other coding is not supported (501); a coding list that does
/// not end in `chunked` leaves the body length unknowable (400).
fn transfer_coding<'a>(values: impl Iterator<Item = &'a [u8]>) -> Result<bool, RequestError> {
    let mut codings = 0usize;
    let mut last_chunked = false;
    for coding in values.flat_map(|v| v.split(|&b| b == b',')) {
        let coding = coding.trim_ascii();
        if coding.is_empty() {
            continue;
        }
        if last_chunked {
            // A coding after chunked, or chunked twice.
            return Err(RequestError::BadHead);
        }
        codings += 1;
        last_chunked = coding.eq_ignore_ascii_case(b"chunked");
        if !last_chunked {
            return Err(RequestError::TransferEncoding);
        }
    }
    Ok(codings > 0)
}

/// Most bytes a chunked body may take on the wire (data, chunk framing and trailers): enough
/// for a maximum-size message in reasonable chunks, bounded so a trickle of tiny chunks cannot
/// make the buffer grow without end.
pub const MAX_CHUNKED: usize = 2 * MAX_MESSAGE + MAX_HEAD;

/// Decodes a chunked body (RFC 9112 §7.1) at the start of `buffer`: `Ok(None)` while it is
/// incomplete, else the data and how many bytes of `buffer` the body took (trailers included,
/// and ignored). Data over [`MAX_MESSAGE`] or a body over [`MAX_CHUNKED`] is refused (413),
/// malformed framing is a bad request (400).
pub fn chunked_body(buffer: &[u8]) -> Result<Option<(Vec<u8>, usize)>, RequestError> {
    let mut data = Vec::new();
    let mut at = 0;
    let outcome = loop {
        let (line, size) = match httparse::parse_chunk_size(&buffer[at..]) {
            Ok(httparse::Status::Complete(parsed)) => parsed,
            Ok(httparse::Status::Partial) => break None,
            Err(_) => return Err(RequestError::BadHead),
        };
        let size = usize::try_from(size).map_err(|_| RequestError::TooLarge)?;
        check_length(data.len().saturating_add(size))?;
        at += line;
        if size == 0 {
            // The trailer section, ended by an empty line.
            let mut trailers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            match httparse::parse_headers(&buffer[at..], &mut trailers) {
                Ok(httparse::Status::Complete((len, _))) => break Some(at + len),
                Ok(httparse::Status::Partial) => break None,
                Err(httparse::Error::TooManyHeaders) => return Err(RequestError::HeadTooLarge),
                Err(_) => return Err(RequestError::BadHead),
            }
        }
        let Some(chunk) = buffer.get(at..at + size + 2) else {
            break None;
        };
        if &chunk[size..] != b"\r\n" {
            return Err(RequestError::BadHead);
        }
        data.extend_from_slice(&chunk[..size]);
        at += size + 2;
    };
    match outcome {
        Some(len) if len <= MAX_CHUNKED => Ok(Some((data, len))),
        None if buffer.len() < MAX_CHUNKED => Ok(None),
        _ => Err(RequestError::TooLarge),
    }
}

/// The freshness lifetime of an answer for `Cache-Control: max-age`: its smallest record TTL
/// (OPT excluded), 0 for an answer without records (RFC 8484 §5.1).
pub fn max_age(reply: &[u8]) -> u32 {
    min_ttl(reply).unwrap_or(0)
}

/// The smallest TTL of the records in all sections of `msg`, OPT excluded; `None` when there
/// is none (or the message is cut short where the walk stops).
pub fn min_ttl(msg: &[u8]) -> Option<u32> {
    let count = |at| wire::read_u16(msg, at).map(usize::from);
    let (questions, records) = (count(4)?, count(6)? + count(8)? + count(10)?);
    let mut pos = HEADER_LEN;
    for _ in 0..questions {
        pos = wire::skip_name(msg, pos)? + 4;
    }
    let mut smallest: Option<u32> = None;
    for _ in 0..records {
        let rr = wire::record_at(msg, pos)?;
        if rr.rtype != rtype::OPT {
            let ttl = wire::read_u32(msg, rr.ttl_at)?;
            smallest = Some(smallest.map_or(ttl, |s| s.min(ttl)));
        }
        pos = rr.end;
    }
    smallest
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client ID is one lowercase label after the endpoint's path (AdGuard Home's
    /// `/dns-query/{id}`); anything else after the path is another resource (404), not an ID.
    #[test]
    fn a_doh_path_segment_after_the_endpoint_is_the_client_id() {
        let id = |target: &[u8]| client_id(target, PATH).map(|id| id.as_str().to_owned());
        assert_eq!(id(b"/dns-query/kids?dns=AAAB"), Some("kids".into()));
        assert_eq!(id(b"/dns-query/office-2"), Some("office-2".into()));
        assert_eq!(id(b"/dns-query?dns=AAAB"), None);
        for not_found in [
            &b"/dns-query/Kids"[..],
            b"/dns-query/kids/more",
            b"/dns-query/",
            b"/dns-query/-kids",
            b"/dns-queryx",
            b"/dns-query/a.b",
        ] {
            assert_eq!(match_path(not_found, PATH), None, "{not_found:?}");
            assert_eq!(
                request(b"POST", not_found, PATH, Some(b"application/dns-message")),
                Err(RequestError::NotFound),
                "{not_found:?}"
            );
        }
        let long = [b'a'; 64];
        let mut target = b"/dns-query/".to_vec();
        target.extend_from_slice(&long);
        assert_eq!(
            match_path(&target, PATH),
            None,
            "a label is at most 63 bytes"
        );
        target.pop();
        assert_eq!(
            match_path(&target, PATH)
                .flatten()
                .map(|id| id.as_str().len()),
            Some(63)
        );
        assert_eq!(
            request(
                b"POST",
                b"/dns-query/kids",
                PATH,
                Some(b"application/dns-message")
            ),
            Ok(Request::Post)
        );
        let head = parse_http1_head(
            b"POST /dns-query/kids HTTP/1.1\r\nContent-Type: application/dns-message\r\nContent-Length: 12\r\n\r\n",
            PATH,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            head.client_id.map(|id| id.as_str().to_owned()),
            Some("kids".into())
        );
    }
    use crate::wire::tests::query;

    const PATH: &str = "/dns-query";

    fn encode(message: &[u8]) -> Vec<u8> {
        let mut target = b"/dns-query?dns=".to_vec();
        target.extend_from_slice(BASE64URL.encode(message).as_bytes());
        target
    }

    #[test]
    fn rfc8484_get_decodes_the_dns_parameter() {
        let q = query("example.com.", rtype::A, None);
        assert_eq!(
            request(b"GET", &encode(&q), PATH, None),
            Ok(Request::Get(q.clone()))
        );
        // Other parameters around it, and padding some clients send anyway.
        let mut target = b"/dns-query?ct=x&dns=".to_vec();
        target.extend_from_slice(
            base64::engine::general_purpose::URL_SAFE
                .encode(&q)
                .as_bytes(),
        );
        target.extend_from_slice(b"&z=1");
        assert_eq!(request(b"GET", &target, PATH, None), Ok(Request::Get(q)));
    }

    #[test]
    fn rfc8484_4_1_example_query_decodes() {
        // The GET example of RFC 8484 §4.1.1: www.example.com A, ID 0.
        let target = b"/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB";
        let Ok(Request::Get(message)) = request(b"GET", target, PATH, None) else {
            panic!("the RFC's example is a valid request");
        };
        assert_eq!(&message[..2], &[0, 0]);
        assert_eq!(message.len(), 33);
        assert_eq!(check_message(&message), Ok(()));
    }

    #[test]
    fn bad_requests_get_their_status() {
        let q = query("example.com.", rtype::A, None);
        // (method, target, content type, status)
        type Case<'a> = (&'a [u8], &'a [u8], Option<&'a [u8]>, u16);
        let cases: [Case<'_>; 9] = [
            (b"GET", b"/other", None, 404),
            (b"GET", b"/dns-query/x/y?dns=AAAA", None, 404),
            (b"PUT", b"/dns-query", None, 405),
            (b"HEAD", b"/dns-query?dns=AAAA", None, 405),
            (b"GET", b"/dns-query", None, 400),
            (b"GET", b"/dns-query?name=example.com", None, 400),
            (b"GET", b"/dns-query?dns=not*base64", None, 400),
            (b"POST", b"/dns-query", Some(b"text/plain"), 415),
            (b"POST", b"/dns-query", None, 415),
        ];
        for (method, target, content_type, status) in cases {
            let got = request(method, target, PATH, content_type).map_err(RequestError::status);
            assert_eq!(
                got,
                Err(status),
                "{} {}",
                String::from_utf8_lossy(method),
                String::from_utf8_lossy(target)
            );
        }
        // A GET whose parameter decodes to more than a DNS message can hold.
        let huge = vec![0u8; MAX_MESSAGE + 1];
        assert_eq!(
            request(b"GET", &encode(&huge), PATH, None),
            Err(RequestError::TooLarge)
        );
        assert_eq!(check_length(MAX_MESSAGE + 1), Err(RequestError::TooLarge));
        assert_eq!(check_length(MAX_MESSAGE), Ok(()));
        assert_eq!(request(b"GET", &encode(&q), PATH, None).map(|_| ()), Ok(()));
    }

    #[test]
    fn post_content_type_is_matched_like_a_media_type() {
        for ok in [
            &b"application/dns-message"[..],
            b"Application/DNS-Message",
            b"application/dns-message; charset=binary",
        ] {
            assert_eq!(
                request(b"POST", b"/dns-query", PATH, Some(ok)),
                Ok(Request::Post)
            );
        }
        assert_eq!(
            request(
                b"POST",
                b"/dns-query",
                PATH,
                Some(b"application/dns-messages")
            ),
            Err(RequestError::MediaType)
        );
    }

    #[test]
    fn only_queries_are_messages() {
        let mut q = query("example.com.", rtype::A, None);
        assert_eq!(check_message(&q), Ok(()));
        assert_eq!(check_message(&q[..11]), Err(RequestError::NotAQuery));
        assert_eq!(check_message(&[]), Err(RequestError::NotAQuery));
        q[2] |= 0x80;
        assert_eq!(check_message(&q), Err(RequestError::NotAQuery));
    }

    fn head(raw: &[u8]) -> Result<Option<Http1Head>, RequestError> {
        parse_http1_head(raw, PATH)
    }

    #[test]
    fn http1_heads_parse_keep_alive_and_lengths() {
        let get = head(b"GET /dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(matches!(get.request, Ok(Request::Get(_))));
        assert!(get.keep_alive);
        let raw = b"POST /dns-query HTTP/1.1\r\ncontent-type: application/dns-message\r\nContent-Length: 33\r\nConnection: keep-alive, close\r\n\r\nbody";
        let post = head(raw).unwrap().unwrap();
        assert!(matches!(post.request, Ok(Request::Post)));
        assert_eq!(post.content_length, Some(33));
        assert!(!post.keep_alive);
        assert_eq!(post.len, raw.len() - 4, "the head ends before the body");
        let old = head(b"GET /dns-query?dns=AAAA HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!old.keep_alive, "HTTP/1.0 closes unless asked");
        let old = head(b"GET /dns-query?dns=AAAA HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(old.keep_alive);
        let twice =
            head(b"POST /dns-query HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n");
        assert_eq!(twice.unwrap().unwrap().content_length, Some(5));
    }

    #[test]
    fn chunked_bodies_decode_with_extensions_and_trailers() {
        let body = b"5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        let (data, len) = chunked_body(body).unwrap().unwrap();
        assert_eq!(data, b"hello world");
        assert_eq!(
            &body[len..],
            b"NEXT",
            "the body ends where the next request starts"
        );
        assert_eq!(chunked_body(b"0\r\n\r\n"), Ok(Some((Vec::new(), 5))));
        // Incomplete at every cut.
        let whole = &body[..body.len() - 4];
        for cut in 0..whole.len() {
            assert_eq!(chunked_body(&whole[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(chunked_body(b"zz\r\n"), Err(RequestError::BadHead));
        assert_eq!(
            chunked_body(b"3\r\nabcX\r\n0\r\n\r\n"),
            Err(RequestError::BadHead),
            "data longer than its size"
        );
        assert_eq!(
            chunked_body(b"10000\r\n"),
            Err(RequestError::TooLarge),
            "a chunk over 65535 is refused before it arrives"
        );
        assert_eq!(
            chunked_body(b"ffffffffffffffff\r\n"),
            Err(RequestError::TooLarge)
        );
        let mut trickle = Vec::new();
        while trickle.len() < MAX_CHUNKED {
            trickle.extend_from_slice(b"0001;pad=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\na\r\n");
        }
        assert_eq!(
            chunked_body(&trickle),
            Err(RequestError::TooLarge),
            "framing overhead is bounded too"
        );
    }

    #[test]
    fn http1_incomplete_and_bad_heads() {
        assert!(matches!(
            head(b"GET /dns-query HTTP/1.1\r\nHost:"),
            Ok(None)
        ));
        let status = |raw: &[u8]| head(raw).err().map(RequestError::status);
        assert_eq!(status(b"\x16\x03\x01garbage\r\n\r\n"), Some(400));
        let coding = |value: &str| {
            let raw = format!("POST /dns-query HTTP/1.1\r\nTransfer-Encoding: {value}\r\n\r\n");
            head(raw.as_bytes()).map(|h| h.map(|h| h.chunked))
        };
        assert_eq!(coding("chunked"), Ok(Some(true)));
        assert_eq!(coding("Chunked"), Ok(Some(true)));
        assert_eq!(coding("gzip, chunked"), Err(RequestError::TransferEncoding));
        assert_eq!(coding("gzip"), Err(RequestError::TransferEncoding));
        assert_eq!(
            coding("chunked, gzip"),
            Err(RequestError::BadHead),
            "not last"
        );
        assert_eq!(
            coding("chunked, chunked"),
            Err(RequestError::BadHead),
            "twice"
        );
        assert_eq!(
            status(b"POST /dns-query HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"),
            Some(400),
            "both framings (request smuggling)"
        );
        for length in ["-1", "+5", "", "1 2", "99999999999999999999999"] {
            let raw = format!("POST /dns-query HTTP/1.1\r\nContent-Length: {length}\r\n\r\n");
            assert_eq!(status(raw.as_bytes()), Some(400), "{length:?}");
        }
        assert_eq!(
            status(b"POST /dns-query HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            Some(400),
            "conflicting lengths (request smuggling)"
        );
        let mut many = b"GET /dns-query HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("x-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(status(&many), Some(431));
        let mut long = b"GET /dns-query?dns=".to_vec();
        long.resize(MAX_HEAD, b'A');
        assert_eq!(status(&long), Some(431), "an unfinished head at the limit");
        let wrong_path = head(b"GET /other HTTP/1.1\r\n\r\n").unwrap().unwrap();
        assert_eq!(
            wrong_path.request.map_err(RequestError::status).err(),
            Some(404)
        );
    }

    #[test]
    fn max_age_is_the_smallest_ttl_and_skips_opt() {
        let q = query("example.com.", rtype::A, Some((1232, 0, false)));
        // Header with QR, one question, two answers (TTL 300 and 60), OPT with a big "TTL".
        let mut reply = q[..HEADER_LEN].to_vec();
        reply[2] |= 0x80;
        reply[6..12].copy_from_slice(&[0, 2, 0, 0, 0, 1]);
        let question_end = wire::skip_name(&q, HEADER_LEN).unwrap() + 4;
        reply.extend_from_slice(&q[HEADER_LEN..question_end]);
        for ttl in [300u32, 60] {
            wire::push_record(&mut reply, HEADER_LEN, rtype::A, ttl, &[192, 0, 2, 1]);
        }
        wire::push_opt(&mut reply, 1232, 0, true);
        assert_eq!(max_age(&reply), 60);
        assert_eq!(min_ttl(&reply), Some(60));
        // No records: 0. Cut short: the walk stops, nothing is claimed.
        assert_eq!(max_age(&q[..question_end]), 0);
        assert_eq!(min_ttl(&reply[..reply.len() - 20]), None);
    }
}
