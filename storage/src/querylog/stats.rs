//! Statistics from the rollups: a series of buckets aligned to the step (minute rollups for
//! steps under an hour, hour rollups otherwise) and top lists merged over the range.

use std::collections::HashMap;

use redb::{ReadableDatabase, ReadableTable};

use super::codec::Rollup;
use super::{
    Bucket, DICT_REV, HOUR_NS, HOURS, MINUTE_NS, MINUTES, QueryLogDb, Stats, corrupt,
    dictionary_string,
};
use crate::error::StorageError;

/// The most buckets one stats call returns.
pub(super) const MAX_BUCKETS: u64 = 100_000;

impl QueryLogDb {
    /// The rollups from `from_ns` to `to_ns` in buckets of `step_ns` (a minute or more; hour
    /// rollups serve steps of an hour or more), with top lists of at most `top` entries.
    /// Buckets start at multiples of the step; every bucket of the range is in the series,
    /// empty ones included. A rollup bucket counts in the step bucket its start falls in.
    pub fn stats(
        &self,
        from_ns: u64,
        to_ns: u64,
        step_ns: u64,
        top: usize,
    ) -> Result<Stats, StorageError> {
        if step_ns < MINUTE_NS {
            return Err(StorageError::InvalidArgument {
                argument: "step",
                reason: format!("{step_ns} ns is under a minute (the finest rollup)"),
            });
        }
        if from_ns >= to_ns {
            return Ok(Stats::default());
        }
        let first = from_ns - from_ns % step_ns;
        let buckets = (to_ns - first).div_ceil(step_ns);
        if buckets > MAX_BUCKETS {
            return Err(StorageError::InvalidArgument {
                argument: "step",
                reason: format!(
                    "the range holds {buckets} steps, more than {MAX_BUCKETS}; use a longer step"
                ),
            });
        }
        let mut series: Vec<Bucket> = (0..buckets)
            .map(|bucket| Bucket {
                start_ns: first + bucket * step_ns,
                ..Bucket::default()
            })
            .collect();
        let (definition, table_name, width) = if step_ns < HOUR_NS {
            (MINUTES, "minutes", MINUTE_NS)
        } else {
            (HOURS, "hours", HOUR_NS)
        };
        let transaction = self.database.begin_read()?;
        let table = transaction.open_table(definition)?;
        let mut names: HashMap<u32, u64> = HashMap::new();
        let mut blocked_names: HashMap<u32, u64> = HashMap::new();
        let mut clients: HashMap<u32, u64> = HashMap::new();
        let start = from_ns - from_ns % width;
        for item in table.range(start..to_ns)? {
            let (key, value) = item?;
            let bucket_start = key.value();
            let rollup = Rollup::decode(value.value())
                .map_err(|reason| corrupt(table_name, bucket_start, reason))?;
            let position = (bucket_start.max(first) - first) / step_ns;
            let Some(bucket) = usize::try_from(position)
                .ok()
                .and_then(|position| series.get_mut(position))
            else {
                continue;
            };
            bucket.queries += rollup.queries;
            bucket.blocked += rollup.blocked;
            bucket.cache_hits += rollup.cache_hits;
            for (code, count) in rollup.by_rcode {
                let rcode =
                    match code {
                        0 => None,
                        code => Some(u16::try_from(code - 1).map_err(|_| {
                            corrupt(table_name, bucket_start, "rcode exceeds 16 bits")
                        })?),
                    };
                *bucket.by_rcode.entry(rcode).or_default() += count;
            }
            for (list, merged) in [
                (rollup.names, &mut names),
                (rollup.blocked_names, &mut blocked_names),
                (rollup.clients, &mut clients),
            ] {
                for (id, count) in list {
                    *merged.entry(id).or_default() += count;
                }
            }
        }
        let reverse = transaction.open_table(DICT_REV)?;
        let resolve = |merged: HashMap<u32, u64>| -> Result<Vec<(String, u64)>, StorageError> {
            let mut list: Vec<(u32, u64)> = merged.into_iter().collect();
            list.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            list.truncate(top);
            list.into_iter()
                .map(|(id, count)| Ok((dictionary_string(&reverse, id)?, count)))
                .collect()
        };
        Ok(Stats {
            series,
            top_names: resolve(names)?,
            top_blocked: resolve(blocked_names)?,
            top_clients: resolve(clients)?,
        })
    }
}
