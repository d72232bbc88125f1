//! API bearer tokens: roles, permissions, and the hashed token file in the data directory.
//!
//! A token reads `kdr_<id>_<secret>`: the id (8 hex digits) names the entry, the secret (32
//! random bytes, hex) is never stored, only its SHA-256, compared in constant time. The file
//! (`<storage.dataDir>/tokens.json`, mode 0600) is written atomically by `kudurru token
//! create/revoke` and re-read by the server when it changes, so the CLI and a running server
//! share it without a database lock (redb admits one process per file).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::files::{create_private_dir, sha256, write_atomically};

/// The token file's name inside the data directory.
pub const FILE: &str = "tokens.json";

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Read settings and node config.
    SettingsRead,
    /// Change cluster settings.
    SettingsWrite,
    /// Change node config.
    NodeWrite,
    /// Read upstream health and counters.
    UpstreamsRead,
    /// Read diagnoses and doctor.
    InfoRead,
    /// Refresh block lists.
    ListsRefresh,
    /// Search, export and tail the query log; read its stats.
    QuerylogRead,
    /// Delete query-log entries.
    QuerylogDelete,
    /// Read objects (block lists, client groups, policies, zones).
    ObjectsRead,
    /// Write the objects an operator manages (block lists, client groups, policies).
    ObjectsWrite,
    /// Write every object, and any object's status.
    ObjectsAdmin,
    /// Read the audit log.
    AuditRead,
    /// Read cache sizes and counters (`GET /api/v1/cache`).
    CacheRead,
    /// List cached names (`GET /api/v1/cache/dump`): operator, since it shows what clients asked.
    CacheDump,
    /// Flush cached answers (`DELETE /api/v1/cache`).
    CacheFlush,
    /// Read one's own session or token (`GET /api/v1/session`): every role.
    Session,
    /// List, create and revoke tokens over the API.
    TokensAdmin,
}

impl Permission {
    /// Every permission, in documentation order.
    pub const ALL: &[Self] = &[
        Self::SettingsRead,
        Self::SettingsWrite,
        Self::NodeWrite,
        Self::UpstreamsRead,
        Self::InfoRead,
        Self::ListsRefresh,
        Self::QuerylogRead,
        Self::QuerylogDelete,
        Self::ObjectsRead,
        Self::ObjectsWrite,
        Self::ObjectsAdmin,
        Self::AuditRead,
        Self::CacheRead,
        Self::CacheDump,
        Self::CacheFlush,
        Self::Session,
        Self::TokensAdmin,
    ];

    /// The name used in errors and docs.
    pub fn name(self) -> &'static str {
        match self {
            Self::SettingsRead => "settings.read",
            Self::SettingsWrite => "settings.write",
            Self::NodeWrite => "node.write",
            Self::UpstreamsRead => "upstreams.read",
            Self::InfoRead => "info.read",
            Self::ListsRefresh => "lists.refresh",
            Self::QuerylogRead => "querylog.read",
            Self::QuerylogDelete => "querylog.delete",
            Self::ObjectsRead => "objects.read",
            Self::ObjectsWrite => "objects.write",
            Self::ObjectsAdmin => "objects.admin",
            Self::AuditRead => "audit.read",
            Self::CacheRead => "cache.read",
            Self::CacheDump => "cache.dump",
            Self::CacheFlush => "cache.flush",
            Self::Session => "session",
            Self::TokensAdmin => "tokens.admin",
        }
    }
}

/// Token roles, each a superset of the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything.
    Viewer,
    /// Also changes cluster settings and refreshes lists.
    Operator,
    /// Also changes node config and deletes query-log data.
    Admin,
}

