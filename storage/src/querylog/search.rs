//! Searching: the filters become index streams (each yields cursors newest first) and fact
//! checks. Several streams are intersected by leapfrogging (each seeks to the largest cursor
//! at or below the others'), so the sparsest filter sets the pace without statistics; every
//! candidate's fact is then checked against the whole filter. Without an index filter, the
//! facts are walked newest first.

use std::collections::{BinaryHeap, HashMap, HashSet};

use redb::{ReadOnlyTable, ReadableDatabase, ReadableTable};

use super::codec::{Answer, Fact, reversed_name};
use super::{
    Cursor, DICT, DICT_REV, Entry, FACTS, Filter, INDEX, IndexKey, NAMES, Page, QueryLogDb,
    corrupt, cursor_of, cursor_time, dict_kind, dictionary_string, entry_flags, index_cursor,
    index_key, index_kind, rcode_code,
};
use crate::error::StorageError;

/// A suffix matching at most this many names is searched through their qname indexes; a
/// broader one is checked on the facts another index (or the time order) yields.
pub(super) const SUFFIX_STREAM_NAMES: usize = 512;

/// Cursors newest first: `seek(bound)` is the largest cursor at or below `bound` (and at or
/// above the search's lower bound). Bounds passed to one stream never increase.
trait Stream {
    fn seek(&mut self, bound: u128) -> Result<Option<u128>, StorageError>;
}

/// One index's entries for one id.
struct IndexStream<'t> {
    index: &'t ReadOnlyTable<IndexKey, ()>,
    kind: u8,
    id: u32,
    lower: u128,
    /// The last bound asked and its answer: a bound between the answer and that bound has
    /// the same answer.
    last: Option<(u128, Option<u128>)>,
}

impl Stream for IndexStream<'_> {
    fn seek(&mut self, bound: u128) -> Result<Option<u128>, StorageError> {
        if let Some((asked, answer)) = self.last
            && bound <= asked
            && answer.is_none_or(|answer| answer <= bound)
        {
            return Ok(answer);
        }
        let range =
            index_key(self.kind, self.id, self.lower)..=index_key(self.kind, self.id, bound);
        let answer = match self.index.range(range)?.next_back() {
            Some(item) => Some(index_cursor(&item?.0.value())),
            None => None,
        };
        self.last = Some((bound, answer));
        Ok(answer)
    }
}

/// The union of several streams (the names below a suffix).
struct UnionStream<'t> {
    parts: Vec<IndexStream<'t>>,
    heads: BinaryHeap<(u128, usize)>,
    started: bool,
}

impl Stream for UnionStream<'_> {
    fn seek(&mut self, bound: u128) -> Result<Option<u128>, StorageError> {
        if !self.started {
            self.started = true;
            for (position, part) in self.parts.iter_mut().enumerate() {
                if let Some(head) = part.seek(bound)? {
                    self.heads.push((head, position));
                }
            }
        }
        while let Some(&(head, position)) = self.heads.peek() {
            if head <= bound {
                return Ok(Some(head));
            }
            self.heads.pop();
            if let Some(head) = self.parts[position].seek(bound)? {
                self.heads.push((head, position));
            }
        }
        Ok(None)
    }
}

/// What a fact must satisfy: the whole filter, as ids.
#[derive(Default)]
struct Checks {
    client: Option<u32>,
    client_id: Option<u32>,
    qname: Option<u32>,
    names: Option<HashSet<u32>>,
    qtype: Option<u16>,
    rcode: Option<Option<u16>>,
    blocked: Option<bool>,
    policy: Option<u32>,
    group: Option<u32>,
    transport: Option<u8>,
    source: Option<u8>,
}

impl Checks {
    fn accept(&self, fact: &Fact<'_>) -> bool {
        let id = |want: Option<u32>, have: u32| want.is_none_or(|want| want == have);
        id(self.client, fact.client)
            && id(self.client_id, fact.client_id)
            && id(self.qname, fact.qname)
            && id(self.policy, fact.policy)
            && id(self.group, fact.group)
            && self
                .names
                .as_ref()
                .is_none_or(|names| names.contains(&fact.qname))
            && self.qtype.is_none_or(|qtype| qtype == fact.qtype)
            && self.rcode.is_none_or(|rcode| rcode == fact.rcode)
            && self
                .blocked
                .is_none_or(|blocked| blocked == (fact.flags & entry_flags::BLOCKED != 0))
            && self.transport.is_none_or(|code| code == fact.transport)
            && self.source.is_none_or(|code| code == fact.source)
    }
}

/// The read snapshot's tables.
struct Snapshot {
    facts: ReadOnlyTable<u128, &'static [u8]>,
    index: ReadOnlyTable<IndexKey, ()>,
    dict: ReadOnlyTable<&'static [u8], u32>,
    reverse: ReadOnlyTable<u32, &'static [u8]>,
    names: ReadOnlyTable<&'static [u8], u32>,
}

