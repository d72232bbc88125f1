//! Prefixed integers (RFC 7541 §5.1), shared by HPACK and QPACK (RFC 9204 §4.1.1 uses the same
//! encoding): an N-bit prefix in the first octet, then 7 bits per continuation octet.

/// Largest integer accepted: sizes, indexes and lengths in a field section never need more.
pub const MAX: u64 = u32::MAX as u64;

/// Continuation octets an integer up to [`MAX`] needs at most (7 bits each).
const MAX_CONTINUATION_OCTETS: u32 = 5;

/// Why an integer could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntegerError {
    /// The input ends inside the integer.
    Truncated,
    /// Over [`MAX`], or more continuation octets than such a value needs (even ones that add
    /// nothing).
    Overflow,
}

/// Reads an integer with a `prefix_bits`-bit prefix, ignoring the first octet's higher bits.
pub fn read(input: &mut &[u8], prefix_bits: u32) -> Result<u64, IntegerError> {
    let Some((&first, rest)) = input.split_first() else {
        return Err(IntegerError::Truncated);
    };
    *input = rest;
    let prefix_max = (1u64 << prefix_bits) - 1;
    let mut value = u64::from(first) & prefix_max;
    if value == prefix_max {
        let mut continuation_octets = 0;
        loop {
            let Some((&octet, rest)) = input.split_first() else {
                return Err(IntegerError::Truncated);
            };
            *input = rest;
            if continuation_octets == MAX_CONTINUATION_OCTETS {
                return Err(IntegerError::Overflow);
            }
            value += u64::from(octet & 0x7f) << (7 * continuation_octets);
            continuation_octets += 1;
            if octet & 0x80 == 0 {
                break;
            }
        }
    }
    if value > MAX {
        return Err(IntegerError::Overflow);
    }
    Ok(value)
}

/// Appends an integer with a `prefix_bits`-bit prefix; `flags` fills the first octet's higher
/// bits.
pub fn write(out: &mut Vec<u8>, flags: u8, prefix_bits: u32, value: u64) {
    let prefix_max = (1u64 << prefix_bits) - 1;
    if value < prefix_max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | prefix_max as u8);
    let mut rest = value - prefix_max;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}