impl Role {
    /// Parses `viewer`, `operator` or `admin`.
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        match text {
            "viewer" => Ok(Self::Viewer),
            "operator" => Ok(Self::Operator),
            "admin" => Ok(Self::Admin),
            other => Err(TokenError::UnknownRole(other.to_owned())),
        }
    }

    /// The role's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Admin => "admin",
        }
    }

    /// Whether the role grants `permission`.
    pub fn grants(self, permission: Permission) -> bool {
        use Permission::*;
        let least = match permission {
            SettingsRead | UpstreamsRead | InfoRead | ObjectsRead | CacheRead | Session => {
                Self::Viewer
            }
            // The query log and its rollups name clients and what they asked: more than a
            // cache dump shows, so not below it.
            SettingsWrite | ListsRefresh | ObjectsWrite | AuditRead | CacheDump | CacheFlush
            | QuerylogRead => Self::Operator,
            NodeWrite | QuerylogDelete | ObjectsAdmin | TokensAdmin => Self::Admin,
        };
        self >= least
    }
}

/// Why a token could not be created, revoked or listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// `--role` named no role.
    #[error("unknown role {0:?}: expected viewer, operator or admin")]
    UnknownRole(String),
    /// `--ttl` is longer than `auth.tokens.maxLifetime`.
    #[error(
        "--ttl {} is longer than auth.tokens.maxLifetime ({})",
        humantime::format_duration(*requested),
        humantime::format_duration(*max_lifetime)
    )]
    TooLong {
        /// The lifetime asked for.
        requested: Duration,
        /// The most allowed.
        max_lifetime: Duration,
    },
    /// The token file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The token file is not JSON of the expected shape.
    #[error("{} is not a token file: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What serde_json said (line and column).
        source: serde_json::Error,
    },
    /// The data directory or the token file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The directory or file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A name longer than [`MAX_NAME`] characters or with control characters.
    #[error("a token name is at most {MAX_NAME} characters, none of them control characters")]
    InvalidName,
    /// `revoke` named no stored token.
    #[error("no token {id} in {}", path.display())]
    NotFound {
        /// The id asked for.
        id: String,
        /// The token file.
        path: PathBuf,
    },
}

/// Longest token name, in characters.
pub const MAX_NAME: usize = 64;

/// Checks a token name: at most [`MAX_NAME`] characters, no control characters (empty: none).
pub fn check_name(name: &str) -> Result<(), TokenError> {
    if name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(TokenError::InvalidName);
    }
    Ok(())
}

/// A token lifetime from `--ttl`, capped by `auth.tokens.maxLifetime` (the cap when none is
/// asked for).
pub fn lifetime(
    requested: Option<Duration>,
    max_lifetime: Duration,
) -> Result<Duration, TokenError> {
    match requested {
        None => Ok(max_lifetime),
        Some(requested) if requested > max_lifetime => Err(TokenError::TooLong {
            requested,
            max_lifetime,
        }),
        Some(ttl) => Ok(ttl),
    }
}

/// One stored token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Public id.
    pub id: String,
    /// Hex SHA-256 of the secret.
    pub sha256: String,
    /// Role.
    pub role: Role,
    /// Unix seconds.
    pub created: u64,
    /// Unix seconds after which the token is refused.
    pub expires: u64,
    /// A name for people (`kudurru token create --name`, `POST /api/v1/tokens`); empty when
    /// none was given (files written before names existed have none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Document {
    tokens: Vec<Entry>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Equal in time independent of where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a request's token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No usable token (missing, malformed, unknown, revoked, expired, or no token file).
    Unauthorized(&'static str),
}

/// The token file of a data directory, cached by content hash.
#[derive(Debug)]
pub struct TokenStore {
    path: PathBuf,
    cache: Mutex<Option<([u8; 32], Vec<Entry>)>>,
}

