//! The configuration layers and where each effective value came from.
//!
//! ```text
//! defaults ─▶ node file (--config) ─▶ settings file (settingsFile) ─▶ environment ─▶ flags
//!  lowest                              cluster-scope keys only                     highest
//! ```
//!
//! Each file layer is parsed strictly into a whole [`Config`] (so its errors carry line, column
//! and key) and remembers which keys it actually set; layering copies exactly those keys. The
//! environment and flags are captured once at start, so a reload of the settings file re-layers
//! the same inputs around the new file: a key set by the environment stays locked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::files::sha256;

use crate::cli::ServeArgs;
use crate::config::{self, Config, ConfigError, KeyInfo, Scope, find_key};

/// The variable that names the settings file, over the `settingsFile` key.
pub const SETTINGS_FILE_ENV: &str = "KUDURRU_SETTINGS_FILE";

/// Where a value came from, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    /// Built in.
    Default,
    /// The node file (`--config`).
    NodeFile,
    /// The watched settings file.
    SettingsFile,
    /// `PATCH /api/v1/node/config` (in memory).
    Api,
    /// A `KUDURRU_…` variable.
    Env,
    /// A command-line flag.
    Flag,
}

impl Layer {
    /// The label `kudurru settings get` prints.
    pub fn label(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::NodeFile => "node-file",
            Self::SettingsFile => "settings-file",
            Self::Api => "api",
            Self::Env => "env",
            Self::Flag => "flag",
        }
    }
}

/// The layer each key's effective value came from (absent: the default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources(BTreeMap<&'static str, Layer>);

impl Sources {
    /// Where `key` came from.
    pub fn of(&self, key: &str) -> Layer {
        self.0.get(key).copied().unwrap_or(Layer::Default)
    }

    fn set(&mut self, key: &'static str, layer: Layer) {
        if layer == Layer::Default {
            self.0.remove(key);
        } else {
            self.0.insert(key, layer);
        }
    }

    /// The same sources with `key` from `layer`.
    pub fn with(mut self, key: &'static str, layer: Layer) -> Self {
        self.set(key, layer);
        self
    }
}

/// One TOML file layer: its values over the defaults, the keys it sets, and its content hash.
#[derive(Debug, Clone)]
pub struct FileLayer {
    /// The file.
    pub path: PathBuf,
    /// Its values (defaults where the file is silent).
    pub config: Config,
    /// The keys it sets.
    pub keys: Vec<&'static KeyInfo>,
    /// SHA-256 of the bytes read.
    pub sha256: [u8; 32],
}

impl FileLayer {
    /// Parses `text` read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let parse_error = |message: String| ConfigError::Parse {
            path: path.to_owned(),
            message,
        };
        let config = Config::from_toml(text).map_err(parse_error)?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| parse_error(e.to_string()))?;
        let keys = config::keys().filter(|k| is_set(&table, k.key)).collect();
        Ok(Self {
            path: path.to_owned(),
            config,
            keys,
            sha256: sha256(text.as_bytes()),
        })
    }

    /// Reads and parses the node file: it must exist.
    pub fn read_node(path: &Path) -> Result<Self, ConfigError> {
        let text = read(path)?;
        Self::parse(path, &text)
    }

    /// Reads the settings file: missing or empty is an empty layer; every key it sets must be
    /// cluster-scope and not host-only.
    pub fn read_settings(path: &Path) -> Result<Self, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        Self::parse_settings(path, &text)
    }

    /// Parses settings-file text: every key it sets must be cluster-scope and not host-only.
    pub fn parse_settings(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let layer = Self::parse(path, text)?;
        if let Some(bad) = layer
            .keys
            .iter()
            .find(|k| k.scope != Scope::Cluster || k.host_only)
        {
            return Err(ConfigError::NotSharable {
                path: path.to_owned(),
                key: bad.key,
            });
        }
        Ok(layer)
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Whether the dotted `key` is present in `table`.
fn is_set(table: &toml::Table, key: &str) -> bool {
    let segments: Vec<&str> = key.split('.').collect();
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut current = table;
    for parent in parents {
        match current.get(*parent) {
            Some(toml::Value::Table(inner)) => current = inner,
            _ => return false,
        }
    }
    current.contains_key(*last)
}

/// Everything but the settings file, captured at start.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The node file, if `--config` was given.
    pub node: Option<FileLayer>,
    /// `KUDURRU_…` variables that are configuration.
    pub env: Vec<(String, String)>,
    /// `KUDURRU_…` variables that are not (a Kubernetes Service named kudurru injects
    /// `KUDURRU_PORT`, `KUDURRU_SERVICE_HOST`, …): names only, for one warning.
    pub ignored_env: Vec<String>,
    /// Command-line flags.
    pub flags: ServeArgs,
}

