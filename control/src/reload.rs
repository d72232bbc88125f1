//! The effective configuration behind an atomic pointer and its subscribers.
//!
//! ```text
//! settings file changed (watch::FileWatcher), SIGHUP, or PATCH ─▶ read + layer + validate
//!                                                            │ invalid: log file/key/line, keep last good
//!                                                            ▼
//!             restart-bound keys keep their running values (logged) ─▶ swap ─▶ subscribers, in order
//! ```
//! Everything here runs on the control thread or its blocking pool; the cores only ever see
//! the settings snapshot a subscriber publishes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::{self, Config, ConfigError, Validated};
use crate::layers::{FileLayer, Inputs, Sources};

/// Keys that apply without a restart; every other key is `restartRequired`. Each has a
/// subscriber in `serve` (a test pins this list against the key table).
pub const HOT_KEYS: &[&str] = &[
    "upstreams",
    "cache.maxEntries",
    "cache.minTTL",
    "cache.maxTTL",
    "cache.negativeMaxTTL",
    "cache.servfailTTL",
    "cache.serveStale",
    "cache.staleMaxAge",
    "cache.prefetch",
    "upstream.strategy",
    "upstream.bootstrap",
    "upstream.idleTimeout",
    "upstream.healthCheckInterval",
    "upstream.staleAnswerTimeout",
    "upstream.padding",
    "upstream.loopProbe",
    "upstream.tls.caFile",
    "upstream.tls.pins",
    "ratelimit.qps",
    "ratelimit.burst",
    "ratelimit.slip",
    "ratelimit.allowlist",
    "server.allow",
    "server.deny",
    "server.aclAction",
    "blocking.blockTTL",
    "blocking.refreshInterval",
    "blocking.allowDegraded",
    "blocking.clientIdDomains",
    "blocking.maxListBytes",
    "blocking.maxListEntries",
    "blocking.fetchTimeout",
    "zones.journalSize",
    "zones.maxRecords",
    "querylog.privacy",
    "querylog.retention",
    "querylog.maxBytes",
    "querylog.pseudonymRotation",
    "log.level",
    // Read at each sign-in from the running configuration: no subscriber needed.
    "api.sessionTTL",
];

/// What is running now.
#[derive(Debug, Clone)]
pub struct Running {
    /// The effective configuration.
    pub config: Config,
    /// Where each value came from.
    pub sources: Sources,
    /// Its validated form.
    pub validated: Validated,
    /// SHA-256 of the settings file this was built from (`None`: no settings file).
    pub settings_sha256: Option<[u8; 32]>,
}

/// One applied change, handed to every subscriber.
pub struct Change<'a> {
    /// Before.
    pub old: &'a Running,
    /// After.
    pub new: &'a Running,
    /// Hot keys whose value changed.
    pub keys: &'a [&'static str],
}

