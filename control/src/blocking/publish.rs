//! The one place the settings snapshot is stored: the configuration's part (from the settings
//! subscriber), the policy index (from the list manager) and the zones (from the zone manager)
//! are merged here, so a settings
//! reload keeps the compiled lists and a list refresh keeps the settings.
//!
//! ```text
//! settings subscriber ─▶ Publisher::settings_changed ─┐
//!                                                      ├─▶ Settings { .., policy } ──arc-swap──▶ cores
//! list manager ───────▶ Publisher::index_changed ─────┘
//! ```
//! The mutex is held for a clone of the settings and one store: both callers run on the control
//! thread or its blocking pool, never on a core.

use std::sync::{Arc, Mutex, PoisonError};

use kudurru_core::policy::PolicyIndex;
use kudurru_core::zone::Zones;
use kudurru_transports::{Settings, SharedSettings};

/// Merges the configured settings and the policy index into the snapshot the cores read.
pub struct Publisher {
    shared: SharedSettings,
    /// The latest configured settings (their `policy` ignored) and the latest index.
    latest: Mutex<(Settings, Arc<PolicyIndex>, Arc<Zones>)>,
    /// The addresses of host names in upstream URLs ([`crate::bootstrap`]).
    addresses: Mutex<crate::bootstrap::Resolved>,
}

impl Publisher {
    /// A publisher over `shared`, starting from what it holds now.
    pub fn new(shared: SharedSettings) -> Self {
        let current = shared.load_full();
        let index = current.policy.clone();
        let zones = current.zones.clone();
        Self {
            shared,
            latest: Mutex::new(((*current).clone(), index, zones)),
            addresses: Mutex::default(),
        }
    }

    /// New configured settings; the policy index in effect stays.
    pub fn settings_changed(&self, settings: Settings) {
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.0 = settings;
        self.store(&latest);
    }

    /// A new policy index; the configured settings stay.
    pub fn index_changed(&self, index: Arc<PolicyIndex>) {
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.1 = index;
        self.store(&latest);
    }

    /// New zones (the zone manager); the settings and the policy index stay.
    pub fn zones_changed(&self, zones: Arc<Zones>) {
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.2 = zones;
        self.store(&latest);
    }

    /// New addresses of the host names in upstream URLs (the bootstrap resolver); the rest
    /// stays.
    pub fn addresses_changed(&self, addresses: crate::bootstrap::Resolved) {
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        *self
            .addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = addresses;
        self.store(&latest);
    }

    /// The zones the cores read now.
    pub fn zones(&self) -> Arc<Zones> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .2
            .clone()
    }

    /// The index the cores read now.
    pub fn index(&self) -> Arc<PolicyIndex> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .clone()
    }

    /// The snapshot the cores read now.
    pub fn snapshot(&self) -> Arc<Settings> {
        self.shared.load_full()
    }

    fn store(&self, latest: &(Settings, Arc<PolicyIndex>, Arc<Zones>)) {
        let mut snapshot = latest.0.clone();
        snapshot.policy = latest.1.clone();
        snapshot.zones = latest.2.clone();
        let addresses = self
            .addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        crate::bootstrap::apply(&mut snapshot, &addresses);
        self.shared.store(Arc::new(snapshot));
    }
}

#[cfg(test)]
mod tests {
    use arc_swap::ArcSwap;

    use super::*;
    use crate::config::Config;

    fn settings(max_entries: usize) -> Settings {
        let mut settings = Config::default().validate().unwrap().settings;
        settings.cache_max_entries = max_entries;
        settings
    }

    #[test]
    fn a_settings_reload_keeps_the_index_and_a_refresh_keeps_the_settings() {
        let shared: SharedSettings = Arc::new(ArcSwap::from_pointee(settings(10)));
        let publisher = Publisher::new(shared.clone());
        let index = Arc::new(PolicyIndex::default());
        publisher.index_changed(index.clone());
        assert!(Arc::ptr_eq(&shared.load().policy, &index));
        assert_eq!(shared.load().cache_max_entries, 10);

        publisher.settings_changed(settings(20));
        assert_eq!(shared.load().cache_max_entries, 20);
        assert!(
            Arc::ptr_eq(&shared.load().policy, &index),
            "a settings reload keeps the index"
        );

        let refreshed = Arc::new(PolicyIndex::default());
        publisher.index_changed(refreshed.clone());
        assert_eq!(
            shared.load().cache_max_entries,
            20,
            "a refresh keeps the settings"
        );
        assert!(Arc::ptr_eq(&shared.load().policy, &refreshed));
        assert!(Arc::ptr_eq(&publisher.index(), &refreshed));
    }
}
