//! QPACK (RFC 9204) without a dynamic table, which is all a DNS-over-HTTP/3 server needs.
//!
//! kudurru advertises SETTINGS_QPACK_MAX_TABLE_CAPACITY 0 (the default), so a client's field
//! sections may use only the static table and literals (§3.2.3, §4.5): a field section is
//! decoded on its own, with no state shared across streams and no blocked streams. Responses
//! are encoded the same way (static references, raw literals): they never wait for, or depend
//! on, anything the client's decoder holds.

use crate::http::huffman;
use crate::http::integer::{self, IntegerError};

/// Why a field section could not be decoded: QPACK_DECOMPRESSION_FAILED (RFC 9204 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The section ends inside a field line or its prefix.
    #[error("field section truncated")]
    Truncated,
    /// An integer too large for any field section.
    #[error("integer overflow")]
    IntegerOverflow,
    /// A reference to the dynamic table, whose capacity this side set to 0.
    #[error("reference to the dynamic table (capacity 0)")]
    DynamicReference,
    /// A static table index past its 99 entries.
    #[error("static table index out of range")]
    StaticIndex,
    /// A Huffman-coded string that does not decode.
    #[error("bad Huffman code")]
    Huffman,
}

/// The static table (RFC 9204 Appendix A).
const STATIC_TABLE: [(&[u8], &[u8]); 99] = [
    (b":authority", b""),
    (b":path", b"/"),
    (b"age", b"0"),
    (b"content-disposition", b""),
    (b"content-length", b"0"),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"referer", b""),
    (b"set-cookie", b""),
    (b":method", b"CONNECT"),
    (b":method", b"DELETE"),
    (b":method", b"GET"),
    (b":method", b"HEAD"),
    (b":method", b"OPTIONS"),
    (b":method", b"POST"),
    (b":method", b"PUT"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"103"),
    (b":status", b"200"),
    (b":status", b"304"),
    (b":status", b"404"),
    (b":status", b"503"),
    (b"accept", b"*/*"),
    (b"accept", b"application/dns-message"),
    (b"accept-encoding", b"gzip, deflate, br"),
    (b"accept-ranges", b"bytes"),
    (b"access-control-allow-headers", b"cache-control"),
    (b"access-control-allow-headers", b"content-type"),
    (b"access-control-allow-origin", b"*"),
    (b"cache-control", b"max-age=0"),
    (b"cache-control", b"max-age=2592000"),
    (b"cache-control", b"max-age=604800"),
    (b"cache-control", b"no-cache"),
    (b"cache-control", b"no-store"),
    (b"cache-control", b"public, max-age=31536000"),
    (b"content-encoding", b"br"),
    (b"content-encoding", b"gzip"),
    (b"content-type", b"application/dns-message"),
    (b"content-type", b"application/javascript"),
    (b"content-type", b"application/json"),
    (b"content-type", b"application/x-www-form-urlencoded"),
    (b"content-type", b"image/gif"),
    (b"content-type", b"image/jpeg"),
    (b"content-type", b"image/png"),
    (b"content-type", b"text/css"),
    (b"content-type", b"text/html; charset=utf-8"),
    (b"content-type", b"text/plain"),
    (b"content-type", b"text/plain;charset=utf-8"),
    (b"range", b"bytes=0-"),
    (b"strict-transport-security", b"max-age=31536000"),
    (
        b"strict-transport-security",
        b"max-age=31536000; includesubdomains",
    ),
    (
        b"strict-transport-security",
        b"max-age=31536000; includesubdomains; preload",
    ),
    (b"vary", b"accept-encoding"),
    (b"vary", b"origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-xss-protection", b"1; mode=block"),
    (b":status", b"100"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"302"),
    (b":status", b"400"),
    (b":status", b"403"),
    (b":status", b"421"),
    (b":status", b"425"),
    (b":status", b"500"),
    (b"accept-language", b""),
    (b"access-control-allow-credentials", b"FALSE"),
    (b"access-control-allow-credentials", b"TRUE"),
    (b"access-control-allow-headers", b"*"),
    (b"access-control-allow-methods", b"get"),
    (b"access-control-allow-methods", b"get, post, options"),
    (b"access-control-allow-methods", b"options"),
    (b"access-control-expose-headers", b"content-length"),
    (b"access-control-request-headers", b"content-type"),
    (b"access-control-request-method", b"get"),
    (b"access-control-request-method", b"post"),
    (b"alt-svc", b"clear"),
    (b"authorization", b""),
    (
        b"content-security-policy",
        b"script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    (b"early-data", b"1"),
    (b"expect-ct", b""),
    (b"forwarded", b""),
    (b"if-range", b""),
    (b"origin", b""),
    (b"purpose", b"prefetch"),
    (b"server", b""),
    (b"timing-allow-origin", b"*"),
    (b"upgrade-insecure-requests", b"1"),
    (b"user-agent", b""),
    (b"x-forwarded-for", b""),
    (b"x-frame-options", b"deny"),
    (b"x-frame-options", b"sameorigin"),
];