type Subscriber = Box<dyn Fn(&Change<'_>) + Send + Sync>;

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ReloadStats {
    /// Settings-file reloads applied (something changed).
    pub applied: AtomicU64,
    /// Reloads refused: the file did not parse or validate (the last good settings stay).
    pub rejected: AtomicU64,
    /// Why the last reload was refused; cleared by the next good one.
    pub last_error: Mutex<Option<String>>,
    /// Restart-bound keys whose configured value differs from the running one.
    pub pending_restart: Mutex<Vec<&'static str>>,
}

/// The effective configuration and what to tell when it changes.
pub struct Reloadable {
    inputs: Inputs,
    /// The settings layer last applied (the file, or the API's in-memory document when there
    /// is no file) and the API's node-scope changes.
    overlays: Mutex<(Option<FileLayer>, Option<FileLayer>)>,
    current: ArcSwap<Running>,
    /// Held while a change is layered, swapped in and told: a file reload and an API change
    /// arrive on different threads of the blocking pool and must not interleave.
    applying: Mutex<()>,
    /// Restart-bound keys and the values already logged as waiting for a restart.
    announced: Mutex<Vec<(&'static str, String)>>,
    subscribers: Mutex<Vec<(&'static str, Subscriber)>>,
    /// Counters.
    pub stats: Arc<ReloadStats>,
}

impl Reloadable {
    /// Layers `inputs` over the settings file they name; any error is fatal at start.
    pub fn start(inputs: Inputs) -> Result<Self, ConfigError> {
        let settings = inputs.read_settings()?;
        let (config, sources) = inputs.layer(settings.as_ref())?;
        let validated = config.validate()?;
        Ok(Self {
            inputs,
            current: ArcSwap::from_pointee(Running {
                config,
                sources,
                validated,
                settings_sha256: settings.as_ref().map(|s| s.sha256),
            }),
            overlays: Mutex::new((settings, None)),
            applying: Mutex::new(()),
            announced: Mutex::new(Vec::new()),
            subscribers: Mutex::new(Vec::new()),
            stats: Arc::default(),
        })
    }

    /// The running configuration.
    pub fn current(&self) -> Arc<Running> {
        self.current.load_full()
    }

    /// The settings file being watched, if any.
    pub fn settings_path(&self) -> Option<PathBuf> {
        self.inputs.settings_path().ok().flatten()
    }

    /// Adds a subscriber; subscribers run in registration order.
    pub fn subscribe(&self, name: &'static str, f: impl Fn(&Change<'_>) + Send + Sync + 'static) {
        self.subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((name, Box::new(f)));
    }

    /// Re-reads the settings file and applies it; an invalid file is logged and changes
    /// nothing. Returns the hot keys that changed.
    pub fn reload_settings(&self) -> Vec<&'static str> {
        let result = self
            .inputs
            .read_settings()
            .and_then(|file| self.apply(file.as_ref()));
        match result {
            Ok(keys) => {
                *lock(&self.stats.last_error) = None;
                keys
            }
            Err(e) => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                *lock(&self.stats.last_error) = Some(e.to_string());
                tracing::error!(error = %e, "settings not applied; the last good settings stay");
                Vec::new()
            }
        }
    }

    /// Applies `settings` as the settings layer. Restart-bound keys keep their running values
    /// (a change to one is logged as taking effect after a restart).
    pub fn apply(&self, settings: Option<&FileLayer>) -> Result<Vec<&'static str>, ConfigError> {
        let _applying = lock(&self.applying);
        let node = self.overlays().1;
        self.apply_layers(settings, node.as_ref())
    }

    /// The settings layer and node overrides in effect.
    pub fn overlays(&self) -> (Option<FileLayer>, Option<FileLayer>) {
        self.overlays
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Checks what `settings` and `node` would give, without applying anything.
    pub fn check(
        &self,
        settings: Option<&FileLayer>,
        node: Option<&FileLayer>,
    ) -> Result<Config, ConfigError> {
        let (config, _) = self.inputs.layer_with(settings, node)?;
        config.validate()?;
        Ok(config)
    }

    /// Applies new node-scope overrides (the API's `PATCH /node/config`).
    pub fn apply_node(&self, node: FileLayer) -> Result<Vec<&'static str>, ConfigError> {
        let _applying = lock(&self.applying);
        let settings = self.overlays().0;
        self.apply_layers(settings.as_ref(), Some(&node))
    }

    fn apply_layers(
        &self,
        settings: Option<&FileLayer>,
        node: Option<&FileLayer>,
    ) -> Result<Vec<&'static str>, ConfigError> {
        let old = self.current();
        let (mut config, mut sources) = self.inputs.layer_with(settings, node)?;
        // The whole file must be valid, restart-bound keys included.
        config.validate()?;
        let mut hot = Vec::new();
        let mut pending = Vec::new();
        let mut announced = lock(&self.announced);
        let mut still_announced = Vec::new();
        for key in config::keys() {
            if same_value(key, &key.get(&config), &key.get(&old.config)) {
                continue;
            }
            if key.restart_required {
                let wanted = (key.key, key.get(&config));
                // Said once per key and value: the running value stays until a restart, so
                // every later reload sees the same difference.
                if !announced.contains(&wanted) {
                    tracing::warn!(
                        key = key.key,
                        value = %wanted.1,
                        running = %key.get(&old.config),
                        "setting changed; it takes effect after a restart"
                    );
                }
                still_announced.push(wanted);
                key.copy(&mut config, &old.config);
                pending.push(key.key);
            } else {
                hot.push(key.key);
            }
        }
        for key in config::keys().filter(|k| k.restart_required) {
            sources = sources.with(key.key, old.sources.of(key.key));
        }
        let validated = config.validate()?;
        *announced = still_announced;
        drop(announced);
        *lock(&self.stats.pending_restart) = pending;
        let new = Arc::new(Running {
            config,
            sources,
            validated,
            settings_sha256: settings.map(|s| s.sha256),
        });
        self.current.store(new.clone());
        *self
            .overlays
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            (settings.cloned(), node.cloned());
        if hot.is_empty() {
            return Ok(hot);
        }
        self.stats.applied.fetch_add(1, Ordering::Relaxed);
        tracing::info!(keys = ?hot, "settings applied");
        let change = Change {
            old: &old,
            new: &new,
            keys: &hot,
        };
        for (name, subscriber) in self
            .subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            tracing::debug!(subscriber = name, "applying settings change");
            subscriber(&change);
        }
        Ok(hot)
    }
}

/// Whether two texts of `key` mean the same value (`0s` and `0ms` are one duration).
fn same_value(key: &config::KeyInfo, a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    key.kind == "duration"
        && matches!(
            (humantime::parse_duration(a), humantime::parse_duration(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_durations_written_differently_are_no_change() {
        let key = config::find_key("shutdown.drainDelay").unwrap();
        assert!(same_value(key, "0s", "0ms"));
        assert!(same_value(key, "1m", "60s"));
        assert!(!same_value(key, "1s", "2s"));
        let other = config::find_key("server.version").unwrap();
        assert!(
            !same_value(other, "1s", "1000ms"),
            "only durations are normalised"
        );
    }

    #[test]
    fn the_hot_keys_are_exactly_the_keys_not_marked_restart_required() {
        let mut hot: Vec<&str> = config::keys()
            .filter(|k| !k.restart_required)
            .map(|k| k.key)
            .collect();
        hot.sort_unstable();
        let mut pinned = HOT_KEYS.to_vec();
        pinned.sort_unstable();
        assert_eq!(
            hot, pinned,
            "a key made hot needs a subscriber in serve and an end-to-end test"
        );
    }
}
