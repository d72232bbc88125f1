//! Deleting facts: `purge` (everything before a time) and `prune` (retention by age, global
//! and per group, then by size). Each write transaction deletes at most `batch` facts and
//! their index entries, so the writer waits at most one such transaction; rollups and
//! dictionaries stay.

use redb::{Durability, ReadableDatabase, ReadableTable};

use super::write::{Tables, oldest};
use super::{
    DICT, QueryLogDb, Retention, cursor_of, dict_kind, index_cursor, index_key, index_kind,
};
use crate::error::StorageError;

impl QueryLogDb {
    /// Deletes facts older than `before_ns` (0: all) in transactions of at most `batch`,
    /// keeping rollups and dictionaries; the number deleted.
    pub fn purge(&self, before_ns: u64, batch: usize) -> Result<u64, StorageError> {
        let end = if before_ns == 0 {
            u128::MAX
        } else {
            cursor_of(before_ns, 0)
        };
        let mut deleted = 0;
        loop {
            let done = self.delete_oldest(end, batch)?;
            deleted += done as u64;
            if done < batch.max(1) {
                return Ok(deleted);
            }
        }
    }

    /// One transaction: deletes the oldest facts before `end`, at most `batch`.
    fn delete_oldest(&self, end: u128, batch: usize) -> Result<usize, StorageError> {
        let mut transaction = self.database.begin_write()?;
        transaction.set_durability(Durability::Immediate)?;
        let done = {
            let mut tables = Tables::open(&transaction)?;
            let found = oldest(&tables.facts, 0..end, batch.max(1))?;
            for (cursor, value) in &found {
                tables.delete_fact(*cursor, value)?;
            }
            tables.finish()?;
            found.len()
        };
        transaction.commit()?;
        Ok(done)
    }

    /// Applies `retention` at `now_ns`: at most `batch` facts per transaction; the number
    /// deleted. By age first, each group with its own limit (or the global one) through the
    /// group index; then by size, the oldest facts until [`QueryLogDb::used_bytes`] is at
    /// most `max_bytes`.
    pub fn prune(
        &self,
        retention: &Retention,
        now_ns: u64,
        batch: usize,
    ) -> Result<u64, StorageError> {
        let batch = batch.max(1);
        let mut deleted = 0;
        for (group, name) in self.groups()? {
            let max_age = retention
                .group_max_age_ns
                .get(&name)
                .copied()
                .unwrap_or(retention.max_age_ns);
            if max_age == 0 || max_age >= now_ns {
                continue;
            }
            let end = cursor_of(now_ns - max_age, 0);
            loop {
                let done = self.delete_group_before(group, end, batch)?;
                deleted += done as u64;
                if done < batch {
                    break;
                }
            }
        }
        if retention.max_bytes > 0 {
            while self.used_bytes()? > retention.max_bytes && !self.is_empty()? {
                let done = self.delete_oldest(u128::MAX, batch)?;
                deleted += done as u64;
                if done == 0 {
                    break;
                }
            }
        }
        Ok(deleted)
    }

    /// Every group in the dictionary, and the empty group (id 0).
    fn groups(&self) -> Result<Vec<(u32, String)>, StorageError> {
        let transaction = self.database.begin_read()?;
        let dict = transaction.open_table(DICT)?;
        let mut groups = vec![(0, String::new())];
        let (start, end) = ([dict_kind::GROUP], [dict_kind::GROUP + 1]);
        for item in dict.range(start.as_slice()..end.as_slice())? {
            let (key, id) = item?;
            let name = String::from_utf8_lossy(key.value().get(1..).unwrap_or_default());
            groups.push((id.value(), name.into_owned()));
        }
        Ok(groups)
    }

    /// One transaction: deletes the oldest facts of `group` before `end`, at most `batch`.
    fn delete_group_before(
        &self,
        group: u32,
        end: u128,
        batch: usize,
    ) -> Result<usize, StorageError> {
        let mut transaction = self.database.begin_write()?;
        transaction.set_durability(Durability::Immediate)?;
        let done = {
            let mut tables = Tables::open(&transaction)?;
            let cursors: Vec<u128> = {
                let range = index_key(index_kind::GROUP, group, 0)
                    ..index_key(index_kind::GROUP, group, end);
                let mut cursors = Vec::with_capacity(batch.min(4096));
                for item in tables.index.range(range)?.take(batch) {
                    cursors.push(index_cursor(&item?.0.value()));
                }
                cursors
            };
            for &cursor in &cursors {
                let value = tables
                    .facts
                    .get(cursor)?
                    .map(|value| value.value().to_vec());
                match value {
                    Some(value) => tables.delete_fact(cursor, &value)?,
                    // A dangling group entry (its fact deleted while damaged): drop it.
                    None => {
                        tables
                            .index
                            .remove(index_key(index_kind::GROUP, group, cursor))?;
                    }
                }
            }
            tables.finish()?;
            cursors.len()
        };
        transaction.commit()?;
        Ok(done)
    }
}
