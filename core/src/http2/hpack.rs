//! HPACK (RFC 7541): the header compression of HTTP/2, without which no DNS-over-HTTPS request
//! can be read and no response sent.
//!
//! Both directions keep a dynamic table that must stay in step with the peer's: a [`Decoder`]
//! mirrors the client's encoder across every field block of the connection, and an [`Encoder`]
//! keeps an exact copy of what the client's decoder holds, so the indexes it sends stay right.
//!
//! ```text
//! HEADERS + CONTINUATION ─▶ Decoder::decode ─▶ field(name, value) … (request head)
//!                                 │ literal with incremental indexing
//!                                 └─▶ dynamic table (newest first, 62 upwards)
//!
//! response head ─▶ Encoder::{begin_block, status, field} ─▶ field block (HEADERS payload)
//!                                 │ remembered values
//!                                 └─▶ mirror of the client's dynamic table
//! ```
//!
//! Indexes 1 to 61 name the static table (RFC 7541 Appendix A), 62 upwards the dynamic table,
//! newest entry first (§2.3.3). Each block is decoded in one call over its complete bytes (the
//! connection joins HEADERS and CONTINUATION payloads first), with no allocation per field:
//! fields are slices of the tables, of the block, or of two scratch buffers for Huffman-coded
//! strings. The encoder never Huffman-codes; the strings a DNS server sends are short and raw
//! octets are cheaper to produce.

use std::collections::VecDeque;

use crate::http::huffman::{self, HuffmanError};
use crate::http::integer::{self, IntegerError};

/// SETTINGS_HEADER_TABLE_SIZE until a peer says otherwise: each side's dynamic table starts at
/// this maximum (RFC 9113 §6.5.2).
const INITIAL_TABLE_SIZE: usize = 4096;

/// Added to the name and value lengths to give an entry's size (RFC 7541 §4.1).
const ENTRY_OVERHEAD: usize = 32;

/// Scratch capacity a decoder keeps between blocks; a larger buffer (after an unusually long
/// Huffman-coded string) is shrunk back so an idle connection holds little memory.
const SCRATCH_CAPACITY_KEPT: usize = 4096;

/// The static table (RFC 7541 Appendix A); index `n` is at position `n - 1`.
static STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The static table index of `:status` (the `200` entry), named by literal status fields.
const STATUS_NAME_INDEX: usize = 8;

/// The lowest static table index with this name (RFC 7541 Appendix A), if any.
fn static_name_index(name: &[u8]) -> Option<usize> {
    let index = match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    };
    Some(index)
}

/// The static table index of exactly this field, given the first index with its name.
fn static_field_index(first_index: usize, name: &[u8], value: &[u8]) -> Option<usize> {
    STATIC_TABLE
        .iter()
        .enumerate()
        .skip(first_index - 1)
        .take_while(|(_, (entry_name, _))| *entry_name == name)
        .find(|(_, (_, entry_value))| *entry_value == value)
        .map(|(position, _)| position + 1)
}

/// Why a field block could not be decoded; the connection answers COMPRESSION_ERROR (RFC 9113 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The block ends inside a representation, or a string's length runs past its end.
    #[error("field block ends inside a representation")]
    Truncated,
    /// An integer exceeds 2^32 - 1 or has more continuation octets than such a value needs
    /// (RFC 7541 §5.1).
    #[error("integer in field block exceeds 2^32 - 1")]
    IntegerOverflow,
    /// An index of 0 (RFC 7541 §6.1).
    #[error("field block refers to index 0")]
    ZeroIndex,
    /// An index past the static and dynamic tables (RFC 7541 §2.3.3).
    #[error("field block refers to index {index}, past the {entries} table entries")]
    IndexOutOfRange {
        /// The index the block referred to.
        index: usize,
        /// How many entries the static and dynamic tables held together.
        entries: usize,
    },
    /// A Huffman-coded string contains the EOS symbol (RFC 7541 §5.2).
    #[error("huffman-coded string contains the end-of-string symbol")]
    HuffmanEos,
    /// A Huffman-coded string ends with padding longer than 7 bits or not all ones
    /// (RFC 7541 §5.2).
    #[error("huffman-coded string ends with padding longer than 7 bits or not all ones")]
    HuffmanPadding,
    /// A dynamic table size update above the SETTINGS_HEADER_TABLE_SIZE this side advertised
    /// (RFC 7541 §6.3).
    #[error("dynamic table size update to {size} exceeds the advertised maximum of {max}")]
    SizeUpdateTooLarge {
        /// The size the update asked for.
        size: usize,
        /// The SETTINGS_HEADER_TABLE_SIZE this side advertised.
        max: usize,
    },
    /// A dynamic table size update after a field of the same block (RFC 7541 §4.2).
    #[error("dynamic table size update after a field in the same block")]
    SizeUpdateAfterField,
}

impl From<HuffmanError> for DecodeError {
    fn from(error: HuffmanError) -> Self {
        match error {
            HuffmanError::EosSymbol => Self::HuffmanEos,
            HuffmanError::Padding => Self::HuffmanPadding,
        }
    }
}

/// One dynamic table entry: name and value in a single allocation.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    /// The name followed by the value.
    field: Box<[u8]>,
    name_length: usize,
}

impl Entry {
    fn new(name: &[u8], value: &[u8]) -> Self {
        Self {
            field: [name, value].concat().into_boxed_slice(),
            name_length: name.len(),
        }
    }

    fn name(&self) -> &[u8] {
        &self.field[..self.name_length]
    }

    fn value(&self) -> &[u8] {
        &self.field[self.name_length..]
    }

    /// The size the table accounts for this entry (RFC 7541 §4.1).
    fn size(&self) -> usize {
        self.field.len() + ENTRY_OVERHEAD
    }
}

/// The size a table entry with this name and value would have (RFC 7541 §4.1).
fn entry_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + ENTRY_OVERHEAD
}

/// The dynamic table (RFC 7541 §2.3.2, §4): newest entry at the front, so position 0 is
/// index 62.
#[derive(Debug, PartialEq, Eq)]
struct DynamicTable {
    entries: VecDeque<Entry>,
    /// Sum of the entries' sizes; never above `max_size`.
    size: usize,
    max_size: usize,
}

