//! List pages: one revision for the whole list, pages after the first read as of that revision.
//!
//! A continue token carries the list's revision and the last name sent. The next page reads
//! the current objects after that name and undoes the changes made since (from the watch
//! history), so every page shows the store at the first page's revision; once that history is
//! compacted the token answers Gone, as Kubernetes' does.

use std::collections::BTreeMap;
use std::iter::Peekable;
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::object::Object;
use crate::selector::LabelSelector;

/// Where a page starts: the list's revision and the last name already sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Continue {
    pub(crate) revision: u64,
    pub(crate) after: String,
}

impl Continue {
    pub(crate) fn encode(&self) -> String {
        format!("{}.{}", self.revision, self.after)
    }

    pub(crate) fn decode(token: &str) -> Result<Self> {
        let invalid =
            || StoreError::invalid("continue", format!("{token:?} is not a continue token"));
        let (revision, after) = token.split_once('.').ok_or_else(invalid)?;
        let revision = revision.parse().map_err(|_| invalid())?;
        crate::kind::validate_name(after).map_err(|_| invalid())?;
        Ok(Self {
            revision,
            after: after.to_owned(),
        })
    }
}

/// Builds one page from the current objects after the start name (in name order) and `undo`
/// (name → the object at the list's revision).
pub(crate) fn page(
    current: impl Iterator<Item = Result<Object>>,
    undo: BTreeMap<String, Option<Arc<Object>>>,
    selector: &LabelSelector,
    limit: usize,
    revision: u64,
) -> Result<(Vec<Object>, Option<String>)> {
    let mut current = current.peekable();
    let mut undo = undo.into_iter().peekable();
    let mut items = Vec::new();
    loop {
        if limit > 0 && items.len() == limit {
            let more = peek_name(&mut current)?.is_some() || undo.peek().is_some();
            let token = items.last().filter(|_| more).map(|last: &Object| {
                Continue {
                    revision,
                    after: last.metadata.name.clone(),
                }
                .encode()
            });
            return Ok((items, token));
        }
        let next = match (peek_name(&mut current)?, undo.peek().map(|(name, _)| name)) {
            (None, None) => return Ok((items, None)),
            (Some(name), Some(undone)) if name == *undone => {
                current.next();
                undo.next().and_then(|(_, then)| then.map(unwrap_arc))
            }
            (Some(name), Some(undone)) if name > *undone => {
                undo.next().and_then(|(_, then)| then.map(unwrap_arc))
            }
            (Some(_), _) => current.next().transpose()?,
            (None, Some(_)) => undo.next().and_then(|(_, then)| then.map(unwrap_arc)),
        };
        if let Some(object) = next
            && selector.matches(&object.metadata.labels)
        {
            items.push(object);
        }
    }
}

fn peek_name<I: Iterator<Item = Result<Object>>>(
    current: &mut Peekable<I>,
) -> Result<Option<String>> {
    match current.peek() {
        None => Ok(None),
        Some(Ok(object)) => Ok(Some(object.metadata.name.clone())),
        Some(Err(_)) => match current.next() {
            Some(Err(error)) => Err(error),
            _ => Ok(None),
        },
    }
}

fn unwrap_arc(object: Arc<Object>) -> Object {
    Arc::try_unwrap(object).unwrap_or_else(|shared| (*shared).clone())
}
