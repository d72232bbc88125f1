//! The objects kudurru keeps in its store (`kudurru-storage`): which kinds exist, the URL
//! path each is served under, who may write it, and the store the control thread opens.
//!
//! ```text
//! /api/v1/{resource}[/{name}[/status]] ─▶ Resource (kind, who writes) ─▶ Store (redb | memory)
//! ```
//! Kinds arrive with their features (block lists, policies, zones); each registers its spec
//! validator here and gets its routes, permissions and OpenAPI entry from this table.

pub mod cli;
pub mod kinds;
pub mod routes;

use std::path::Path;
use std::sync::Arc;

use kudurru_storage::{
    AuditLog, BodyCache, KindRegistry, MemoryStore, RedbStore, Store, StoreError, StoreOptions,
};

use crate::tokens::Permission;

/// A store with its audit log and list-body cache: what every driver provides.
pub trait ObjectStore: Store + AuditLog + BodyCache {}

impl<T: Store + AuditLog + BodyCache> ObjectStore for T {}

/// One kind as the API serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    /// The kind (`ClientGroup`).
    pub kind: &'static str,
    /// Its path segment under `/api/v1/` (`clientgroups`), as Kubernetes names resources.
    pub plural: &'static str,
    /// Who may create, change and delete it.
    pub write: Permission,
    /// One line for the OpenAPI document.
    pub summary: &'static str,
    /// Names an object of this kind may not take (built-in ones).
    pub reserved: &'static [&'static str],
}

/// Every kind, in documentation order.
pub const RESOURCES: &[Resource] = &[
    Resource {
        kind: kinds::CLIENT_GROUP,
        plural: "clientgroups",
        write: Permission::ObjectsWrite,
        summary: "Clients by address, prefix or client ID (DoH path, TLS SNI), for policies",
        reserved: kinds::RESERVED_GROUP_NAMES,
    },
    Resource {
        kind: kinds::BLOCK_LIST,
        plural: "blocklists",
        write: Permission::ObjectsWrite,
        summary: "Block or allow lists: url, file or inline sources in hosts, domains, adblock, wildcard or RPZ syntax",
        reserved: &[],
    },
    Resource {
        kind: kinds::POLICY,
        plural: "policies",
        write: Permission::ObjectsWrite,
        summary: "Client groups to deny and allow lists, block answers, rewrites and schedules",
        reserved: &[],
    },
    Resource {
        kind: kinds::ZONE,
        plural: "zones",
        write: Permission::ObjectsWrite,
        summary: "Local zones: primary (zone file and RecordSets), secondary (transferred) or forward (own upstreams)",
        reserved: &[],
    },
    Resource {
        kind: kinds::RECORD_SET,
        plural: "recordsets",
        write: Permission::ObjectsWrite,
        summary: "One RRset of a primary zone (owner, type, TTL, rdata), overlaid on its zone file",
        reserved: &[],
    },
];

/// The resource served under `plural`.
pub fn resource(plural: &str) -> Option<&'static Resource> {
    RESOURCES.iter().find(|r| r.plural == plural)
}

/// The resource of `kind`.
pub fn resource_of_kind(kind: &str) -> Option<&'static Resource> {
    RESOURCES.iter().find(|r| r.kind == kind)
}

/// The kinds the store accepts, with their validators.
pub fn registry() -> Arc<KindRegistry> {
    let mut registry = KindRegistry::new();
    for schema in kinds::SCHEMAS {
        registry
            .register(*schema)
            .expect("built-in kind names are CamelCase");
    }
    registry.into_shared()
}

/// The node's store: `objects.redb` in `data_dir`, or memory when `ephemeral`.
pub fn open_store(data_dir: &Path, ephemeral: bool) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let options = StoreOptions::new(registry());
    if ephemeral {
        return Ok(Arc::new(MemoryStore::new(options)));
    }
    Ok(Arc::new(RedbStore::open(data_dir, options)?))
}