impl DynamicTable {
    fn new(max_size: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    fn get(&self, position: usize) -> Option<&Entry> {
        self.entries.get(position)
    }

    /// Adds an entry, evicting the oldest ones to make room; an entry larger than the whole
    /// table empties it and is not added (RFC 7541 §4.4).
    fn insert(&mut self, entry: Entry) {
        let entry_size = entry.size();
        if entry_size > self.max_size {
            self.clear();
            return;
        }
        self.evict_to(self.max_size - entry_size);
        self.size += entry_size;
        self.entries.push_front(entry);
    }

    /// Evicts every entry.
    fn clear(&mut self) {
        self.entries.clear();
        self.size = 0;
    }

    /// Applies a new maximum size, evicting as needed (RFC 7541 §4.3).
    fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// Evicts the oldest entries until the table's size is at most `size`.
    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let Some(oldest) = self.entries.pop_back() else {
                break;
            };
            self.size -= oldest.size();
        }
    }

    /// The position of an entry with exactly this name and value.
    fn position_of(&self, name: &[u8], value: &[u8]) -> Option<usize> {
        self.entries
            .iter()
            .position(|entry| entry.name() == name && entry.value() == value)
    }

    /// The position of the newest entry with this name.
    fn position_of_name(&self, name: &[u8]) -> Option<usize> {
        self.entries.iter().position(|entry| entry.name() == name)
    }
}

/// The name and value at `index` of the static table followed by `dynamic` (RFC 7541 §2.3.3).
fn field_at(dynamic: &DynamicTable, index: usize) -> Result<(&[u8], &[u8]), DecodeError> {
    let Some(position) = index.checked_sub(1) else {
        return Err(DecodeError::ZeroIndex);
    };
    if let Some(&(name, value)) = STATIC_TABLE.get(position) {
        return Ok((name, value));
    }
    match dynamic.get(position - STATIC_TABLE.len()) {
        Some(entry) => Ok((entry.name(), entry.value())),
        None => Err(DecodeError::IndexOutOfRange {
            index,
            entries: STATIC_TABLE.len() + dynamic.entries.len(),
        }),
    }
}

/// Reads an integer with a `prefix_bits`-bit prefix from the front of `input` (RFC 7541 §5.1);
/// the first octet's higher bits are the caller's. Lengths, indexes and table sizes over
/// 2^32 - 1 are refused before any arithmetic on them.
fn read_integer(input: &mut &[u8], prefix_bits: u32) -> Result<usize, DecodeError> {
    let value = integer::read(input, prefix_bits).map_err(|e| match e {
        IntegerError::Truncated => DecodeError::Truncated,
        IntegerError::Overflow => DecodeError::IntegerOverflow,
    })?;
    usize::try_from(value).map_err(|_| DecodeError::IntegerOverflow)
}

/// Reads a string literal from the front of `input` (RFC 7541 §5.2): a raw string is a slice of
/// the input, a Huffman-coded one is decoded into `buffer`.
fn read_string<'string, 'input: 'string, 'buffer: 'string>(
    input: &mut &'input [u8],
    buffer: &'buffer mut Vec<u8>,
) -> Result<&'string [u8], DecodeError> {
    let huffman_coded = input.first().is_some_and(|&octet| octet & 0x80 != 0);
    let length = read_integer(input, 7)?;
    let Some((string, rest)) = input.split_at_checked(length) else {
        return Err(DecodeError::Truncated);
    };
    *input = rest;
    if !huffman_coded {
        return Ok(string);
    }
    buffer.clear();
    huffman::decode(string, buffer)?;
    Ok(buffer)
}

/// An HPACK decoder: one per connection, fed every field block the peer sends, in order.
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    /// The SETTINGS_HEADER_TABLE_SIZE this side advertised: the most a size update may ask for.
    max_table_size: usize,
    /// Where Huffman-coded names are decoded.
    name_buffer: Vec<u8>,
    /// Where Huffman-coded values are decoded.
    value_buffer: Vec<u8>,
    /// The first error: the table is out of step from then on, so every later block fails too.
    failure: Option<DecodeError>,
}

impl Decoder {
    /// A decoder whose dynamic table may grow to `max_table_size` bytes (the
    /// SETTINGS_HEADER_TABLE_SIZE this side advertised; kudurru uses the default 4096).
    ///
    /// The table starts at the smaller of that and 4096, the size the peer's encoder assumes
    /// until it sends a dynamic table size update (RFC 7541 §4.2, RFC 9113 §6.5.2).
    pub fn new(max_table_size: usize) -> Self {
        Self {
            // The peer's encoder starts from the protocol's initial size and must signal any
            // other (RFC 7541 §4.2); it may never exceed what this side advertised.
            table: DynamicTable::new(max_table_size.min(INITIAL_TABLE_SIZE)),
            max_table_size,
            name_buffer: Vec::new(),
            value_buffer: Vec::new(),
            failure: None,
        }
    }

    /// Decodes one complete field block, calling `field(name, value)` for each field in order.
    ///
    /// The whole block is processed even when the caller no longer wants the fields (the
    /// dynamic table must stay in step with the peer's encoder); an error leaves the decoder
    /// unusable for this connection (the caller closes it), and every later call returns the
    /// same error. Indexed fields can repeat a table entry many times over, so a caller that
    /// keeps fields bounds them itself (SETTINGS_MAX_HEADER_LIST_SIZE, RFC 9113 §6.5.2).
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), DecodeError> {
        if let Some(error) = self.failure {
            return Err(error);
        }
        let result = self.decode_block(block, &mut field);
        if let Err(error) = result {
            self.failure = Some(error);
        }
        for buffer in [&mut self.name_buffer, &mut self.value_buffer] {
            if buffer.capacity() > SCRATCH_CAPACITY_KEPT {
                buffer.clear();
                buffer.shrink_to(SCRATCH_CAPACITY_KEPT);
            }
        }
        result
    }

    /// Walks the representations of one block (RFC 7541 §6).
    fn decode_block(
        &mut self,
        block: &[u8],
        field: &mut impl FnMut(&[u8], &[u8]),
    ) -> Result<(), DecodeError> {
        let mut input = block;
        let mut after_field = false;
        while let Some(&first) = input.first() {
            if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = read_integer(&mut input, 7)?;
                let (name, value) = field_at(&self.table, index)?;
                field(name, value);
            } else if first & 0x40 != 0 {
                // Literal with incremental indexing (§6.2.1). The name is copied into the new
                // entry before insertion can evict the entry it came from (§4.4).
                let index = read_integer(&mut input, 6)?;
                let name = match index {
                    0 => read_string(&mut input, &mut self.name_buffer)?,
                    _ => field_at(&self.table, index)?.0,
                };
                let value = read_string(&mut input, &mut self.value_buffer)?;
                if entry_size(name, value) > self.table.max_size {
                    // Too large for the table: it empties and nothing is copied (§4.4).
                    field(name, value);
                    self.table.clear();
                } else {
                    let entry = Entry::new(name, value);
                    field(entry.name(), entry.value());
                    self.table.insert(entry);
                }
            } else if first & 0x20 != 0 {
                // Dynamic table size update (§6.3), only before the block's first field (§4.2).
                if after_field {
                    return Err(DecodeError::SizeUpdateAfterField);
                }
                let size = read_integer(&mut input, 5)?;
                if size > self.max_table_size {
                    return Err(DecodeError::SizeUpdateTooLarge {
                        size,
                        max: self.max_table_size,
                    });
                }
                self.table.set_max_size(size);
                continue;
            } else {
                // Literal without indexing (§6.2.2, 0000) or never indexed (§6.2.3, 0001):
                // the same to a decoder that passes fields on and never re-encodes them.
                let index = read_integer(&mut input, 4)?;
                let name = match index {
                    0 => read_string(&mut input, &mut self.name_buffer)?,
                    _ => field_at(&self.table, index)?.0,
                };
                let value = read_string(&mut input, &mut self.value_buffer)?;
                field(name, value);
            }
            after_field = true;
        }
        Ok(())
    }
}