/// Whether a `KUDURRU_…` variable is configuration: a reserved variable, a section key
/// (`__` between levels; a misspelt one is still an error, not ignored), or a top-level key
/// (`KUDURRU_UPSTREAMS`). Anything else (`KUDURRU_PORT`, `KUDURRU_PORT_53_UDP_ADDR`,
/// `KUDURRU_SERVICE_HOST`) belongs to someone else.
fn is_configuration(var: &str) -> bool {
    let Some(path) = var.strip_prefix("KUDURRU_") else {
        return false;
    };
    config::RESERVED_ENV.contains(&var) || path.contains("__") || find_key(path).is_some()
}

impl Inputs {
    /// Reads the node file and captures the environment.
    pub fn capture(
        flags: &ServeArgs,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let node = flags
            .config
            .as_deref()
            .map(FileLayer::read_node)
            .transpose()?;
        let (env, ignored): (Vec<_>, Vec<_>) = env
            .into_iter()
            .filter(|(k, _)| k.starts_with("KUDURRU_"))
            .partition(|(k, _)| is_configuration(k));
        Ok(Self {
            node,
            env,
            ignored_env: ignored.into_iter().map(|(k, _)| k).collect(),
            flags: flags.clone(),
        })
    }

    /// The settings file: `KUDURRU_SETTINGS_FILE`, else the `settingsFile` key of the other
    /// layers; `None` when neither names one.
    pub fn settings_path(&self) -> Result<Option<PathBuf>, ConfigError> {
        if let Some((_, path)) = self.env.iter().find(|(k, _)| k == SETTINGS_FILE_ENV) {
            return Ok((!path.is_empty()).then(|| PathBuf::from(path)));
        }
        let (config, _) = self.layer(None)?;
        Ok((!config.settings_file.is_empty()).then(|| PathBuf::from(config.settings_file)))
    }

    /// Reads the settings file, if one is named.
    pub fn read_settings(&self) -> Result<Option<FileLayer>, ConfigError> {
        self.settings_path()?
            .map(|path| FileLayer::read_settings(&path))
            .transpose()
    }

    /// The effective configuration over `settings`, and the source of every value.
    pub fn layer(&self, settings: Option<&FileLayer>) -> Result<(Config, Sources), ConfigError> {
        self.layer_with(settings, None)
    }

    /// As [`Self::layer`], with node-scope changes made through the API (in memory) above the
    /// files and below the environment.
    pub fn layer_with(
        &self,
        settings: Option<&FileLayer>,
        node_api: Option<&FileLayer>,
    ) -> Result<(Config, Sources), ConfigError> {
        let mut config = Config::default();
        let mut sources = Sources::default();
        for (file, layer) in [
            (self.node.as_ref(), Layer::NodeFile),
            (settings, Layer::SettingsFile),
            (node_api, Layer::Api),
        ] {
            let Some(file) = file else { continue };
            for key in &file.keys {
                key.copy(&mut config, &file.config);
                sources.set(key.key, layer);
            }
        }
        for key in config.apply_env(self.env.iter().cloned())? {
            sources.set(key, Layer::Env);
        }
        for key in apply_flags(&mut config, &self.flags)? {
            sources.set(key, Layer::Flag);
        }
        if let Some((_, path)) = self.env.iter().find(|(k, _)| k == SETTINGS_FILE_ENV) {
            config.settings_file = path.clone();
            sources.set("settingsFile", Layer::Env);
        }
        Ok((config, sources))
    }
}