impl Snapshot {
    /// The id of `text` in dictionary `kind`: `Ok(None)` when it was never stored (so nothing
    /// matches), 0 for "".
    fn id(&self, kind: u8, text: &str) -> Result<Option<u32>, StorageError> {
        if text.is_empty() {
            return Ok(Some(0));
        }
        let mut key = Vec::with_capacity(text.len() + 1);
        key.push(kind);
        key.extend_from_slice(text.as_bytes());
        Ok(self.dict.get(key.as_slice())?.map(|id| id.value()))
    }

    /// The ids of the names at or below `suffix`, at most `cap + 1` of them.
    fn names_below(&self, suffix: &str, cap: usize) -> Result<Vec<u32>, StorageError> {
        let prefix = reversed_name(suffix);
        let mut ids = Vec::new();
        let mut push = |item: Result<
            (redb::AccessGuard<'_, &[u8]>, redb::AccessGuard<'_, u32>),
            redb::StorageError,
        >|
         -> Result<bool, StorageError> {
            ids.push(item?.1.value());
            Ok(ids.len() <= cap)
        };
        match prefix.split_last() {
            None => {
                for item in self.names.iter()? {
                    if !push(item)? {
                        break;
                    }
                }
            }
            Some((_, head)) => {
                // The key ends with a zero byte; the range ends before the same key with one.
                let mut end = head.to_vec();
                end.push(1);
                for item in self.names.range(prefix.as_slice()..end.as_slice())? {
                    if !push(item)? {
                        break;
                    }
                }
            }
        }
        Ok(ids)
    }

    fn string(&self, cache: &mut HashMap<u32, String>, id: u32) -> Result<String, StorageError> {
        if id == 0 {
            return Ok(String::new());
        }
        if let Some(text) = cache.get(&id) {
            return Ok(text.clone());
        }
        let text = dictionary_string(&self.reverse, id)?;
        cache.insert(id, text.clone());
        Ok(text)
    }

    fn entry(
        &self,
        cache: &mut HashMap<u32, String>,
        cursor: u128,
        fact: &Fact<'_>,
    ) -> Result<Entry, StorageError> {
        Ok(Entry {
            time_ns: cursor_time(cursor),
            client: self.string(cache, fact.client)?,
            client_id: self.string(cache, fact.client_id)?,
            group: self.string(cache, fact.group)?,
            transport: fact.transport,
            source: fact.source,
            qname: self.string(cache, fact.qname)?,
            qtype: fact.qtype,
            rcode: fact.rcode,
            flags: fact.flags,
            answer: match fact.answer {
                Answer::Id(id) => self.string(cache, id)?,
                Answer::Inline(text) => text.to_owned(),
            },
            upstream: self.string(cache, fact.upstream)?,
            upstream_latency_us: fact.upstream_latency_us,
            policy: self.string(cache, fact.policy)?,
            list: self.string(cache, fact.list)?,
            rule: self.string(cache, fact.rule)?,
            ede: fact.ede,
            omitted: false,
        })
    }
}

/// Where a plan comes out: streams to intersect and checks for each fact, or nothing can match.
enum Plan<'t> {
    Empty,
    Search {
        streams: Vec<Box<dyn Stream + 't>>,
        checks: Checks,
    },
}

fn plan<'t>(
    snapshot: &'t Snapshot,
    filter: &Filter,
    lower: u128,
) -> Result<Plan<'t>, StorageError> {
    let mut streams: Vec<Box<dyn Stream + 't>> = Vec::new();
    let mut checks = Checks::default();
    let stream = |kind: u8, id: u32| IndexStream {
        index: &snapshot.index,
        kind,
        id,
        lower,
        last: None,
    };
    // Strings: an unknown one matches nothing; "" (id 0) is not indexed except for groups.
    for (text, dictionary, kind, check) in [
        (
            &filter.client,
            dict_kind::CLIENT,
            index_kind::CLIENT,
            &mut checks.client,
        ),
        (
            &filter.client_id,
            dict_kind::CLIENT_ID,
            index_kind::CLIENT_ID,
            &mut checks.client_id,
        ),
        (
            &filter.qname,
            dict_kind::QNAME,
            index_kind::QNAME,
            &mut checks.qname,
        ),
        (
            &filter.policy,
            dict_kind::POLICY,
            index_kind::POLICY,
            &mut checks.policy,
        ),
        (
            &filter.group,
            dict_kind::GROUP,
            index_kind::GROUP,
            &mut checks.group,
        ),
    ] {
        let Some(text) = text else { continue };
        let Some(id) = snapshot.id(dictionary, text)? else {
            return Ok(Plan::Empty);
        };
        *check = Some(id);
        if id != 0 || kind == index_kind::GROUP || kind == index_kind::QNAME {
            streams.push(Box::new(stream(kind, id)));
        }
    }
    if let Some(qtype) = filter.qtype {
        checks.qtype = Some(qtype);
        streams.push(Box::new(stream(index_kind::QTYPE, u32::from(qtype))));
    }
    if let Some(rcode) = filter.rcode {
        checks.rcode = Some(rcode);
        streams.push(Box::new(stream(index_kind::RCODE, rcode_code(rcode))));
    }
    if let Some(blocked) = filter.blocked {
        checks.blocked = Some(blocked);
        // Only blocked facts are indexed; "not blocked" is most of the log, checked per fact.
        if blocked {
            streams.push(Box::new(stream(index_kind::BLOCKED, 1)));
        }
    }
    checks.transport = filter.transport;
    checks.source = filter.source;
    if let Some(suffix) = &filter.qname_suffix
        && !reversed_name(suffix).is_empty()
    {
        let ids = snapshot.names_below(suffix, SUFFIX_STREAM_NAMES)?;
        if ids.is_empty() {
            return Ok(Plan::Empty);
        }
        if ids.len() <= SUFFIX_STREAM_NAMES {
            let parts = ids
                .iter()
                .map(|&id| stream(index_kind::QNAME, id))
                .collect();
            streams.push(Box::new(UnionStream {
                parts,
                heads: BinaryHeap::new(),
                started: false,
            }));
            checks.names = Some(ids.into_iter().collect());
        } else {
            let all = snapshot.names_below(suffix, usize::MAX - 1)?;
            checks.names = Some(all.into_iter().collect());
        }
    }
    Ok(Plan::Search { streams, checks })
}

