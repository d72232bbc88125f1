//! Block lists on the control thread (issue 34): fetching list bodies over http(s) and from
//! files, with conditional requests, size and time limits, and a retry and cooldown schedule
//! per source. Parsing and matching are sans-IO and live in `kudurru-core`'s policy module;
//! the last fetched bodies are kept in `kudurru-storage`'s list-body cache.

pub mod fetch;