/// Reads an integer with a `prefix_bits`-bit prefix (RFC 9204 §4.1.1, RFC 7541 §5.1).
pub(crate) fn read_integer(input: &mut &[u8], prefix_bits: u32) -> Result<u64, DecodeError> {
    integer::read(input, prefix_bits).map_err(|e| match e {
        IntegerError::Truncated => DecodeError::Truncated,
        IntegerError::Overflow => DecodeError::IntegerOverflow,
    })
}

/// Reads a string literal whose length has a `prefix_bits`-bit prefix and whose Huffman flag
/// is the bit just above it; a Huffman-coded string is decoded into `buffer`.
fn read_string<'string, 'input: 'string, 'buffer: 'string>(
    input: &mut &'input [u8],
    prefix_bits: u32,
    buffer: &'buffer mut Vec<u8>,
) -> Result<&'string [u8], DecodeError> {
    let huffman_coded = input
        .first()
        .is_some_and(|&octet| octet & (1 << prefix_bits) != 0);
    let length = read_integer(input, prefix_bits)?;
    let length = usize::try_from(length).map_err(|_| DecodeError::IntegerOverflow)?;
    let Some((string, rest)) = input.split_at_checked(length) else {
        return Err(DecodeError::Truncated);
    };
    *input = rest;
    if !huffman_coded {
        return Ok(string);
    }
    buffer.clear();
    huffman::decode(string, buffer).map_err(|_| DecodeError::Huffman)?;
    Ok(buffer)
}

fn static_entry(index: u64) -> Result<(&'static [u8], &'static [u8]), DecodeError> {
    usize::try_from(index)
        .ok()
        .and_then(|i| STATIC_TABLE.get(i))
        .copied()
        .ok_or(DecodeError::StaticIndex)
}

/// Decodes one field section (RFC 9204 §4.5) that may use only the static table, calling
/// `field(name, value)` for each field line in order.
pub fn decode(mut section: &[u8], mut field: impl FnMut(&[u8], &[u8])) -> Result<(), DecodeError> {
    // §4.5.1: Required Insert Count (8-bit prefix) must be 0 without a dynamic table; the
    // Base (sign bit and 7-bit prefix) is then meaningless and ignored.
    if read_integer(&mut section, 8)? != 0 {
        return Err(DecodeError::DynamicReference);
    }
    read_integer(&mut section, 7)?;
    let (mut names, mut values) = (Vec::new(), Vec::new());
    while let Some(&first) = section.first() {
        if first & 0x80 != 0 {
            // §4.5.2 Indexed field line: 1 T index(6).
            if first & 0x40 == 0 {
                return Err(DecodeError::DynamicReference);
            }
            let (name, value) = static_entry(read_integer(&mut section, 6)?)?;
            field(name, value);
        } else if first & 0x40 != 0 {
            // §4.5.4 Literal field line with name reference: 01 N T index(4).
            if first & 0x10 == 0 {
                return Err(DecodeError::DynamicReference);
            }
            let (name, _) = static_entry(read_integer(&mut section, 4)?)?;
            let value = read_string(&mut section, 7, &mut values)?;
            field(name, value);
        } else if first & 0x20 != 0 {
            // §4.5.6 Literal field line with literal name: 001 N H length(3).
            let name = read_string(&mut section, 3, &mut names)?;
            let value = read_string(&mut section, 7, &mut values)?;
            field(name, value);
        } else {
            // §4.5.3 and §4.5.5: post-base forms reference the dynamic table.
            return Err(DecodeError::DynamicReference);
        }
    }
    Ok(())
}

