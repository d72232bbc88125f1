//! The blocking metrics: per-list gauges the manager sets, and the blocked-query counters of
//! the policy index. The cores count on the index they answered from; an index replaced by a
//! newer one is kept here until no core holds it any more, then its counts are folded into a
//! base, so `kudurru_blocked_total` never goes back when the index is rebuilt.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use kudurru_core::policy::PolicyIndex;

/// One list's gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListGauges {
    /// Entries in the matcher.
    pub entries: u64,
    /// Unix seconds of the last successful refresh.
    pub last_refresh: Option<i64>,
    /// Failed fetches and reads since the process started.
    pub refresh_errors: u64,
    /// Whether the list is degraded.
    pub degraded: bool,
}

/// The blocking metrics.
#[derive(Debug, Default)]
pub struct BlockingMetrics {
    lists: Mutex<BTreeMap<String, ListGauges>>,
    /// Replaced indexes a core may still count on.
    retired: Mutex<Vec<Arc<PolicyIndex>>>,
    /// Counts of indexes no one holds any more, by (policy, list).
    base: Mutex<BTreeMap<(String, String), u64>>,
}

/// A gauge family: name, type, help, and each list's value (`None`: no sample).
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ListGauges) -> Option<String>,
);

/// `(policy, list)` → blocked queries.
type Counts = BTreeMap<(String, String), u64>;

fn add(into: &mut Counts, index: &PolicyIndex) {
    // An index with no policy in effect never blocked anything (and a default one has no
    // counters to read).
    if index.is_empty() {
        return;
    }
    for (policy, list, count) in index.counts() {
        *into
            .entry((policy.to_owned(), list.to_owned()))
            .or_default() += count;
    }
}

impl BlockingMetrics {
    /// Replaces the per-list gauges.
    pub fn set_lists(&self, lists: BTreeMap<String, ListGauges>) {
        *self.lists.lock().unwrap_or_else(PoisonError::into_inner) = lists;
    }

    /// The per-list gauges.
    pub fn lists(&self) -> BTreeMap<String, ListGauges> {
        self.lists
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Keeps `index`, just replaced, until no core holds it.
    pub fn retire(&self, index: Arc<PolicyIndex>) {
        self.fold();
        self.retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(index);
    }

    /// Folds the counts of retired indexes only this holds into the base, freeing them.
    pub fn fold(&self) {
        let mut retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        let mut base = self.base.lock().unwrap_or_else(PoisonError::into_inner);
        retired.retain(|index| {
            if Arc::strong_count(index) > 1 {
                return true;
            }
            add(&mut base, index);
            false
        });
    }

    /// Blocked queries by (policy, list): the base, the retired indexes and `current`.
    pub fn blocked(&self, current: &PolicyIndex) -> Counts {
        self.fold();
        let mut counts = self
            .base
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for index in self
            .retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            add(&mut counts, index);
        }
        add(&mut counts, current);
        counts
    }

    /// The Prometheus text of every blocking metric.
    pub fn render(&self, current: &PolicyIndex, out: &mut String) {
        let head = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        head(
            out,
            "kudurru_blocked_total",
            "counter",
            "Queries blocked or rewritten by a policy, by policy and the list whose rule decided (list=\"rewrite\" for the policy's rewrites).",
        );
        for ((policy, list), count) in self.blocked(current) {
            let _ = writeln!(
                out,
                "kudurru_blocked_total{{policy=\"{policy}\",list=\"{list}\"}} {count}"
            );
        }
        let lists = self.lists();
        let gauges: [Family; 4] = [
            (
                "kudurru_blocklist_entries",
                "gauge",
                "Entries of each enabled block list in the compiled matcher (its last good copy).",
                |g| Some(g.entries.to_string()),
            ),
            (
                "kudurru_blocklist_last_refresh_seconds",
                "gauge",
                "Unix time of each block list's last successful refresh (a body or a 304).",
                |g| g.last_refresh.map(|t| t.to_string()),
            ),
            (
                "kudurru_blocklist_refresh_errors_total",
                "counter",
                "Failed fetches and file reads of each block list's sources.",
                |g| Some(g.refresh_errors.to_string()),
            ),
            (
                "kudurru_blocklist_degraded",
                "gauge",
                "1 while a block list is degraded (its last refresh failed or was empty; the last good copy stays in effect), else 0.",
                |g| Some(u8::from(g.degraded).to_string()),
            ),
        ];
        for (name, kind, help, value) in gauges {
            head(out, name, kind, help);
            for (list, gauge) in &lists {
                if let Some(value) = value(gauge) {
                    let _ = writeln!(out, "{name}{{list=\"{list}\"}} {value}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_rendered_per_list() {
        let metrics = BlockingMetrics::default();
        metrics.set_lists(BTreeMap::from([(
            "ads".to_owned(),
            ListGauges {
                entries: 12,
                last_refresh: Some(1_700_000_000),
                refresh_errors: 2,
                degraded: true,
            },
        )]));
        let mut out = String::new();
        metrics.render(&PolicyIndex::default(), &mut out);
        for line in [
            "# TYPE kudurru_blocked_total counter",
            "kudurru_blocklist_entries{list=\"ads\"} 12",
            "kudurru_blocklist_last_refresh_seconds{list=\"ads\"} 1700000000",
            "kudurru_blocklist_refresh_errors_total{list=\"ads\"} 2",
            "kudurru_blocklist_degraded{list=\"ads\"} 1",
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }
    }

    #[test]
    fn retired_indexes_are_kept_while_a_core_holds_them() {
        let metrics = BlockingMetrics::default();
        let index = Arc::new(PolicyIndex::default());
        let held_by_a_core = index.clone();
        metrics.retire(index);
        metrics.blocked(&PolicyIndex::default());
        assert_eq!(metrics.retired.lock().unwrap().len(), 1);
        drop(held_by_a_core);
        metrics.blocked(&PolicyIndex::default());
        assert!(metrics.retired.lock().unwrap().is_empty());
    }
}
