//! Request heads: the fields of a request's field section (an HTTP/2 HEADERS block, an HTTP/3
//! HEADERS frame) checked against RFC 9113 §8.2 and §8.3 (RFC 9114 §4.2 and §4.3 repeat them)
//! while they are decoded, keeping only what DNS over HTTPS needs.

/// The request method, as far as DNS over HTTPS cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET (RFC 9110 §9.3.1).
    Get,
    /// POST (RFC 9110 §9.3.3).
    Post,
    /// CONNECT (RFC 9113 §8.5), which has no `:path`.
    Connect,
    /// Any other method.
    Other,
}

impl Method {
    fn parse(value: &[u8]) -> Self {
        match value {
            b"GET" => Self::Get,
            b"POST" => Self::Post,
            b"CONNECT" => Self::Connect,
            _ => Self::Other,
        }
    }

    /// The method's name for [`crate::doh::request`]; empty for methods it need not tell apart.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Self::Get => b"GET",
            Self::Post => b"POST",
            Self::Connect => b"CONNECT",
            Self::Other => b"",
        }
    }
}

/// Why a request head is malformed (RFC 9113 §8.1.1): a stream error PROTOCOL_ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Malformed {
    /// A field name with uppercase letters or characters outside a token (§8.2.1).
    #[error("field name is not lowercase token characters")]
    FieldName,
    /// A field value with NUL, CR or LF, or leading or trailing whitespace (§8.2.1).
    #[error("field value has NUL, CR, LF or surrounding whitespace")]
    FieldValue,
    /// A connection-specific field, or `te` other than `trailers` (§8.2.2).
    #[error("connection-specific field")]
    ConnectionField,
    /// A pseudo-header after a regular field (§8.3).
    #[error("pseudo-header after a regular field")]
    PseudoAfterRegular,
    /// A pseudo-header that requests do not have, or one given twice (§8.3.1).
    #[error("unknown, response or repeated pseudo-header")]
    BadPseudo,
    /// `:method`, `:scheme` or `:path` missing or empty; or CONNECT with `:scheme`/`:path` or
    /// without `:authority` (§8.3.1, §8.5).
    #[error("missing or empty :method, :scheme or :path")]
    MissingPseudo,
    /// A `content-length` that is not a number, or two that differ (RFC 9110 §8.6).
    #[error("content-length is not one decimal number")]
    ContentLength,
    /// Trailers carrying a pseudo-header (§8.1).
    #[error("pseudo-header in trailers")]
    PseudoInTrailers,
}

/// A request head being decoded. Fields are offered one at a time, as HPACK or QPACK yields them; past
/// `max_size` bytes (RFC 9113 §6.5.2 sizes: name + value + 32 each) nothing more is kept, but
/// every field is still looked at so the block's checks complete.
#[derive(Debug)]
pub(crate) struct HeadBuilder {
    pub(crate) method: Option<Method>,
    pub(crate) path: Option<Vec<u8>>,
    scheme: bool,
    authority: bool,
    pub(crate) content_type: Option<Vec<u8>>,
    pub(crate) content_length: Option<u64>,
    regular_seen: bool,
    pub(crate) size: usize,
    max_size: usize,
    pub(crate) malformed: Option<Malformed>,
}

impl HeadBuilder {
    pub(crate) fn new(max_size: usize) -> Self {
        Self {
            method: None,
            path: None,
            scheme: false,
            authority: false,
            content_type: None,
            content_length: None,
            regular_seen: false,
            size: 0,
            max_size,
            malformed: None,
        }
    }

    /// Whether the field section went over the size limit.
    pub(crate) fn too_large(&self) -> bool {
        self.size > self.max_size
    }

    fn fail(&mut self, why: Malformed) {
        self.malformed.get_or_insert(why);
    }

    /// Takes one field of a request's field section.
    pub(crate) fn field(&mut self, name: &[u8], value: &[u8]) {
        self.size = self.size.saturating_add(name.len() + value.len() + 32);
        if self.malformed.is_some() {
            return;
        }
        if !valid_value(value) {
            return self.fail(Malformed::FieldValue);
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.regular_seen {
                return self.fail(Malformed::PseudoAfterRegular);
            }
            let seen = match pseudo {
                b"method" => self.method.is_some(),
                b"path" => self.path.is_some(),
                b"scheme" => self.scheme,
                b"authority" => self.authority,
                _ => true,
            };
            if seen {
                return self.fail(Malformed::BadPseudo);
            }
            match pseudo {
                b"method" => self.method = Some(Method::parse(value)),
                b"path" if self.too_large() => self.path = Some(Vec::new()),
                b"path" => self.path = Some(value.to_vec()),
                b"scheme" => self.scheme = true,
                _ => self.authority = true,
            }
            if pseudo == b"path" && value.is_empty() {
                self.fail(Malformed::MissingPseudo);
            }
            return;
        }
        self.regular_seen = true;
        if !valid_name(name) {
            return self.fail(Malformed::FieldName);
        }
        match name {
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
            | b"upgrade" => self.fail(Malformed::ConnectionField),
            b"te" if value != b"trailers" => self.fail(Malformed::ConnectionField),
            b"content-type" if self.content_type.is_none() && !self.too_large() => {
                self.content_type = Some(value.to_vec());
            }
            b"content-length" => match parse_length(value) {
                Some(n) if self.content_length.is_none_or(|m| m == n) => {
                    self.content_length = Some(n);
                }
                _ => self.fail(Malformed::ContentLength),
            },
            _ => {}
        }
    }

    /// Checks what must be present once the section ended (RFC 9113 §8.3.1, §8.5).
    pub(crate) fn finish(&mut self) {
        if self.malformed.is_some() {
            return;
        }
        let complete = match self.method {
            None => false,
            Some(Method::Connect) => self.authority && !self.scheme && self.path.is_none(),
            Some(_) => self.scheme && self.path.is_some(),
        };
        if !complete {
            self.fail(Malformed::MissingPseudo);
        }
    }
}

