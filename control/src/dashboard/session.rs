//! Browser sessions: an API token exchanged once (`POST /api/v1/session`) for a random
//! session id in an HttpOnly cookie, and the checks a cookie-authenticated request passes.
//!
//! Sessions live in memory on the control thread, keyed by the SHA-256 of the cookie (the
//! cookie itself is not kept, and a lookup compares hashes, not secrets). They are bounded in
//! number (the oldest is evicted), end at their expiry, on sign-out, and as soon as their token
//! is revoked or changes role (the caller re-checks the token file's entry on each request). A
//! restart signs everyone out. Failed sign-ins are limited per client address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::files::sha256;
use crate::tokens::{Entry, Role};

/// The cookie's name.
pub const COOKIE: &str = "kudurru_session";
/// Sessions held at once; past this the oldest is evicted.
pub const MAX_SESSIONS: usize = 4096;
/// Failed sign-ins one address (an IPv6 /64) may make per [`SIGN_IN_WINDOW`].
pub const SIGN_IN_FAILURES: u32 = 10;
/// The window of [`SIGN_IN_FAILURES`].
pub const SIGN_IN_WINDOW: Duration = Duration::from_secs(60);
/// Addresses the sign-in limiter tracks at once; past this the oldest window is dropped.
const LIMITER_ADDRESSES: usize = 4096;

/// A session id or CSRF token: 32 random bytes, hex.
fn random_hex() -> String {
    rand::random::<[u8; 32]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Equal in time independent of where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One signed-in browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The token it was signed in with (its id).
    pub token_id: String,
    /// The token entry's hash when signed in: a token revoked and another created under the
    /// same id does not inherit the session.
    pub token_sha256: String,
    /// The token's role when signed in.
    pub role: Role,
    /// The value `X-CSRF-Token` must carry on writes.
    pub csrf: String,
    /// When it was created (eviction order).
    pub created: Instant,
    /// When it ends.
    pub expires: Instant,
    /// The same, as Unix seconds (for `expiresAt`).
    pub expires_unix: u64,
}

impl Session {
    /// Whether `entries` (the token file now) still holds the token with the role it was
    /// signed in with, unexpired at `now_unix` (and within `max_lifetime` of its creation).
    pub fn token_still_valid(
        &self,
        entries: &[Entry],
        max_lifetime: Duration,
        now_unix: u64,
    ) -> bool {
        entries.iter().any(|e| {
            e.id == self.token_id
                && e.sha256 == self.token_sha256
                && e.role == self.role
                && now_unix < e.expires
                && now_unix < e.created.saturating_add(max_lifetime.as_secs())
        })
    }
}

/// The sessions of one API listener.
#[derive(Debug)]
pub struct Sessions {
    by_hash: Mutex<HashMap<[u8; 32], Session>>,
    max: usize,
}

impl Default for Sessions {
    fn default() -> Self {
        Self::new(MAX_SESSIONS)
    }
}

impl Sessions {
    /// A store holding at most `max` sessions.
    pub fn new(max: usize) -> Self {
        Self {
            by_hash: Mutex::new(HashMap::new()),
            max: max.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.by_hash
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new session for `entry`, living `ttl` from `now`: the cookie value and the session.
    /// Expired sessions are dropped first; then, when full, the oldest.
    pub fn create(
        &self,
        entry: &Entry,
        ttl: Duration,
        now: Instant,
        now_unix: u64,
    ) -> (String, Session) {
        // A session never outlives its token.
        let token_left = Duration::from_secs(entry.expires.saturating_sub(now_unix));
        let ttl = ttl.min(token_left);
        let cookie = random_hex();
        let session = Session {
            token_id: entry.id.clone(),
            token_sha256: entry.sha256.clone(),
            role: entry.role,
            csrf: random_hex(),
            created: now,
            expires: now + ttl,
            expires_unix: now_unix.saturating_add(ttl.as_secs()),
        };
        let mut sessions = self.lock();
        if sessions.len() >= self.max {
            sessions.retain(|_, s| s.expires > now);
        }
        while sessions.len() >= self.max {
            let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.created)
                .map(|(hash, _)| *hash)
            else {
                break;
            };
            sessions.remove(&oldest);
        }
        sessions.insert(sha256(cookie.as_bytes()), session.clone());
        (cookie, session)
    }

    /// The live session of `cookie`; an expired one is removed.
    pub fn get(&self, cookie: &str, now: Instant) -> Option<Session> {
        let hash = sha256(cookie.as_bytes());
        let mut sessions = self.lock();
        match sessions.get(&hash) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                sessions.remove(&hash);
                None
            }
            None => None,
        }
    }

    /// Ends the session of `cookie`; whether there was one.
    pub fn remove(&self, cookie: &str) -> bool {
        self.lock().remove(&sha256(cookie.as_bytes())).is_some()
    }

    /// Sessions held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The session cookie among `Cookie` header values (RFC 6265 §5.4: `name=value` pairs
