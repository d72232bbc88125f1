//! Block-list parsers: hosts, domains, adblock, wildcard and RPZ bodies into rules. A parser
//! never fails: a line it cannot use is counted (and the first few sampled) as invalid, a
//! rule that cannot apply to DNS (an adblock cosmetic or path rule) as skipped.

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
pub fn parse(body: &[u8], format: Format, max_rules: usize) -> ParsedList {
    let _ = (body, format, max_rules);
    unimplemented!("policy::blocklist::parse")
}
