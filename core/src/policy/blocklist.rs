//! Block-list parsers: hosts, domains, adblock, wildcard and RPZ bodies into rules. A parser
//! never fails: a line it cannot use is counted (and the first few sampled) as invalid, a
//! rule that cannot apply to DNS (an adblock cosmetic or path rule) as skipped.

use super::name;

/// A list body's syntax (`BlockList.spec.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Decided from the body: RPZ if it has an SOA, adblock if it has `||` rules or a `[Adblock`
    /// header, hosts if lines start with an address, wildcard if they start with `*.`, else
    /// domains.
    #[default]
    Auto,
    /// `0.0.0.0 name [name...]` / `127.0.0.1 name` / `::` lines; a name blocks itself only.
    Hosts,
    /// One name per line; a name blocks itself only (Pi-hole, AdGuard Home, hagezi "domains").
    Domains,
    /// `||name^` (the name and below), `@@||name^` (allow), `|name^` and `name` exact; rules with
    /// paths, cosmetic selectors or options DNS cannot honour are skipped.
    Adblock,
    /// `*.name` or `name`: the name and everything below (hagezi "wildcard", Blocky).
    Wildcard,
    /// A Response Policy Zone (RPZ) zone file: QNAME triggers only.
    Rpz,
}

impl Format {
    /// The spelling in specs and status.
    pub fn label(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Hosts => "hosts",
            Self::Domains => "domains",
            Self::Adblock => "adblock",
            Self::Wildcard => "wildcard",
            Self::Rpz => "rpz",
        }
    }

    /// The format spelled `label`.
    pub fn from_label(label: &str) -> Option<Self> {
        [
            Self::Auto,
            Self::Hosts,
            Self::Domains,
            Self::Adblock,
            Self::Wildcard,
            Self::Rpz,
        ]
        .into_iter()
        .find(|f| f.label() == label)
    }
}

/// Which names a rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The name only.
    Exact,
    /// The name and every name below it (`||name^`, wildcard lists).
    Subtree,
    /// Names below it, not the name itself (RPZ `*.name`).
    Below,
}

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Block, with the policy's `blockResponse` (in an allow-mode list: allow).
    Deny,
    /// Allow, whatever else matches (adblock `@@`, RPZ `rpz-passthru.`).
    Allow,
    /// RPZ `CNAME .`: NXDOMAIN.
    Nxdomain,
    /// RPZ `CNAME *.`: NOERROR with no records.
    Nodata,
    /// RPZ `rpz-drop.`: no answer at all.
    Drop,
    /// RPZ local data: the records at this index of [`ParsedList::local_data`].
    LocalData(u32),
}

/// One rule of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The lowercase wire name the rule is about.
    pub name: Box<[u8]>,
    /// Which names below it it covers.
    pub scope: Scope,
    /// What it does.
    pub action: Action,
}

/// One RPZ local-data record set: answers of these types in place of the real ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalData {
    /// (type, rdata in wire form) of each record; a CNAME's rdata is a wire name.
    pub records: Vec<(u16, Box<[u8]>)>,
}

/// A line the parser could not use, kept for the list's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidLine {
    /// 1-based line number in the body.
    pub line: u32,
    /// The line, cut to 200 bytes.
    pub text: String,
    /// Why it was refused.
    pub reason: &'static str,
}

/// How many invalid lines a parse keeps as samples.
pub const INVALID_SAMPLES: usize = 10;

/// What a parse counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParseStats {
    /// The format used (the detected one for [`Format::Auto`]).
    pub format: Option<Format>,
    /// Lines read.
    pub lines: u64,
    /// Rules produced.
    pub rules: u64,
    /// Lines that were neither a rule, a comment nor blank.
    pub invalid: u64,
    /// Rules that cannot apply to DNS, counted and skipped.
    pub skipped: u64,
    /// Rules past the entry limit, left out.
    pub truncated: u64,
    /// The first [`INVALID_SAMPLES`] invalid lines.
    pub samples: Vec<InvalidLine>,
}

/// A parsed list: its rules, RPZ local data and what the parse counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedList {
    /// The rules, in body order.
    pub rules: Vec<Rule>,
    /// RPZ local data, indexed by [`Action::LocalData`].
    pub local_data: Vec<LocalData>,
    /// Counts and samples.
    pub stats: ParseStats,
}

/// Parses `body` in `format`, keeping at most `max_rules` rules (the rest counted as
/// truncated). Never fails and never panics, whatever the bytes.
///
/// Lines end in LF or CRLF; a UTF-8 byte-order mark is ignored; a line that is not UTF-8 is
/// invalid. Duplicates are kept here and counted once by the matcher.
pub fn parse(body: &[u8], format: Format, max_rules: usize) -> ParsedList {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    let format = match format {
        Format::Auto => detect(body),
        other => other,
    };
    let mut parser = Parser {
        list: ParsedList::default(),
        max_rules,
        name: Vec::with_capacity(256),
    };
    parser.list.stats.format = Some(format);
    if format == Format::Rpz {
        rpz::parse(body, &mut parser);
        return parser.list;
    }
    for (number, raw) in lines(body) {
        parser.list.stats.lines += 1;
        let Ok(line) = std::str::from_utf8(raw) else {
            parser.invalid(number, &String::from_utf8_lossy(raw), "not UTF-8");
            continue;
        };
        match format {
            Format::Hosts => parser.hosts_line(number, line),
            Format::Domains => parser.domains_line(number, line),
            Format::Adblock => parser.adblock_line(number, line),
            Format::Wildcard => parser.wildcard_line(number, line),
            Format::Auto | Format::Rpz => {}
        }
    }
    parser.list
}