/// separated by `; `): only a value of 64 hex digits counts, so nothing else reaches the store.
pub fn session_cookie<'h>(headers: impl IntoIterator<Item = &'h str>) -> Option<&'h str> {
    headers
        .into_iter()
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| name.trim() == COOKIE)
        .map(|(_, value)| value.trim().trim_matches('"'))
        .find(|value| value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value of a new session (`Secure` when the listener has TLS).
pub fn set_cookie(cookie: &str, max_age: Duration, secure: bool) -> String {
    format!(
        "{COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        max_age.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that clears the cookie.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

/// Whether a method changes state (anything but GET and HEAD) and so needs the CSRF token.
pub fn is_unsafe(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD")
}

/// Why a cookie-authenticated write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsrfRefusal {
    /// No `X-CSRF-Token` header, or not the session's.
    Token,
    /// An `Origin` header naming another origin than the API's own.
    Origin,
}

/// The checks of a cookie-authenticated request with an unsafe method: `X-CSRF-Token` equal
/// (in constant time) to the session's, and an `Origin`, when sent, that is the API's own
/// (`http(s)://<Host>`).
pub fn check_csrf(
    session: &Session,
    csrf_header: Option<&str>,
    origin: Option<&str>,
    host: Option<&str>,
    tls: bool,
) -> Result<(), CsrfRefusal> {
    if let Some(origin) = origin {
        let scheme = if tls { "https" } else { "http" };
        let own = host.is_some_and(|host| {
            !host.trim().is_empty()
                && origin
                    .strip_prefix(scheme)
                    .and_then(|rest| rest.strip_prefix("://"))
                    .is_some_and(|authority| authority.eq_ignore_ascii_case(host.trim()))
        });
        if !own {
            return Err(CsrfRefusal::Origin);
        }
    }
    match csrf_header {
        Some(token) if constant_time_eq(token.trim().as_bytes(), session.csrf.as_bytes()) => Ok(()),
        _ => Err(CsrfRefusal::Token),
    }
}

/// The key the limiter counts an address under: the address, or its /64 for IPv6 (one host
/// commonly holds a whole /64).
fn limiter_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Failed sign-ins per address: at most [`SIGN_IN_FAILURES`] per [`SIGN_IN_WINDOW`].
#[derive(Debug, Default)]
pub struct SignInLimiter {
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl SignInLimiter {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, (Instant, u32)>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `None` when `ip` may try to sign in at `now`; else how long until it may.
    pub fn check(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let failures = self.lock();
        let &(start, count) = failures.get(&limiter_key(ip))?;
        let elapsed = now.saturating_duration_since(start);
        (count >= SIGN_IN_FAILURES && elapsed < SIGN_IN_WINDOW).then(|| SIGN_IN_WINDOW - elapsed)
    }

    /// Counts a failed sign-in of `ip` at `now`.
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        let key = limiter_key(ip);
        let mut failures = self.lock();
        if !failures.contains_key(&key) && failures.len() >= LIMITER_ADDRESSES {
            failures.retain(|_, (start, _)| now.saturating_duration_since(*start) < SIGN_IN_WINDOW);
            if failures.len() >= LIMITER_ADDRESSES
                && let Some(oldest) = failures
                    .iter()
                    .min_by_key(|(_, (start, _))| *start)
                    .map(|(k, _)| *k)
            {
                failures.remove(&oldest);
            }
        }
        let entry = failures.entry(key).or_insert((now, 0));
        if now.saturating_duration_since(entry.0) >= SIGN_IN_WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

/// Largest sign-in body read.
pub const MAX_SIGN_IN_BODY: usize = 4096;

/// Why a sign-in body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignInError {
    /// Not a JSON object.
    #[error("the body must be a JSON object {{\"token\": \"kdr_...\"}}: {0}")]
    Json(String),
    /// A field other than `token`.
    #[error("no field {0:?}: send {{\"token\": \"kdr_...\"}}")]
    UnknownField(String),
    /// `token` missing or not a string.
    #[error("token must be a string (an API token from `kudurru token create`)")]
    Token,
}

/// The token of a sign-in body `{"token": "kdr_..."}`.
pub fn parse_sign_in(body: &[u8]) -> Result<String, SignInError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| SignInError::Json(e.to_string()))?;
    let serde_json::Value::Object(map) = value else {
        return Err(SignInError::Json("not an object".into()));
    };
    if let Some(other) = map.keys().find(|k| *k != "token") {
        return Err(SignInError::UnknownField(other.clone()));
    }
    match map.get("token") {
        Some(serde_json::Value::String(token)) => Ok(token.trim().to_owned()),
        _ => Err(SignInError::Token),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, role: Role) -> Entry {
        Entry {
            id: id.into(),
            sha256: format!("{id}-hash"),
            role,
            created: 1_000,
            expires: 1_000_000,
            name: String::new(),
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn the_cookie_parser_takes_only_a_well_formed_session_id() {
        let id = "ab".repeat(32);
        assert_eq!(
            session_cookie([format!("a=b; {COOKIE}={id}; c=d").as_str()]),
            Some(id.as_str())
        );
        assert_eq!(
            session_cookie(["x=1", format!("{COOKIE}=\"{id}\"").as_str()]),
            Some(id.as_str())
        );
        assert_eq!(session_cookie([format!("{COOKIE}=abc").as_str()]), None);
        assert_eq!(
            session_cookie([format!("{COOKIE}={}", "zz".repeat(32)).as_str()]),
            None
        );
        assert_eq!(
            session_cookie([format!("other_session={id}").as_str()]),
            None
        );
        assert_eq!(session_cookie([";;=;", "", COOKIE]), None);
    }

    #[test]
    fn the_sign_in_body_is_an_object_with_a_token_string() {
        assert_eq!(
            parse_sign_in(br#"{"token": " kdr_a_b "}"#),
            Ok("kdr_a_b".into())
        );
        assert_eq!(parse_sign_in(br#"{"token": 1}"#), Err(SignInError::Token));
        assert_eq!(parse_sign_in(br#"{}"#), Err(SignInError::Token));
        assert_eq!(
            parse_sign_in(br#"{"token": "x", "role": "admin"}"#),
            Err(SignInError::UnknownField("role".into()))
        );
        assert!(matches!(parse_sign_in(b"[1]"), Err(SignInError::Json(_))));
        assert!(matches!(parse_sign_in(b"\xff"), Err(SignInError::Json(_))));
    }

    #[test]
    fn sessions_expire_are_removed_and_the_oldest_is_evicted() {
        let sessions = Sessions::new(2);
        let now = Instant::now();
        let admin = entry("00000001", Role::Admin);
        let (first, _) = sessions.create(&admin, HOUR, now, 2_000);
        let (second, s) = sessions.create(&admin, HOUR, now + Duration::from_secs(1), 2_001);
        assert_eq!(s.expires_unix, 2_001 + 3600);
        assert!(sessions.get(&first, now).is_some());
        assert!(
            sessions.get(&first, now + HOUR).is_none(),
            "expired at its ttl"
        );
        assert_eq!(sessions.len(), 1, "the expired one is gone");
        let (third, _) = sessions.create(&admin, HOUR, now + Duration::from_secs(2), 2_002);
        let (fourth, _) = sessions.create(&admin, HOUR, now + Duration::from_secs(3), 2_003);
        assert_eq!(sessions.len(), 2);
        assert!(
            sessions.get(&second, now).is_none(),
            "the oldest was evicted"
        );
        assert!(sessions.get(&third, now).is_some() && sessions.get(&fourth, now).is_some());
        assert!(sessions.remove(&third));
        assert!(sessions.get(&third, now).is_none());
        assert!(!sessions.remove(&third));
    }

    #[test]
    fn a_session_never_outlives_its_token() {
        let sessions = Sessions::default();
        let mut short = entry("00000002", Role::Viewer);
        short.expires = 2_060;
        let (_, s) = sessions.create(&short, HOUR, Instant::now(), 2_000);
        assert_eq!(s.expires_unix, 2_060);
    }

    #[test]
    fn a_revoked_or_changed_token_ends_its_session() {
        let sessions = Sessions::default();
        let operator = entry("00000003", Role::Operator);
        let (cookie, _) = sessions.create(&operator, HOUR, Instant::now(), 2_000);
        let s = sessions.get(&cookie, Instant::now()).unwrap();
        let year = Duration::from_secs(365 * 86_400);
        assert!(s.token_still_valid(std::slice::from_ref(&operator), year, 2_000));
        assert!(!s.token_still_valid(&[], year, 2_000), "revoked");
        let promoted = entry("00000003", Role::Admin);
        assert!(
            !s.token_still_valid(&[promoted], year, 2_000),
            "role changed"
        );
        let mut rehashed = operator.clone();
        rehashed.sha256 = "other".into();
        assert!(
            !s.token_still_valid(&[rehashed], year, 2_000),
            "another token under that id"
        );
        assert!(
            !s.token_still_valid(std::slice::from_ref(&operator), year, 1_000_000),
            "expired"
        );
        assert!(
            !s.token_still_valid(&[operator], Duration::from_secs(10), 2_000),
            "past the cap"
        );
    }

    #[test]
    fn csrf_needs_the_token_and_the_own_origin() {
        let sessions = Sessions::default();
        let (_, s) = sessions.create(&entry("00000004", Role::Admin), HOUR, Instant::now(), 2_000);
        let host = Some("127.0.0.1:8080");
        assert_eq!(check_csrf(&s, Some(&s.csrf), None, host, false), Ok(()));
        assert_eq!(
            check_csrf(
                &s,
                Some(&s.csrf),
                Some("http://127.0.0.1:8080"),
                host,
                false
            ),
            Ok(())
        );
        assert_eq!(
            check_csrf(&s, None, None, host, false),
            Err(CsrfRefusal::Token)
        );
        let wrong = "0".repeat(64);
        assert_eq!(
            check_csrf(&s, Some(&wrong), None, host, false),
            Err(CsrfRefusal::Token)
        );
        assert_eq!(
            check_csrf(&s, Some(&s.csrf[..10]), None, host, false),
            Err(CsrfRefusal::Token)
        );
        for origin in [
            "http://evil.example",
            "https://127.0.0.1:8080",
            "null",
            "http://127.0.0.1:8080.evil",
        ] {
            assert_eq!(
                check_csrf(&s, Some(&s.csrf), Some(origin), host, false),
                Err(CsrfRefusal::Origin),
                "{origin}"
            );
        }
        assert_eq!(
            check_csrf(
                &s,
                Some(&s.csrf),
                Some("https://127.0.0.1:8080"),
                host,
                true
            ),
            Ok(())
        );
        assert_eq!(
            check_csrf(
                &s,
                Some(&s.csrf),
                Some("http://127.0.0.1:8080"),
                None,
                false
            ),
            Err(CsrfRefusal::Origin)
        );
        assert!(
            is_unsafe("POST") && is_unsafe("DELETE") && !is_unsafe("GET") && !is_unsafe("HEAD")
        );
    }

    #[test]
    fn failed_sign_ins_are_limited_per_address_and_per_ipv6_64() {
        let limiter = SignInLimiter::default();
        let now = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..SIGN_IN_FAILURES {
            assert_eq!(limiter.check(a, now), None);
            limiter.failed(a, now);
        }
        assert!(limiter.check(a, now).is_some());
        assert_eq!(limiter.check("192.0.2.2".parse().unwrap(), now), None);
        assert_eq!(
            limiter.check(a, now + SIGN_IN_WINDOW),
            None,
            "the window passed"
        );
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        for _ in 0..SIGN_IN_FAILURES {
            limiter.failed(v6, now);
        }
        assert!(
            limiter
                .check("2001:db8::ffff".parse().unwrap(), now)
                .is_some()
        );
        assert_eq!(limiter.check("2001:db8:0:1::1".parse().unwrap(), now), None);
    }
}