/// Checks one field of a trailer section: no pseudo-headers, valid names and values.
pub(crate) fn trailer_field(name: &[u8], value: &[u8], malformed: &mut Option<Malformed>) {
    if malformed.is_some() {
        return;
    }
    if name.first() == Some(&b':') {
        *malformed = Some(Malformed::PseudoInTrailers);
    } else if !valid_name(name) {
        *malformed = Some(Malformed::FieldName);
    } else if !valid_value(value) {
        *malformed = Some(Malformed::FieldValue);
    }
}

/// RFC 9113 §8.2.1: no uppercase, no controls, space, DEL or non-ASCII; not empty. (The token
/// rule of RFC 9110 §5.1 is stricter; this is what HTTP/2 requires a receiver to check.)
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b > 0x20 && b < 0x7f && !b.is_ascii_uppercase())
}

/// RFC 9113 §8.2.1: no NUL, CR or LF anywhere, no SP or HTAB at either end.
fn valid_value(value: &[u8]) -> bool {
    let edge = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    !edge(value.first())
        && !edge(value.last())
        && !value.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n'))
}

/// A `content-length` value: decimal digits only, at most 15 of them.
fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 15 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        value
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&str, &str)]) -> HeadBuilder {
        let mut head = HeadBuilder::new(16 * 1024);
        for (name, value) in fields {
            head.field(name.as_bytes(), value.as_bytes());
        }
        head.finish();
        head
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "dns.example"),
        (":path", "/dns-query?dns=AAAB"),
    ];

    #[test]
    fn rfc9113_8_3_1_a_complete_get_keeps_method_and_path() {
        let head = head(&GET);
        assert_eq!(head.malformed, None);
        assert_eq!(head.method, Some(Method::Get));
        assert_eq!(head.path.as_deref(), Some(&b"/dns-query?dns=AAAB"[..]));
    }

    #[test]
    fn rfc9113_8_3_1_missing_repeated_and_misplaced_pseudo_headers_are_malformed() {
        let cases: [(&[(&str, &str)], Malformed); 7] = [
            (&GET[1..], Malformed::MissingPseudo),
            (&[GET[0], GET[1]], Malformed::MissingPseudo),
            (&[GET[0], GET[1], (":path", "")], Malformed::MissingPseudo),
            (&[GET[0], GET[0], GET[1], GET[3]], Malformed::BadPseudo),
            (&[GET[0], (":status", "200")], Malformed::BadPseudo),
            (
                &[GET[0], ("accept", "*/*"), GET[1]],
                Malformed::PseudoAfterRegular,
            ),
            (
                &[(":method", "CONNECT"), GET[1], GET[2]],
                Malformed::MissingPseudo,
            ),
        ];
        for (fields, why) in cases {
            assert_eq!(head(fields).malformed, Some(why), "{fields:?}");
        }
        let connect = head(&[(":method", "CONNECT"), (":authority", "a:443")]);
        assert_eq!(connect.malformed, None);
        assert_eq!(connect.method, Some(Method::Connect));
    }

    #[test]
    fn rfc9113_8_2_uppercase_names_bad_values_and_connection_fields_are_malformed() {
        let with = |name: &str, value: &str| {
            let mut fields = GET.to_vec();
            fields.push((name, value));
            head(&fields).malformed
        };
        assert_eq!(with("Accept", "x"), Some(Malformed::FieldName));
        assert_eq!(with("a b", "x"), Some(Malformed::FieldName));
        assert_eq!(with("accept", " x"), Some(Malformed::FieldValue));
        assert_eq!(with("accept", "a\r\nb"), Some(Malformed::FieldValue));
        assert_eq!(
            with("connection", "close"),
            Some(Malformed::ConnectionField)
        );
        assert_eq!(
            with("transfer-encoding", "chunked"),
            Some(Malformed::ConnectionField)
        );
        assert_eq!(with("te", "gzip"), Some(Malformed::ConnectionField));
        assert_eq!(with("te", "trailers"), None);
        assert_eq!(with("accept", ""), None);
    }

    #[test]
    fn content_length_must_be_one_decimal_number() {
        let with = |values: &[&str]| {
            let mut fields = GET.to_vec();
            fields.extend(values.iter().map(|v| ("content-length", *v)));
            head(&fields)
        };
        assert_eq!(with(&["42"]).content_length, Some(42));
        assert_eq!(with(&["42", "42"]).content_length, Some(42));
        for bad in [
            &["42", "43"][..],
            &["-1"],
            &["4 2"],
            &["0x10"],
            &["9999999999999999"],
        ] {
            assert_eq!(
                with(bad).malformed,
                Some(Malformed::ContentLength),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn past_the_size_limit_fields_are_checked_but_not_kept() {
        let mut head = HeadBuilder::new(100);
        head.field(b":method", b"POST");
        head.field(b":scheme", b"https");
        head.field(b"x-filler", &[b'a'; 60]);
        head.field(b":path", b"/dns-query");
        head.field(b"content-type", b"application/dns-message");
        head.finish();
        assert!(head.too_large());
        assert_eq!(head.malformed, Some(Malformed::PseudoAfterRegular));
        assert_eq!(head.content_type, None);
    }

    #[test]
    fn trailers_may_not_carry_pseudo_headers() {
        let mut malformed = None;
        trailer_field(b"x-checksum", b"1", &mut malformed);
        assert_eq!(malformed, None);
        trailer_field(b":path", b"/", &mut malformed);
        assert_eq!(malformed, Some(Malformed::PseudoInTrailers));
    }
}
