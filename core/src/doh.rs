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
}

impl RequestError {
    /// The HTTP status code to answer with.
    pub fn status(self) -> u16 {
        match self {
            Self::NotFound => 404,
            Self::Method => 405,
            Self::MissingParameter | Self::BadParameter | Self::NotAQuery => 400,
            Self::MediaType => 415,
            Self::TooLarge => 413,
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
    if target_path != path.as_bytes() {
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
            (b"GET", b"/dns-query/x?dns=AAAA", None, 404),
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
