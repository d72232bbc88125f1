//! The HPACK Huffman code (RFC 7541 §5.2, Appendix B), which QPACK reuses (RFC 9204 §4.1.2):
//! decoding for string literals a peer sends.
//!
//! Clients Huffman-code nearly every string they send, the `:path` of each DNS-over-HTTPS GET
//! included, so decoding is on the hot path and runs from a lookup table instead of walking the
//! code one bit at a time:
//!
//! ```text
//! octets ─▶ 64-bit bit buffer ─▶ next 10 bits ─▶ LOOKUP ─┬▶ (symbol, length ≤ 10): emit, consume
//!                                                        └▶ longer code: canonical search by length
//! ```
//!
//! The code is canonical (within a length, codes count up in symbol order; each length starts
//! where the shorter ones end, shifted left), so the table carries code lengths only: the codes,
//! the lookup table and the canonical search bounds are all derived from them at compile time.
//! kudurru's encoder never Huffman-codes (raw octets are cheaper to produce), so there is no
//! production encoder here; the tests carry a small one.

/// Code length in bits of each symbol: octets 0x00..=0xff, then EOS (RFC 7541 Appendix B).
const CODE_LENGTHS: [u8; SYMBOL_COUNT] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 0x10
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, // 0x20
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, // 0x30
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, // 0x40
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, // 0x50
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, // 0x60
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, // 0x70
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 0x80
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 0x90
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 0xa0
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 0xb0
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 0xc0
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 0xd0
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 0xe0
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 0xf0
    30, // EOS
];

/// Octets 0..=255 plus EOS.
const SYMBOL_COUNT: usize = 257;
/// The end-of-string symbol: never valid inside a string (RFC 7541 §5.2).
const EOS: u16 = 256;
/// The longest code (EOS, 30 ones).
const MAX_CODE_LENGTH: usize = 30;
/// Bits the lookup table is indexed by: every code up to this long decodes in one lookup. HPACK
/// has no 9-bit codes; 10 bits cover letters, digits and most punctuation. Longer codes are the
/// rarer punctuation (`'+|#>$@[]~^}<{` and backquote, backslash), control characters and octets
/// above 0x7f.
const LOOKUP_BITS: u32 = 10;

/// Why a Huffman-coded string could not be decoded (RFC 7541 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HuffmanError {
    /// The string contains the EOS symbol.
    EosSymbol,
    /// The string ends with more than 7 bits of padding, or padding that is not all ones.
    Padding,
}

/// What the next [`LOOKUP_BITS`] bits of input decode to.
#[derive(Clone, Copy)]
struct LookupEntry {
    /// The octet a code of at most `LOOKUP_BITS` bits decodes to.
    symbol: u8,
    /// That code's length in bits; 0 when the bits start a longer code.
    length: u8,
}

/// The code of each symbol, right-aligned, derived from [`CODE_LENGTHS`] (tests only: decoding
/// needs the lookup table and the canonical bounds, not the codes themselves).
#[cfg(test)]
static CODES: [u32; SYMBOL_COUNT] = canonical_codes();

/// Indexed by the next [`LOOKUP_BITS`] bits of input.
static LOOKUP: [LookupEntry; 1 << LOOKUP_BITS] = lookup_table();

/// Bounds for decoding codes longer than [`LOOKUP_BITS`].
static CANONICAL: Canonical = canonical_bounds();

/// For each code length `n` (index `n`, 0 unused), what a canonical decoder needs.
struct Canonical {
    /// The first code of length `n`, right-aligned.
    first_code: [u32; MAX_CODE_LENGTH + 1],
    /// One past the last code of length `n`, left-aligned in 32 bits: the next 32 bits of input
    /// are below `limit[n]` (and not below `limit[n - 1]`) exactly when the next code is `n`
    /// bits long.
    limit: [u64; MAX_CODE_LENGTH + 1],
    /// Where the symbols of length `n` start in `symbols`.
    offset: [u16; MAX_CODE_LENGTH + 1],
    /// Every symbol, ordered by code length and then by symbol: the order codes are assigned in.
    symbols: [u16; SYMBOL_COUNT],
}

