//! etcd-only rules.