/// Writes an integer with a `prefix_bits`-bit prefix (RFC 7541 §5.1); `flags` fills the first
/// octet's higher bits.
fn write_integer(out: &mut Vec<u8>, flags: u8, prefix_bits: u32, value: usize) {
    integer::write(out, flags, prefix_bits, value as u64);
}

/// Writes a raw (not Huffman-coded) string literal (RFC 7541 §5.2).
fn write_string(out: &mut Vec<u8>, string: &[u8]) {
    write_integer(out, 0x00, 7, string.len());
    out.extend_from_slice(string);
}

/// Writes an indexed field (RFC 7541 §6.1).
fn write_indexed(out: &mut Vec<u8>, index: usize) {
    write_integer(out, 0x80, 7, index);
}

/// Writes a dynamic table size update (RFC 7541 §6.3).
fn write_size_update(out: &mut Vec<u8>, size: usize) {
    write_integer(out, 0x20, 5, size);
}

/// Writes a literal field (RFC 7541 §6.2): the name by index when there is one, else raw, then
/// the value.
fn write_literal(
    out: &mut Vec<u8>,
    flags: u8,
    prefix_bits: u32,
    name_index: Option<usize>,
    name: &[u8],
    value: &[u8],
) {
    match name_index {
        Some(index) => write_integer(out, flags, prefix_bits, index),
        None => {
            write_integer(out, flags, prefix_bits, 0);
            write_string(out, name);
        }
    }
    write_string(out, value);
}

/// An HPACK encoder for responses: one per connection.
#[derive(Debug)]
pub struct Encoder {
    /// An exact copy of the peer decoder's dynamic table: what it holds once it has decoded
    /// every block written so far.
    table: DynamicTable,
    /// The most of the peer's table this encoder will use.
    own_limit: usize,
    /// The peer's SETTINGS_HEADER_TABLE_SIZE.
    peer_limit: usize,
    /// Set when the size to use changed since the last block: the smallest size in between,
    /// which the next block must announce before the final one (RFC 7541 §4.2).
    pending_smallest: Option<usize>,
}

impl Encoder {
    /// An encoder that uses at most `table_size` bytes of the peer's dynamic table (kudurru
    /// will pass something like 512: a small table keeps lookups short).
    ///
    /// The blocks it writes must reach the peer in the order they were written, every one of
    /// them: each may change the peer's table.
    pub fn new(table_size: usize) -> Self {
        let target = table_size.min(INITIAL_TABLE_SIZE);
        Self {
            table: DynamicTable::new(INITIAL_TABLE_SIZE),
            own_limit: table_size,
            peer_limit: INITIAL_TABLE_SIZE,
            pending_smallest: (target != INITIAL_TABLE_SIZE).then_some(target),
        }
    }

