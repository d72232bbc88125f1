//! Names as lists and specs write them (`Ads.Example.COM.`, `bücher.example`) turned into the
//! lowercase wire form the matcher and the cache key use, IDNA names to punycode (UTS #46).

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

/// `text` (absolute or relative to the root, any case, IDNA allowed) as a lowercase wire name.
/// Underscores are allowed (`_dmarc`, service names); `*` is not (wildcards are the parsers').
pub fn to_wire(text: &str) -> Result<Vec<u8>, NameError> {
    let _ = text;
    unimplemented!("policy::name::to_wire")
}
