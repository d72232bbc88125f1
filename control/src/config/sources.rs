//! The raw inputs a [`Config`] is read from: the TOML node file and the `KUDURRU_…` environment
//! variables. Layering them with the settings file, the API and flags is `crate::layers`' job.

use std::path::Path;

use super::{Config, ConfigError, find_key};

/// Variables with the `KUDURRU_` prefix and a meaning of their own: never a key.
pub const RESERVED_ENV: &[&str] = &["KUDURRU_SETTINGS_FILE", "KUDURRU_BIN"];

impl Config {
    /// Reads the TOML node file at `path` over the defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses TOML text over the defaults; the error names line, column and key.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())
    }

    /// Applies `KUDURRU_<SECTION>__<KEY>` variables from `vars` (case-insensitive keys);
    /// returns the keys they set.
    pub fn apply_env(
        &mut self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Vec<&'static str>, ConfigError> {
        let mut set = Vec::new();
        for (var, value) in vars {
            let Some(path) = var.strip_prefix("KUDURRU_") else {
                continue;
            };
            if RESERVED_ENV.contains(&var.as_str()) {
                continue;
            }
            let key = path.replace("__", ".");
            let info = find_key(&key).ok_or_else(|| ConfigError::UnknownEnv {
                var: var.clone(),
                key: key.clone(),
            })?;
            info.set(self, &value).map_err(|e| ConfigError::Env {
                var: var.clone(),
                source: Box::new(e),
            })?;
            set.push(info.key);
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_errors_name_line_and_key() {
        let err = Config::from_toml("[cache]\nmaxEntries = 10\nmaxEntrie = 5\n").unwrap_err();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("maxEntrie"), "{err}");
        let err = Config::from_toml("[cache]\nmaxEntries = \"lots\"\n").unwrap_err();
        assert!(
            err.contains("line 2") && err.contains("maxEntries"),
            "{err}"
        );
        let c = Config::from_toml("upstreams = [\"tcp://127.0.0.1:53\"]\n[cache]\nminTTL = 60\n")
            .unwrap();
        assert_eq!(c.cache.min_ttl, 60);
        assert_eq!(c.upstreams, vec!["tcp://127.0.0.1:53"]);
    }

    #[test]
    fn env_overrides_file_and_unknown_env_is_an_error() {
        let mut c = Config::from_toml("[cache]\nmaxEntries = 10\n").unwrap();
        c.apply_env([
            ("KUDURRU_CACHE__MAXENTRIES".into(), "99".into()),
            ("PATH".into(), "/bin".into()),
        ])
        .unwrap();
        assert_eq!(c.cache.max_entries, 99);
        let err = c
            .apply_env([("KUDURRU_CACHE__MAXENTRYS".into(), "1".into())])
            .unwrap_err();
        assert!(
            err.to_string().contains("KUDURRU_CACHE__MAXENTRYS"),
            "{err}"
        );
        let err = c
            .apply_env([("KUDURRU_CACHE__MAXENTRIES".into(), "x".into())])
            .unwrap_err();
        assert!(err.to_string().contains("cache.maxEntries"), "{err}");
    }
}