    /// The table size to use: this encoder's own limit, within the peer's.
    fn target_size(&self) -> usize {
        self.own_limit.min(self.peer_limit)
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE (initially 4096) changed.
    ///
    /// Takes effect at the next [`begin_block`](Self::begin_block), which announces it.
    pub fn set_peer_max_table_size(&mut self, size: usize) {
        if size == self.peer_limit {
            return;
        }
        self.peer_limit = size;
        // Announced even when the size this encoder uses stays the same: a decoder may expect
        // an update after any change of its setting.
        let target = self.target_size();
        self.pending_smallest = Some(self.pending_smallest.map_or(target, |s| s.min(target)));
    }

    /// Starts a field block: writes any pending dynamic table size update(s) (RFC 7541 §4.2,
    /// §6.3: the smallest size since the last block, then the final one).
    pub fn begin_block(&mut self, out: &mut Vec<u8>) {
        let Some(smallest) = self.pending_smallest.take() else {
            return;
        };
        let target = self.target_size();
        if smallest < target {
            write_size_update(out, smallest);
            self.table.set_max_size(smallest);
        }
        write_size_update(out, target);
        self.table.set_max_size(target);
    }

    /// `:status` (static table entries 8–14 where they match, else a literal without indexing
    /// with name index 8).
    pub fn status(&mut self, code: u16, out: &mut Vec<u8>) {
        let index = match code {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => {
                write_integer(out, 0x00, 4, STATUS_NAME_INDEX);
                let mut digits = [0u8; 5];
                let mut start = digits.len();
                let mut rest = code;
                loop {
                    start -= 1;
                    digits[start] = b'0' + (rest % 10) as u8;
                    rest /= 10;
                    if rest == 0 {
                        break;
                    }
                }
                // A u16 has at most 5 decimal digits, so start stays within the array.
                write_string(out, &digits[start..]);
                return;
            }
        };
        write_indexed(out, index);
    }

    /// One field (name lowercase ASCII).
    ///
    /// `remember`: the value repeats across responses (content-type, date within one second,
    /// alt-svc): find it in, or insert it into, the dynamic table (literal with incremental
    /// indexing, static name index when there is one, else the name of an older entry);
    /// otherwise a literal without indexing (RFC 7541 §6.2.2) with the static name index when
    /// there is one. A field the static table holds whole is sent as its index either way, and
    /// a remembered field larger than the whole table as a literal without indexing. Never
    /// Huffman-encodes (raw octets: cheaper to produce).
    pub fn field(&mut self, name: &[u8], value: &[u8], remember: bool, out: &mut Vec<u8>) {
        debug_assert!(
            !name.iter().any(u8::is_ascii_uppercase),
            "field names are lowercase (RFC 9113 §8.2.1)"
        );
        let static_name = static_name_index(name);
        if let Some(index) = static_name.and_then(|first| static_field_index(first, name, value)) {
            write_indexed(out, index);
            return;
        }
        // An entry larger than the whole table would only empty it (RFC 7541 §4.4).
        if remember && entry_size(name, value) <= self.table.max_size {
            if let Some(position) = self.table.position_of(name, value) {
                write_indexed(out, STATIC_TABLE.len() + 1 + position);
                return;
            }
            // Literal with incremental indexing (§6.2.1); a dynamic name index refers to the
            // table before this entry is added, as the decoder reads it.
            let name_index = static_name.or_else(|| {
                self.table
                    .position_of_name(name)
                    .map(|position| STATIC_TABLE.len() + 1 + position)
            });
            write_literal(out, 0x40, 6, name_index, name, value);
            self.table.insert(Entry::new(name, value));
            return;
        }
        // Literal without indexing (§6.2.2).
        write_literal(out, 0x00, 4, static_name, name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::hex;

    /// A small xorshift generator: deterministic test data without extra crates.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, bound: u64) -> u64 {
            self.next() % bound
        }
    }

    /// Fields as the RFC prints them: one `name: value` line each.
    fn lines<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> String {
        let lines: Vec<String> = fields
            .into_iter()
            .map(|(name, value)| {
                let name = std::str::from_utf8(name).unwrap();
                format!("{name}: {}", std::str::from_utf8(value).unwrap())
            })
            .collect();
        lines.join("\n")
    }

    fn decode(decoder: &mut Decoder, block: &[u8]) -> Result<String, DecodeError> {
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        decoder.decode(block, |name, value| {
            fields.push((name.to_vec(), value.to_vec()))
        })?;
        Ok(lines(
            fields.iter().map(|(name, value)| (&name[..], &value[..])),
        ))
    }

    fn decode_hex(decoder: &mut Decoder, block: &str) -> Result<String, DecodeError> {
        decode(decoder, &hex(block))
    }

    /// The error a fresh decoder with the default table size finds in a block.
    fn error(block: &str) -> DecodeError {
        decode_hex(&mut Decoder::new(4096), block).unwrap_err()
    }

    /// The dynamic table, newest first, and its size.
    fn table(table: &DynamicTable) -> (String, usize) {
        let fields = table
            .entries
            .iter()
            .map(|entry| (entry.name(), entry.value()));
        (lines(fields), table.size)
    }

    fn integer(bytes: &[u8], prefix_bits: u32) -> Result<usize, DecodeError> {
        let mut input = bytes;
        let value = read_integer(&mut input, prefix_bits)?;
        assert!(input.is_empty(), "integer left {input:?}");
        Ok(value)
    }

    fn written_integer(value: usize, prefix_bits: u32) -> Vec<u8> {
        let mut out = Vec::new();
        write_integer(&mut out, 0, prefix_bits, value);
        out
    }

    #[test]
    fn static_name_index_matches_static_table() {
        for &(name, _) in &STATIC_TABLE {
            let first = STATIC_TABLE.iter().position(|&(other, _)| other == name);
            assert_eq!(static_name_index(name), first.map(|position| position + 1));
        }
        assert_eq!(static_name_index(b"alt-svc"), None);
        assert_eq!(static_name_index(b"Date"), None);
    }

    #[test]
    fn rfc7541_c_1_1_integer_10_with_5_bit_prefix() {
        assert_eq!(written_integer(10, 5), [0b0000_1010]);
        assert_eq!(integer(&[0b1110_1010], 5), Ok(10));
    }

    #[test]
    fn rfc7541_c_1_2_integer_1337_with_5_bit_prefix() {
        let octets = [0b0001_1111, 0b1001_1010, 0b0000_1010];
        assert_eq!(written_integer(1337, 5), octets);
        assert_eq!(
            integer(&[0b1111_1111, 0b1001_1010, 0b0000_1010], 5),
            Ok(1337)
        );
    }

    #[test]
    fn rfc7541_c_1_3_integer_42_at_octet_boundary() {
        assert_eq!(written_integer(42, 8), [0b0010_1010]);
        assert_eq!(integer(&[0b0010_1010], 8), Ok(42));
    }

    #[test]
    fn rfc7541_5_1_integer_round_trips_at_boundaries() {
        for prefix_bits in 4..=8 {
            let max = (1usize << prefix_bits) - 1;
            let values = [0, 1, max - 1, max, max + 1, max + 127, max + 128, 16_384];
            for value in values.into_iter().chain([u32::MAX as usize]) {
                let octets = written_integer(value, prefix_bits);
                assert_eq!(integer(&octets, prefix_bits), Ok(value));
            }
        }
    }

    #[test]
    fn rfc7541_5_1_integer_overflow() {
        // 2^32 - 1 is the largest accepted value: 31 + 0xffff_ffe0.
        assert_eq!(integer(&hex("1f e0 ff ff ff 0f"), 5), Ok(u32::MAX as usize));
        let overflow = Err(DecodeError::IntegerOverflow);
        assert_eq!(integer(&hex("1f e1 ff ff ff 0f"), 5), overflow);
        // A sixth continuation octet, even one that adds nothing.
        assert_eq!(integer(&hex("1f 80 80 80 80 80 00"), 5), overflow);
        // Enough continuation octets to overflow a u64 if summed unchecked.
        let mut long = vec![0xff; 21];
        long.push(0x01);
        assert_eq!(integer(&long, 7), overflow);
    }

    #[test]
    fn rfc7541_5_1_integer_truncated() {
        assert_eq!(integer(&[], 5), Err(DecodeError::Truncated));
        assert_eq!(integer(&[0x1f], 5), Err(DecodeError::Truncated));
        assert_eq!(integer(&[0x1f, 0x9a], 5), Err(DecodeError::Truncated));
    }

    /// Decodes one block with a fresh decoder, checking the fields and the table after it.
    fn check_block(block: &str, fields: &str, after: (&str, usize)) {
        let mut decoder = Decoder::new(4096);
        assert_eq!(decode_hex(&mut decoder, block).as_deref(), Ok(fields));
        let (entries, size) = table(&decoder.table);
        assert_eq!((entries.as_str(), size), after);
    }

    #[test]
    fn rfc7541_c_2_1_literal_with_indexing() {
        let block = "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572";
        let field = "custom-key: custom-header";
        check_block(block, field, (field, 55));
    }

    #[test]
    fn rfc7541_c_2_2_literal_without_indexing() {
        check_block(
            "040c 2f73 616d 706c 652f 7061 7468",
            ":path: /sample/path",
            ("", 0),
        );
    }

    #[test]
    fn rfc7541_c_2_3_literal_never_indexed() {
        let block = "1008 7061 7373 776f 7264 0673 6563 7265 74";
        check_block(block, "password: secret", ("", 0));
    }

    #[test]
    fn rfc7541_c_2_4_indexed() {
        check_block("82", ":method: GET", ("", 0));
    }

    /// Decodes a sequence of blocks (RFC 7541 C.3 to C.6) with one decoder, checking the fields
    /// and the dynamic table (newest first) and its size after each.
    fn check_sequence(
        max_table_size: usize,
        blocks: [&str; 3],
        expected: [(&str, &str, usize); 3],
    ) {
        let mut decoder = Decoder::new(max_table_size);
        for (step, (block, (fields, entries, size))) in blocks.iter().zip(expected).enumerate() {
            assert_eq!(
                decode_hex(&mut decoder, block).as_deref(),
                Ok(fields),
                "block {step}"
            );
            let (actual_entries, actual_size) = table(&decoder.table);
            assert_eq!(
                (actual_entries.as_str(), actual_size),
                (entries, size),
                "block {step}"
            );
        }
    }

    const C_3_AND_C_4_REQUESTS: [(&str, &str, usize); 3] = [
        (
            ":method: GET\n:scheme: http\n:path: /\n:authority: www.example.com",
            ":authority: www.example.com",
            57,
        ),
        (
            ":method: GET\n:scheme: http\n:path: /\n:authority: www.example.com\n\
             cache-control: no-cache",
            "cache-control: no-cache\n:authority: www.example.com",
            110,
        ),
        (
            ":method: GET\n:scheme: https\n:path: /index.html\n:authority: www.example.com\n\
             custom-key: custom-value",
            "custom-key: custom-value\ncache-control: no-cache\n:authority: www.example.com",
            164,
        ),
    ];

    #[test]
    fn rfc7541_c_3_requests_without_huffman() {
        let blocks = [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ];
        check_sequence(4096, blocks, C_3_AND_C_4_REQUESTS);
    }

    #[test]
    fn rfc7541_c_4_requests_with_huffman() {
        let blocks = [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ];
        check_sequence(4096, blocks, C_3_AND_C_4_REQUESTS);
    }

    /// The RFC's response examples run with a 256-octet table, so entries are evicted.
    const C_5_AND_C_6_RESPONSES: [(&str, &str, usize); 3] = [
        (
            ":status: 302\ncache-control: private\ndate: Mon, 21 Oct 2013 20:13:21 GMT\n\
             location: https://www.example.com",
            "location: https://www.example.com\ndate: Mon, 21 Oct 2013 20:13:21 GMT\n\
             cache-control: private\n:status: 302",
            222,
        ),
        (
            ":status: 307\ncache-control: private\ndate: Mon, 21 Oct 2013 20:13:21 GMT\n\
             location: https://www.example.com",
            ":status: 307\nlocation: https://www.example.com\n\
             date: Mon, 21 Oct 2013 20:13:21 GMT\ncache-control: private",
            222,
        ),
        (
            ":status: 200\ncache-control: private\ndate: Mon, 21 Oct 2013 20:13:22 GMT\n\
             location: https://www.example.com\ncontent-encoding: gzip\n\
             set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
            "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1\n\
             content-encoding: gzip\ndate: Mon, 21 Oct 2013 20:13:22 GMT",
            215,
        ),
    ];

    #[test]
    fn rfc7541_c_5_responses_without_huffman() {
        let blocks = [
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 \
             3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 \
             7861 6d70 6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 \
             474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 \
             454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 \
             6572 7369 6f6e 3d31",
        ];
        check_sequence(256, blocks, C_5_AND_C_6_RESPONSES);
    }

    #[test]
    fn rfc7541_c_6_responses_with_huffman() {
        let blocks = [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 \
             82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b \
             d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 \
             0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ];
        check_sequence(256, blocks, C_5_AND_C_6_RESPONSES);
    }

    #[test]
    fn rfc7541_5_2_truncated_string() {
        // Literal without indexing, new name of length 10 with only 3 octets present.
        assert_eq!(error("00 0a 61 62 63"), DecodeError::Truncated);
        // The value's length octet is missing.
        assert_eq!(error("04"), DecodeError::Truncated);
        // Huffman-coded value of length 2 with one octet present.
        assert_eq!(error("44 82 64"), DecodeError::Truncated);
    }

    #[test]
    fn rfc7541_5_1_integer_overflow_in_block() {
        assert_eq!(error("ff ff ff ff ff ff 01"), DecodeError::IntegerOverflow);
        // A string length of 2^32 in a short block: refused as an integer, not allocated.
        assert_eq!(error("04 7f 81 ff ff ff 0f"), DecodeError::IntegerOverflow);
    }

    #[test]
    fn rfc7541_6_1_zero_index() {
        assert_eq!(error("80"), DecodeError::ZeroIndex);
        assert_eq!(error("82 80"), DecodeError::ZeroIndex);
        // In a literal, index 0 means a new name follows (§6.2): not an error.
        check_block("00 01 61 01 62", "a: b", ("", 0));
    }

    #[test]
    fn rfc7541_2_3_3_index_out_of_range() {
        let out_of_range = |index, entries| DecodeError::IndexOutOfRange { index, entries };
        // Index 61 is the last static entry; 62 is the first dynamic one, absent here.
        check_block("bd", "www-authenticate: ", ("", 0));
        assert_eq!(error("be"), out_of_range(62, 61));
        // A name index past the tables.
        assert_eq!(error("7f 00 01 61"), out_of_range(63, 61));
        // With one dynamic entry, 62 works and 63 does not.
        let mut decoder = Decoder::new(4096);
        assert!(decode_hex(&mut decoder, "41 01 61").is_ok());
        assert_eq!(
            decode_hex(&mut decoder, "be").as_deref(),
            Ok(":authority: a")
        );
        assert_eq!(decode_hex(&mut decoder, "bf"), Err(out_of_range(63, 62)));
    }

    #[test]
    fn rfc7541_5_2_huffman_eos_in_block() {
        assert_eq!(error("04 84 ff ff ff ff"), DecodeError::HuffmanEos);
    }

    #[test]
    fn rfc7541_5_2_huffman_padding_in_block() {
        // Name: Huffman "0" with padding 110; then a valid raw value.
        assert_eq!(error("00 81 06 01 61"), DecodeError::HuffmanPadding);
        // Value: a whole octet of padding.
        assert_eq!(error("04 81 ff"), DecodeError::HuffmanPadding);
    }

    #[test]
    fn rfc7541_6_3_size_update_too_large() {
        // 4096 = 31 + 4065: 3f e1 1f.
        check_block("3f e1 1f 82", ":method: GET", ("", 0));
        let too_large = DecodeError::SizeUpdateTooLarge {
            size: 4097,
            max: 4096,
        };
        assert_eq!(error("3f e2 1f"), too_large);
        let too_large = DecodeError::SizeUpdateTooLarge { size: 1, max: 0 };
        assert_eq!(decode_hex(&mut Decoder::new(0), "21"), Err(too_large));
    }

    #[test]
    fn rfc7541_4_2_size_update_after_field() {
        assert_eq!(error("82 20"), DecodeError::SizeUpdateAfterField);
        // The next block may start with one.
        let mut decoder = Decoder::new(4096);
        assert!(decode_hex(&mut decoder, "82").is_ok());
        assert_eq!(
            decode_hex(&mut decoder, "20 82").as_deref(),
            Ok(":method: GET")
        );
    }

    #[test]
    fn rfc7541_4_2_two_size_updates_at_block_start() {
        let mut decoder = Decoder::new(4096);
        assert!(decode_hex(&mut decoder, "41 01 61").is_ok());
        // 0 evicts everything, then 100 allows new entries again.
        let fields = decode_hex(&mut decoder, "20 3f 45 41 01 62");
        assert_eq!(fields.as_deref(), Ok(":authority: b"));
        assert_eq!(table(&decoder.table), (":authority: b".to_owned(), 43));
        assert_eq!(decoder.table.max_size, 100);
    }

    #[test]
    fn rfc7541_4_3_size_update_evicts_oldest() {
        let mut decoder = Decoder::new(4096);
        // Three entries of 43 octets each.
        assert!(decode_hex(&mut decoder, "41 01 61 41 01 62 41 01 63").is_ok());
        assert_eq!(decoder.table.size, 129);
        // 87 octets keep the two newest.
        assert!(decode_hex(&mut decoder, "3f 38").is_ok());
        let expected = (":authority: c\n:authority: b".to_owned(), 86);
        assert_eq!(table(&decoder.table), expected);
    }

    #[test]
    fn rfc7541_4_4_entry_larger_than_table_empties_it() {
        let mut decoder = Decoder::new(64);
        assert!(decode_hex(&mut decoder, "41 01 61").is_ok());
        assert_eq!(decoder.table.size, 43);
        // 10 + 32 + 32 = 74 > 64: the table empties and the field still decodes.
        let block = "41 20 3031323334353637383930313233343536373839303132333435363738393031";
        let fields = decode_hex(&mut decoder, block);
        assert_eq!(
            fields.as_deref(),
            Ok(":authority: 01234567890123456789012345678901")
        );
        assert_eq!(table(&decoder.table), (String::new(), 0));
        let out_of_range = DecodeError::IndexOutOfRange {
            index: 62,
            entries: 61,
        };
        assert_eq!(decode_hex(&mut decoder, "be"), Err(out_of_range));
    }

    #[test]
    fn rfc7541_4_4_new_entry_may_name_evicted_entry() {
        // A 64-octet table holds one entry of "custom-name: a" (11 + 1 + 32 = 44).
        let mut decoder = Decoder::new(64);
        assert!(decode_hex(&mut decoder, "40 0b 637573746f6d2d6e616d65 01 61").is_ok());
        // Literal with incremental indexing naming index 62, whose insertion evicts index 62.
        assert_eq!(
            decode_hex(&mut decoder, "7e 01 62").as_deref(),
            Ok("custom-name: b")
        );
        assert_eq!(table(&decoder.table), ("custom-name: b".to_owned(), 44));
    }

    #[test]
    fn decoder_initial_table_is_protocol_default_within_advertised_maximum() {
        // Advertising more than 4096 does not grow the table until the peer says so.
        let mut decoder = Decoder::new(8192);
        assert_eq!(decoder.table.max_size, 4096);
        assert!(decode_hex(&mut decoder, "3f e1 3f").is_ok());
        assert_eq!(decoder.table.max_size, 8192);
        assert_eq!(Decoder::new(256).table.max_size, 256);
    }

    #[test]
    fn decoder_stays_failed_after_error() {
        let mut decoder = Decoder::new(4096);
        assert_eq!(decode_hex(&mut decoder, "80"), Err(DecodeError::ZeroIndex));
        assert_eq!(decode_hex(&mut decoder, "82"), Err(DecodeError::ZeroIndex));
    }

    #[test]
    fn decoder_processes_whole_block_for_uninterested_caller() {
        let mut decoder = Decoder::new(4096);
        assert!(decoder.decode(&hex("41 01 61 41 01 62"), |_, _| {}).is_ok());
        assert_eq!(decoder.table.entries.len(), 2);
    }

    /// A block with one literal field whose value is Huffman-coded.
    fn huffman_value_block(prefix: &str, value: &[u8]) -> Vec<u8> {
        let mut coded = Vec::new();
        huffman::encode(value, &mut coded);
        let mut block = hex(prefix);
        write_integer(&mut block, 0x80, 7, coded.len());
        block.extend_from_slice(&coded);
        block
    }

    #[test]
    fn decoder_reuses_scratch_buffers() {
        let path = "/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB";
        // :method GET, :scheme https, :path (literal without indexing, Huffman-coded).
        let block = huffman_value_block("82 87 04", path.as_bytes());
        let mut decoder = Decoder::new(4096);
        let expected = format!(":method: GET\n:scheme: https\n:path: {path}");
        assert_eq!(decode(&mut decoder, &block), Ok(expected.clone()));
        let buffer = (
            decoder.value_buffer.as_ptr(),
            decoder.value_buffer.capacity(),
        );
        for _ in 0..10 {
            assert_eq!(decode(&mut decoder, &block), Ok(expected.clone()));
            let reused = (
                decoder.value_buffer.as_ptr(),
                decoder.value_buffer.capacity(),
            );
            assert_eq!(reused, buffer);
        }
    }

    #[test]
    fn decoder_shrinks_large_scratch_buffers() {
        let block = huffman_value_block("04", &[b'a'; 20_000]);
        let mut decoder = Decoder::new(4096);
        assert_eq!(
            decode(&mut decoder, &block).unwrap().len(),
            ":path: ".len() + 20_000
        );
        assert!(decoder.value_buffer.capacity() <= SCRATCH_CAPACITY_KEPT);
    }

    #[test]
    fn decode_never_panics_on_garbage() {
        let mut random = XorShift(0x853c_49e6_748f_ea9b);
        // Valid blocks to mutate: requests, responses, size updates, never-indexed fields.
        let seeds: Vec<Vec<u8>> = [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0",
            "3f e1 1f 20 41 01 61 be 10 01 61 01 62",
        ]
        .iter()
        .map(|block| hex(block))
        .collect();
        for round in 0..20_000 {
            let mut decoder = Decoder::new([0, 64, 256, 4096][round % 4]);
            for _ in 0..4 {
                let block: Vec<u8> = if random.below(2) == 0 {
                    let length = random.below(48) as usize;
                    (0..length).map(|_| random.next() as u8).collect()
                } else {
                    let mut block = seeds[random.below(seeds.len() as u64) as usize].clone();
                    for _ in 0..=random.below(3) {
                        let position = random.below(block.len() as u64) as usize;
                        block[position] ^= 1 << random.below(8);
                    }
                    block.truncate(random.below(block.len() as u64 + 1) as usize);
                    block
                };
                let result = decoder.decode(&block, |_, _| {});
                assert!(decoder.table.size <= decoder.table.max_size);
                if let Err(error) = result {
                    assert_eq!(decoder.decode(&[0x82], |_, _| {}), Err(error));
                    break;
                }
            }
        }
    }

    /// Encodes one block: size updates, then whatever `build` writes.
    fn encode(encoder: &mut Encoder, build: impl FnOnce(&mut Encoder, &mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        encoder.begin_block(&mut out);
        build(encoder, &mut out);
        out
    }

    /// The size updates at the start of a block.
    fn size_updates(block: &[u8]) -> Vec<usize> {
        let mut input = block;
        let mut sizes = Vec::new();
        while input.first().is_some_and(|&octet| octet & 0xe0 == 0x20) {
            sizes.push(read_integer(&mut input, 5).unwrap());
        }
        sizes
    }

    fn content_type(encoder: &mut Encoder, out: &mut Vec<u8>) {
        encoder.field(b"content-type", b"application/dns-message", true, out);
    }

    #[test]
    fn encoder_first_block_announces_table_size() {
        let mut encoder = Encoder::new(512);
        // 512 = 31 + 481: 3f e1 03; then indexed :status 200.
        assert_eq!(
            encode(&mut encoder, |encoder, out| encoder.status(200, out)),
            hex("3f e1 03 88")
        );
        assert_eq!(
            encode(&mut encoder, |encoder, out| encoder.status(200, out)),
            hex("88")
        );
        // An encoder using the whole default table has nothing to announce.
        assert_eq!(encode(&mut Encoder::new(4096), |_, _| {}), []);
    }

    #[test]
    fn encoder_status_uses_static_entries() {
        let mut encoder = Encoder::new(4096);
        let codes = [200, 204, 206, 304, 400, 404, 500];
        for (code, index) in codes.into_iter().zip(8..) {
            let mut out = Vec::new();
            encoder.status(code, &mut out);
            assert_eq!(out, [0x80 | index]);
        }
    }

    #[test]
    fn encoder_status_literal_for_other_codes() {
        let mut encoder = Encoder::new(4096);
        let mut decoder = Decoder::new(4096);
        for code in [
            100, 302, 307, 405, 413, 415, 429, 502, 503, 504, 999, 0, 7, 65535,
        ] {
            let mut out = Vec::new();
            encoder.status(code, &mut out);
            assert_eq!(out[0], 0x08, "literal without indexing, name index 8");
            assert_eq!(decode(&mut decoder, &out), Ok(format!(":status: {code}")));
        }
        assert_eq!(decoder.table.size, 0);
    }

    #[test]
    fn encoder_field_without_remember_is_literal_without_indexing() {
        let mut encoder = Encoder::new(512);
        let mut out = Vec::new();
        encoder.field(b"cache-control", b"max-age=300", false, &mut out);
        assert_eq!(out, hex("0f 09 0b 6d61782d6167653d333030"));
        out.clear();
        encoder.field(b"x-kudurru", b"1", false, &mut out);
        assert_eq!(out, hex("00 09 782d6b7564757272 75 01 31"));
        assert!(encoder.table.entries.is_empty());
    }

    #[test]
    fn encoder_remembered_field_is_inserted_then_indexed() {
        let mut encoder = Encoder::new(512);
        let mut decoder = Decoder::new(4096);
        let first = encode(&mut encoder, content_type);
        // Size update, then literal with incremental indexing, static name 31.
        assert_eq!(first[..4], hex("3f e1 03 5f"));
        let second = encode(&mut encoder, content_type);
        assert_eq!(second, [0x80 | 62]);
        for block in [first, second] {
            let fields = decode(&mut decoder, &block);
            assert_eq!(
                fields.as_deref(),
                Ok("content-type: application/dns-message")
            );
        }
        assert_eq!(encoder.table, decoder.table);
    }

    #[test]
    fn encoder_new_value_refers_to_dynamic_name() {
        let mut encoder = Encoder::new(512);
        let mut decoder = Decoder::new(4096);
        let first = encode(&mut encoder, |encoder, out| {
            encoder.field(b"alt-svc", b"h3=\":443\"", true, out);
        });
        let second = encode(&mut encoder, |encoder, out| {
            encoder.field(b"alt-svc", b"h3=\":8443\"", true, out);
        });
        // The second names index 62 (the first alt-svc) with a 6-bit prefix.
        assert_eq!(second[0], 0x40 | 62);
        assert!(decode(&mut decoder, &first).is_ok());
        assert_eq!(
            decode(&mut decoder, &second).as_deref(),
            Ok("alt-svc: h3=\":8443\"")
        );
        assert_eq!(encoder.table, decoder.table);
    }

    #[test]
    fn encoder_uses_static_field_when_it_matches() {
        let mut encoder = Encoder::new(512);
        let mut out = Vec::new();
        encoder.field(b"accept-encoding", b"gzip, deflate", true, &mut out);
        assert_eq!(out, [0x80 | 16]);
        assert!(encoder.table.entries.is_empty());
    }

    #[test]
    fn encoder_oversized_entry_is_not_inserted() {
        let mut encoder = Encoder::new(128);
        let mut decoder = Decoder::new(4096);
        let block = encode(&mut encoder, |encoder, out| {
            encoder.field(b"date", b"Mon, 21 Oct 2013 20:13:21 GMT", true, out);
            encoder.field(b"x-large", &[b'v'; 100], true, out);
        });
        assert!(decode(&mut decoder, &block).is_ok());
        // The date stays; the large field went as a literal without indexing.
        let expected = ("date: Mon, 21 Oct 2013 20:13:21 GMT".to_owned(), 65);
        assert_eq!(table(&encoder.table), expected);
        assert_eq!(encoder.table, decoder.table);
    }

    #[test]
    fn encoder_never_inserts_when_table_size_zero() {
        let mut encoder = Encoder::new(0);
        let mut decoder = Decoder::new(4096);
        for second in 0..5 {
            let date = format!("Mon, 21 Oct 2013 20:13:2{second} GMT");
            let block = encode(&mut encoder, |encoder, out| {
                encoder.field(b"date", date.as_bytes(), true, out);
                encoder.field(b"date", date.as_bytes(), true, out);
            });
            assert_eq!(
                decode(&mut decoder, &block),
                Ok(format!("date: {date}\ndate: {date}"))
            );
            assert!(encoder.table.entries.is_empty());
            assert_eq!(encoder.table, decoder.table);
        }
    }

    #[test]
    fn rfc7541_4_2_encoder_peer_table_size_zero_then_raised() {
        let mut encoder = Encoder::new(512);
        let mut decoder = Decoder::new(4096);
        assert!(decode(&mut decoder, &encode(&mut encoder, content_type)).is_ok());
        assert_eq!(decoder.table.entries.len(), 1);

        encoder.set_peer_max_table_size(0);
        let block = encode(&mut encoder, content_type);
        // Size update to 0, then a literal without indexing with name index 31.
        assert_eq!(block[..3], hex("20 0f 10"));
        assert!(decode(&mut decoder, &block).is_ok());
        assert_eq!(table(&decoder.table), (String::new(), 0));
        assert_eq!(encoder.table, decoder.table);

        encoder.set_peer_max_table_size(4096);
        let block = encode(&mut encoder, content_type);
        assert_eq!(block[..4], hex("3f e1 03 5f"));
        assert!(decode(&mut decoder, &block).is_ok());
        assert_eq!(
            (decoder.table.entries.len(), decoder.table.max_size),
            (1, 512)
        );
        assert_eq!(encoder.table, decoder.table);
    }

    #[test]
    fn rfc7541_4_2_encoder_peer_table_size_lowered_twice_between_blocks() {
        let mut encoder = Encoder::new(512);
        let mut decoder = Decoder::new(4096);
        let mut next_block = |encoder: &mut Encoder| {
            let block = encode(encoder, content_type);
            assert!(decode(&mut decoder, &block).is_ok());
            assert_eq!(encoder.table, decoder.table);
            size_updates(&block)
        };
        assert_eq!(next_block(&mut encoder), [512]);

        // Lowered to 100, then to 200 (still below 512): announce 100, then 200.
        encoder.set_peer_max_table_size(100);
        encoder.set_peer_max_table_size(200);
        assert_eq!(next_block(&mut encoder), [100, 200]);
        // Lowered to 150, then to 50: the smallest is also the final size, announced once.
        encoder.set_peer_max_table_size(150);
        encoder.set_peer_max_table_size(50);
        assert_eq!(next_block(&mut encoder), [50]);
        // Lowered to 0 and raised past this encoder's own limit: announce 0, then 512.
        encoder.set_peer_max_table_size(0);
        encoder.set_peer_max_table_size(65_536);
        assert_eq!(next_block(&mut encoder), [0, 512]);
        // A change that leaves the size in use alone is still announced.
        encoder.set_peer_max_table_size(8192);
        assert_eq!(next_block(&mut encoder), [512]);
        assert_eq!(next_block(&mut encoder), []);
        assert_eq!(encoder.table.entries.len(), 1);
    }

    #[test]
    fn encoder_round_trips_many_blocks_with_changing_dates() {
        let mut random = XorShift(0xd1b5_4a32_d192_ed03);
        let mut encoder = Encoder::new(512);
        let mut decoder = Decoder::new(4096);
        let peer_sizes = [0, 40, 64, 100, 256, 512, 1000, 4096, 65_536];
        for block_number in 0..5000u32 {
            if random.below(50) == 0 {
                for _ in 0..=random.below(2) {
                    let size = peer_sizes[random.below(peer_sizes.len() as u64) as usize];
                    encoder.set_peer_max_table_size(size);
                }
            }
            let status = [200, 200, 200, 404, 302, 503][random.below(6) as usize];
            let second = block_number / 7;
            let (hours, minutes, seconds) = (second / 3600 % 24, second / 60 % 60, second % 60);
            let date = format!("Tue, 15 Nov 1994 {hours:02}:{minutes:02}:{seconds:02} GMT");
            let alt_svc =
                ["h3=\":443\"; ma=86400", "h3=\":8443\"; ma=3600"][random.below(2) as usize];
            let max_age = format!("max-age={}", random.below(3600));
            let length = random.below(1232);
            let block = encode(&mut encoder, |encoder, out| {
                encoder.status(status, out);
                content_type(encoder, out);
                encoder.field(b"date", date.as_bytes(), true, out);
                encoder.field(b"alt-svc", alt_svc.as_bytes(), true, out);
                encoder.field(b"cache-control", max_age.as_bytes(), false, out);
                encoder.field(b"content-length", length.to_string().as_bytes(), false, out);
            });
            let expected = format!(
                ":status: {status}\ncontent-type: application/dns-message\ndate: {date}\n\
                 alt-svc: {alt_svc}\ncache-control: {max_age}\ncontent-length: {length}"
            );
            assert_eq!(
                decode(&mut decoder, &block),
                Ok(expected),
                "block {block_number}"
            );
            assert_eq!(encoder.table, decoder.table, "block {block_number}");
            assert!(encoder.table.size <= 512);
        }
    }

    #[test]
    fn encoder_own_limit_above_default_waits_for_peer() {
        let mut encoder = Encoder::new(8192);
        let mut decoder = Decoder::new(16_384);
        // The peer's table starts at 4096: nothing to announce.
        let block = encode(&mut encoder, |encoder, out| encoder.status(200, out));
        assert_eq!(block, [0x88]);
        assert!(decode(&mut decoder, &block).is_ok());
        encoder.set_peer_max_table_size(16_384);
        let block = encode(&mut encoder, |encoder, out| encoder.status(200, out));
        assert_eq!(size_updates(&block), [8192]);
        assert!(decode(&mut decoder, &block).is_ok());
        assert_eq!(encoder.table, decoder.table);
    }
}