/// Assigns canonical codes: shortest first, in symbol order within a length.
const fn canonical_codes() -> [u32; SYMBOL_COUNT] {
    let mut codes = [0; SYMBOL_COUNT];
    let mut next = 0u32;
    let mut length = 1;
    while length <= MAX_CODE_LENGTH {
        let mut symbol = 0;
        while symbol < SYMBOL_COUNT {
            if CODE_LENGTHS[symbol] as usize == length {
                codes[symbol] = next;
                next += 1;
            }
            symbol += 1;
        }
        next <<= 1;
        length += 1;
    }
    codes
}

/// Fills every lookup slot whose bits start with a code of at most [`LOOKUP_BITS`] bits.
const fn lookup_table() -> [LookupEntry; 1 << LOOKUP_BITS] {
    let codes = canonical_codes();
    let mut table = [LookupEntry {
        symbol: 0,
        length: 0,
    }; 1 << LOOKUP_BITS];
    let mut symbol = 0;
    while symbol < 256 {
        let length = CODE_LENGTHS[symbol] as u32;
        if length <= LOOKUP_BITS {
            let free_bits = LOOKUP_BITS - length;
            let first = (codes[symbol] << free_bits) as usize;
            let mut slot = first;
            while slot < first + (1 << free_bits) {
                table[slot] = LookupEntry {
                    symbol: symbol as u8,
                    length: length as u8,
                };
                slot += 1;
            }
        }
        symbol += 1;
    }
    table
}

/// Derives the per-length bounds of the canonical code.
const fn canonical_bounds() -> Canonical {
    let codes = canonical_codes();
    let mut bounds = Canonical {
        first_code: [0; MAX_CODE_LENGTH + 1],
        limit: [0; MAX_CODE_LENGTH + 1],
        offset: [0; MAX_CODE_LENGTH + 1],
        symbols: [0; SYMBOL_COUNT],
    };
    let mut position = 0;
    let mut length = 1;
    while length <= MAX_CODE_LENGTH {
        bounds.offset[length] = position as u16;
        let mut count = 0u32;
        let mut symbol = 0;
        while symbol < SYMBOL_COUNT {
            if CODE_LENGTHS[symbol] as usize == length {
                if count == 0 {
                    bounds.first_code[length] = codes[symbol];
                }
                bounds.symbols[position] = symbol as u16;
                position += 1;
                count += 1;
            }
            symbol += 1;
        }
        if count == 0 {
            // No codes of this length: the next code of this length would follow the last
            // limit, so the (empty) range is [limit[n - 1], limit[n - 1]).
            bounds.first_code[length] = (bounds.limit[length - 1] >> (32 - length)) as u32;
        }
        bounds.limit[length] = ((bounds.first_code[length] as u64) + count as u64) << (32 - length);
        length += 1;
    }
    bounds
}

/// Decodes a code longer than [`LOOKUP_BITS`] from the next 32 bits of input (left-aligned,
/// zeros past the end), returning the symbol and its code length.
fn decode_long_code(next_bits: u64) -> (u16, u32) {
    let mut length = 1;
    // The code is complete and the EOS limit is 2^32, so this stops by MAX_CODE_LENGTH.
    while length < MAX_CODE_LENGTH && next_bits >= CANONICAL.limit[length] {
        length += 1;
    }
    // next_bits lies in [limit[length - 1], limit[length]), so the code is at least
    // first_code[length] and the position stays within the symbols of this length.
    let code = (next_bits >> (32 - length)) as u32;
    let position =
        usize::from(CANONICAL.offset[length]) + (code - CANONICAL.first_code[length]) as usize;
    (CANONICAL.symbols[position], length as u32)
}

/// Reads bits most significant first from a byte slice through a 64-bit buffer.
struct BitReader<'a> {
    input: &'a [u8],
    /// The next unread bits, left-aligned; bits past `count` are zero or the input that follows.
    bits: u64,
    /// How many bits of `bits` are valid.
    count: u32,
}

impl<'a> BitReader<'a> {
    fn new(input: &'a [u8]) -> Self {
        Self {
            input,
            bits: 0,
            count: 0,
        }
    }