impl TokenStore {
    /// The store in `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(FILE),
            cache: Mutex::new(None),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn load(&self) -> Result<Vec<Entry>, TokenError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(TokenError::Read {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let hash = sha256(&bytes);
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((cached, entries)) = cache.as_ref()
            && *cached == hash
        {
            return Ok(entries.clone());
        }
        let tokens = parse_token_file(&bytes).map_err(|source| TokenError::Parse {
            path: self.path.clone(),
            source,
        })?;
        *cache = Some((hash, tokens.clone()));
        Ok(tokens)
    }

    fn save(&self, entries: Vec<Entry>) -> Result<(), TokenError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        create_private_dir(dir).map_err(|source| TokenError::Write {
            path: dir.to_owned(),
            source,
        })?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        // Serializing plain strings and integers cannot fail.
        let text = serde_json::to_vec_pretty(&Document { tokens: entries }).unwrap_or_default();
        write_atomically(&self.path, &text, 0o600).map_err(|source| TokenError::Write {
            path: self.path.clone(),
            source,
        })
    }

    /// Creates a token with `role` valid for `ttl`; returns the token text (shown once).
    pub fn create(&self, role: Role, ttl: Duration) -> Result<(String, Entry), TokenError> {
        self.create_named("", role, ttl)
    }

    /// Creates a token named `name` (see [`TokenStore::create`]).
    pub fn create_named(
        &self,
        name: &str,
        role: Role,
        ttl: Duration,
    ) -> Result<(String, Entry), TokenError> {
        check_name(name)?;
        let mut entries = self.load()?;
        let id = hex(&rand::random::<[u8; 4]>());
        let secret = hex(&rand::random::<[u8; 32]>());
        let created = now_unix();
        let entry = Entry {
            id: id.clone(),
            sha256: hex(&sha256(secret.as_bytes())),
            role,
            created,
            expires: created.saturating_add(ttl.as_secs().max(1)),
            name: name.to_owned(),
        };
        entries.push(entry.clone());
        self.save(entries)?;
        Ok((format!("kdr_{id}_{secret}"), entry))
    }

    /// Removes the token `id`.
    pub fn revoke(&self, id: &str) -> Result<(), TokenError> {
        let mut entries = self.load()?;
        let before = entries.len();
        entries.retain(|e| e.id != id);
        if entries.len() == before {
            return Err(TokenError::NotFound {
                id: id.to_owned(),
                path: self.path.clone(),
            });
        }
        self.save(entries)
    }

    /// Every stored token.
    pub fn list(&self) -> Result<Vec<Entry>, TokenError> {
        self.load()
    }

    /// The role of a presented token, if it is known and current. `max_lifetime` caps every
    /// token's age, whatever expiry it was created with.
    pub fn verify(&self, token: &str, max_lifetime: Duration) -> Result<Role, Refusal> {
        self.identify(token, max_lifetime).map(|(role, _)| role)
    }

    /// As [`TokenStore::verify`], with the token's id: the principal its writes are audited as.
    pub fn identify(&self, token: &str, max_lifetime: Duration) -> Result<(Role, String), Refusal> {
        // A malformed token is refused before the file is read.
        parse_token(token)?;
        let entries = self
            .load()
            .map_err(|_| Refusal::Unauthorized("the token file cannot be read"))?;
        identify_among(&entries, token, max_lifetime, now_unix())
    }
}

/// The id and secret of `kdr_<id>_<secret>`.
fn parse_token(token: &str) -> Result<(&str, &str), Refusal> {
    token
        .strip_prefix("kdr_")
        .and_then(|rest| rest.split_once('_'))
        .ok_or(Refusal::Unauthorized("malformed token"))
}

/// The entries of a token file's bytes.
pub fn parse_token_file(bytes: &[u8]) -> Result<Vec<Entry>, serde_json::Error> {
    serde_json::from_slice::<Document>(bytes).map(|doc| doc.tokens)
}

