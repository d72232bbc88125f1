//! Names as lists and specs write them (`Ads.Example.COM.`, `bücher.example`) turned into the
//! lowercase wire form the matcher and the cache key use, IDNA names to punycode (UTS #46).
//!
//! ASCII names (nearly every line of every list) take a fast path that checks and lowercases
//! in one pass; only a name with a non-ASCII character goes through `idna`.

/// Longest name in wire form (RFC 1035 §2.3.4).
const MAX_WIRE: usize = 255;
/// Longest label (RFC 1035 §2.3.4).
const MAX_LABEL: usize = 63;

/// Why a text name was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty, or only dots.
    #[error("empty name")]
    Empty,
    /// A label longer than 63 bytes (RFC 1035 §2.3.4).
    #[error("a label is longer than 63 bytes")]
    LabelTooLong,
    /// More than 255 bytes in wire form.
    #[error("the name is longer than 255 bytes")]
    TooLong,
    /// An empty label inside the name (`a..b`).
    #[error("an empty label")]
    EmptyLabel,
    /// A character no hostname or IDNA label may hold.
    #[error("a character a domain name cannot hold")]
    BadCharacter,
}

impl NameError {
    /// The reason as a block list's status shows it for an invalid line.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Empty => "empty name",
            Self::LabelTooLong => "a label is longer than 63 bytes",
            Self::TooLong => "the name is longer than 255 bytes",
            Self::EmptyLabel => "an empty label",
            Self::BadCharacter => "a character a domain name cannot hold",
        }
    }
}

/// `text` (absolute or relative to the root, any case, IDNA allowed) as a lowercase wire name.
/// Underscores are allowed (`_dmarc`, service names); `*` is not (wildcards are the parsers').
pub fn to_wire(text: &str) -> Result<Vec<u8>, NameError> {
    let mut out = Vec::with_capacity(text.len() + 2);
    to_wire_into(text, &mut out)?;
    Ok(out)
}

/// [`to_wire`] appending to `out` (cleared first), so a parser reuses one buffer.
pub fn to_wire_into(text: &str, out: &mut Vec<u8>) -> Result<(), NameError> {
    out.clear();
    if text.is_ascii() {
        return ascii_to_wire(text.as_bytes(), out);
    }
    // UTS #46 (non-transitional, as browsers): maps case and compatibility forms, then
    // punycode. Its deny list is the URL one, which lets `*` through: the ASCII check after
    // it refuses that.
    let ascii = idna::domain_to_ascii(text).map_err(|_| NameError::BadCharacter)?;
    ascii_to_wire(ascii.as_bytes(), out)
}

/// Checks and lowercases an ASCII name into wire form.
fn ascii_to_wire(text: &[u8], out: &mut Vec<u8>) -> Result<(), NameError> {
    let text = text.strip_suffix(b".").unwrap_or(text);
    if text.is_empty() {
        return Err(NameError::Empty);
    }
    if text.iter().all(|&b| b == b'.') {
        return Err(NameError::Empty);
    }
    for label in text.split(|&b| b == b'.') {
        if label.is_empty() {
            return Err(NameError::EmptyLabel);
        }
        if label.len() > MAX_LABEL {
            return Err(NameError::LabelTooLong);
        }
        if !label
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(NameError::BadCharacter);
        }
        if out.len() + 1 + label.len() + 1 > MAX_WIRE {
            return Err(NameError::TooLong);
        }
        out.push(label.len() as u8);
        out.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    out.push(0);
    Ok(())
}

/// Whether `wire` is a valid lowercase uncompressed wire name (what [`to_wire`] returns).
pub fn is_lowercase_wire(wire: &[u8]) -> bool {
    if wire.len() > MAX_WIRE {
        return false;
    }
    let mut pos = 0;
    loop {
        let Some(&len) = wire.get(pos) else {
            return false;
        };
        let len = usize::from(len);
        if len == 0 {
            return pos + 1 == wire.len();
        }
        if len > MAX_LABEL {
            return false;
        }
        let Some(label) = wire.get(pos + 1..pos + 1 + len) else {
            return false;
        };
        if label.iter().any(u8::is_ascii_uppercase) {
            return false;
        }
        pos += 1 + len;
    }
}

/// `wire` (uncompressed) as presentation text without the trailing dot (`ads.example.com`);
/// the root is `.`. Bytes other than letters, digits, `-` and `_` are escaped as `\DDD`.
pub fn to_text(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut pos = 0;
    while let Some(&len) = wire.get(pos) {
        if len == 0 || len > MAX_LABEL as u8 {
            break;
        }
        let Some(label) = wire.get(pos + 1..pos + 1 + usize::from(len)) else {
            break;
        };
        if !out.is_empty() {
            out.push('.');
        }
        for &b in label {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("\\{b:03}"));
            }
        }
        pos += 1 + usize::from(len);
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_names_are_lowercased_with_or_without_the_trailing_dot() {
        let expected = b"\x03ads\x07example\x03com\x00".to_vec();
        assert_eq!(to_wire("Ads.Example.COM."), Ok(expected.clone()));
        assert_eq!(to_wire("ads.example.com"), Ok(expected));
        assert_eq!(
            to_wire("_dmarc.x-y.example"),
            Ok(b"\x06_dmarc\x03x-y\x07example\x00".to_vec())
        );
    }

    #[test]
    fn uts46_idna_names_become_punycode() {
        // bücher.example: the punycode of "bücher" is "xn--bcher-kva" (RFC 3492's algorithm,
        // the value every browser shows).
        assert_eq!(
            to_wire("Bücher.example"),
            Ok(b"\x0dxn--bcher-kva\x07example\x00".to_vec())
        );
        // Full-width dots and letters are mapped (UTS #46 mapping), then lowercased.
        assert_eq!(to_wire("ＥＸＡＭＰＬＥ．com"), to_wire("example.com"));
    }

    #[test]
    fn bad_names_say_why() {
        assert_eq!(to_wire(""), Err(NameError::Empty));
        assert_eq!(to_wire("."), Err(NameError::Empty));
        assert_eq!(to_wire(".."), Err(NameError::Empty));
        assert_eq!(to_wire("a..b"), Err(NameError::EmptyLabel));
        assert_eq!(to_wire(".a"), Err(NameError::EmptyLabel));
        assert_eq!(to_wire("*.a"), Err(NameError::BadCharacter));
        assert_eq!(to_wire("a b"), Err(NameError::BadCharacter));
        assert_eq!(to_wire("a/b"), Err(NameError::BadCharacter));
        assert_eq!(
            to_wire(&format!("{}.com", "a".repeat(64))),
            Err(NameError::LabelTooLong)
        );
        assert!(to_wire(&format!("{}.com", "a".repeat(63))).is_ok());
        let long = vec!["a".repeat(63); 4].join(".");
        assert_eq!(to_wire(&long), Err(NameError::TooLong));
        let fits = format!("{}.{}", vec!["a".repeat(63); 3].join("."), "a".repeat(61));
        assert_eq!(to_wire(&fits).map(|w| w.len()), Ok(255));
    }

    #[test]
    fn wire_names_render_back_to_text() {
        let wire = to_wire("ads.example.com").unwrap();
        assert!(is_lowercase_wire(&wire));
        assert_eq!(to_text(&wire), "ads.example.com");
        assert_eq!(to_text(b"\x00"), ".");
        assert_eq!(to_text(b"\x03a.b\x00"), "a\\046b");
        assert!(!is_lowercase_wire(b"\x01A\x00"));
        assert!(!is_lowercase_wire(b"\x01a"));
        assert!(!is_lowercase_wire(b"\x01a\x00\x00"));
    }
}
