//! The list manager's one seam to `kudurru_core::policy`: parsing, the matcher's per-list
//! replacement and the index build, each a thin call. The manager's tests put a fake behind it
//! (the state machine is what they check, not the core's matching), and it names every core
//! call the control thread makes, all of which run on the blocking pool.

#[cfg(test)]
use std::collections::HashMap;
use std::sync::Arc;
#[cfg(test)]
use std::sync::{Mutex, PoisonError};

use kudurru_core::policy::{
    BuildInputs, BuildReport, Format, ListId, ListMode, Matcher, ParsedList, PolicyIndex,
};

/// What the manager asks of the core.
pub trait Engine: Send + Sync + 'static {
    /// An empty matcher (once per process: its hash seed is chosen here).
    fn empty(&self) -> Matcher;
    /// Parses one list's body (its sources concatenated).
    fn parse(&self, body: &[u8], format: Format, max_rules: usize) -> ParsedList;
    /// `matcher` with `list` replaced by `parsed`.
    fn with_list(
        &self,
        matcher: &Matcher,
        list: ListId,
        mode: ListMode,
        parsed: &ParsedList,
    ) -> Matcher;
    /// `matcher` without `list`.
    fn without_list(&self, matcher: &Matcher, list: ListId) -> Matcher;
    /// Entries `list` holds in `matcher`.
    fn entries(&self, matcher: &Matcher, list: ListId) -> usize;
    /// The policy index over `inputs`.
    fn build(&self, inputs: BuildInputs<'_>) -> (PolicyIndex, BuildReport);
}

/// The real thing: `kudurru_core::policy`.
#[derive(Debug)]
pub struct CoreEngine {
    seed: u64,
}

impl CoreEngine {
    /// An engine hashing names with a random seed (a peer cannot aim for collisions).
    pub fn new() -> Self {
        Self {
            seed: rand::random(),
        }
    }
}

impl Default for CoreEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl Engine for CoreEngine {
    fn empty(&self) -> Matcher {
        Matcher::new(self.seed)
    }

    fn parse(&self, body: &[u8], format: Format, max_rules: usize) -> ParsedList {
        kudurru_core::policy::parse(body, format, max_rules)
    }

    fn with_list(
        &self,
        matcher: &Matcher,
        list: ListId,
        mode: ListMode,
        parsed: &ParsedList,
    ) -> Matcher {
        matcher.with_list(list, mode, parsed)
    }

    fn without_list(&self, matcher: &Matcher, list: ListId) -> Matcher {
        matcher.without_list(list)
    }

    fn entries(&self, matcher: &Matcher, list: ListId) -> usize {
        matcher.entries(list)
    }

    fn build(&self, inputs: BuildInputs<'_>) -> (PolicyIndex, BuildReport) {
        PolicyIndex::build(inputs)
    }
}

/// A fake for tests: one rule per non-blank, non-`#` line; `invalid` lines are invalid;
/// entries are counted per slot; the index is the empty one and the report names the
/// inactive policies `inactive` lists.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct FakeEngine {
    entries: Mutex<HashMap<ListId, usize>>,
    /// Index builds so far.
    pub(crate) builds: std::sync::atomic::AtomicUsize,
    /// The lists each build saw, by name.
    pub(crate) last_lists: Mutex<Vec<String>>,
    /// Policies the next builds report as inactive, and the next change they report.
    pub(crate) schedule: Mutex<(Vec<String>, Option<jiff::Timestamp>)>,
}

#[cfg(test)]
impl Engine for FakeEngine {
    fn empty(&self) -> Matcher {
        Matcher::default()
    }

    fn parse(&self, body: &[u8], format: Format, max_rules: usize) -> ParsedList {
        use kudurru_core::policy::{Action, ParseStats, Rule, Scope};
        let text = String::from_utf8_lossy(body);
        let mut parsed = ParsedList {
            stats: ParseStats {
                format: Some(if format == Format::Auto {
                    Format::Domains
                } else {
                    format
                }),
                ..ParseStats::default()
            },
            ..ParsedList::default()
        };
        for (i, line) in text.lines().enumerate() {
            parsed.stats.lines += 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line == "invalid" {
                parsed.stats.invalid += 1;
                parsed
                    .stats
                    .samples
                    .push(kudurru_core::policy::blocklist::InvalidLine {
                        line: u32::try_from(i + 1).unwrap_or(u32::MAX),
                        text: line.to_owned(),
                        reason: "not a name",
                    });
                continue;
            }
            if parsed.rules.len() >= max_rules {
                parsed.stats.truncated += 1;
                continue;
            }
            parsed.rules.push(Rule {
                name: line.as_bytes().into(),
                scope: Scope::Exact,
                action: Action::Deny,
            });
            parsed.stats.rules += 1;
        }
        parsed
    }

    fn with_list(&self, _: &Matcher, list: ListId, _: ListMode, parsed: &ParsedList) -> Matcher {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(list, parsed.rules.len());
        Matcher::default()
    }

    fn without_list(&self, _: &Matcher, list: ListId) -> Matcher {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&list);
        Matcher::default()
    }

    fn entries(&self, _: &Matcher, list: ListId) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&list)
            .copied()
            .unwrap_or(0)
    }

    fn build(&self, inputs: BuildInputs<'_>) -> (PolicyIndex, BuildReport) {
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut names: Vec<String> = inputs.lists.keys().cloned().collect();
        names.sort();
        *self
            .last_lists
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = names;
        let (inactive, next_change) = self
            .schedule
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        (
            PolicyIndex::default(),
            BuildReport {
                inactive,
                next_change,
                ..BuildReport::default()
            },
        )
    }
}

/// Shared so the manager can move it onto the blocking pool.
pub type SharedEngine = Arc<dyn Engine>;
