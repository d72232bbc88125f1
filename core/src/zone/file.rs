//! RFC 1035 zone files through `domain`'s zone-file scanner: `$ORIGIN`, `$TTL`, relative
//! names, `@`, every type `domain` knows (and RFC 3597's `\#` form for the others),
//! `$INCLUDE` through a reader the caller gives (the control thread's confines it to
//! `zones.fileDir`); every error names its file and line.
//!
//! ```text
//! text ─▶ domain::zonefile::inplace::Zonefile ─▶ Entry::Record ─▶ Record (owner lowercased,
//!           │                                                        rdata uncompressed wire)
//!           └▶ Entry::Include ─▶ include(path) ─▶ the same, one level deeper (at most 8)
//! ```
//!
//! `domain` reports the line of a syntax error but not of a record it scanned; the line of a
//! record is found from the scanner's byte offset before the entry (the first token after
//! it). A RecordSet's rdata goes through the same scanner ([`parse_record_set`]), so an
//! object and a file accept the same presentation format.
//!
//! Choices where RFC 1035 is silent: the class is IN (any other is refused, as a zone served
//! here is IN only); an included file starts at the including file's origin (or the one
//! `$INCLUDE` names) and with `domain`'s default TTL until its own `$TTL`.

use bytes::Bytes;
use domain::base::iana::{Class, Rtype};
use domain::base::name::{Name, ToName};
use domain::base::rdata::ComposeRecordData;
use domain::zonefile::inplace::{Entry, Zonefile};

use crate::zone::data::{Record, ZoneData, ZoneError, ZoneErrorKind};

/// How deep `$INCLUDE`s nest (a file that includes itself stops here).
pub const MAX_INCLUDE_DEPTH: usize = 8;

/// Bounds on one zone's text and records.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most bytes of text, the file and everything it includes together.
    pub max_bytes: usize,
    /// Most records.
    pub max_records: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: 512 << 20,
            max_records: 5_000_000,
        }
    }
}

/// An included file as the reader found it: the name errors give it, and its text.
#[derive(Debug)]
pub struct Included {
    /// How errors name it (`corp.example.d/hosts.zone`).
    pub name: String,
    /// Its text.
    pub text: Vec<u8>,
}

/// Reads the file an `$INCLUDE` names (as written), or says why it may not or cannot.
pub type IncludeReader<'a> = dyn FnMut(&str) -> Result<Included, String> + 'a;

/// Parses the zone file `text`, named `source` in errors, for the zone at `apex` (lowercase
/// wire form; the initial `$ORIGIN`). Records outside the zone are refused here, with their
/// line; the zone-wide checks (SOA, NS, CNAME and other data) are [`crate::zone::Zone::compile`]'s,
/// which names the line through [`ZoneData::origins`].
pub fn parse_zone_file(
    source: &str,
    text: &[u8],
    apex: &[u8],
    limits: &Limits,
    include: &mut IncludeReader<'_>,
) -> Result<ZoneData, ZoneError> {
    let origin = wire_to_name(apex).ok_or_else(|| ZoneError {
        origin: None,
        kind: ZoneErrorKind::Syntax("the apex is not a domain name".into()),
    })?;
    let mut parser = Parser {
        apex,
        limits,
        bytes: 0,
        data: ZoneData {
            apex: apex.into(),
            ..ZoneData::default()
        },
    };
    parser.file(source, text, origin, 0, include)?;
    Ok(parser.data)
}

/// One RecordSet parsed: its owner and type (known even when it has no records) and records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRecordSet {
    /// The owner, lowercase wire form.
    pub owner: Box<[u8]>,
    /// The type.
    pub rtype: u16,
    /// The records, each with `owner`, `rtype` and the TTL given.
    pub records: Vec<Record>,
}

