//! The objects kudurru keeps in its store (`kudurru-storage`): which kinds exist, the URL
//! path each is served under, who may write it, and the store the control thread opens.
//!
//! ```text
//! /api/v1/{resource}[/{name}[/status]] ─▶ Resource (kind, who writes) ─▶ Store (redb | memory)
//! ```
//! Kinds arrive with their features (block lists, policies, zones); each registers its spec
//! validator here and gets its routes, permissions and OpenAPI entry from this table.

mod kinds;
pub mod routes;

use std::path::Path;
use std::sync::Arc;

use kudurru_storage::{
    AuditLog, KindRegistry, MemoryStore, RedbStore, Store, StoreError, StoreOptions,
};

use crate::tokens::Permission;

/// A store with its audit log: what every driver provides.
pub trait ObjectStore: Store + AuditLog {}

impl<T: Store + AuditLog> ObjectStore for T {}

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
}

/// Every kind, in documentation order.
pub const RESOURCES: &[Resource] = &[Resource {
    kind: kinds::CLIENT_GROUP,
    plural: "clientgroups",
    write: Permission::ObjectsWrite,
    summary: "Clients by address, prefix or client ID (DoH path, TLS SNI), for policies",
}];

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