/// Applies the command-line flags; returns the keys they set.
fn apply_flags(config: &mut Config, args: &ServeArgs) -> Result<Vec<&'static str>, ConfigError> {
    let mut set = Vec::new();
    let mut put = |key: &str, value: String| -> Result<(), ConfigError> {
        let info = find_key(key).expect("flag maps to a known key");
        info.set(config, &value)?;
        set.push(info.key);
        Ok(())
    };
    if let Some(cores) = args.cores {
        put("server.cores", cores.to_string())?;
    }
    if let Some(cpus) = &args.cpus {
        put("server.cpus", config::show_list(cpus))?;
    }
    if !args.listen.is_empty() {
        put("server.listen", args.listen.join(","))?;
    }
    if !args.upstream.is_empty() {
        put("upstreams", args.upstream.join(","))?;
    }
    if let Some(addr) = &args.ops_address {
        put("ops.address", addr.clone())?;
    }
    if let Some(level) = &args.log_level {
        put("log.level", level.clone())?;
    }
    if let Some(addr) = &args.api_address {
        put("api.address", addr.clone())?;
    }
    if let Some(dir) = &args.data_dir {
        put("storage.dataDir", dir.clone())?;
    }
    if let Some(file) = &args.tls_cert {
        put("tls.certFile", file.clone())?;
    }
    if let Some(file) = &args.tls_key {
        put("tls.keyFile", file.clone())?;
    }
    Ok(set)
}