/// Encodes a response field section: `:status`, then `fields` (lowercase names), using static
/// references where the table has them and raw literals otherwise.
pub fn encode_response(status: u16, fields: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    // Required Insert Count 0, Base 0.
    out.extend_from_slice(&[0, 0]);
    let mut digits = [0u8; 3];
    let code = status.clamp(100, 999);
    digits[0] = b'0' + (code / 100) as u8;
    digits[1] = b'0' + (code / 10 % 10) as u8;
    digits[2] = b'0' + (code % 10) as u8;
    encode_field(b":status", &digits, out);
    for (name, value) in fields {
        encode_field(name, value, out);
    }
}

/// The static entries named `name`, as ranges of indexes (start, end) (one name's entries are adjacent
/// in the table, except `:status`, which has two runs).
fn static_names(name: &[u8]) -> &'static [(usize, usize)] {
    match name {
        b":status" => &[(24, 29), (63, 72)],
        b"content-type" => &[(44, 55)],
        b"content-length" => &[(4, 5)],
        b"cache-control" => &[(36, 42)],
        b"date" => &[(6, 7)],
        b"alt-svc" => &[(83, 84)],
        b"server" => &[(92, 93)],
        _ => &[],
    }
}

fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let ranges = static_names(name);
    let mut name_index = None;
    if ranges.is_empty() {
        // Names without a fast path are looked up in the whole table.
        for (index, &(n, v)) in STATIC_TABLE.iter().enumerate() {
            if n != name {
                continue;
            }
            if v == value {
                return indexed(index, out);
            }
            name_index.get_or_insert(index);
        }
    } else {
        // Every entry in a name's ranges has that name (the table test checks it): only the
        // values are compared.
        for index in ranges.iter().flat_map(|&(start, end)| start..end) {
            if STATIC_TABLE[index].1 == value {
                return indexed(index, out);
            }
        }
        name_index = Some(ranges[0].0);
    }
    match name_index {
        Some(index) => {
            // §4.5.4 with a static name: 01 N=0 T=1 index(4).
            integer::write(out, 0x50, 4, index as u64);
        }
        None => {
            // §4.5.6: 001 N=0 H=0 length(3).
            integer::write(out, 0x20, 3, name.len() as u64);
            out.extend_from_slice(name);
        }
    }
    integer::write(out, 0, 7, value.len() as u64);
    out.extend_from_slice(value);
}

