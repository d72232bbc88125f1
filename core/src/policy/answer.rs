//! Block answers and rewrites, written like every other answer (`wire::start_response` …
//! `finish_response`): the query's ID, question and EDNS handling, never from the cache.

use std::time::Instant;

use crate::answer::CachedAnswer;
use crate::wire::{Query, ReplyOptions};

/// The answer to `query` rewritten to a CNAME: the CNAME from the query's name to `target`
/// (lowercase wire) with `ttl`, then `resolved`'s records for the target (its answer section,
/// TTLs as they are at `now`); `resolved`'s rcode (NXDOMAIN for a target that does not exist,
/// SERVFAIL for a failure, with the CNAME still in the answer as RFC 6604 says).
pub fn write_chased(
    query: &Query<'_>,
    target: &[u8],
    ttl: u32,
    resolved: &CachedAnswer,
    now: Instant,
    options: &ReplyOptions,
    out: &mut Vec<u8>,
) {
    let _ = (query, target, ttl, resolved, now, options, out);
    unimplemented!("policy::answer::write_chased")
}