/// The body's lines (1-based numbers), without their LF or CRLF; no empty last line after a
/// final newline.
fn lines(body: &[u8]) -> impl Iterator<Item = (u32, &[u8])> {
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    let empty = body.is_empty();
    body.split(|&b| b == b'\n')
        .filter(move |_| !empty)
        .enumerate()
        .map(|(i, line)| {
            let number = u32::try_from(i + 1).unwrap_or(u32::MAX);
            (number, line.strip_suffix(b"\r").unwrap_or(line))
        })
}

/// How many meaningful lines [`Format::Auto`] looks at.
const DETECT_LINES: usize = 2000;

/// The format of `body` as [`Format::Auto`] documents: RPZ if an SOA record or a `$ORIGIN`
/// or `$TTL` directive comes first, adblock if a line is a `||`/`@@` rule or a `[Adblock`
/// header, hosts if most lines start with an address, wildcard if most start with `*.`,
/// else domains.
fn detect(body: &[u8]) -> Format {
    let (mut hosts, mut wildcard, mut other) = (0usize, 0usize, 0usize);
    for (_, raw) in lines(body).take(DETECT_LINES * 4) {
        let Ok(line) = std::str::from_utf8(raw) else {
            continue;
        };
        let line = line.trim();
        if line.starts_with('$') {
            let directive = line.split_ascii_whitespace().next().unwrap_or("");
            if directive.eq_ignore_ascii_case("$ORIGIN") || directive.eq_ignore_ascii_case("$TTL") {
                return Format::Rpz;
            }
        }
        let before_comment = line.split(';').next().unwrap_or("");
        if before_comment
            .split_ascii_whitespace()
            .any(|t| t.eq_ignore_ascii_case("SOA"))
        {
            return Format::Rpz;
        }
        if line.starts_with("[Adblock") || line.starts_with("||") || line.starts_with("@@") {
            return Format::Adblock;
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let first = line.split_ascii_whitespace().next().unwrap_or("");
        if first.parse::<std::net::IpAddr>().is_ok() {
            hosts += 1;
        } else if line.starts_with("*.") {
            wildcard += 1;
        } else {
            other += 1;
        }
        if hosts + wildcard + other >= DETECT_LINES {
            break;
        }
    }
    if hosts > wildcard + other {
        Format::Hosts
    } else if wildcard > hosts + other {
        Format::Wildcard
    } else {
        Format::Domains
    }
}

/// Names in hosts files that are the machine's own, never block-list entries.
const LOCAL_HOST_NAMES: &[&str] = &[
    "localhost",
    "localhost.localdomain",
    "localhost4",
    "localhost4.localdomain4",
    "localhost6",
    "localhost6.localdomain6",
    "localdomain",
    "local",
    "broadcasthost",
    "ip6-localhost",
    "ip6-loopback",
    "ip6-localnet",
    "ip6-mcastprefix",
    "ip6-allnodes",
    "ip6-allrouters",
    "ip6-allhosts",
];

fn is_local_host_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    LOCAL_HOST_NAMES
        .iter()
        .any(|local| local.eq_ignore_ascii_case(name))
}

/// Adblock options that change nothing for a DNS filter, so a rule carrying only these is
/// used: `important` (its precedence over exceptions is a browser's; here allow still wins),
/// `all`, `document`/`doc` (the whole site: what a DNS block is anyway). Any other option
/// (`third-party`, `script`, `denyallow`, `client`, `dnsrewrite`, `badfilter`, …) narrows or
/// changes the rule in a way DNS cannot honour: the rule is skipped.
const HARMLESS_ADBLOCK_OPTIONS: &[&str] = &["important", "all", "document", "doc"];

/// Adblock markers of cosmetic and HTML-filtering rules (never DNS).
const COSMETIC_MARKERS: &[&str] = &[
    "##", "#@#", "#?#", "#@?#", "#$#", "#@$#", "#%#", "#@%#", "$$", "$@$",
];

/// The parse in progress.
struct Parser {
    list: ParsedList,
    max_rules: usize,
    /// Reused for every name.
    name: Vec<u8>,
}

impl Parser {
    /// Records a rule for the wire name in `self.name`.
    fn push_name(&mut self, scope: Scope, action: Action) {
        let name = self.name.as_slice().into();
        self.push(name, scope, action);
    }

    fn push(&mut self, name: Box<[u8]>, scope: Scope, action: Action) {
        if self.list.rules.len() >= self.max_rules {
            self.list.stats.truncated += 1;
            return;
        }
        self.list.rules.push(Rule {
            name,
            scope,
            action,
        });
        self.list.stats.rules += 1;
    }

    fn skipped(&mut self) {
        self.list.stats.skipped += 1;
    }

    fn invalid(&mut self, line: u32, text: &str, reason: &'static str) {
        self.list.stats.invalid += 1;
        if self.list.stats.samples.len() < INVALID_SAMPLES {
            let mut end = text.len().min(200);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            self.list.stats.samples.push(InvalidLine {
                line,
                text: text[..end].to_owned(),
                reason,
            });
        }
    }