/// One RecordSet's records: `name` (relative to `apex`, `@`, or absolute with a trailing
/// dot), `rtype` (a mnemonic such as `AAAA`, or `TYPE65280`), `ttl`, and each of `records`
/// in presentation format (relative names in rdata are relative to the apex). An error says
/// which record (its index; `None` for the name or type) and why.
pub fn parse_record_set(
    apex: &[u8],
    name: &str,
    rtype: &str,
    ttl: u32,
    records: &[&str],
) -> Result<ParsedRecordSet, (Option<usize>, String)> {
    let origin = wire_to_name(apex).ok_or((None, "the apex is not a domain name".into()))?;
    let forbidden = |text: &str| text.contains(['\n', '\r', '\0', '$', '(', ')', '"', ';']);
    if name.is_empty() || name.contains(char::is_whitespace) || forbidden(name) {
        return Err((None, format!("{name:?} is not a name")));
    }
    let parsed_type = match rtype.parse::<Rtype>() {
        Ok(parsed) if !rtype.contains(char::is_whitespace) => parsed,
        _ => return Err((None, format!("{rtype:?} is not a record type"))),
    };
    let scan_one = |line: String| {
        let mut zonefile = Zonefile::from(line.as_bytes());
        zonefile.set_origin(origin.clone());
        zonefile.set_default_class(Class::IN);
        let record = match zonefile.next_entry() {
            Ok(Some(Entry::Record(record))) => record,
            Ok(_) => return Err("not a record".to_owned()),
            Err(e) => return Err(scanner_message(&e.to_string()).1),
        };
        if !matches!(zonefile.next_entry(), Ok(None)) {
            return Err("more than one record".into());
        }
        Ok(record)
    };
    // The owner alone, with a placeholder record, so a set without records has one too.
    let owner = scan_one(format!("{name} 0 IN A 0.0.0.0\n"))
        .map(|record| owner_wire(record.owner()))
        .map_err(|e| (None, format!("{name:?} is not a name: {e}")))?;
    if !in_zone(&owner, apex) {
        return Err((
            None,
            format!(
                "{} is not in the zone",
                crate::policy::name::to_text(&owner)
            ),
        ));
    }
    let mut out = Vec::with_capacity(records.len());
    for (i, rdata) in records.iter().enumerate() {
        if rdata.contains(['\n', '\r', '\0']) {
            return Err((
                Some(i),
                "one record per entry: no line breaks or NUL".into(),
            ));
        }
        // Parentheses and quotes stay allowed in rdata (TXT strings, multi-part rdata on one
        // line); with no line break they cannot reach a second entry, which is checked too.
        let record = scan_one(format!("{name} {ttl} IN {parsed_type} {rdata}\n"))
            .map_err(|e| (Some(i), e))?;
        out.push(Record {
            owner: owner.clone().into(),
            rtype: parsed_type.to_int(),
            ttl: record.ttl().as_secs(),
            rdata: rdata_wire(record.data()).into(),
        });
    }
    Ok(ParsedRecordSet {
        owner: owner.into(),
        rtype: parsed_type.to_int(),
        records: out,
    })
}

/// `rdata` of type `rtype` in presentation format, names absolute (with the trailing dot),
/// so [`parse_record_set`] reads it back to the same wire form; RFC 3597's `\# len hex` for
/// a type `domain` does not know or rdata it cannot parse.
pub fn rdata_text(rtype: u16, rdata: &[u8]) -> String {
    use domain::base::ParsedName;
    use domain::base::rdata::ParseRecordData;
    use domain::base::zonefile_fmt::{DisplayKind, ZonefileFmt};
    use domain::dep::octseq::Parser as OctetsParser;
    use domain::rdata::ZoneRecordData;

    let mut parser = OctetsParser::from_ref(rdata);
    if let Ok(Some(data)) =
        ZoneRecordData::<&[u8], ParsedName<&[u8]>>::parse_rdata(Rtype::from_int(rtype), &mut parser)
        && parser.remaining() == 0
        && !matches!(data, ZoneRecordData::Unknown(_))
    {
        return data.display_zonefile(DisplayKind::Simple).to_string();
    }
    let mut text = format!("\\# {}", rdata.len());
    if !rdata.is_empty() {
        text.push(' ');
        for byte in rdata {
            text.push_str(&format!("{byte:02x}"));
        }
    }
    text
}