    /// Tops the buffer up to at least 56 bits while input remains. When it returns with fewer
    /// than 32 bits buffered, the input is exhausted.
    #[inline]
    fn refill(&mut self) {
        if self.count >= 32 {
            return;
        }
        if let Some(word) = self.input.first_chunk::<8>() {
            // Whole bytes that fit are counted; the partial byte past them is loaded now and
            // loaded again (the same bits in the same place) by the next refill.
            self.bits |= u64::from_be_bytes(*word) >> self.count;
            let taken = (63 - self.count) / 8;
            // taken is at most 7, and the input holds at least the 8 octets just read.
            self.input = &self.input[taken as usize..];
            self.count += taken * 8;
            return;
        }
        while self.count <= 56 {
            let Some((&byte, rest)) = self.input.split_first() else {
                break;
            };
            self.bits |= u64::from(byte) << (56 - self.count);
            self.input = rest;
            self.count += 8;
        }
    }

    /// The next `LOOKUP_BITS` bits.
    #[inline]
    fn peek_lookup(&self) -> usize {
        (self.bits >> (64 - LOOKUP_BITS)) as usize
    }

    /// The next 32 bits, left-aligned in the low half.
    #[inline]
    fn peek_32(&self) -> u64 {
        self.bits >> 32
    }

    #[inline]
    fn consume(&mut self, length: u32) {
        self.bits <<= length;
        self.count -= length;
    }

    /// Checks the bits left at the end (fewer than a whole code): at most 7, all ones, the
    /// most significant bits of EOS (RFC 7541 §5.2).
    fn finish(&self) -> Result<(), HuffmanError> {
        if self.count == 0 {
            return Ok(());
        }
        if self.count > 7 {
            return Err(HuffmanError::Padding);
        }
        let padding = self.bits >> (64 - self.count);
        if padding == (1 << self.count) - 1 {
            Ok(())
        } else {
            Err(HuffmanError::Padding)
        }
    }
}

/// Decodes a Huffman-coded string (RFC 7541 §5.2), appending the octets to `output`.
pub(crate) fn decode(input: &[u8], output: &mut Vec<u8>) -> Result<(), HuffmanError> {
    // The shortest code is 5 bits, so no string decodes to more octets than this.
    output.reserve(input.len() * 8 / 5);
    let mut reader = BitReader::new(input);
    loop {
        reader.refill();
        if reader.count == 0 {
            return Ok(());
        }
        let entry = LOOKUP[reader.peek_lookup()];
        let (symbol, length) = if entry.length != 0 {
            (u16::from(entry.symbol), u32::from(entry.length))
        } else {
            decode_long_code(reader.peek_32())
        };
        if length > reader.count {
            // Only at the end of input: while input remains, a refill leaves at least 32 bits,
            // more than the longest code.
            return reader.finish();
        }
        if symbol == EOS {
            return Err(HuffmanError::EosSymbol);
        }
        // Every symbol but EOS is an octet.
        output.push(symbol as u8);
        reader.consume(length);
    }
}