/// How long the etcd driver waits for a connection to an endpoint.
pub const ETCD_DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long one etcd call of the store may take before it answers `Unavailable` (the API: 503).
pub const ETCD_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens the fleet's object store on etcd (`cluster.driver = etcd`); fails with
/// `StoreError::Unavailable` when etcd does not answer within the timeouts.
pub fn open_etcd_store(
    settings: &crate::config::EtcdCluster,
) -> Result<Arc<kudurru_storage::EtcdStore>, StoreError> {
    let tls = settings
        .endpoints
        .iter()
        .any(|e| e.starts_with("https://"))
        .then(|| kudurru_storage::EtcdTls {
            ca_file: settings.ca_file.clone().unwrap_or_default(),
            cert_file: settings.client_pair.as_ref().map(|(cert, _)| cert.clone()),
            key_file: settings.client_pair.as_ref().map(|(_, key)| key.clone()),
        });
    let options = kudurru_storage::EtcdOptions {
        endpoints: settings.endpoints.clone(),
        prefix: settings.name.clone(),
        tls,
        dial_timeout: ETCD_DIAL_TIMEOUT,
        request_timeout: ETCD_REQUEST_TIMEOUT,
    };
    Ok(Arc::new(kudurru_storage::EtcdStore::connect(
        options,
        StoreOptions::new(registry()),
    )?))
}

/// How often the audit log is pruned (besides once at start).
pub const AUDIT_PRUNE_PERIOD: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Removes audit records older than `retention`, now and every [`AUDIT_PRUNE_PERIOD`], on the
/// blocking pool, while `leading` is true (in a fleet only the leader prunes; a node that
/// becomes leader prunes at once); runs until the runtime ends.
pub async fn prune_audit(
    store: Arc<dyn ObjectStore>,
    retention: std::time::Duration,
    mut leading: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if leading.wait_for(|leads| *leads).await.is_err() {
            return;
        }
        let store = store.clone();
        let pruned = tokio::task::spawn_blocking(move || {
            let cutoff = kudurru_storage::Timestamp::now().unix_millis()
                - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
            store.audit_prune(kudurru_storage::Timestamp::from_unix_millis(cutoff))
        })
        .await;
        match pruned {
            Ok(Ok(report)) if report.removed > 0 => tracing::info!(
                removed = report.removed,
                anchor = report.anchor_seq,
                retention = %humantime::format_duration(retention),
                "audit records past their retention removed"
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "the audit log could not be pruned"),
            Err(e) => tracing::error!(error = %e, "the audit prune task failed"),
        }
        // The next period, or sooner when leadership is lost (and later regained).
        let lost = leading.wait_for(|leads| !*leads);
        tokio::select! {
            () = tokio::time::sleep(AUDIT_PRUNE_PERIOD) => {}
            _ = lost => {}
        }
    }
}

/// How often watches that asked for bookmarks get one (Kubernetes sends them about once a
/// minute), so a client watching a quiet kind keeps a fresh resourceVersion to resume from.
pub const BOOKMARK_PERIOD: std::time::Duration = std::time::Duration::from_secs(60);

/// Sends a BOOKMARK to every watch that asked for them every [`BOOKMARK_PERIOD`].
pub async fn bookmarks(store: Arc<dyn ObjectStore>) {
    let mut tick = tokio::time::interval(BOOKMARK_PERIOD);
    tick.tick().await;
    loop {
        tick.tick().await;
        let store = store.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || store.progress_notify()).await {
            tracing::warn!(error = %e, "watch bookmarks could not be sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resource_names_a_registered_kind_and_a_lowercase_plural() {
        let registry = registry();
        for r in RESOURCES {
            assert!(registry.schema(r.kind).is_ok(), "{}", r.kind);
            assert_eq!(r.plural, r.plural.to_ascii_lowercase());
            assert_eq!(resource(r.plural), Some(r));
            assert_eq!(resource_of_kind(r.kind), Some(r));
        }
    }
}