/// `kudurru settings get [KEY]`: one line per key, `R` marking restart-bound keys.
pub fn render_get(
    config: &Config,
    sources: &Sources,
    key: Option<&str>,
) -> Result<String, ConfigError> {
    let keys: Vec<&KeyInfo> = match key {
        Some(name) => vec![find_key(name).ok_or_else(|| ConfigError::UnknownKey {
            key: name.to_owned(),
        })?],
        None => config::keys().collect(),
    };
    let mut out = String::new();
    for k in keys {
        let value = k.get(config);
        let value = if value.is_empty() {
            "(empty)".to_owned()
        } else {
            value
        };
        out.push_str(&format!(
            "{} {:<28} {:<14} {}\n",
            if k.restart_required { "R" } else { " " },
            k.key,
            sources.of(k.key).label(),
            value
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> FileLayer {
        FileLayer::parse(Path::new("test.toml"), text).unwrap()
    }

    fn inputs(node: Option<&str>, env: &[(&str, &str)], flags: ServeArgs) -> Inputs {
        Inputs {
            node: node.map(file),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ignored_env: Vec::new(),
            flags,
        }
    }

    #[test]
    fn kudurru_variables_of_other_software_are_not_configuration() {
        let env = [
            ("KUDURRU_PORT", "tcp://10.0.0.7:53"),
            ("KUDURRU_PORT_53_UDP_ADDR", "10.0.0.7"),
            ("KUDURRU_SERVICE_HOST", "10.0.0.7"),
            ("KUDURRU_UPSTREAMS", "udp://127.0.0.1:53"),
            ("KUDURRU_CACHE__MINTTL", "7"),
            ("KUDURRU_SETTINGS_FILE", ""),
            ("HOME", "/root"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let inputs = Inputs::capture(&ServeArgs::default(), env).unwrap();
        assert_eq!(
            inputs.ignored_env,
            [
                "KUDURRU_PORT",
                "KUDURRU_PORT_53_UDP_ADDR",
                "KUDURRU_SERVICE_HOST"
            ]
        );
        let (config, _) = inputs.layer(None).unwrap();
        assert_eq!(config.cache.min_ttl, 7);
        assert_eq!(config.upstreams, ["udp://127.0.0.1:53"]);
        // A misspelt section key is still an error, not ignored.
        let typo = [("KUDURRU_CACHE__MINTLL".to_owned(), "7".to_owned())];
        let inputs = Inputs::capture(&ServeArgs::default(), typo).unwrap();
        assert!(inputs.ignored_env.is_empty());
        assert!(inputs.layer(None).is_err());
    }

    #[test]
    fn a_file_layer_knows_exactly_the_keys_it_sets() {
        let f = file(
            "upstreams = [\"udp://127.0.0.1:53\"]\n[cache]\nminTTL = 5\n[ratelimit]\nallowlist = []\n",
        );
        let keys: Vec<&str> = f.keys.iter().map(|k| k.key).collect();
        assert_eq!(keys, ["upstreams", "cache.minTTL", "ratelimit.allowlist"]);
        assert!(file("").keys.is_empty());
        assert!(
            file("[cache]\n").keys.is_empty(),
            "an empty section sets nothing"
        );
    }

    #[test]
    fn each_layer_overrides_the_one_below_and_the_environment_locks_a_key() {
        let node =
            "[cache]\nmaxEntries = 100\nminTTL = 1\nmaxTTL = 1000\n[log]\nlevel = \"warn\"\n";
        let settings = file("[cache]\nmaxEntries = 200\nminTTL = 2\n");
        let flags = ServeArgs {
            log_level: Some("debug".into()),
            ..ServeArgs::default()
        };
        let i = inputs(Some(node), &[("KUDURRU_CACHE__MINTTL", "3")], flags);
        let (c, s) = i.layer(Some(&settings)).unwrap();
        assert_eq!(
            (c.cache.max_entries, s.of("cache.maxEntries")),
            (200, Layer::SettingsFile)
        );
        assert_eq!((c.cache.min_ttl, s.of("cache.minTTL")), (3, Layer::Env));
        assert_eq!(
            (c.cache.max_ttl, s.of("cache.maxTTL")),
            (1000, Layer::NodeFile)
        );
        assert_eq!(
            (c.log.level.as_str(), s.of("log.level")),
            ("debug", Layer::Flag)
        );
        assert_eq!(s.of("cache.servfailTTL"), Layer::Default);
        // A new settings file cannot move the key the environment holds.
        let (c, _) = i.layer(Some(&file("[cache]\nminTTL = 9\n"))).unwrap();
        assert_eq!(c.cache.min_ttl, 3);
        let (c, s) = i.layer(None).unwrap();
        assert_eq!(
            (c.cache.max_entries, s.of("cache.maxEntries")),
            (100, Layer::NodeFile)
        );
    }

    #[test]
    fn the_settings_file_holds_cluster_keys_only_and_may_be_missing_or_empty() {
        let dir = std::env::temp_dir().join(format!("kudurru-layers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("settings.toml");
        let _ = std::fs::remove_file(&path);
        assert!(
            FileLayer::read_settings(&path).unwrap().keys.is_empty(),
            "missing = empty"
        );
        std::fs::write(&path, "").unwrap();
        assert!(FileLayer::read_settings(&path).unwrap().keys.is_empty());
        for (text, key) in [
            ("[server]\nlisten = [\"127.0.0.1:53\"]\n", "server.listen"),
            (
                "[tcp]\nmaxConnectionsPerCore = 5\n",
                "tcp.maxConnectionsPerCore",
            ),
            ("settingsFile = \"/x\"\n", "settingsFile"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = FileLayer::read_settings(&path).unwrap_err();
            assert!(
                matches!(err, ConfigError::NotSharable { key: k, .. } if k == key),
                "{text}: {err}"
            );
        }
        std::fs::write(&path, "[cache]\nmaxEntrie = 1\n").unwrap();
        let err = FileLayer::read_settings(&path).unwrap_err().to_string();
        assert!(
            err.contains("settings.toml") && err.contains("line 2") && err.contains("maxEntrie"),
            "{err}"
        );
    }

    #[test]
    fn the_settings_file_is_named_by_the_key_or_the_reserved_variable() {
        let i = inputs(
            Some("settingsFile = \"/etc/kudurru/settings.toml\"\n"),
            &[],
            ServeArgs::default(),
        );
        assert_eq!(
            i.settings_path().unwrap(),
            Some(PathBuf::from("/etc/kudurru/settings.toml"))
        );
        let i = inputs(
            Some("settingsFile = \"/etc/kudurru/settings.toml\"\n"),
            &[(SETTINGS_FILE_ENV, "/run/settings.toml")],
            ServeArgs::default(),
        );
        assert_eq!(
            i.settings_path().unwrap(),
            Some(PathBuf::from("/run/settings.toml"))
        );
        let (c, s) = i.layer(None).unwrap();
        assert_eq!(
            (c.settings_file.as_str(), s.of("settingsFile")),
            ("/run/settings.toml", Layer::Env)
        );
        assert_eq!(
            inputs(None, &[], ServeArgs::default())
                .settings_path()
                .unwrap(),
            None
        );
    }
}