    /// `0.0.0.0 a.example b.example # comment`.
    fn hosts_line(&mut self, number: u32, line: &str) {
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            return;
        }
        let mut fields = content.split_ascii_whitespace();
        let address = fields.next().unwrap_or("");
        if address.parse::<std::net::IpAddr>().is_err() {
            self.invalid(number, line, "not an address followed by names");
            return;
        }
        let mut names = 0;
        let mut bad = None;
        for field in fields {
            names += 1;
            if is_local_host_name(field) || field.parse::<std::net::IpAddr>().is_ok() {
                self.skipped();
                continue;
            }
            match name::to_wire_into(field, &mut self.name) {
                Ok(()) => self.push_name(Scope::Exact, Action::Deny),
                Err(e) => bad = bad.or(Some(e.reason())),
            }
        }
        if names == 0 {
            self.invalid(number, line, "an address without a name");
        } else if let Some(reason) = bad {
            self.invalid(number, line, reason);
        }
    }

    /// The one field of a line without its `#` comment; `None` for a blank or comment line, and
    /// for a line of more fields (counted invalid).
    fn one_field<'l>(&mut self, number: u32, line: &'l str) -> Option<&'l str> {
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            return None;
        }
        if content.split_ascii_whitespace().nth(1).is_some() {
            self.invalid(number, line, "more than one field");
            return None;
        }
        Some(content)
    }

    /// `ads.example # comment`.
    fn domains_line(&mut self, number: u32, line: &str) {
        let Some(content) = self.one_field(number, line) else {
            return;
        };
        if content.contains('*') {
            self.invalid(
                number,
                line,
                "a wildcard in a domains list (use format wildcard)",
            );
            return;
        }
        match name::to_wire_into(content, &mut self.name) {
            Ok(()) => self.push_name(Scope::Exact, Action::Deny),
            Err(e) => self.invalid(number, line, e.reason()),
        }
    }

    /// `*.ads.example` or `ads.example` (or `.ads.example`): the name and below.
    fn wildcard_line(&mut self, number: u32, line: &str) {
        let Some(content) = self.one_field(number, line) else {
            return;
        };
        let name = content
            .strip_prefix("*.")
            .or_else(|| content.strip_prefix('.'))
            .unwrap_or(content);
        if name.contains('*') {
            self.invalid(number, line, "a wildcard inside a name");
            return;
        }
        match name::to_wire_into(name, &mut self.name) {
            Ok(()) => self.push_name(Scope::Subtree, Action::Deny),
            Err(e) => self.invalid(number, line, e.reason()),
        }
    }

    /// One adblock-syntax line (AdGuard DNS filtering and uBlock Origin's subset that applies
    /// to whole hosts).
    fn adblock_line(&mut self, number: u32, line: &str) {
        let line_trimmed = line.trim();
        if line_trimmed.is_empty()
            || line_trimmed.starts_with('!')
            || (line_trimmed.starts_with('[') && line_trimmed.ends_with(']'))
        {
            return;
        }
        if COSMETIC_MARKERS.iter().any(|m| line_trimmed.contains(m)) {
            self.skipped();
            return;
        }
        if line_trimmed.starts_with('#') {
            return; // a comment (cosmetic `##` was caught above)
        }
        // /etc/hosts syntax is part of AdGuard's filter syntax.
        if let Some(first) = line_trimmed.split_ascii_whitespace().next()
            && first.len() < line_trimmed.len()
            && first.parse::<std::net::IpAddr>().is_ok()
        {
            self.hosts_line(number, line_trimmed);
            return;
        }
        let (action, rule) = match line_trimmed.strip_prefix("@@") {
            Some(rest) => (Action::Allow, rest),
            None => (Action::Deny, line_trimmed),
        };
        let (pattern, options) = match rule.find('$') {
            Some(at) => (&rule[..at], Some(&rule[at + 1..])),
            None => (rule, None),
        };
        if let Some(options) = options
            && !options.split(',').all(|o| {
                let o = o.trim();
                HARMLESS_ADBLOCK_OPTIONS
                    .iter()
                    .any(|h| h.eq_ignore_ascii_case(o))
            })
        {
            self.skipped();
            return;
        }
        if pattern.len() > 1 && pattern.starts_with('/') && pattern.ends_with('/') {
            self.skipped(); // a regular expression
            return;
        }
        let (scope, host, plain) = if let Some(rest) = pattern.strip_prefix("||") {
            (Scope::Subtree, rest, false)
        } else if let Some(rest) = pattern.strip_prefix('|') {
            (Scope::Exact, rest, false)
        } else {
            (Scope::Exact, pattern, true)
        };
        let host = host.strip_suffix('|').unwrap_or(host);
        let host = host.strip_suffix('^').unwrap_or(host);
        if host.is_empty() {
            self.invalid(number, line, "a rule without a name");
            return;
        }
        if host.bytes().any(|b| {
            matches!(
                b,
                b'/' | b':' | b'?' | b'=' | b'&' | b'^' | b'*' | b'|' | b'@'
            )
        }) {
            self.skipped(); // a path, a port, a query, a wildcard or a separator inside
            return;
        }
        if plain && (!host.contains('.') || host.starts_with(['.', '-', '_'])) {
            self.skipped(); // a URL fragment (`-banner-`, `.ads.`), not a host
            return;
        }
        match name::to_wire_into(host, &mut self.name) {
            Ok(()) => self.push_name(scope, action),
            Err(e) => self.invalid(number, line, e.reason()),
        }
    }
}