/// §4.5.2 indexed field line, static: 11 index(6).
fn indexed(index: usize, out: &mut Vec<u8>) {
    integer::write(out, 0xc0, 6, index as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(section: &[u8]) -> Result<Vec<(String, String)>, DecodeError> {
        let mut out = Vec::new();
        decode(section, |name, value| {
            out.push((
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            ));
        })?;
        Ok(out)
    }

    #[test]
    fn rfc9204_appendix_a_the_static_table_has_99_entries_in_order() {
        assert_eq!(STATIC_TABLE.len(), 99);
        assert_eq!(STATIC_TABLE[0], (&b":authority"[..], &b""[..]));
        assert_eq!(STATIC_TABLE[17], (&b":method"[..], &b"GET"[..]));
        assert_eq!(STATIC_TABLE[25], (&b":status"[..], &b"200"[..]));
        assert_eq!(
            STATIC_TABLE[44],
            (&b"content-type"[..], &b"application/dns-message"[..])
        );
        assert_eq!(STATIC_TABLE[71], (&b":status"[..], &b"500"[..]));
        assert_eq!(
            STATIC_TABLE[98],
            (&b"x-frame-options"[..], &b"sameorigin"[..])
        );
    }

    #[test]
    fn rfc9204_b_1_a_literal_field_line_with_a_static_name_reference() {
        // Appendix B.1: ":path: /index.html" with no dynamic table.
        let section = [
            0x00, 0x00, 0x51, 0x0b, 0x2f, 0x69, 0x6e, 0x64, 0x65, 0x78, 0x2e, 0x68, 0x74, 0x6d,
            0x6c,
        ];
        assert_eq!(
            fields(&section).unwrap(),
            [(":path".to_owned(), "/index.html".to_owned())]
        );
    }

    #[test]
    fn rfc9204_4_5_every_static_form_decodes() {
        let mut section = vec![0x00, 0x00];
        section.push(0xc0 | 17); // :method GET
        section.push(0xc0 | 23); // :scheme https
        section.extend_from_slice(&[0x50 | 1, 4]); // :path with a literal value
        section.extend_from_slice(b"/dns");
        // 001 N H len(3): "x-trace" (7 fills the prefix: a continuation byte of 0 follows),
        // value with H set: Huffman "www".
        section.extend_from_slice(&[0x20 | 7, 0]);
        section.extend_from_slice(b"x-trace");
        section.extend_from_slice(&[0x83, 0xf1, 0xe3, 0xc7]);
        assert_eq!(
            fields(&section).unwrap(),
            [
                (":method".to_owned(), "GET".to_owned()),
                (":scheme".to_owned(), "https".to_owned()),
                (":path".to_owned(), "/dns".to_owned()),
                ("x-trace".to_owned(), "www".to_owned()),
            ]
        );
    }

    #[test]
    fn rfc9204_dynamic_references_and_bad_input_are_decompression_failures() {
        let cases: [(&[u8], DecodeError); 8] = [
            (&[0x01, 0x00], DecodeError::DynamicReference),
            (&[0x00, 0x00, 0x80], DecodeError::DynamicReference),
            (&[0x00, 0x00, 0x40, 0x00], DecodeError::DynamicReference),
            (&[0x00, 0x00, 0x10], DecodeError::DynamicReference),
            (&[0x00, 0x00, 0x00], DecodeError::DynamicReference),
            (&[0x00, 0x00, 0xc0 | 63, 100], DecodeError::StaticIndex),
            (&[0x00, 0x00, 0x51, 0x05, b'/'], DecodeError::Truncated),
            (&[0x00], DecodeError::Truncated),
        ];
        for (section, error) in cases {
            assert_eq!(fields(section), Err(error), "{section:x?}");
        }
        let overflow = [0x00, 0x00, 0x51, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(fields(&overflow), Err(DecodeError::IntegerOverflow));
    }

    #[test]
    fn responses_use_static_entries_where_they_can_and_decode_back() {
        let mut out = Vec::new();
        encode_response(
            200,
            &[
                (b"content-type", b"application/dns-message"),
                (b"content-length", b"57"),
                (b"cache-control", b"max-age=300"),
                (b"alt-svc", b"h3=\":443\""),
                (b"allow", b"GET, POST"),
            ],
            &mut out,
        );
        // :status 200 and the DoH media type are one byte each.
        assert_eq!(&out[..4], &[0x00, 0x00, 0xc0 | 25, 0xc0 | 44]);
        assert_eq!(
            fields(&out).unwrap(),
            [
                (":status".to_owned(), "200".to_owned()),
                (
                    "content-type".to_owned(),
                    "application/dns-message".to_owned()
                ),
                ("content-length".to_owned(), "57".to_owned()),
                ("cache-control".to_owned(), "max-age=300".to_owned()),
                ("alt-svc".to_owned(), "h3=\":443\"".to_owned()),
                ("allow".to_owned(), "GET, POST".to_owned()),
            ]
        );
        for status in [400, 404, 405, 408, 413, 415, 431, 500] {
            let mut out = Vec::new();
            encode_response(status, &[], &mut out);
            assert_eq!(fields(&out).unwrap()[0].1, status.to_string());
        }
    }

    #[test]
    fn the_fast_name_lookup_agrees_with_the_table() {
        for name in [
            &b":status"[..],
            b"content-type",
            b"content-length",
            b"cache-control",
            b"date",
            b"alt-svc",
            b"server",
        ] {
            let expected: Vec<usize> = (0..STATIC_TABLE.len())
                .filter(|&i| STATIC_TABLE[i].0 == name)
                .collect();
            let fast: Vec<usize> = static_names(name)
                .iter()
                .flat_map(|&(start, end)| start..end)
                .collect();
            assert_eq!(fast, expected, "{}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            let len = (state % 24) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let _ = fields(&bytes);
        }
    }
}