/// Huffman-codes `input`, appending to `output` (tests only: kudurru sends raw strings).
#[cfg(test)]
pub(crate) fn encode(input: &[u8], output: &mut Vec<u8>) {
    let mut bits = 0u64;
    let mut count = 0u32;
    for &octet in input {
        let length = u32::from(CODE_LENGTHS[usize::from(octet)]);
        bits = (bits << length) | u64::from(CODES[usize::from(octet)]);
        count += length;
        while count >= 8 {
            count -= 8;
            output.push((bits >> count) as u8);
        }
    }
    if count > 0 {
        // Pad with the most significant bits of EOS: ones.
        output.push(((bits << (8 - count)) as u8) | (0xff >> count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::hex;

    /// RFC 7541 Appendix B as printed: (code, length in bits) of octets 0..=255, then EOS.
    const RFC_CODES: [(u32, u8); SYMBOL_COUNT] = [
        (0x1ff8, 13),
        (0x7fffd8, 23),
        (0xfffffe2, 28),
        (0xfffffe3, 28),
        (0xfffffe4, 28),
        (0xfffffe5, 28),
        (0xfffffe6, 28),
        (0xfffffe7, 28),
        (0xfffffe8, 28),
        (0xffffea, 24),
        (0x3ffffffc, 30),
        (0xfffffe9, 28),
        (0xfffffea, 28),
        (0x3ffffffd, 30),
        (0xfffffeb, 28),
        (0xfffffec, 28),
        (0xfffffed, 28),
        (0xfffffee, 28),
        (0xfffffef, 28),
        (0xffffff0, 28),
        (0xffffff1, 28),
        (0xffffff2, 28),
        (0x3ffffffe, 30),
        (0xffffff3, 28),
        (0xffffff4, 28),
        (0xffffff5, 28),
        (0xffffff6, 28),
        (0xffffff7, 28),
        (0xffffff8, 28),
        (0xffffff9, 28),
        (0xffffffa, 28),
        (0xffffffb, 28),
        (0x14, 6),
        (0x3f8, 10),
        (0x3f9, 10),
        (0xffa, 12),
        (0x1ff9, 13),
        (0x15, 6),
        (0xf8, 8),
        (0x7fa, 11),
        (0x3fa, 10),
        (0x3fb, 10),
        (0xf9, 8),
        (0x7fb, 11),
        (0xfa, 8),
        (0x16, 6),
        (0x17, 6),
        (0x18, 6),
        (0x0, 5),
        (0x1, 5),
        (0x2, 5),
        (0x19, 6),
        (0x1a, 6),
        (0x1b, 6),
        (0x1c, 6),
        (0x1d, 6),
        (0x1e, 6),
        (0x1f, 6),
        (0x5c, 7),
        (0xfb, 8),
        (0x7ffc, 15),
        (0x20, 6),
        (0xffb, 12),
        (0x3fc, 10),
        (0x1ffa, 13),
        (0x21, 6),
        (0x5d, 7),
        (0x5e, 7),
        (0x5f, 7),
        (0x60, 7),
        (0x61, 7),
        (0x62, 7),
        (0x63, 7),
        (0x64, 7),
        (0x65, 7),
        (0x66, 7),
        (0x67, 7),
        (0x68, 7),
        (0x69, 7),
        (0x6a, 7),
        (0x6b, 7),
        (0x6c, 7),
        (0x6d, 7),
        (0x6e, 7),
        (0x6f, 7),
        (0x70, 7),
        (0x71, 7),
        (0x72, 7),
        (0xfc, 8),
        (0x73, 7),
        (0xfd, 8),
        (0x1ffb, 13),
        (0x7fff0, 19),
        (0x1ffc, 13),
        (0x3ffc, 14),
        (0x22, 6),
        (0x7ffd, 15),
        (0x3, 5),
        (0x23, 6),
        (0x4, 5),
        (0x24, 6),
        (0x5, 5),
        (0x25, 6),
        (0x26, 6),
        (0x27, 6),
        (0x6, 5),
        (0x74, 7),
        (0x75, 7),
        (0x28, 6),
        (0x29, 6),
        (0x2a, 6),
        (0x7, 5),
        (0x2b, 6),
        (0x76, 7),
        (0x2c, 6),
        (0x8, 5),
        (0x9, 5),
        (0x2d, 6),
        (0x77, 7),
        (0x78, 7),
        (0x79, 7),
        (0x7a, 7),
        (0x7b, 7),
        (0x7ffe, 15),
        (0x7fc, 11),
        (0x3ffd, 14),
        (0x1ffd, 13),
        (0xffffffc, 28),
        (0xfffe6, 20),
        (0x3fffd2, 22),
        (0xfffe7, 20),
        (0xfffe8, 20),
        (0x3fffd3, 22),
        (0x3fffd4, 22),
        (0x3fffd5, 22),
        (0x7fffd9, 23),
        (0x3fffd6, 22),
        (0x7fffda, 23),
        (0x7fffdb, 23),
        (0x7fffdc, 23),
        (0x7fffdd, 23),
        (0x7fffde, 23),
        (0xffffeb, 24),
        (0x7fffdf, 23),
        (0xffffec, 24),
        (0xffffed, 24),
        (0x3fffd7, 22),
        (0x7fffe0, 23),
        (0xffffee, 24),
        (0x7fffe1, 23),
        (0x7fffe2, 23),
        (0x7fffe3, 23),
        (0x7fffe4, 23),
        (0x1fffdc, 21),
        (0x3fffd8, 22),
        (0x7fffe5, 23),
        (0x3fffd9, 22),
        (0x7fffe6, 23),
        (0x7fffe7, 23),
        (0xffffef, 24),
        (0x3fffda, 22),
        (0x1fffdd, 21),
        (0xfffe9, 20),
        (0x3fffdb, 22),
        (0x3fffdc, 22),
        (0x7fffe8, 23),
        (0x7fffe9, 23),
        (0x1fffde, 21),
        (0x7fffea, 23),
        (0x3fffdd, 22),
        (0x3fffde, 22),
        (0xfffff0, 24),
        (0x1fffdf, 21),
        (0x3fffdf, 22),
        (0x7fffeb, 23),
        (0x7fffec, 23),
        (0x1fffe0, 21),
        (0x1fffe1, 21),
        (0x3fffe0, 22),
        (0x1fffe2, 21),
        (0x7fffed, 23),
        (0x3fffe1, 22),
        (0x7fffee, 23),
        (0x7fffef, 23),
        (0xfffea, 20),
        (0x3fffe2, 22),
        (0x3fffe3, 22),
        (0x3fffe4, 22),
        (0x7ffff0, 23),
        (0x3fffe5, 22),
        (0x3fffe6, 22),
        (0x7ffff1, 23),
        (0x3ffffe0, 26),
        (0x3ffffe1, 26),
        (0xfffeb, 20),
        (0x7fff1, 19),
        (0x3fffe7, 22),
        (0x7ffff2, 23),
        (0x3fffe8, 22),
        (0x1ffffec, 25),
        (0x3ffffe2, 26),
        (0x3ffffe3, 26),
        (0x3ffffe4, 26),
        (0x7ffffde, 27),
        (0x7ffffdf, 27),
        (0x3ffffe5, 26),
        (0xfffff1, 24),
        (0x1ffffed, 25),
        (0x7fff2, 19),
        (0x1fffe3, 21),
        (0x3ffffe6, 26),
        (0x7ffffe0, 27),
        (0x7ffffe1, 27),
        (0x3ffffe7, 26),
        (0x7ffffe2, 27),
        (0xfffff2, 24),
        (0x1fffe4, 21),
        (0x1fffe5, 21),
        (0x3ffffe8, 26),
        (0x3ffffe9, 26),
        (0xffffffd, 28),
        (0x7ffffe3, 27),
        (0x7ffffe4, 27),
        (0x7ffffe5, 27),
        (0xfffec, 20),
        (0xfffff3, 24),
        (0xfffed, 20),
        (0x1fffe6, 21),
        (0x3fffe9, 22),
        (0x1fffe7, 21),
        (0x1fffe8, 21),
        (0x7ffff3, 23),
        (0x3fffea, 22),
        (0x3fffeb, 22),
        (0x1ffffee, 25),
        (0x1ffffef, 25),
        (0xfffff4, 24),
        (0xfffff5, 24),
        (0x3ffffea, 26),
        (0x7ffff4, 23),
        (0x3ffffeb, 26),
        (0x7ffffe6, 27),
        (0x3ffffec, 26),
        (0x3ffffed, 26),
        (0x7ffffe7, 27),
        (0x7ffffe8, 27),
        (0x7ffffe9, 27),
        (0x7ffffea, 27),
        (0x7ffffeb, 27),
        (0xffffffe, 28),
        (0x7ffffec, 27),
        (0x7ffffed, 27),
        (0x7ffffee, 27),
        (0x7ffffef, 27),
        (0x7fffff0, 27),
        (0x3ffffee, 26),
        (0x3fffffff, 30),
    ];

    /// A small xorshift generator: deterministic test data without extra crates.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn decoded(input: &[u8]) -> Result<Vec<u8>, HuffmanError> {
        let mut output = Vec::new();
        decode(input, &mut output).map(|()| output)
    }

    fn encoded(input: &[u8]) -> Vec<u8> {
        let mut output = Vec::new();
        encode(input, &mut output);
        output
    }

    #[test]
    fn rfc7541_appendix_b_code_is_canonical() {
        for (symbol, &(code, length)) in RFC_CODES.iter().enumerate() {
            assert_eq!(CODE_LENGTHS[symbol], length, "length of symbol {symbol}");
            assert_eq!(CODES[symbol], code, "code of symbol {symbol}");
        }
    }

    #[test]
    fn rfc7541_appendix_b_code_is_complete_and_prefix_free() {
        // Kraft sum of exactly 1: every bit string starts with a code, so the canonical search
        // always ends on a symbol.
        let kraft: u64 = CODE_LENGTHS
            .iter()
            .map(|&length| 1u64 << (MAX_CODE_LENGTH - usize::from(length)))
            .sum();
        assert_eq!(kraft, 1 << MAX_CODE_LENGTH);
        assert_eq!(CODES[usize::from(EOS)], (1 << 30) - 1);
        assert_eq!(CANONICAL.limit[MAX_CODE_LENGTH], 1 << 32);
    }

    #[test]
    fn lookup_table_agrees_with_canonical_decoding() {
        for (slot, entry) in LOOKUP.iter().enumerate() {
            let next_bits = (slot as u64) << (32 - LOOKUP_BITS);
            let (symbol, length) = decode_long_code(next_bits);
            if length <= LOOKUP_BITS {
                assert_eq!(
                    (u16::from(entry.symbol), u32::from(entry.length)),
                    (symbol, length)
                );
            } else {
                assert_eq!(entry.length, 0, "slot {slot:#x}");
            }
        }
    }

    #[test]
    fn canonical_decoding_finds_every_code() {
        for symbol in 0..SYMBOL_COUNT {
            let length = u32::from(CODE_LENGTHS[symbol]);
            let next_bits = u64::from(CODES[symbol]) << (32 - length);
            assert_eq!(decode_long_code(next_bits), (symbol as u16, length));
            // Whatever follows the code does not change it.
            let followed = next_bits | ((1 << (32 - length)) - 1);
            assert_eq!(decode_long_code(followed), (symbol as u16, length));
        }
    }

    #[test]
    fn rfc7541_c_4_1_huffman_string() {
        let coded = hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff");
        assert_eq!(decoded(&coded).unwrap(), b"www.example.com");
        assert_eq!(encoded(b"www.example.com"), coded);
    }

    #[test]
    fn rfc7541_c_6_1_huffman_strings() {
        let cases: [(&str, &[u8]); 4] = [
            ("6402", b"302"),
            ("aec3 771a 4b", b"private"),
            (
                "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
                b"Mon, 21 Oct 2013 20:13:21 GMT",
            ),
            (
                "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3",
                b"https://www.example.com",
            ),
        ];
        for (coded, plain) in cases {
            assert_eq!(decoded(&hex(coded)).unwrap(), plain);
            assert_eq!(encoded(plain), hex(coded));
        }
    }

    #[test]
    fn rfc7541_5_2_round_trip_every_byte_value() {
        for octet in 0..=255u8 {
            for repeat in [1, 2, 3, 7, 8, 9] {
                let plain = vec![octet; repeat];
                assert_eq!(
                    decoded(&encoded(&plain)).unwrap(),
                    plain,
                    "octet {octet:#x}"
                );
            }
        }
        let every: Vec<u8> = (0..=255).collect();
        assert_eq!(decoded(&encoded(&every)).unwrap(), every);
        let reversed: Vec<u8> = (0..=255).rev().collect();
        assert_eq!(decoded(&encoded(&reversed)).unwrap(), reversed);
    }

    #[test]
    fn rfc7541_5_2_round_trip_long_strings() {
        let mut random = XorShift(0x9e37_79b9_7f4a_7c15);
        for length in (0..300).chain([1000, 4096, 20_000]) {
            // Mostly printable ASCII (the lookup path), sometimes any octet (the long codes).
            let plain: Vec<u8> = (0..length)
                .map(|_| {
                    let value = random.next();
                    if value.is_multiple_of(8) {
                        value as u8
                    } else {
                        b' ' + ((value >> 8) % 95) as u8
                    }
                })
                .collect();
            assert_eq!(decoded(&encoded(&plain)).unwrap(), plain, "length {length}");
        }
    }

    #[test]
    fn rfc7541_5_2_round_trip_dns_query_path() {
        let path = b"/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB";
        let coded = encoded(path);
        assert!(coded.len() < path.len());
        assert_eq!(decoded(&coded).unwrap(), path);
    }

    #[test]
    fn rfc7541_5_2_empty_string() {
        assert_eq!(decoded(&[]).unwrap(), b"");
    }

    #[test]
    fn rfc7541_5_2_decode_appends_to_output() {
        let mut output = b"x".to_vec();
        decode(&encoded(b"yz"), &mut output).unwrap();
        assert_eq!(output, b"xyz");
    }

    #[test]
    fn rfc7541_5_2_rejects_eos_symbol() {
        // EOS alone: 30 ones and 2 bits of padding.
        assert_eq!(decoded(&[0xff; 4]), Err(HuffmanError::EosSymbol));
        // EOS after a symbol: 'a' (00011) then 30 ones and 5 bits of padding.
        let mut coded = vec![0b0001_1111, 0xff, 0xff, 0xff, 0b1111_1111];
        assert_eq!(decoded(&coded), Err(HuffmanError::EosSymbol));
        // EOS followed by 'a' and 3 bits of padding: 30 ones, 00011, 111.
        coded = vec![0xff, 0xff, 0xff, 0b1111_1100, 0b0111_1111];
        assert_eq!(decoded(&coded), Err(HuffmanError::EosSymbol));
    }

    #[test]
    fn rfc7541_5_2_rejects_padding_longer_than_7_bits() {
        // A whole octet of ones after a complete string.
        let mut coded = encoded(b"www.example.com");
        coded.push(0xff);
        assert_eq!(decoded(&coded), Err(HuffmanError::Padding));
        assert_eq!(decoded(&[0xff]), Err(HuffmanError::Padding));
        assert_eq!(decoded(&[0xff, 0xff]), Err(HuffmanError::Padding));
        assert_eq!(decoded(&[0xff, 0xff, 0xff]), Err(HuffmanError::Padding));
    }

    #[test]
    fn rfc7541_5_2_rejects_padding_not_all_ones() {
        // '0' is 00000 (5 bits), leaving 3 bits of padding that must be 111.
        assert_eq!(decoded(&[0b0000_0111]).unwrap(), b"0");
        assert_eq!(decoded(&[0b0000_0110]), Err(HuffmanError::Padding));
        assert_eq!(decoded(&[0b0000_0011]), Err(HuffmanError::Padding));
        // The last octet holds the start of a longer code, not padding.
        assert_eq!(decoded(&[0b0000_0000]), Err(HuffmanError::Padding));
        let mut coded = encoded(b"/dns-query");
        *coded.last_mut().unwrap() &= 0xfe;
        assert_eq!(decoded(&coded), Err(HuffmanError::Padding));
    }

    #[test]
    fn rfc7541_5_2_accepts_every_padding_length() {
        // Strings of n '0' symbols (5 bits each) end with every padding length 0..=7.
        for count in 1..=8 {
            let plain = vec![b'0'; count];
            let coded = encoded(&plain);
            assert_eq!(coded.len(), (count * 5).div_ceil(8));
            assert_eq!(decoded(&coded).unwrap(), plain);
        }
    }

    #[test]
    fn decode_never_panics_on_garbage() {
        let mut random = XorShift(0x2545_f491_4f6c_dd1d);
        let mut output = Vec::new();
        for _ in 0..20_000 {
            let length = (random.next() % 40) as usize;
            let dense = random.next().is_multiple_of(2);
            let input: Vec<u8> = (0..length)
                .map(|_| {
                    let value = random.next() as u8;
                    // Half the inputs lean towards ones, where the long codes and EOS live.
                    if dense { value | 0xe0 } else { value }
                })
                .collect();
            output.clear();
            if decode(&input, &mut output).is_ok() {
                assert_eq!(encoded(&output), input);
            }
        }
    }
}