/// RFC 1035 zone files of Response Policy Zone records (draft-vixie-dnsop-dns-rpz): QNAME
/// triggers only.
///
/// ```text
/// $ORIGIN rpz.example.             the zone's apex (or the SOA's owner, if absolute)
/// @ SOA ns hostmaster 1 3600 600 86400 60   ignored, as are the apex's NS records
/// bad.example CNAME .              NXDOMAIN          owner name.<apex>: Exact
/// *.bad.example CNAME .            NXDOMAIN below    owner *.name.<apex>: Below
/// empty.example CNAME *.           NODATA
/// ok.bad.example CNAME rpz-passthru.   allow
/// drop.example CNAME rpz-drop.     no answer
/// tcp.example CNAME rpz-tcp-only.  skipped (kudurru answers on every transport alike)
/// walled.example A 192.0.2.1       local data (A, AAAA, TXT, MX, PTR, NS, SRV, CNAME <name>)
/// 24.0.2.0.192.rpz-ip CNAME .      skipped: rpz-ip, rpz-nsdname, rpz-nsip, rpz-client-ip
/// ```
mod rpz {
    use std::collections::HashMap;

    use super::{Action, LocalData, Parser, Scope, lines, name};

    /// The policy subzones kudurru does not evaluate (response IP, name server and client IP
    /// triggers need the answer or the resolution path, not the qname).
    const UNSUPPORTED_TRIGGERS: &[&[u8]] =
        &[b"rpz-ip", b"rpz-nsdname", b"rpz-nsip", b"rpz-client-ip"];

    /// Record types whose local data kudurru answers.
    const A: u16 = 1;
    const NS: u16 = 2;
    const CNAME: u16 = 5;
    const PTR: u16 = 12;
    const MX: u16 = 15;
    const TXT: u16 = 16;
    const AAAA: u16 = 28;
    const SRV: u16 = 33;