/// The role and id of `token` among `entries` at `now` (Unix seconds): every entry is compared
/// in constant time, so timing does not tell which ids exist.
pub fn identify_among(
    entries: &[Entry],
    token: &str,
    max_lifetime: Duration,
    now: u64,
) -> Result<(Role, String), Refusal> {
    let (id, secret) = parse_token(token)?;
    let digest = hex(&sha256(secret.as_bytes()));
    let mut found = None;
    for entry in entries {
        let matched = constant_time_eq(entry.id.as_bytes(), id.as_bytes())
            & constant_time_eq(entry.sha256.as_bytes(), digest.as_bytes());
        if matched {
            found = Some(entry);
        }
    }
    let entry = found.ok_or(Refusal::Unauthorized("unknown or revoked token"))?;
    if now >= entry.expires || now >= entry.created.saturating_add(max_lifetime.as_secs()) {
        return Err(Refusal::Unauthorized("token expired"));
    }
    Ok((entry.role, entry.id.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifetime_longer_than_the_cap_is_refused_with_both_named() {
        let day = Duration::from_secs(86_400);
        assert_eq!(lifetime(None, day).unwrap(), day);
        assert_eq!(lifetime(Some(day / 2), day).unwrap(), day / 2);
        let e = lifetime(Some(day * 2), day).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--ttl 2days is longer than auth.tokens.maxLifetime (1day)"
        );
        assert!(matches!(Role::parse("root"), Err(TokenError::UnknownRole(r)) if r == "root"));
    }

    #[test]
    fn token_names_are_short_and_printable() {
        assert!(check_name("").is_ok() && check_name("ci bot").is_ok());
        assert!(check_name(&"é".repeat(MAX_NAME)).is_ok());
        assert!(matches!(
            check_name(&"x".repeat(MAX_NAME + 1)),
            Err(TokenError::InvalidName)
        ));
        assert!(matches!(check_name("a\nb"), Err(TokenError::InvalidName)));
    }

    #[test]
    fn roles_grant_supersets() {
        assert!(Role::Viewer.grants(Permission::SettingsRead));
        assert!(!Role::Viewer.grants(Permission::SettingsWrite));
        assert!(Role::Operator.grants(Permission::SettingsWrite));
        assert!(!Role::Operator.grants(Permission::NodeWrite));
        assert!(Role::Viewer.grants(Permission::CacheRead));
        assert!(!Role::Viewer.grants(Permission::CacheDump));
        assert!(!Role::Viewer.grants(Permission::CacheFlush));
        assert!(Role::Operator.grants(Permission::CacheFlush));
        assert!(Role::Admin.grants(Permission::QuerylogDelete));
        assert_eq!(Role::parse("admin").ok(), Some(Role::Admin));
        assert!(Role::parse("root").is_err());
    }

    #[test]
    fn tokens_are_stored_hashed_verified_expired_and_revoked() {
        let dir = std::env::temp_dir().join(format!("kudurru-tokens-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TokenStore::new(&dir);
        let year = Duration::from_secs(365 * 86400);
        let (token, entry) = store
            .create(Role::Operator, Duration::from_secs(3600))
            .unwrap();
        let text = std::fs::read_to_string(store.path()).unwrap();
        let secret = token.rsplit('_').next().unwrap();
        assert!(!text.contains(secret), "never stored in plain text");
        assert!(text.contains(&entry.sha256));
        let mode = std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(store.verify(&token, year), Ok(Role::Operator));
        let mut wrong = token.clone();
        wrong.pop();
        wrong.push(if token.ends_with('0') { '1' } else { '0' });
        assert!(store.verify(&wrong, year).is_err());
        assert!(store.verify("Bearer x", year).is_err());
        assert!(store.verify("kdr_nothing", year).is_err());
        assert_eq!(
            store.verify(&token, Duration::ZERO),
            Err(Refusal::Unauthorized("token expired")),
            "auth.tokens.maxLifetime caps every token"
        );
        store.revoke(&entry.id).unwrap();
        let again = store.revoke(&entry.id).unwrap_err();
        assert!(matches!(again, TokenError::NotFound { .. }), "{again}");
        assert!(again.to_string().contains(&entry.id), "{again}");
        assert_eq!(
            store.verify(&token, year),
            Err(Refusal::Unauthorized("unknown or revoked token"))
        );
    }
}