/// Leapfrog: the newest cursor at or below `bound` that every stream has.
fn intersect(
    streams: &mut [Box<dyn Stream + '_>],
    bound: u128,
) -> Result<Option<u128>, StorageError> {
    let Some((first, rest)) = streams.split_first_mut() else {
        return Ok(None);
    };
    let Some(mut candidate) = first.seek(bound)? else {
        return Ok(None);
    };
    if rest.is_empty() {
        return Ok(Some(candidate));
    }
    let count = streams.len();
    let mut agreed = 1;
    let mut next = 1;
    while agreed < count {
        match streams[next].seek(candidate)? {
            None => return Ok(None),
            Some(found) if found == candidate => agreed += 1,
            Some(found) => {
                candidate = found;
                agreed = 1;
            }
        }
        next = (next + 1) % count;
    }
    Ok(Some(candidate))
}

impl QueryLogDb {
    /// A page of at most `limit` entries matching `filter`, newest first, after `cursor`
    /// (older than it). Reads one snapshot: a concurrent append or purge does not change it.
    pub fn search(
        &self,
        filter: &Filter,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StorageError> {
        let lower = filter.from_ns.map_or(0, |from| cursor_of(from, 0));
        let mut upper = match filter.to_ns {
            Some(0) => return Ok(Page::default()),
            Some(to) => cursor_of(to, 0) - 1,
            None => u128::MAX,
        };
        if let Some(Cursor(after)) = cursor {
            let Some(before) = after.checked_sub(1) else {
                return Ok(Page::default());
            };
            upper = upper.min(before);
        }
        if limit == 0 || lower > upper {
            return Ok(Page::default());
        }
        let transaction = self.database.begin_read()?;
        let snapshot = Snapshot {
            facts: transaction.open_table(FACTS)?,
            index: transaction.open_table(INDEX)?,
            dict: transaction.open_table(DICT)?,
            reverse: transaction.open_table(DICT_REV)?,
            names: transaction.open_table(NAMES)?,
        };
        let (mut streams, checks) = match plan(&snapshot, filter, lower)? {
            Plan::Empty => return Ok(Page::default()),
            Plan::Search { streams, checks } => (streams, checks),
        };
        let mut cache = HashMap::new();
        let mut entries = Vec::new();
        let mut more = false;
        let mut take = |cursor: u128, value: &[u8]| -> Result<bool, StorageError> {
            let fact = Fact::decode(value).map_err(|reason| corrupt("facts", cursor, reason))?;
            if checks.accept(&fact) {
                if entries.len() == limit {
                    more = true;
                    return Ok(false);
                }
                entries.push((Cursor(cursor), snapshot.entry(&mut cache, cursor, &fact)?));
            }
            Ok(true)
        };
        if streams.is_empty() {
            for item in snapshot.facts.range(lower..=upper)?.rev() {
                let (key, value) = item?;
                if !take(key.value(), value.value())? {
                    break;
                }
            }
        } else {
            let mut bound = upper;
            while let Some(found) = intersect(&mut streams, bound)? {
                // An index entry without its fact (left by deleting a damaged fact) is skipped.
                if let Some(value) = snapshot.facts.get(found)?
                    && !take(found, value.value())?
                {
                    break;
                }
                match found.checked_sub(1) {
                    Some(next) if next >= lower => bound = next,
                    _ => break,
                }
            }
        }
        let next = if more {
            entries.last().map(|(cursor, _)| *cursor)
        } else {
            None
        };
        Ok(Page { entries, next })
    }
}