    /// One logical entry: parentheses joined, comments removed.
    struct Entry<'a> {
        line: u32,
        text: &'a str,
        owner_blank: bool,
        fields: Vec<&'a str>,
    }

    struct Zone {
        origin: Vec<u8>,
        apex: Option<Vec<u8>>,
        last_owner: Option<(bool, Vec<u8>)>,
        local: HashMap<(Box<[u8]>, bool), u32>,
    }

    pub(super) fn parse(body: &[u8], parser: &mut Parser) {
        let mut zone = Zone {
            origin: vec![0],
            apex: None,
            last_owner: None,
            local: HashMap::new(),
        };
        let mut pending: Option<Entry<'_>> = None;
        let mut depth = 0usize;
        for (number, raw) in lines(body) {
            parser.list.stats.lines += 1;
            let Ok(line) = std::str::from_utf8(raw) else {
                parser.invalid(number, &String::from_utf8_lossy(raw), "not UTF-8");
                pending = None;
                depth = 0;
                continue;
            };
            let entry = pending.get_or_insert_with(|| Entry {
                line: number,
                text: line,
                owner_blank: line.starts_with([' ', '\t']),
                fields: Vec::new(),
            });
            if !tokenize(line, &mut entry.fields, &mut depth) {
                parser.invalid(number, line, "an unterminated quoted string or a stray ')'");
                pending = None;
                depth = 0;
                continue;
            }
            if depth > 0 {
                continue;
            }
            if let Some(entry) = pending.take()
                && !entry.fields.is_empty()
            {
                zone.entry(parser, &entry);
            }
        }
        if let Some(entry) = pending
            && !entry.fields.is_empty()
        {
            parser.invalid(entry.line, entry.text, "an unclosed '('");
        }
    }

    /// Splits `line` into fields (appended to `fields`), dropping a `;` comment and tracking
    /// parentheses; false for an unterminated string or a `)` without `(`.
    fn tokenize<'a>(line: &'a str, fields: &mut Vec<&'a str>, depth: &mut usize) -> bool {
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b' ' | b'\t' | b'\r' => i += 1,
                b';' => break,
                b'(' => {
                    *depth += 1;
                    i += 1;
                }
                b')' => {
                    if *depth == 0 {
                        return false;
                    }
                    *depth -= 1;
                    i += 1;
                }
                b'"' => {
                    let start = i;
                    i += 1;
                    loop {
                        match bytes.get(i) {
                            None => return false,
                            Some(b'\\') => i += 2,
                            Some(b'"') => {
                                i += 1;
                                break;
                            }
                            Some(_) => i += 1,
                        }
                    }
                    let Some(field) = line.get(start..i.min(bytes.len())) else {
                        return false;
                    };
                    fields.push(field);
                }
                _ => {
                    let start = i;
                    while i < bytes.len()
                        && !matches!(bytes[i], b' ' | b'\t' | b'\r' | b';' | b'(' | b')' | b'"')
                    {
                        if bytes[i] == b'\\' {
                            i += 1;
                        }
                        i += 1;
                    }
                    let Some(field) = line.get(start..i.min(bytes.len())) else {
                        return false;
                    };
                    fields.push(field);
                }
            }
        }
        true
    }

    fn is_class(field: &str) -> bool {
        ["IN", "CH", "HS", "CS", "ANY"]
            .iter()
            .any(|c| c.eq_ignore_ascii_case(field))
    }

    fn is_ttl(field: &str) -> bool {
        field.as_bytes().first().is_some_and(u8::is_ascii_digit)
            && field
                .bytes()
                .all(|b| b.is_ascii_digit() || b"smhdwSMHDW".contains(&b))
    }

    impl Zone {
        /// `text` as an absolute lowercase wire name (relative names under the origin; `@`
        /// the origin), into `out`.
        fn absolute(&self, text: &str, out: &mut Vec<u8>) -> Result<(), &'static str> {
            out.clear();
            if text == "@" {
                out.extend_from_slice(&self.origin);
                return Ok(());
            }
            if text == "." {
                out.push(0);
                return Ok(());
            }
            if text.contains('\\') {
                return Err("escapes in names are not supported");
            }
            name::to_wire_into(text, out).map_err(|e| e.reason())?;
            if !text.ends_with('.') && self.origin.len() > 1 {
                out.pop();
                if out.len() + self.origin.len() > 255 {
                    return Err("the name is longer than 255 bytes");
                }
                out.extend_from_slice(&self.origin);
            }
            Ok(())
        }

        /// The owner field as (wildcard, absolute name without the `*` label).
        fn owner(&self, text: &str) -> Result<(bool, Vec<u8>), &'static str> {
            let mut out = Vec::new();
            if text == "*" {
                return Ok((true, self.origin.clone()));
            }
            match text.strip_prefix("*.") {
                Some(rest) => {
                    self.absolute(rest, &mut out)?;
                    Ok((true, out))
                }
                None => {
                    self.absolute(text, &mut out)?;
                    Ok((false, out))
                }
            }
        }

        fn entry(&mut self, parser: &mut Parser, entry: &Entry<'_>) {
            let (line, text) = (entry.line, entry.text);
            let fields = entry.fields.as_slice();
            if let Some(directive) = fields.first().filter(|f| f.starts_with('$')) {
                if directive.eq_ignore_ascii_case("$ORIGIN") {
                    let Some(origin) = fields.get(1) else {
                        return parser.invalid(line, text, "$ORIGIN without a name");
                    };
                    let mut out = Vec::new();
                    if let Err(reason) = self.absolute(origin, &mut out) {
                        return parser.invalid(line, text, reason);
                    }
                    self.origin = out;
                    if self.apex.is_none() {
                        self.apex = Some(self.origin.clone());
                    }
                } else if !directive.eq_ignore_ascii_case("$TTL") {
                    parser.invalid(line, text, "a directive other than $ORIGIN and $TTL");
                }
                return;
            }
            let (owner, rest) = if entry.owner_blank {
                match &self.last_owner {
                    Some(owner) => (owner.clone(), fields),
                    None => return parser.invalid(line, text, "a record without an owner"),
                }
            } else {
                match self.owner(fields[0]) {
                    Ok(owner) => (owner, &fields[1..]),
                    Err(reason) => return parser.invalid(line, text, reason),
                }
            };
            self.last_owner = Some(owner.clone());
            let mut at = 0;
            while at < rest.len() && (is_ttl(rest[at]) || is_class(rest[at])) {
                if is_class(rest[at]) && !rest[at].eq_ignore_ascii_case("IN") {
                    return parser.skipped();
                }
                at += 1;
            }
            let Some(rtype) = rest.get(at) else {
                return parser.invalid(line, text, "a record without a type");
            };
            let rdata = &rest[at + 1..];
            let (wildcard, owner) = owner;
            if rtype.eq_ignore_ascii_case("SOA") {
                if self.apex.is_none() || (self.apex.as_deref() == Some(&[0][..]) && !wildcard) {
                    self.apex = Some(owner);
                }
                return;
            }
            let apex = self.apex.clone().unwrap_or_else(|| vec![0]);
            if !wildcard && owner == apex {
                if !rtype.eq_ignore_ascii_case("NS") {
                    parser.skipped(); // data at the apex is no trigger
                }
                return;
            }
            let Some(trigger) = relative(&owner, &apex) else {
                return parser.invalid(line, text, "an owner outside the zone");
            };
            if let Some(last) = last_label(&trigger)
                && UNSUPPORTED_TRIGGERS.contains(&last)
            {
                return parser.skipped();
            }
            let scope = if wildcard { Scope::Below } else { Scope::Exact };
            if rtype.eq_ignore_ascii_case("CNAME") {
                let Some(target) = rdata.first() else {
                    return parser.invalid(line, text, "a CNAME without a target");
                };
                let action = match target.to_ascii_lowercase().as_str() {
                    "." => Some(Action::Nxdomain),
                    "*." => Some(Action::Nodata),
                    "rpz-passthru." => Some(Action::Allow),
                    "rpz-drop." => Some(Action::Drop),
                    "rpz-tcp-only." => return parser.skipped(),
                    t if t.starts_with("*.") => return parser.skipped(),
                    _ => None,
                };
                if let Some(action) = action {
                    return parser.push(trigger.into(), scope, action);
                }
            }
            match self.rdata(rtype, rdata) {
                Ok((rtype, rdata)) => self.local_data(parser, trigger, wildcard, rtype, rdata),
                Err(reason) => parser.invalid(line, text, reason),
            }
        }

        /// Adds a local-data record to the owner's set, creating the rule with the first.
        fn local_data(
            &mut self,
            parser: &mut Parser,
            trigger: Vec<u8>,
            wildcard: bool,
            rtype: u16,
            rdata: Box<[u8]>,
        ) {
            let key = (trigger.into_boxed_slice(), wildcard);
            if let Some(&index) = self.local.get(&key) {
                if let Some(set) = parser.list.local_data.get_mut(index as usize) {
                    set.records.push((rtype, rdata));
                }
                return;
            }
            if parser.list.rules.len() >= parser.max_rules {
                parser.list.stats.truncated += 1;
                return;
            }
            let Ok(index) = u32::try_from(parser.list.local_data.len()) else {
                return parser.skipped();
            };
            parser.list.local_data.push(LocalData {
                records: vec![(rtype, rdata)],
            });
            let scope = if wildcard { Scope::Below } else { Scope::Exact };
            parser.push(key.0.clone(), scope, Action::LocalData(index));
            self.local.insert(key, index);
        }

        /// The wire rdata of a local-data record.
        fn rdata(&self, rtype: &str, fields: &[&str]) -> Result<(u16, Box<[u8]>), &'static str> {
            let rtype = rtype.to_ascii_uppercase();
            let first = fields.first().copied().unwrap_or("");
            let name = |text: &str| -> Result<Vec<u8>, &'static str> {
                let mut out = Vec::new();
                self.absolute(text, &mut out)?;
                Ok(out)
            };
            let number = |text: &str| text.parse::<u16>().map_err(|_| "a bad number in rdata");
            let need = |n: usize| {
                if fields.len() == n {
                    Ok(())
                } else {
                    Err("the wrong number of rdata fields")
                }
            };
            let (code, data) = match rtype.as_str() {
                "A" => {
                    need(1)?;
                    let a: std::net::Ipv4Addr = first.parse().map_err(|_| "a bad IPv4 address")?;
                    (A, a.octets().to_vec())
                }
                "AAAA" => {
                    need(1)?;
                    let a: std::net::Ipv6Addr = first.parse().map_err(|_| "a bad IPv6 address")?;
                    (AAAA, a.octets().to_vec())
                }
                "CNAME" | "PTR" | "NS" => {
                    need(1)?;
                    let code = match rtype.as_str() {
                        "CNAME" => CNAME,
                        "PTR" => PTR,
                        _ => NS,
                    };
                    (code, name(first)?)
                }
                "MX" => {
                    need(2)?;
                    let mut data = number(first)?.to_be_bytes().to_vec();
                    data.extend_from_slice(&name(fields[1])?);
                    (MX, data)
                }
                "SRV" => {
                    need(4)?;
                    let mut data = Vec::new();
                    for field in &fields[..3] {
                        data.extend_from_slice(&number(field)?.to_be_bytes());
                    }
                    data.extend_from_slice(&name(fields[3])?);
                    (SRV, data)
                }
                "TXT" => {
                    if fields.is_empty() {
                        return Err("a TXT record without strings");
                    }
                    let mut data = Vec::new();
                    for field in fields {
                        let text = field
                            .strip_prefix('"')
                            .and_then(|f| f.strip_suffix('"'))
                            .unwrap_or(field);
                        if text.contains('\\') {
                            return Err("escapes in TXT strings are not supported");
                        }
                        let Ok(len) = u8::try_from(text.len()) else {
                            return Err("a TXT string longer than 255 bytes");
                        };
                        data.push(len);
                        data.extend_from_slice(text.as_bytes());
                    }
                    (TXT, data)
                }
                _ => return Err("local data of a type kudurru does not answer"),
            };
            if data.len() > usize::from(u16::MAX) {
                return Err("rdata too long");
            }
            Ok((code, data.into_boxed_slice()))
        }
    }

    /// `name` with `apex` cut off its end (label-aligned), as a wire name; `None` when
    /// `name` is not at or below `apex`.
    fn relative(name: &[u8], apex: &[u8]) -> Option<Vec<u8>> {
        let mut pos = 0;
        loop {
            if name.get(pos..)? == apex {
                let mut out = name[..pos].to_vec();
                out.push(0);
                return Some(out);
            }
            let len = usize::from(*name.get(pos)?);
            if len == 0 {
                return None;
            }
            pos += 1 + len;
        }
    }

    /// The last label before the root of a wire name.
    fn last_label(name: &[u8]) -> Option<&[u8]> {
        let mut pos = 0;
        let mut last = None;
        loop {
            let len = usize::from(*name.get(pos)?);
            if len == 0 {
                return last;
            }
            last = name.get(pos + 1..pos + 1 + len);
            pos += 1 + len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wire name from dotted text, written out by hand (not through `name::to_wire`).
    fn w(text: &str) -> Box<[u8]> {
        let mut out = Vec::new();
        for label in text.split('.').filter(|l| !l.is_empty()) {
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
        out.into()
    }

    fn rule(text: &str, scope: Scope, action: Action) -> Rule {
        Rule {
            name: w(text),
            scope,
            action,
        }
    }

    fn exact(text: &str) -> Rule {
        rule(text, Scope::Exact, Action::Deny)
    }

    #[test]
    fn hosts_files_as_published_with_bom_crlf_comments_and_local_names() {
        let body = "\u{feff}# Title: StevenBlack/hosts\r\n\
            127.0.0.1 localhost\r\n\
            127.0.0.1 localhost.localdomain\r\n\
            255.255.255.255 broadcasthost\r\n\
            ::1 localhost ip6-localhost ip6-loopback\r\n\
            fe80::1%lo0 localhost\r\n\
            0.0.0.0 0.0.0.0\r\n\
            \r\n\
            0.0.0.0 Ads.Example.com # a tracker\r\n\
            127.0.0.1\ttracker.example   metrics.example\r\n\
            :: v6.example\r\n\
            0:0:0:0:0:0:0:0 zeros.example\r\n\
            0.0.0.0 bücher.example\r\n\
            ads.example.net\r\n\
            0.0.0.0\r\n\
            0.0.0.0 bad..name good.example\r\n";
        let list = parse(body.as_bytes(), Format::Hosts, usize::MAX);
        assert_eq!(
            list.rules,
            vec![
                exact("ads.example.com"),
                exact("tracker.example"),
                exact("metrics.example"),
                exact("v6.example"),
                exact("zeros.example"),
                exact("xn--bcher-kva.example"),
                exact("good.example"),
            ]
        );
        let stats = &list.stats;
        assert_eq!(stats.format, Some(Format::Hosts));
        assert_eq!(stats.lines, 16);
        assert_eq!(stats.rules, 7);
        // localhost, localhost.localdomain, broadcasthost, 3 on the ::1 line, 0.0.0.0; the
        // `fe80::1%lo0` line is no address (a zone index) so it is invalid, not skipped.
        assert_eq!(stats.skipped, 7);
        assert_eq!(stats.invalid, 4);
        let lines: Vec<u32> = stats.samples.iter().map(|s| s.line).collect();
        assert_eq!(lines, vec![6, 14, 15, 16]);
        assert_eq!(stats.samples[2].reason, "an address without a name");
        assert_eq!(stats.samples[3].reason, "an empty label");
        assert_eq!(stats.samples[3].text, "0.0.0.0 bad..name good.example");
    }

    #[test]
    fn domains_lists_take_one_exact_name_per_line() {
        let body = b"# hagezi light\n\
            ads.example\n\
            TRACKER.example.  # trailing comment\n\
            \n\
            _dmarc.example\n\
            two names\n\
            *.wild.example\n\
            bad/char.example\n\
            \xff\xfe.example\n";
        let list = parse(body, Format::Domains, usize::MAX);
        assert_eq!(
            list.rules,
            vec![
                exact("ads.example"),
                exact("tracker.example"),
                exact("_dmarc.example")
            ]
        );
        assert_eq!(list.stats.invalid, 4);
        assert_eq!(list.stats.samples[3].reason, "not UTF-8");
        assert_eq!(list.stats.samples[3].line, 9);
    }

    #[test]
    fn very_long_labels_and_names_are_invalid() {
        let body = format!(
            "{}.example\n{}\nok.example\n",
            "a".repeat(64),
            vec!["abcdefghij"; 30].join(".")
        );
        let list = parse(body.as_bytes(), Format::Domains, usize::MAX);
        assert_eq!(list.rules, vec![exact("ok.example")]);
        let reasons: Vec<_> = list.stats.samples.iter().map(|s| s.reason).collect();
        assert_eq!(
            reasons,
            vec![
                "a label is longer than 63 bytes",
                "the name is longer than 255 bytes"
            ]
        );
        // A sample is cut to 200 bytes.
        assert_eq!(list.stats.samples[1].text.len(), 200);
    }

    #[test]
    fn adblock_rules_that_dns_can_honour_and_the_rest_skipped() {
        let body = "[Adblock Plus 2.0]\n\
            ! Title: AdGuard DNS filter\n\
            ||ads.example^\n\
            @@||good.ads.example^\n\
            |exact.example^\n\
            plain.example\n\
            plain2.example^\n\
            ||important.example^$important\n\
            ||all.example^$all\n\
            ||third.example^$third-party\n\
            ||rewrite.example^$dnsrewrite=1.2.3.4\n\
            example.com##.banner\n\
            ##.ad-box\n\
            example.com#@#.ad\n\
            /ads[0-9]+\\.example/\n\
            ||path.example/ads/*\n\
            ||mid*.example^\n\
            -banner-ad-\n\
            0.0.0.0 hosts-style.example\n\
            # a comment\n\
            ||bad..example^\n\
            ||\n";
        let list = parse(body.as_bytes(), Format::Adblock, usize::MAX);
        assert_eq!(
            list.rules,
            vec![
                rule("ads.example", Scope::Subtree, Action::Deny),
                rule("good.ads.example", Scope::Subtree, Action::Allow),
                exact("exact.example"),
                exact("plain.example"),
                exact("plain2.example"),
                rule("important.example", Scope::Subtree, Action::Deny),
                rule("all.example", Scope::Subtree, Action::Deny),
                exact("hosts-style.example"),
            ]
        );
        // $third-party, $dnsrewrite, 3 cosmetic, the regex, the path, the mid wildcard, the
        // URL fragment.
        assert_eq!(list.stats.skipped, 9);
        assert_eq!(list.stats.invalid, 2);
    }

    #[test]
    fn wildcard_lists_cover_the_name_and_below() {
        let body =
            b"# hagezi wildcard\n*.ads.example\ntracker.example\n.dot.example\na.*.example\n";
        let list = parse(body, Format::Wildcard, usize::MAX);
        assert_eq!(
            list.rules,
            vec![
                rule("ads.example", Scope::Subtree, Action::Deny),
                rule("tracker.example", Scope::Subtree, Action::Deny),
                rule("dot.example", Scope::Subtree, Action::Deny),
            ]
        );
        assert_eq!(list.stats.invalid, 1);
    }

    const RPZ: &str = "$TTL 300\n\
        $ORIGIN rpz.example.\n\
        @ IN SOA ns.rpz.example. hostmaster.rpz.example. (\n\
        \t2026010101 ; serial\n\
        \t3600 600 86400 60 )\n\
        \tIN NS ns.rpz.example.\n\
        bad.example CNAME .\n\
        *.bad.example CNAME .\n\
        empty.example 60 IN CNAME *.\n\
        ok.bad.example CNAME rpz-passthru.\n\
        drop.example CNAME rpz-drop.\n\
        tcp.example CNAME rpz-tcp-only.\n\
        walled.example A 192.0.2.1\n\
        \tA 192.0.2.2\n\
        walled.example AAAA 2001:db8::1\n\
        cname.example CNAME safe.example.net.\n\
        txt.example TXT \"blocked by policy\" \"see admin\"\n\
        32.1.2.0.192.rpz-ip CNAME .\n\
        ns.example.rpz-nsdname CNAME .\n\
        absolute.example.rpz.example. CNAME .\n\
        outside.example. CNAME .\n\
        weird.example HINFO \"a\" \"b\"\n\
        ; a comment line\n";

    #[test]
    fn rpz_zones_give_qname_triggers_with_their_actions_and_local_data() {
        let list = parse(RPZ.as_bytes(), Format::Rpz, usize::MAX);
        assert_eq!(
            list.rules,
            vec![
                rule("bad.example", Scope::Exact, Action::Nxdomain),
                rule("bad.example", Scope::Below, Action::Nxdomain),
                rule("empty.example", Scope::Exact, Action::Nodata),
                rule("ok.bad.example", Scope::Exact, Action::Allow),
                rule("drop.example", Scope::Exact, Action::Drop),
                rule("walled.example", Scope::Exact, Action::LocalData(0)),
                rule("cname.example", Scope::Exact, Action::LocalData(1)),
                rule("txt.example", Scope::Exact, Action::LocalData(2)),
                rule("absolute.example", Scope::Exact, Action::Nxdomain),
            ]
        );
        assert_eq!(
            list.local_data[0].records,
            vec![
                (1, vec![192, 0, 2, 1].into()),
                (1, vec![192, 0, 2, 2].into()),
                (
                    28,
                    vec![0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1].into()
                ),
            ]
        );
        assert_eq!(list.local_data[1].records, vec![(5, w("safe.example.net"))]);
        assert_eq!(
            list.local_data[2].records,
            vec![(16, b"\x11blocked by policy\x09see admin".to_vec().into())]
        );
        // rpz-tcp-only, rpz-ip, rpz-nsdname.
        assert_eq!(list.stats.skipped, 3);
        let reasons: Vec<_> = list
            .stats
            .samples
            .iter()
            .map(|s| (s.line, s.reason))
            .collect();
        assert_eq!(
            reasons,
            vec![
                (21, "an owner outside the zone"),
                (22, "local data of a type kudurru does not answer")
            ]
        );
        assert_eq!(list.stats.lines, 23);
    }

    #[test]
    fn rpz_without_origin_takes_the_soa_owner_as_apex() {
        let body = b"rpz.test. 300 IN SOA ns.rpz.test. h.rpz.test. 1 2 3 4 5\n\
            ads.example.rpz.test. 300 IN CNAME .\n\
            *.rpz.test. CNAME rpz-passthru.\n";
        let list = parse(body, Format::Auto, usize::MAX);
        assert_eq!(list.stats.format, Some(Format::Rpz));
        assert_eq!(
            list.rules,
            vec![
                rule("ads.example", Scope::Exact, Action::Nxdomain),
                Rule {
                    name: vec![0].into(),
                    scope: Scope::Below,
                    action: Action::Allow
                },
            ]
        );
    }

    #[test]
    fn rpz_garbage_is_counted_not_fatal() {
        let body = b"( unclosed\n\"unterminated\n) stray\n$INCLUDE other\nx.example\n";
        let list = parse(body, Format::Rpz, usize::MAX);
        assert!(list.rules.is_empty());
        assert_eq!(list.stats.invalid, 4, "{:?}", list.stats.samples);
    }

    #[test]
    fn auto_detects_every_format() {
        let cases: [(&[u8], Format); 6] = [
            (
                b"# hosts\n0.0.0.0 a.example\n0.0.0.0 b.example\n",
                Format::Hosts,
            ),
            (b"! comment\n||a.example^\n", Format::Adblock),
            (b"[Adblock Plus 2.0]\na.example\n", Format::Adblock),
            (b"*.a.example\n*.b.example\n", Format::Wildcard),
            (b"a.example\nb.example\n", Format::Domains),
            (b"$ORIGIN rpz.\nx CNAME .\n", Format::Rpz),
        ];
        for (body, format) in cases {
            let list = parse(body, Format::Auto, usize::MAX);
            assert_eq!(
                list.stats.format,
                Some(format),
                "{}",
                String::from_utf8_lossy(body)
            );
            assert!(!list.rules.is_empty());
        }
        assert_eq!(Format::from_label("rpz"), Some(Format::Rpz));
        assert_eq!(Format::from_label("RPZ"), None);
    }

    #[test]
    fn the_entry_limit_truncates_and_counts_the_rest() {
        let body = b"a.example\nb.example\nc.example\nd.example\n";
        let list = parse(body, Format::Domains, 2);
        assert_eq!(list.rules.len(), 2);
        assert_eq!(list.stats.truncated, 2);
        assert_eq!(list.stats.rules, 2);
    }

    #[test]
    fn only_the_first_invalid_lines_are_sampled() {
        let body = "bad name\n".repeat(25);
        let list = parse(body.as_bytes(), Format::Domains, usize::MAX);
        assert_eq!(list.stats.invalid, 25);
        assert_eq!(list.stats.samples.len(), INVALID_SAMPLES);
        assert_eq!(list.stats.samples[9].line, 10);
    }

    #[test]
    fn empty_and_binary_bodies_parse_to_nothing() {
        for body in [&b""[..], b"\n\n", b"\xef\xbb\xbf", b"\0\0\0\xff"] {
            for format in [Format::Auto, Format::Hosts, Format::Adblock, Format::Rpz] {
                let list = parse(body, format, usize::MAX);
                assert!(list.rules.is_empty());
            }
        }
    }
}
