//! What every block-list parser target checks (included by each `blocklist_*` target).
//!
//! The first byte chooses the entry limit (high bit set: `byte & 0x3f` rules; else none), the
//! rest is the list body. Invariants: the parser never panics; every rule names a valid
//! lowercase wire name; the counts agree with the rules and samples; local-data indexes point
//! at local data; and a matcher built from the parse finds every Exact or Subtree rule's name
//! as that rule says: an allow rule's name is allowed, a blocking rule's name is blocked
//! (at the name itself) unless an allow rule covers it; an allow role allows every one of
//! them, an unused role none.

use std::collections::HashSet;

use kudurru_core::policy::{
    self, Action, Format, INVALID_SAMPLES, ListId, ListMode, Matcher, Role, Scope,
};

pub fn check(data: &[u8], format: Format) {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let max_rules = if first & 0x80 != 0 {
        usize::from(first & 0x3f)
    } else {
        usize::MAX
    };
    let list = policy::parse(body, format, max_rules);
    let stats = &list.stats;
    if format != Format::Auto {
        assert_eq!(stats.format, Some(format));
    }
    assert!(stats.format.is_some_and(|f| f != Format::Auto));
    assert_eq!(stats.rules, list.rules.len() as u64);
    assert!(list.rules.len() <= max_rules);
    if max_rules == usize::MAX {
        assert_eq!(stats.truncated, 0);
    }
    assert!(stats.samples.len() <= INVALID_SAMPLES);
    assert!(stats.samples.len() as u64 <= stats.invalid);
    assert!(stats.invalid <= stats.lines);
    let mut last = 0;
    for sample in &stats.samples {
        assert!(
            sample.line >= 1 && u64::from(sample.line) <= stats.lines,
            "{sample:?}"
        );
        assert!(sample.line >= last, "samples in line order");
        last = sample.line;
        assert!(sample.text.len() <= 200);
        assert!(!sample.reason.is_empty());
    }
    for rule in &list.rules {
        assert!(policy::name::is_lowercase_wire(&rule.name), "{rule:?}");
        if let Action::LocalData(index) = rule.action {
            assert!((index as usize) < list.local_data.len(), "{rule:?}");
        }
    }
    for data in &list.local_data {
        assert!(!data.records.is_empty());
    }

    let matcher = Matcher::new(0x5eed).with_list(ListId(3), ListMode::Deny, &list);
    let kinds: HashSet<(&[u8], u8, u8)> = list
        .rules
        .iter()
        .map(|r| (&*r.name, scope_code(r.scope), action_code(r.action)))
        .collect();
    assert_eq!(
        matcher.entries(ListId(3)),
        kinds.len(),
        "duplicates count once"
    );
    let deny = [Role::Unused, Role::Unused, Role::Unused, Role::Deny];
    let allow = [Role::Unused, Role::Unused, Role::Unused, Role::Allow];
    let allows: HashSet<(&[u8], u8)> = list
        .rules
        .iter()
        .filter(|r| r.action == Action::Allow)
        .map(|r| (&*r.name, scope_code(r.scope)))
        .collect();
    for rule in list.rules.iter().take(512) {
        if rule.scope == Scope::Below {
            continue;
        }
        let hit = matcher
            .lookup(&rule.name, &deny)
            .unwrap_or_else(|| panic!("{rule:?} is not found"));
        assert_eq!(hit.list, ListId(3));
        let allowed = covered_by_allow(&rule.name, &allows);
        assert_eq!(hit.action == Action::Allow, allowed, "{rule:?} → {hit:?}");
        if !allowed {
            assert_eq!(
                hit.suffix_at, 0,
                "the most specific deny is the name itself"
            );
        }
        let as_allow = matcher.lookup(&rule.name, &allow).expect("found");
        assert_eq!(as_allow.action, Action::Allow);
        assert!(matcher.lookup(&rule.name, &[]).is_none());
    }
}

fn scope_code(scope: Scope) -> u8 {
    match scope {
        Scope::Exact => 0,
        Scope::Subtree => 1,
        Scope::Below => 2,
    }
}

fn action_code(action: Action) -> u8 {
    match action {
        Action::Deny => 0,
        Action::Allow => 1,
        Action::Nxdomain => 2,
        Action::Nodata => 3,
        Action::Drop => 4,
        Action::LocalData(_) => 5,
    }
}

/// Whether an allow rule covers `name`: an Exact or Subtree one for the name itself, a
/// Subtree or Below one for a proper suffix of it.
fn covered_by_allow(name: &[u8], allows: &HashSet<(&[u8], u8)>) -> bool {
    let mut at = 0;
    loop {
        let suffix = &name[at..];
        if at == 0 {
            if allows.contains(&(suffix, 0)) || allows.contains(&(suffix, 1)) {
                return true;
            }
        } else if allows.contains(&(suffix, 1)) || allows.contains(&(suffix, 2)) {
            return true;
        }
        let len = usize::from(name[at]);
        if len == 0 {
            return false;
        }
        at += 1 + len;
    }
}