/// A record type's mnemonic (`AAAA`), or `TYPE65280` for one `domain` does not name.
pub fn type_text(rtype: u16) -> String {
    Rtype::from_int(rtype).to_string()
}

/// Whether `owner` is `apex` or below it (both lowercase wire form).
pub fn in_zone(owner: &[u8], apex: &[u8]) -> bool {
    if owner.len() < apex.len() || !owner.ends_with(apex) {
        return false;
    }
    // The suffix must start on a label boundary of `owner`.
    let boundary = owner.len() - apex.len();
    let mut at = 0;
    while at < boundary {
        at += 1 + usize::from(owner[at]);
    }
    at == boundary
}

struct Parser<'a> {
    apex: &'a [u8],
    limits: &'a Limits,
    bytes: usize,
    data: ZoneData,
}

impl Parser<'_> {
    fn file(
        &mut self,
        source: &str,
        text: &[u8],
        origin: Name<Bytes>,
        depth: usize,
        include: &mut IncludeReader<'_>,
    ) -> Result<(), ZoneError> {
        self.bytes = self.bytes.saturating_add(text.len());
        if self.bytes > self.limits.max_bytes {
            return Err(ZoneError {
                origin: Some(source.to_owned()),
                kind: ZoneErrorKind::TooLarge(format!(
                    "more than {} bytes of zone text",
                    self.limits.max_bytes
                )),
            });
        }
        // Fed one entry at a time, so each record's first line is known exactly.
        let mut zonefile = Zonefile::with_capacity(0);
        zonefile.set_origin(origin);
        zonefile.set_default_class(Class::IN);
        let mut lines = Lines::new(text);
        for (start, end) in entries(text) {
            let line = lines.entry_line(start);
            zonefile.extend_from_slice(&text[start..end]);
            loop {
                let entry = match zonefile.next_entry() {
                    Ok(Some(entry)) => entry,
                    Ok(None) => break,
                    Err(e) => {
                        return Err(ZoneError {
                            origin: Some(format!("{source}:{line}")),
                            kind: ZoneErrorKind::Syntax(scanner_message(&e.to_string()).1),
                        });
                    }
                };
                self.entry(source, line, entry, &mut zonefile, depth, include)?;
            }
        }
        Ok(())
    }

    fn entry(
        &mut self,
        source: &str,
        line: usize,
        entry: Entry,
        zonefile: &mut Zonefile,
        depth: usize,
        include: &mut IncludeReader<'_>,
    ) -> Result<(), ZoneError> {
        let at = format!("{source}:{line}");
        match entry {
            Entry::Record(record) => {
                if record.class() != Class::IN {
                    return Err(ZoneError {
                        origin: Some(at),
                        kind: ZoneErrorKind::Syntax(format!(
                            "class {} (only IN zones are served)",
                            record.class()
                        )),
                    });
                }
                let owner = owner_wire(record.owner());
                if !in_zone(&owner, self.apex) {
                    return Err(ZoneError {
                        origin: Some(at),
                        kind: ZoneErrorKind::OutOfZone(crate::policy::name::to_text(&owner)),
                    });
                }
                if self.data.records.len() >= self.limits.max_records {
                    return Err(ZoneError {
                        origin: Some(at),
                        kind: ZoneErrorKind::TooLarge(format!(
                            "more than {} records",
                            self.limits.max_records
                        )),
                    });
                }
                self.data.records.push(Record {
                    owner: owner.into(),
                    rtype: record.rtype().to_int(),
                    ttl: record.ttl().as_secs(),
                    rdata: rdata_wire(record.data()).into(),
                });
                self.data.origins.push(at);
            }
            Entry::Include {
                path,
                origin: included_origin,
            } => {
                let refuse = |why: String| ZoneError {
                    origin: Some(at.clone()),
                    kind: ZoneErrorKind::Include(why),
                };
                if depth + 1 >= MAX_INCLUDE_DEPTH {
                    return Err(refuse(format!(
                        "{path}: nested more than {MAX_INCLUDE_DEPTH} deep"
                    )));
                }
                let included =
                    include(path.as_ref()).map_err(|why| refuse(format!("{path}: {why}")))?;
                let origin = match included_origin {
                    Some(origin) => origin,
                    None => zonefile.origin().map_err(|e| refuse(e.to_string()))?,
                };
                self.file(&included.name, &included.text, origin, depth + 1, include)?;
            }
        }
        Ok(())
    }
}

/// The entries of `text` as byte ranges, each ending after its line feed: a line feed ends an
/// entry unless it is inside parentheses or quotes (RFC 1035 §5.1); comments and escapes are
/// followed so a `;`, `(` or `"` inside them does not count.
fn entries(text: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start = 0;
    let mut at = 0;
    std::iter::from_fn(move || {
        if start >= text.len() {
            return None;
        }
        let (mut depth, mut quoted, mut comment, mut escaped) = (0usize, false, false, false);
        while at < text.len() {
            let b = text[at];
            at += 1;
            match b {
                b'\n' if !quoted && depth == 0 => {
                    let range = (start, at);
                    start = at;
                    return Some(range);
                }
                b'\n' => comment = false,
                _ if comment => {}
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => quoted = !quoted,
                _ if quoted => {}
                b';' => comment = true,
                b'(' => depth += 1,
                b')' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        let range = (start, text.len());
        start = text.len();
        Some(range)
    })
}

/// `domain`'s scanner error (`line:col: message`) as the line and the message.
fn scanner_message(text: &str) -> (Option<usize>, String) {
    let mut parts = text.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(line), Some(col), Some(message))
            if line.parse::<usize>().is_ok() && col.parse::<usize>().is_ok() =>
        {
            (line.parse().ok(), message.trim().to_owned())
        }
        _ => (None, text.to_owned()),
    }
}

/// A scanned owner as lowercase wire form.
fn owner_wire(owner: &impl ToName) -> Vec<u8> {
    let mut wire = owner.to_vec().into_octets();
    // Label lengths are at most 63, below b'A': lowercasing the whole name is safe.
    wire.make_ascii_lowercase();
    wire
}

/// Rdata in uncompressed wire form, names as written.
fn rdata_wire(data: &impl ComposeRecordData) -> Vec<u8> {
    let mut wire = Vec::new();
    // Composing into a Vec cannot fail: it grows (the only error is a short buffer).
    let _ = data.compose_rdata(&mut wire);
    wire
}

/// A wire name as `domain`'s name, `None` if it is not one.
fn wire_to_name(wire: &[u8]) -> Option<Name<Bytes>> {
    Name::from_octets(Bytes::copy_from_slice(wire)).ok()
}

/// Finds the line an entry starts on from the scanner's offset before it.
struct Lines<'a> {
    text: &'a [u8],
    /// Bytes counted so far, and the line at `at`.
    at: usize,
    line: usize,
}

impl<'a> Lines<'a> {
    fn new(text: &'a [u8]) -> Self {
        Self {
            text,
            at: 0,
            line: 1,
        }
    }

    /// The line of the first token at or after `offset`: blanks, line breaks and comments
    /// before it are skipped.
    fn entry_line(&mut self, offset: usize) -> usize {
        let offset = offset.min(self.text.len());
        if offset > self.at {
            self.line += self.text[self.at..offset]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            self.at = offset;
        }
        let mut line = self.line;
        let mut comment = false;
        for &b in &self.text[self.at..] {
            match b {
                b'\n' => {
                    line += 1;
                    comment = false;
                }
                _ if comment => {}
                b';' => comment = true,
                b' ' | b'\t' | b'\r' => {}
                _ => break,
            }
        }
        line
    }
}

#[cfg(test)]
mod tests;
