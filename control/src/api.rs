//! The HTTP API on `api.address`: JSON under `/api/v1/`, bearer tokens with roles.
//!
//! ```text
//! request ─▶ route? (404 / 405) ─▶ bearer token, or session cookie? (401)
//!         ─▶ cookie writes: X-CSRF-Token and Origin (403 csrf) ─▶ role grants? (403)
//!         ─▶ body: ≤ 64 KiB (413), application/json (415), a JSON object (400)
//!         ─▶ handler ─▶ 200 JSON | error JSON {code, message} (400 names the key, 409 locked)
//! ```
//! `PATCH /settings` validates the whole result before anything changes, writes the settings
//! file atomically (temp, fsync, rename, mode 0640; other keys kept) and applies it through the
//! same subscribers as a file reload. Without a settings file the change stays in memory
//! (`persisted: false`). `PATCH /node/config` changes node-scope keys in memory only.
//! Outside `/api/` the listener serves the dashboard's files; `POST /api/v1/session` signs a
//! browser in (`dashboard_routes`); settings changes are diffed, dry-run and versioned
//! (`settings_versions`); `GET /api/v1/lookup` asks the node itself (`lookup`).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

mod dashboard_routes;
mod live_stats;
mod lookup;
mod settings_versions;
mod zone_import;

pub use dashboard_routes::parse_token_request;
pub use lookup::{Lookup, parse_lookup};
pub use settings_versions::parse_rollback;

use crate::config::{self, ConfigError, KeyInfo, Scope, find_key, find_key_exact};
use crate::files::write_atomically;
use crate::health::upstream_totals;
use crate::http::{Handler, HttpError, Request as HttpRequest, Response};
use crate::layers::{FileLayer, Layer};
use crate::objects::ObjectStore;
use crate::objects::routes::{self, Query, Target};
use crate::ops::OpsState;
use crate::reload::Reloadable;
use crate::tokens::{Permission, Refusal, TokenStore};
use kudurru_core::cache_control::NameScope;
use kudurru_storage::{Actor, Watch};
use kudurru_transports::{CacheCommand, CacheControl, CacheReport};

/// Largest request body accepted on the settings routes.
pub const MAX_BODY: usize = 64 * 1024;
/// Largest object accepted (a client group of ten thousand prefixes fits).
pub const MAX_OBJECT_BODY: usize = 1 << 20;
/// Records per page of `/api/v1/zones/{name}/records` when the request names no limit.
const RECORDS_DEFAULT_LIMIT: usize = 500;
/// Most records per page of `/api/v1/zones/{name}/records`.
const RECORDS_MAX_LIMIT: usize = 10_000;

/// The routes: (method, path, permission). The OpenAPI document lists exactly these (a test
/// checks it).
pub const ROUTES: &[(&str, &str, Permission)] = &[
    ("GET", "/api/v1/settings", Permission::SettingsRead),
    ("PATCH", "/api/v1/settings", Permission::SettingsWrite),
    ("GET", "/api/v1/node/config", Permission::SettingsRead),
    ("PATCH", "/api/v1/node/config", Permission::NodeWrite),
    ("GET", "/api/v1/upstreams", Permission::UpstreamsRead),
    ("GET", "/api/v1/info/messages", Permission::InfoRead),
    ("GET", "/api/v1/doctor", Permission::InfoRead),
    ("GET", "/api/v1/cluster", Permission::InfoRead),
    // What `GET /api/v1/cluster` on another member asks of this one (outside /api/v1/: the
    // fleet's own route, not for clients).
    ("GET", "/internal/zones", Permission::InfoRead),
    ("GET", "/api/v1/cache", Permission::CacheRead),
    ("DELETE", "/api/v1/cache", Permission::CacheFlush),
    ("GET", "/api/v1/cache/dump", Permission::CacheDump),
    (
        "POST",
        "/api/v1/blocklists/{name}/refresh",
        Permission::ListsRefresh,
    ),
    ("GET", "/api/v1/blocking/check", Permission::ObjectsRead),
    (
        "GET",
        "/api/v1/zones/{name}/records",
        Permission::ObjectsRead,
    ),
    ("GET", "/api/v1/querylog", Permission::QuerylogRead),
    ("DELETE", "/api/v1/querylog", Permission::QuerylogDelete),
    ("GET", "/api/v1/querylog/tail", Permission::QuerylogRead),
    ("GET", "/api/v1/stats", Permission::QuerylogRead),
    // The dashboard: sessions (POST needs no credentials: it takes a token), settings
    // versions, tokens.
    ("POST", "/api/v1/session", Permission::Session),
    ("GET", "/api/v1/session", Permission::Session),
    ("DELETE", "/api/v1/session", Permission::Session),
    ("GET", "/api/v1/settings/history", Permission::SettingsRead),
    (
        "POST",
        "/api/v1/settings/rollback",
        Permission::SettingsWrite,
    ),
    ("GET", "/api/v1/tokens", Permission::TokensAdmin),
    ("POST", "/api/v1/tokens", Permission::TokensAdmin),
    ("DELETE", "/api/v1/tokens/{id}", Permission::TokensAdmin),
    ("GET", "/api/v1/lookup", Permission::InfoRead),
    // The dashboard's overview and tools (issue 39, round 2).
    ("GET", "/api/v1/stats/live", Permission::InfoRead),
    ("GET", "/api/v1/lameduck", Permission::InfoRead),
    (
        "POST",
        "/api/v1/zones/{name}/import",
        Permission::ObjectsWrite,
    ),
];

/// Whether `path` is the route `pattern`, whose `{name}` segments match one non-empty segment.
pub fn path_matches(pattern: &str, path: &str) -> bool {
    let (mut pattern, mut path) = (pattern.split('/'), path.split('/'));
    loop {
        match (pattern.next(), path.next()) {
            (None, None) => return true,
            (Some(p), Some(segment)) if p.starts_with('{') && p.ends_with('}') => {
                if segment.is_empty() {
                    return false;
                }
            }
            (Some(p), Some(segment)) if p == segment => {}
            _ => return false,
        }
    }
}

/// How long a cache command waits for the cores' reports.
const CACHE_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Entries a dump lists per core unless `limit` says otherwise, and the most it may say.
const DUMP_DEFAULT_LIMIT: usize = 1000;
const DUMP_MAX_LIMIT: usize = 100_000;

/// An API response: status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// JSON body.
    pub body: Value,
    /// The `Allow` header of a 405 (RFC 9110 §15.5.6).
    pub allow: Option<String>,
}

fn ok(body: Value) -> Reply {
    Reply {
        status: 200,
        body,
        allow: None,
    }
}

fn error(status: u16, code: &'static str, message: impl Into<String>) -> Reply {
    Reply {
        status,
        body: HttpError::new(status, code, message).body(),
        allow: None,
    }
}

/// Which table a request's route is in.
#[derive(Debug)]
pub enum Route {
    /// One of [`ROUTES`].
    Fixed,
    /// An object route (`/api/v1/{resource}…`, `/api/v1/audit`).
    Objects(Target),
}

/// A request that passed [`Api::authorize`].
#[derive(Debug)]
pub struct Authorized {
    /// Its route.
    pub route: Route,
    /// Who sent it, as the audit log names them (`token:<id>`).
    pub principal: String,
    /// The role of its token.
    pub role: crate::tokens::Role,
    /// The dashboard session it came with (`None`: a bearer token).
    pub session: Option<crate::dashboard::session::Session>,
}

/// What [`Api::dispatch`] produced.
pub enum Outcome {
    /// A JSON answer.
    Json(Reply),
    /// A watch, streamed as newline-delimited JSON.
    Watch(Watch),
    /// A query-log request, checked: answered on the control thread (it may stream).
    QueryLog(crate::querylog::api::Call),
}

impl From<HttpError> for Reply {
    fn from(e: HttpError) -> Self {
        Self {
            status: e.status,
            body: e.body(),
            allow: e.allow,
        }
    }
}

/// What the API serves from.
pub struct Api {
    /// The effective configuration.
    pub reloadable: Arc<Reloadable>,
    /// Tokens.
    pub tokens: TokenStore,
    /// Counters (upstreams).
    pub ops: Arc<OpsState>,
    /// The object store (`/api/v1/{resource}`, `/api/v1/audit`).
    pub store: Arc<dyn ObjectStore>,
    /// Turns true when the server stops: watch streams end then, so shutdown need not wait
    /// for their clients.
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Every core's cache (`/api/v1/cache`); `None` when no data plane runs (tests).
    pub cache: Option<CacheControl>,
    /// The list manager (`/api/v1/blocklists/{name}/refresh`, `/api/v1/blocking/check`);
    /// `None` when none runs (tests).
    pub blocking: Option<crate::blocking::Handle>,
    /// The zone manager's shared state (`/api/v1/zones/{name}/records`); `None` when none
    /// runs (tests).
    pub zones: Option<Arc<crate::zones::Shared>>,
    /// Host names in upstream URLs and their addresses (doctor); `None` when no bootstrap
    /// resolver runs (tests).
    pub bootstrap: Option<Arc<crate::bootstrap::Bootstrap>>,
    /// The query log (`/api/v1/querylog`, `/api/v1/stats`, doctor); a disabled one unless
    /// serve sets it (tests): its routes answer as a disabled log does.
    pub querylog: crate::querylog::QueryLog,
    /// Held by a change from read to apply: requests are served concurrently, and two PATCHes
    /// of one file must not both read the old document.
    writes: Mutex<()>,
    /// Dashboard sessions (cookies), in memory.
    pub sessions: crate::dashboard::session::Sessions,
    /// Failed sign-ins per client address.
    pub sign_ins: crate::dashboard::session::SignInLimiter,
    /// Whether the listener serves HTTPS (the cookie's `Secure`, the origin's scheme).
    pub tls: bool,
}

/// A request, already read.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `GET`, `PATCH`, …
    pub method: String,
    /// The path (query string removed).
    pub path: String,
    /// The query string, undecoded (empty when none).
    pub query: String,
    /// `Authorization` header.
    pub authorization: Option<String>,
    /// `Content-Type` header.
    pub content_type: Option<String>,
    /// `Accept` header (the query-log export's format).
    pub accept: Option<String>,
    /// The body; `None` when it was longer than [`MAX_BODY`].
    pub body: Option<Vec<u8>>,
    /// The `Cookie` headers, joined with `; `.
    pub cookie: Option<String>,
    /// `X-CSRF-Token` header.
    pub csrf_token: Option<String>,
    /// `Origin` header.
    pub origin: Option<String>,
    /// `Host` header.
    pub host: Option<String>,
}

impl Api {
    /// The API over `reloadable`, with `tokens`, the ops counters and the object store.
    pub fn new(
        reloadable: Arc<Reloadable>,
        tokens: TokenStore,
        ops: Arc<OpsState>,
        store: Arc<dyn ObjectStore>,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        Self {
            reloadable,
            tokens,
            ops,
            store,
            stopping,
            cache: None,
            blocking: None,
            zones: None,
            bootstrap: None,
            querylog: crate::querylog::QueryLog::disabled(),
            writes: Mutex::new(()),
            sessions: crate::dashboard::session::Sessions::default(),
            sign_ins: crate::dashboard::session::SignInLimiter::default(),
            tls: false,
        }
    }

    /// The route of `request`, or 404 / 405 (with the methods the path answers).
    fn route(request: &Request) -> Result<(Route, Permission), Reply> {
        let method = request.method.as_str();
        if let Some(&(_, _, permission)) = ROUTES
            .iter()
            .find(|(m, p, _)| path_matches(p, &request.path) && *m == method)
        {
            return Ok((Route::Fixed, permission));
        }
        let (allowed, target) = match Target::parse(&request.path) {
            Some(target) => match target.permission(method) {
                Some(permission) => return Ok((Route::Objects(target), permission)),
                None => (target.methods().to_vec(), None::<Target>),
            },
            None => (
                ROUTES
                    .iter()
                    .filter(|(_, p, _)| path_matches(p, &request.path))
                    .map(|(m, _, _)| *m)
                    .collect(),
                None,
            ),
        };
        drop(target);
        Err(if allowed.is_empty() {
            error(404, "not_found", format!("no route {}", request.path))
        } else {
            let mut reply = error(
                405,
                "method_not_allowed",
                format!("{} is not allowed on {}", request.method, request.path),
            );
            reply.allow = Some(allowed.join(", "));
            reply
        })
    }

    /// The route and token checks, which read nothing but the method, the path and the
    /// `Authorization` header: 404, 405, 401 or 403, before any body is read. Returns the
    /// route and the principal (`token:<id>`) its writes are audited as.
    pub fn authorize(&self, request: &Request) -> Result<Authorized, Reply> {
        let (route, permission) = Self::route(request)?;
        let max_lifetime = self.reloadable.current().validated.token_max_lifetime;
        let token = request.authorization.as_deref().and_then(bearer_token);
        let Some(token) = token else {
            if let Some(cookie) = request
                .cookie
                .as_deref()
                .and_then(|c| crate::dashboard::session::session_cookie([c]))
            {
                return self.authorize_session(request, cookie, route, permission);
            }
            return Err(error(
                401,
                "unauthorized",
                "send Authorization: Bearer <token> (kudurru token create)",
            ));
        };
        let (role, id) = match self.tokens.identify(token, max_lifetime) {
            Ok(identity) => identity,
            Err(Refusal::Unauthorized(why)) => {
                // Say where this server looks: a token created for another data directory
                // (`kudurru token create --data-dir …`) is the usual cause.
                return Err(error(
                    401,
                    "unauthorized",
                    format!(
                        "{why} (this server reads tokens from {})",
                        self.tokens.path().display()
                    ),
                ));
            }
        };
        if !role.grants(permission) {
            return Err(error(
                403,
                "forbidden",
                format!("role {} lacks {}", role.name(), permission.name()),
            ));
        }
        Ok(Authorized {
            route,
            principal: format!("token:{id}"),
            role,
            session: None,
        })
    }

    /// Answers a request [`Api::authorize`] let through.
    pub fn dispatch(&self, request: &Request, authorized: &Authorized) -> Outcome {
        let Route::Objects(target) = &authorized.route else {
            if crate::querylog::api::is_route(&request.path) {
                return match crate::querylog::api::parse(
                    &request.method,
                    &request.path,
                    &request.query,
                    request.accept.as_deref(),
                    &authorized.principal,
                    crate::querylog::api::now_ns(),
                ) {
                    Ok(call) => Outcome::QueryLog(call),
                    Err(e) => Outcome::Json(e.into()),
                };
            }
            return Outcome::Json(self.dispatch_fixed(request, authorized));
        };
        if Target::takes_body(&request.method) {
            let media = request
                .content_type
                .as_deref()
                .and_then(|t| t.split(';').next())
                .map(|t| t.trim().to_ascii_lowercase());
            let accepted = match media.as_deref() {
                Some("application/json") => true,
                Some("application/merge-patch+json") => request.method == "PATCH",
                _ => false,
            };
            if !accepted {
                return Outcome::Json(error(
                    415,
                    "unsupported_media_type",
                    "send Content-Type: application/json (or application/merge-patch+json for PATCH)",
                ));
            }
        }
        let actor = match Actor::principal(&authorized.principal) {
            Ok(actor) => actor,
            Err(e) => return Outcome::Json(Reply::from(routes::store_error(e))),
        };
        match routes::handle(
            self.store.as_ref(),
            &actor,
            &request.method,
            target,
            &request.query,
            request.body.as_deref(),
        ) {
            Ok(routes::Outcome::Json(status, body)) => Outcome::Json(Reply {
                status,
                body,
                allow: None,
            }),
            Ok(routes::Outcome::Watch(watch)) => Outcome::Watch(watch),
            Err(e) => Outcome::Json(Reply::from(e)),
        }
    }

    fn dispatch_fixed(&self, request: &Request, authorized: &Authorized) -> Reply {
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/api/v1/session") => self.session_info(authorized),
            ("GET", "/api/v1/stats/live") => ok(live_stats::live(&self.ops)),
            ("POST", path) if path_matches("/api/v1/zones/{name}/import", path) => {
                let name = path.split('/').nth(4).unwrap_or_default();
                self.zone_import(name, request, authorized)
            }
            ("GET", "/api/v1/lameduck") => ok(json!({
                "lameduck": self.ops.lameduck.load(std::sync::atomic::Ordering::Relaxed),
                "change": "POST or DELETE /lameduck on the ops listener, from loopback only",
            })),
            ("GET", "/api/v1/settings/history") => self.settings_history(&request.query),
            ("POST", "/api/v1/settings/rollback") => self.rollback(request, authorized),
            ("GET", "/api/v1/tokens") => self.list_tokens(),
            ("POST", "/api/v1/tokens") => self.create_token(request, authorized),
            ("DELETE", path) if path_matches("/api/v1/tokens/{id}", path) => {
                let id = path.split('/').nth(4).unwrap_or_default();
                self.revoke_token(id, authorized)
            }
            ("GET", "/api/v1/settings") => self.get_keys(Scope::Cluster),
            ("GET", "/api/v1/node/config") => self.get_keys(Scope::Node),
            ("GET", "/api/v1/upstreams") => self.upstreams(),
            ("GET", "/api/v1/info/messages") => ok(json!({ "messages": self.messages() })),
            ("GET", "/api/v1/doctor") => self.doctor(),
            ("GET", "/api/v1/cluster") => self.cluster_status(request),
            ("GET", "/internal/zones") => ok(self.member_view()),
            ("GET", "/api/v1/cache") => self.cache_stats(),
            ("DELETE", "/api/v1/cache") => self.cache_flush(&request.query),
            ("GET", "/api/v1/cache/dump") => self.cache_dump(&request.query),
            ("GET", "/api/v1/blocking/check") => self.blocking_check(&request.query),
            ("GET", path) if path_matches("/api/v1/zones/{name}/records", path) => {
                let name = path.split('/').nth(4).unwrap_or_default();
                self.zone_records(name, &request.query)
            }
            ("POST", path) if path_matches("/api/v1/blocklists/{name}/refresh", path) => {
                let name = path.split('/').nth(4).unwrap_or_default();
                self.refresh_list(name)
            }
            ("PATCH", path) => match json_body(request) {
                Ok(patch) if path == "/api/v1/settings" => match dry_run(&request.query) {
                    Ok(dry) => self.patch_settings(&patch, dry, &authorized.principal),
                    Err(reply) => reply,
                },
                Ok(patch) => self.patch_node(&patch),
                Err(reply) => reply,
            },
            _ => error(404, "not_found", format!("no route {}", request.path)),
        }
    }

    /// The list manager, or a 503 when none runs.
    fn blocking(&self) -> Result<&crate::blocking::Handle, Reply> {
        self.blocking
            .as_ref()
            .ok_or_else(|| error(503, "no_list_manager", "no list manager runs"))
    }

    /// Leader-only work on a node that does not lead: 409 `not_leader` naming the leader's
    /// advertised address (send it there), 503 `no_leader` while none is elected or etcd
    /// cannot be reached. `None` on the leader (and on a single node, which always leads).
    fn not_leader(&self) -> Option<Reply> {
        let cluster = self.ops.cluster.as_ref()?;
        match cluster.leadership() {
            crate::cluster::Leadership::Leader { .. } => None,
            crate::cluster::Leadership::Follower { leader } => Some(
                HttpError::new(
                    409,
                    "not_leader",
                    format!(
                        "this node does not lead the fleet; send this to the leader at {leader}"
                    ),
                )
                .with_leader(&leader)
                .into(),
            ),
            crate::cluster::Leadership::NoLeader => Some(error(
                503,
                "no_leader",
                "no node leads the fleet now (an election is under way); retry in a few seconds",
            )),
            crate::cluster::Leadership::Disconnected => Some(error(
                503,
                "no_leader",
                "this node cannot reach etcd, so no leader is known to it; retry later or ask another node",
            )),
        }
    }

    /// `POST /api/v1/blocklists/{name}/refresh`: 202 when a refresh started (skipping the
    /// interval and any failure cooldown), 404 for an unknown list, 409 for a disabled one.
    fn refresh_list(&self, name: &str) -> Reply {
        let handle = match self.blocking() {
            Ok(handle) => handle,
            Err(reply) => return reply,
        };
        // Leadership first: a follower, or a node cut off from etcd, cannot act on the list
        // and may not even read it.
        if let Some(reply) = self.not_leader() {
            return reply;
        }
        let object = match self.store.get(crate::objects::kinds::BLOCK_LIST, name) {
            Ok(object) => object,
            Err(e) => return routes::store_error(e).into(),
        };
        if !kudurru_storage::is_enabled(&object) {
            return error(
                409,
                "disabled",
                format!(
                    "BlockList {name} is disabled ({} is \"false\"); enable it to refresh it",
                    kudurru_storage::ENABLED_ANNOTATION
                ),
            );
        }
        if !handle.refresh(name) {
            return error(503, "no_list_manager", "the list manager has stopped");
        }
        tracing::info!(list = name, "refresh requested over the API");
        Reply {
            status: 202,
            body: json!({ "list": name, "refresh": "started" }),
            allow: None,
        }
    }

    /// `GET /api/v1/blocking/check?name=&client=&clientId=&at=`: which groups, policies, list
    /// and rule decide `name` for that client.
    fn blocking_check(&self, query: &str) -> Reply {
        let handle = match self.blocking() {
            Ok(handle) => handle,
            Err(reply) => return reply,
        };
        let query = match Query::parse(query) {
            Ok(query) => query,
            Err(e) => return e.into(),
        };
        let check = crate::blocking::CheckQuery {
            name: query.get("name"),
            client: query.get("client"),
            client_id: query.get("clientId"),
            at: query.get("at"),
        };
        match handle.shared.check(&check) {
            Ok(body) => ok(body),
            Err(e) => e.into(),
        }
    }

    /// Runs `command` on every core; a 503 without a data plane.
    fn cache_command(&self, command: &CacheCommand) -> Result<Vec<Value>, Reply> {
        let Some(cache) = &self.cache else {
            return Err(error(503, "no_data_plane", "no cores are running"));
        };
        let reports = cache.run(command, CACHE_COMMAND_TIMEOUT);
        Ok(reports
            .into_iter()
            .enumerate()
            .map(|(core, report)| match report {
                None => json!({ "core": core, "error": "the core did not answer in time" }),
                Some(CacheReport::Flushed { shard, l1 }) => {
                    json!({ "core": core, "removed": shard + l1, "shard": shard, "l1": l1 })
                }
                Some(CacheReport::Stats(s)) => json!({
                    "core": core, "entries": s.entries, "capacity": s.capacity,
                    "l1Entries": s.l1_entries, "l1Capacity": s.l1_capacity,
                    "hits": s.hits, "misses": s.misses,
                }),
                Some(CacheReport::Dump { entries, total }) => json!({
                    "core": core,
                    "total": total,
                    "truncated": total > entries.len(),
                    "entries": entries.iter().map(|e| json!({
                        "name": e.name, "type": e.rtype, "class": e.class, "ttl": e.ttl,
                        "rcode": e.rcode, "kind": e.kind,
                    })).collect::<Vec<_>>(),
                }),
            })
            .collect())
    }

    fn cache_stats(&self) -> Reply {
        match self.cache_command(&CacheCommand::Stats) {
            Ok(cores) => ok(json!({ "cores": cores })),
            Err(reply) => reply,
        }
    }

    /// `DELETE /api/v1/cache?name=NAME&subtree=true|false`: no name flushes everything.
    fn cache_flush(&self, query: &str) -> Reply {
        let query = match Query::parse(query) {
            Ok(query) => query,
            Err(e) => return e.into(),
        };
        let subtree = match query.get("subtree") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return HttpError::new(
                    400,
                    "invalid_value",
                    format!("subtree must be true or false, not {other:?}"),
                )
                .with_key("subtree")
                .into();
            }
        };
        let scope = match query.get("name") {
            None => NameScope::All,
            Some(name) => match NameScope::parse(name, subtree) {
                Ok(scope) => scope,
                Err(e) => {
                    return HttpError::new(400, "invalid_value", e.to_string())
                        .with_key("name")
                        .into();
                }
            },
        };
        match self.cache_command(&CacheCommand::Flush(scope)) {
            Ok(cores) => {
                let removed: u64 = cores.iter().filter_map(|c| c["removed"].as_u64()).sum();
                tracing::info!(
                    name = query.get("name").unwrap_or("(all)"),
                    subtree,
                    removed,
                    "cache flushed"
                );
                ok(json!({ "removed": removed, "cores": cores }))
            }
            Err(reply) => reply,
        }
    }

    /// `GET /api/v1/zones/{name}/records?limit=N&continue=T`: the records a zone serves, SOA
    /// first then in canonical order, a page at a time; the token names the serial it was
    /// read at, so a page of another version is 410 (list again).
    /// `POST /api/v1/zones/{name}/import[?dryRun=true]`: a zone file (`text/dns`) as the
    /// Zone's RecordSets ([`zone_import`]).
    fn zone_import(&self, name: &str, request: &Request, authorized: &Authorized) -> Reply {
        let query = match Query::parse(&request.query) {
            Ok(query) => query,
            Err(e) => return e.into(),
        };
        let dry_run = match query.get("dryRun") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return HttpError::new(
                    400,
                    "invalid_value",
                    format!("dryRun must be true or false, not {other:?}"),
                )
                .with_key("dryRun")
                .into();
            }
        };
        let media = request
            .content_type
            .as_deref()
            .and_then(|t| t.split(';').next())
            .map(|t| t.trim().to_ascii_lowercase());
        if !matches!(media.as_deref(), Some("text/dns" | "text/plain")) {
            return error(
                415,
                "unsupported_media_type",
                "send the zone file with Content-Type: text/dns (RFC 4027)",
            );
        }
        let Some(body) = &request.body else {
            return error(
                413,
                "too_large",
                format!("bodies are limited to {MAX_BODY} bytes"),
            );
        };
        let actor = match Actor::principal(&authorized.principal) {
            Ok(actor) => actor,
            Err(e) => return routes::store_error(e).into(),
        };
        let _writing = self
            .writes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        zone_import::import(self.store.as_ref(), &actor, name, body, dry_run)
    }

    fn zone_records(&self, name: &str, query: &str) -> Reply {
        let query = match Query::parse(query) {
            Ok(query) => query,
            Err(e) => return e.into(),
        };
        let limit = match query.get("limit").map(str::parse::<usize>) {
            None => RECORDS_DEFAULT_LIMIT,
            Some(Ok(limit)) if (1..=RECORDS_MAX_LIMIT).contains(&limit) => limit,
            Some(_) => {
                return HttpError::new(
                    400,
                    "invalid_value",
                    format!("limit must be 1 to {RECORDS_MAX_LIMIT}"),
                )
                .with_key("limit")
                .into();
            }
        };
        let Some(zones) = &self.zones else {
            return error(503, "no_zone_manager", "no zone manager runs");
        };
        let view = zones.served().unwrap_or_default();
        let Some(zone) = view.iter().find(|z| z.name == name) else {
            return error(
                404,
                "not_found",
                format!(
                    "Zone {name} serves no data (no such Zone, not loaded yet, or a forward zone)"
                ),
            );
        };
        let start = match query.get("continue") {
            None => 0,
            Some(token) => match token.split_once(':').and_then(|(serial, at)| {
                Some((serial.parse::<u32>().ok()?, at.parse::<usize>().ok()?))
            }) {
                Some((serial, at)) if serial == zone.serial => at,
                Some(_) => {
                    return error(
                        410,
                        "expired",
                        format!(
                            "the zone changed since this list began (serial now {}); list again",
                            zone.serial
                        ),
                    );
                }
                None => {
                    return HttpError::new(
                        400,
                        "invalid_value",
                        "not a continue token from this API",
                    )
                    .with_key("continue")
                    .into();
                }
            },
        };
        // Paged from the compiled zone itself, in its canonical order: no sorted copy is kept.
        let total = zone.zone.record_count();
        let end = start.saturating_add(limit).min(total);
        let page: Vec<Value> = zone
            .zone
            .records()
            .skip(start)
            .take(end.saturating_sub(start))
            .map(|r| {
                json!({
                    "name": crate::zones::zone_text(&r.owner),
                    "type": kudurru_core::zone::file::type_text(r.rtype),
                    "ttl": r.ttl,
                    "rdata": kudurru_core::zone::file::rdata_text(r.rtype, &r.rdata),
                })
            })
            .collect();
        let mut body = json!({
            "zone": crate::zones::zone_text(&zone.apex),
            "serial": zone.serial,
            "total": total,
            "records": page,
        });
        if end < total {
            body["continue"] = json!(format!("{}:{end}", zone.serial));
        }
        ok(body)
    }

    /// `GET /api/v1/cache/dump?limit=N`: at most N fresh answers per core (default 1000).
    fn cache_dump(&self, query: &str) -> Reply {
        let query = match Query::parse(query) {
            Ok(query) => query,
            Err(e) => return e.into(),
        };
        let limit = match query.get("limit").map(str::parse::<usize>) {
            None => DUMP_DEFAULT_LIMIT,
            Some(Ok(limit)) if (1..=DUMP_MAX_LIMIT).contains(&limit) => limit,
            Some(_) => {
                return HttpError::new(
                    400,
                    "invalid_value",
                    format!("limit must be 1 to {DUMP_MAX_LIMIT}"),
                )
                .with_key("limit")
                .into();
            }
        };
        match self.cache_command(&CacheCommand::Dump { limit }) {
            Ok(cores) => ok(json!({ "cores": cores })),
            Err(reply) => reply,
        }
    }

    fn get_keys(&self, scope: Scope) -> Reply {
        let running = self.reloadable.current();
        let mut values = Map::new();
        let mut sources = Map::new();
        let mut restart = Vec::new();
        let full = serde_json::to_value(&running.config).unwrap_or(Value::Null);
        for key in config::keys().filter(|k| k.scope == scope) {
            insert_path(
                &mut values,
                key.key,
                lookup(&full, key.key).cloned().unwrap_or(Value::Null),
            );
            sources.insert(key.key.into(), running.sources.of(key.key).label().into());
            if key.restart_required {
                restart.push(key.key);
            }
        }
        let mut body = json!({ "values": values, "sources": sources, "restartRequired": restart });
        if scope == Scope::Cluster {
            body["settingsFile"] = self
                .reloadable
                .settings_path()
                .map_or(Value::Null, |p| p.display().to_string().into());
        }
        ok(body)
    }

    /// Diagnoses of the running configuration, most severe first.
    pub fn messages(&self) -> Vec<Value> {
        let running = self.reloadable.current();
        let stats = &self.reloadable.stats;
        let mut out = Vec::new();
        let mut push = |severity: &str, code: &str, message: String| {
            out.push(json!({ "severity": severity, "code": code, "message": message }));
        };
        if let Some(e) = stats.last_error.lock().ok().and_then(|e| e.clone()) {
            push(
                "error",
                "settings_rejected",
                format!("the last settings reload was refused, the previous settings stay: {e}"),
            );
        }
        let pending = stats
            .pending_restart
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default();
        if !pending.is_empty() {
            push(
                "warning",
                "restart_pending",
                format!(
                    "changed but restart-bound, not applied until a restart: {}",
                    pending.join(", ")
                ),
            );
        }
        let public = running
            .validated
            .listeners
            .iter()
            .any(|l| !l.addr.ip().is_loopback());
        if public && !running.validated.settings.ratelimit.enabled() {
            push("warning", "ratelimit_off", "a listener is on a non-loopback address and the rate limiter is off (ratelimit.qps = 0)".into());
        }
        if public
            && running.validated.settings.acl.is_open()
            && !running.validated.settings.ratelimit.enabled()
        {
            push("warning", "open_resolver", "an open resolver: a listener is on a non-loopback address, server.allow admits every client (0.0.0.0/0 or ::/0) and the rate limiter is off (ratelimit.qps = 0); it can be used to amplify attacks on others".into());
        }
        if !running.validated.ops_address.ip().is_loopback() {
            push(
                "warning",
                "ops_not_loopback",
                format!(
                    "the unauthenticated ops listener is on {}",
                    running.validated.ops_address
                ),
            );
        }
        if let Some(blocking) = &self.blocking {
            for diagnosis in blocking.shared.diagnoses() {
                push(diagnosis.severity, diagnosis.code, diagnosis.message);
            }
        }
        if let Some(zones) = &self.zones {
            for diagnosis in zones.diagnoses() {
                push(diagnosis.severity, diagnosis.code, diagnosis.message);
            }
        }
        if self.reloadable.settings_path().is_none() {
            push(
                "info",
                "no_settings_file",
                "no settings file: PATCH /api/v1/settings changes stay in memory".into(),
            );
        }
        out.sort_by_key(|m| match m["severity"].as_str() {
            Some("error") => 0,
            Some("warning") => 1,
            _ => 2,
        });
        out
    }

    /// `GET /api/v1/cluster`: this node's role, the leader, the members (with each one's
    /// snapshot revision and zone serials, asked of the member with the caller's bearer
    /// token) and etcd's revision; a single node says `driver: none`.
    fn cluster_status(&self, request: &Request) -> Reply {
        match &self.ops.cluster {
            Some(cluster) => {
                let own = serde_json::from_value(self.member_view()).unwrap_or_else(|_| {
                    crate::cluster::peers::MemberView {
                        snapshot_revision: cluster.snapshot_revision(),
                        zones: Vec::new(),
                    }
                });
                let token = request
                    .authorization
                    .as_deref()
                    .and_then(bearer_token)
                    .map(str::to_owned);
                ok(crate::cluster::status(
                    cluster,
                    Some(crate::cluster::AskMembers { own, token }),
                ))
            }
            None => {
                ok(json!({ "driver": "none", "role": "leader", "connected": true, "members": [] }))
            }
        }
    }

    /// `GET /internal/zones`: this node's snapshot revision and the zones it serves with
    /// their serials (what another member's `GET /api/v1/cluster` lists for this one).
    fn member_view(&self) -> Value {
        let mut view = match &self.zones {
            Some(zones) => zones.internal_json(),
            None => json!({ "zones": [] }),
        };
        view["snapshotRevision"] = self
            .ops
            .cluster
            .as_ref()
            .map_or(0, crate::cluster::ClusterHandle::snapshot_revision)
            .into();
        view
    }

    fn doctor(&self) -> Reply {
        use std::os::unix::fs::PermissionsExt as _;
        let running = self.reloadable.current();
        let mut checks = Vec::new();
        let mut check = |name: &str, status: &str, message: String| {
            checks.push(json!({ "name": name, "status": status, "message": message }));
        };
        let node = running.sources.of("server.listen");
        check(
            "config_source",
            "ok",
            format!(
                "listeners from {}; {} keys set outside the defaults",
                node.label(),
                config::keys()
                    .filter(|k| running.sources.of(k.key) != Layer::Default)
                    .count()
            ),
        );
        match (
            self.reloadable.settings_path(),
            self.reloadable
                .stats
                .last_error
                .lock()
                .ok()
                .and_then(|e| e.clone()),
        ) {
            (_, Some(e)) => check("settings_file", "fail", format!("last reload refused: {e}")),
            (Some(path), None) if path.exists() => {
                check("settings_file", "ok", format!("{} applied", path.display()))
            }
            (Some(path), None) => check(
                "settings_file",
                "warn",
                format!("{} does not exist (an empty layer)", path.display()),
            ),
            (None, None) => check(
                "settings_file",
                "warn",
                "none: settings changed through the API are not persisted".into(),
            ),
        }
        check(
            "api",
            "ok",
            format!("serving; tokens in {}", self.tokens.path().display()),
        );
        match self.tokens.list() {
            Ok(list) if list.is_empty() => check(
                "tokens",
                "warn",
                "no tokens: create one with `kudurru token create --role admin`".into(),
            ),
            Ok(list) => {
                let roles: Vec<&str> = list.iter().map(|e| e.role.name()).collect();
                check(
                    "tokens",
                    "ok",
                    format!("{} tokens ({})", list.len(), roles.join(", ")),
                );
            }
            Err(e) => check("tokens", "fail", e.to_string()),
        }
        let dir = &running.validated.data_dir;
        match std::fs::metadata(dir) {
            Ok(meta) if meta.permissions().mode() & 0o002 != 0 => check(
                "data_dir",
                "fail",
                format!("{} is world-writable", dir.display()),
            ),
            Ok(meta) if meta.permissions().readonly() => check(
                "data_dir",
                "fail",
                format!("{} is read-only", dir.display()),
            ),
            Ok(_) => match tempfile_probe(dir) {
                Ok(()) => check("data_dir", "ok", format!("{} is writable", dir.display())),
                Err(e) => check(
                    "data_dir",
                    "fail",
                    format!("{} is not writable: {e}", dir.display()),
                ),
            },
            Err(e) => check("data_dir", "warn", format!("{}: {e}", dir.display())),
        }
        // The data directory and its files (objects.redb, tokens.json): no access for group
        // or others, as they are created.
        match kudurru_storage::files::check_modes(dir) {
            Ok(warnings) if warnings.is_empty() => check(
                "databases",
                "ok",
                "the data directory and its files are private (0700, 0600)".into(),
            ),
            Ok(warnings) => check(
                "databases",
                "warn",
                warnings
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            Err(e) => check("databases", "warn", e.to_string()),
        }
        let (status, message) = self.querylog.health();
        check("querylog", status, message);
        let messages = self.messages();
        let worst = messages
            .first()
            .and_then(|m| m["severity"].as_str())
            .unwrap_or("info");
        let status = match worst {
            "error" => "fail",
            "warning" => "warn",
            _ => "ok",
        };
        check(
            "diagnoses",
            status,
            format!("{} messages (GET /api/v1/info/messages)", messages.len()),
        );
        for t in upstream_totals(&self.ops) {
            let (status, message) = if t.down_cores > 0 {
                (
                    "fail",
                    format!(
                        "out of rotation on {} core(s) after consecutive failures; probed every upstream.healthCheckInterval ({} of {} attempts failed)",
                        t.down_cores, t.errors, t.queries
                    ),
                )
            } else if t.queries == 0 {
                ("ok", "no queries sent yet".to_owned())
            } else if !t.healthy() {
                (
                    "fail",
                    format!("{} of {} attempts failed", t.errors, t.queries),
                )
            } else if t.errors * 10 >= t.queries {
                (
                    "warn",
                    format!(
                        "{} of {} attempts failed; mean latency {:.1} ms",
                        t.errors,
                        t.queries,
                        t.mean_latency_ms()
                    ),
                )
            } else {
                (
                    "ok",
                    format!(
                        "{} queries, {} failed; mean latency {:.1} ms",
                        t.queries,
                        t.errors,
                        t.mean_latency_ms()
                    ),
                )
            };
            check(&format!("upstream {}", t.upstream), status, message);
        }
        // Forwarding loops: the last probe round's verdict per upstream.
        for probe in self.ops.loops.iter().flat_map(|l| l.statuses()) {
            let (status, message) = probe.check();
            check(&format!("loop {}", probe.upstream), status, message);
        }
        for (host, status) in self.bootstrap.iter().flat_map(|b| b.statuses()) {
            let (state, message) = match (&status.addr, &status.error, &status.from) {
                (None, Some(error), _) => (
                    "fail",
                    format!(
                        "not resolved through upstream.bootstrap (its upstreams are left out): {error}"
                    ),
                ),
                (None, None, _) => ("warn", "not resolved yet".to_owned()),
                (Some(addr), Some(error), _) => (
                    "warn",
                    format!("re-resolution failed, keeping {addr}: {error}"),
                ),
                (Some(addr), None, from) => (
                    "ok",
                    format!(
                        "{addr} (through {})",
                        from.map_or_else(|| "?".to_owned(), |f| f.to_string())
                    ),
                ),
            };
            check(&format!("bootstrap {host}"), state, message);
        }
        let ready = (self.ops.ready)();
        let lameduck = self.ops.lameduck.load(std::sync::atomic::Ordering::Relaxed);
        match (ready, lameduck) {
            (true, false) => check("readiness", "ok", "every core serves every listener".into()),
            (true, true) => check(
                "readiness",
                "warn",
                "in lameduck: the health name answers SERVFAIL".into(),
            ),
            (false, _) => check("readiness", "fail", "not every core is serving yet".into()),
        }
        if let Some(cluster) = self.ops.cluster.as_ref().filter(|c| c.is_fleet()) {
            let status = crate::cluster::status(cluster, None);
            let members = status["members"].as_array().map(|m| {
                m.iter()
                    .filter_map(|m| m["name"].as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            let leader = status["leader"].as_str().unwrap_or("none");
            match (status["connected"] == true, members) {
                (true, Some(members)) => check(
                    "cluster",
                    if status["leader"].is_null() {
                        "warn"
                    } else {
                        "ok"
                    },
                    format!(
                        "connected to etcd; this node is {}; leader {leader}; members: {members}",
                        status["role"].as_str().unwrap_or("?")
                    ),
                ),
                (_, members) => check(
                    "cluster",
                    "fail",
                    format!(
                        "etcd cannot be reached ({}): answers come from the last snapshot, writes answer 503, no leader work here{}",
                        status["error"].as_str().unwrap_or("lease not kept alive"),
                        members
                            .map(|m| format!("; members: {m}"))
                            .unwrap_or_default()
                    ),
                ),
            }
        }
        let count = |s: &str| checks.iter().filter(|c| c["status"] == s).count();
        let counts = json!({ "ok": count("ok"), "warn": count("warn"), "fail": count("fail") });
        ok(json!({ "checks": checks, "counts": counts }))
    }

    fn upstreams(&self) -> Reply {
        let list: Vec<Value> = upstream_totals(&self.ops)
            .iter()
            .map(|t| {
                json!({
                    "upstream": t.upstream,
                    "queries": t.queries,
                    "errors": t.errors,
                    "answered": t.answered,
                    "mismatchedReplies": t.mismatched,
                    "tcpRetries": t.tcp_retries,
                    "tcpConnections": t.tcp_connections,
                    "meanLatencyMs": t.mean_latency_ms(),
                    "healthy": t.healthy(),
                })
            })
            .collect();
        ok(json!({ "upstreams": list }))
    }

    fn patch_settings(&self, patch: &Map<String, Value>, dry_run: bool, principal: &str) -> Reply {
        let keys = match patched_keys(patch, Scope::Cluster) {
            Ok(keys) => keys,
            Err(reply) => return reply,
        };
        let _writing = self
            .writes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(reply) = self.locked(&keys) {
            return reply;
        }
        if let Some(reply) = self.managed_by_file() {
            return reply;
        }
        // A fleet's PATCH goes to etcd. A dry run changes nothing: the patch is merged into the
        // fleet's document as this node last applied it, and checked and compared below.
        if let Some(etcd) = self.ops.cluster.as_ref().and_then(|c| c.etcd())
            && !dry_run
        {
            return self.patch_fleet_settings(etcd, patch, &keys, principal);
        }
        let mut document = match self.settings_document() {
            Ok(document) => document,
            Err(reply) => return reply,
        };
        merge(&mut document, patch, "");
        let text = toml::to_string(&document).unwrap_or_default();
        self.apply_settings_text(&text, dry_run, principal, Some(restart_bound(&keys)))
    }

    /// In a fleet, a node with its own settings file follows the file, not etcd: its settings
    /// writes (PATCH, rollback) answer 409 `managed_by` naming the file.
    fn managed_by_file(&self) -> Option<Reply> {
        self.ops.cluster.as_ref().and_then(|c| c.etcd())?;
        let path = self.reloadable.settings_path()?;
        Some(error(
            409,
            "managed_by",
            format!(
                "this node's cluster settings are managed by its settings file {} (settingsFile), which wins over the fleet's settings in etcd; change the file, or remove settingsFile to follow the fleet",
                path.display()
            ),
        ))
    }

    /// The cluster settings document to change: the settings file as it is now, or the
    /// in-memory settings without one.
    fn settings_document(&self) -> Result<toml::Table, Reply> {
        let (current, _) = self.reloadable.overlays();
        let Some(path) = self.reloadable.settings_path() else {
            return Ok(current.map(|layer| to_table(&layer)).unwrap_or_default());
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => text.parse().map_err(|e| {
                error(
                    409,
                    "settings_file_invalid",
                    format!(
                        "{} does not parse ({e}); fix it before patching",
                        path.display()
                    ),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(toml::Table::new()),
            Err(e) => Err(error(
                409,
                "settings_file_unreadable",
                format!("{}: {e}", path.display()),
            )),
        }
    }

    /// Validates `text` as the whole cluster settings layer and, unless `dry_run`, persists
    /// it, applies it and records it as a settings version by `principal`. Called with
    /// [`Api::writes`] held. Both answers list the effective values that change.
    fn apply_settings_text(
        &self,
        text: &str,
        dry_run: bool,
        principal: &str,
        restart_keys: Option<Vec<&'static str>>,
    ) -> Reply {
        let path = self.reloadable.settings_path();
        let file_path = path.clone().unwrap_or_else(|| "(api)".into());
        let layer = match FileLayer::parse_settings(&file_path, text) {
            Ok(layer) => layer,
            Err(e) => return config_error(&e),
        };
        let node = self.reloadable.overlays().1;
        let next = match self.reloadable.check(Some(&layer), node.as_ref()) {
            Ok(next) => next,
            Err(e) => return config_error(&e),
        };
        let changes = settings_versions::changes(&self.reloadable.current(), &next);
        if dry_run {
            let restart = changes.iter().any(|c| c["restartRequired"] == true);
            return ok(json!({ "dryRun": true, "changes": changes, "restartRequired": restart }));
        }
        // In a fleet (no settings file: patch_settings answered managed_by otherwise) the
        // document goes to etcd, whatever it holds now: a rollback replaces it whole.
        if path.is_none()
            && let Some(etcd) = self.ops.cluster.as_ref().and_then(|c| c.etcd())
        {
            return self.write_fleet_settings(
                etcd,
                |_| Ok(text.to_owned()),
                principal,
                restart_keys,
            );
        }
        let persisted = match &path {
            Some(path) => match persist(path, text) {
                Ok(()) => true,
                Err(e) => {
                    return error(
                        500,
                        "persist_failed",
                        format!("cannot write {}: {e}", path.display()),
                    );
                }
            },
            None => false,
        };
        match self.reloadable.apply(Some(&layer)) {
            Ok(changed) => {
                // A rollback names no keys: the restart-bound ones among those it changed.
                let restart_keys = restart_keys.unwrap_or_else(|| {
                    changes
                        .iter()
                        .filter(|c| c["restartRequired"] == true)
                        .filter_map(|c| c["key"].as_str().and_then(find_key_exact))
                        .map(|k| k.key)
                        .collect()
                });
                let mut body = json!({
                    "persisted": persisted,
                    "changed": changed,
                    "restartRequired": restart_keys,
                    "changes": changes,
                });
                if !changes.is_empty() {
                    body["version"] = self.record_settings_version(principal, text, &changes);
                }
                ok(body)
            }
            Err(e) => config_error(&e),
        }
    }

    /// A PATCH of the fleet's settings: `patch` merged into the document in etcd as it is at
    /// the write (compare-and-swap); see [`Api::write_fleet_settings`].
    fn patch_fleet_settings(
        &self,
        etcd: &crate::cluster::EtcdInfo,
        patch: &Map<String, Value>,
        keys: &[&'static KeyInfo],
        principal: &str,
    ) -> Reply {
        use crate::cluster::settings::WriteError;
        self.write_fleet_settings(
            etcd,
            |current| {
                let mut document: toml::Table = current
                    .parse()
                    .map_err(|e: toml::de::Error| WriteError::Stored(e.to_string()))?;
                merge(&mut document, patch, "");
                Ok(toml::to_string(&document).unwrap_or_default())
            },
            principal,
            Some(restart_bound(keys)),
        )
    }

    /// Writes the fleet's settings document to etcd (compare-and-swap: `change` gets the
    /// stored text and returns the new one, checked before it is written), applies it here at
    /// once (every other node applies it from its watch) and records it as a settings version
    /// by `principal`. Called with [`Api::writes`] held; the answer is a PATCH's.
    fn write_fleet_settings(
        &self,
        etcd: &crate::cluster::EtcdInfo,
        change: impl Fn(&str) -> Result<String, crate::cluster::settings::WriteError>,
        principal: &str,
        restart_keys: Option<Vec<&'static str>>,
    ) -> Reply {
        use crate::cluster::settings::{SETTINGS_SOURCE, WriteError, write};
        let source = Path::new(SETTINGS_SOURCE);
        let written = write(etcd, |current| {
            let text = change(current)?;
            let layer = FileLayer::parse_settings(source, &text)?;
            let node = self.reloadable.overlays().1;
            self.reloadable.check(Some(&layer), node.as_ref())?;
            Ok(text)
        });
        let text = match written {
            Ok(text) => text,
            Err(WriteError::Invalid(e)) => return config_error(&e),
            Err(e @ WriteError::Stored(_)) => {
                return error(409, "settings_invalid", e.to_string());
            }
            Err(e @ WriteError::Contended(_)) => return error(409, "conflict", e.to_string()),
            Err(e) => {
                return error(
                    503,
                    "cluster_unavailable",
                    format!("the fleet's settings could not be written: {e}"),
                );
            }
        };
        let layer = match FileLayer::parse_settings(source, &text) {
            Ok(layer) => layer,
            Err(e) => return config_error(&e),
        };
        let node = self.reloadable.overlays().1;
        let changes = match self.reloadable.check(Some(&layer), node.as_ref()) {
            Ok(next) => settings_versions::changes(&self.reloadable.current(), &next),
            Err(e) => return config_error(&e),
        };
        match self.reloadable.apply(Some(&layer)) {
            Ok(changed) => {
                let restart_keys = restart_keys.unwrap_or_else(|| {
                    changes
                        .iter()
                        .filter(|c| c["restartRequired"] == true)
                        .filter_map(|c| c["key"].as_str().and_then(find_key_exact))
                        .map(|k| k.key)
                        .collect()
                });
                let mut body = json!({
                    "persisted": true,
                    "changed": changed,
                    "restartRequired": restart_keys,
                    "changes": changes,
                });
                if !changes.is_empty() {
                    body["version"] = self.record_settings_version(principal, &text, &changes);
                }
                ok(body)
            }
            Err(e) => config_error(&e),
        }
    }

    fn patch_node(&self, patch: &Map<String, Value>) -> Reply {
        let keys = match patched_keys(patch, Scope::Node) {
            Ok(keys) => keys,
            Err(reply) => return reply,
        };
        let _writing = self
            .writes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(reply) = self.locked(&keys) {
            return reply;
        }
        let (_, node) = self.reloadable.overlays();
        let mut document = node.map(|layer| to_table(&layer)).unwrap_or_default();
        merge(&mut document, patch, "");
        let text = toml::to_string(&document).unwrap_or_default();
        let layer = match FileLayer::parse(Path::new("(api node config)"), &text) {
            Ok(layer) => layer,
            Err(e) => return config_error(&e),
        };
        let settings = self.reloadable.overlays().0;
        if let Err(e) = self.reloadable.check(settings.as_ref(), Some(&layer)) {
            return config_error(&e);
        }
        match self.reloadable.apply_node(layer) {
            Ok(changed) => ok(json!({
                "persisted": false,
                "changed": changed,
                "restartRequired": restart_bound(&keys),
            })),
            Err(e) => config_error(&e),
        }
    }

    /// 409 when a patched key is held by the environment or a flag (a higher layer).
    fn locked(&self, keys: &[&'static KeyInfo]) -> Option<Reply> {
        let running = self.reloadable.current();
        keys.iter().find_map(|k| {
            let source = running.sources.of(k.key);
            matches!(source, Layer::Env | Layer::Flag).then(|| {
                error(
                    409,
                    "locked",
                    format!(
                        "{} is set by the {} ({}); that layer wins over the API",
                        k.key,
                        if source == Layer::Env {
                            "environment"
                        } else {
                            "command line"
                        },
                        if source == Layer::Env {
                            k.env_var()
                        } else {
                            "flag".into()
                        }
                    ),
                )
            })
        })
    }
}

/// Creates and removes a file in `dir`.
fn tempfile_probe(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// The `dryRun` query parameter: `true`, or `false` when absent.
fn dry_run(query: &str) -> Result<bool, Reply> {
    let query = Query::parse(query).map_err(Reply::from)?;
    match query.get("dryRun") {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(error(
            400,
            "invalid_value",
            format!("dryRun must be true or false, not {other:?}"),
        )
        .with_key("dryRun")),
    }
}

fn restart_bound(keys: &[&'static KeyInfo]) -> Vec<&'static str> {
    keys.iter()
        .filter(|k| k.restart_required)
        .map(|k| k.key)
        .collect()
}

fn config_error(e: &ConfigError) -> Reply {
    let key = match e {
        ConfigError::Value { key, .. } | ConfigError::NotSharable { key, .. } => Some(*key),
        _ => None,
    };
    let mut reply = error(400, "invalid_value", e.to_string());
    if let Some(key) = key {
        reply.body["key"] = key.into();
    }
    reply
}

fn persist(path: &Path, text: &str) -> std::io::Result<()> {
    write_atomically(path, text.as_bytes(), 0o640)
}

fn json_body(request: &Request) -> Result<Map<String, Value>, Reply> {
    let Some(body) = &request.body else {
        return Err(error(
            413,
            "too_large",
            format!("bodies are limited to {MAX_BODY} bytes"),
        ));
    };
    let json_type = request
        .content_type
        .as_deref()
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return Err(error(
            415,
            "unsupported_media_type",
            "send Content-Type: application/json",
        ));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(error(
            400,
            "invalid_json",
            "the body must be a JSON object of keys",
        )),
        Err(e) => Err(error(400, "invalid_json", e.to_string())),
    }
}

/// The keys a patch sets (leaves of nested objects, or dotted names at the top level), each
/// checked against `scope`.
fn patched_keys(patch: &Map<String, Value>, scope: Scope) -> Result<Vec<&'static KeyInfo>, Reply> {
    let mut keys: Vec<&'static KeyInfo> = Vec::new();
    let mut stack: Vec<(String, &Map<String, Value>)> = vec![(String::new(), patch)];
    while let Some((prefix, map)) = stack.pop() {
        for (name, value) in map {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            match (find_key_exact(&path), value) {
                (Some(key), _) if keys.iter().any(|k| k.key == key.key) => {
                    return Err(error(
                        400,
                        "duplicate_key",
                        format!("{} is set twice in one patch (dotted and nested)", key.key),
                    )
                    .with_key(key.key));
                }
                (Some(key), value) => {
                    check_value(key, value)?;
                    keys.push(key);
                }
                (None, Value::Object(inner))
                    if config::keys().any(|k| k.key.starts_with(&format!("{path}."))) =>
                {
                    stack.push((path, inner));
                }
                (None, _) => {
                    let hint = find_key(&path)
                        .map(|k| format!("; keys are case-sensitive: did you mean {}?", k.key))
                        .unwrap_or_else(|| " (see docs/configuration.md)".into());
                    return Err(
                        error(400, "unknown_key", format!("no key {path:?}{hint}")).with_key(&path)
                    );
                }
            }
        }
    }
    for key in &keys {
        if key.host_only {
            return Err(error(
                400,
                "host_only",
                format!(
                    "{} can only be set on the host (node file, environment or flags)",
                    key.key
                ),
            )
            .with_key(key.key));
        }
        if key.scope != scope {
            let (code, hint) = match scope {
                Scope::Cluster => ("node_scope", "use /api/v1/node/config"),
                Scope::Node => ("cluster_scope", "use /api/v1/settings"),
            };
            return Err(error(
                400,
                code,
                format!(
                    "{} is not {}-scope; {hint}",
                    key.key,
                    if scope == Scope::Cluster {
                        "cluster"
                    } else {
                        "node"
                    }
                ),
            )
            .with_key(key.key));
        }
    }
    Ok(keys)
}

/// The credentials of an `Authorization: Bearer <token>` header; the scheme is matched
/// case-insensitively (RFC 9110 §11.1).
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// A settings PATCH body checked and merged into an empty document, as `PATCH /settings`
/// (`Scope::Cluster`) or `/node/config` (`Scope::Node`) would merge it into the current one;
/// the error is the answer the API would send.
pub fn parse_patch(body: &[u8], scope: Scope) -> Result<toml::Table, Reply> {
    let patch = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => map,
        Ok(_) => {
            return Err(error(
                400,
                "invalid_json",
                "the body must be a JSON object of keys",
            ));
        }
        Err(e) => return Err(error(400, "invalid_json", e.to_string())),
    };
    patched_keys(&patch, scope)?;
    let mut document = toml::Table::new();
    merge(&mut document, &patch, "");
    Ok(document)
}

/// Checks one patched value against its key's type, so a wrong type is an error naming the
/// key rather than a parse error of the merged document.
fn check_value(key: &'static KeyInfo, value: &Value) -> Result<(), Reply> {
    let invalid =
        |why: String| error(400, "invalid_value", format!("{}: {why}", key.key)).with_key(key.key);
    let toml_value =
        to_toml(value).ok_or_else(|| invalid("null and nested values are not settings".into()))?;
    let mut document = toml::Table::new();
    insert_toml(&mut document, key.key, toml_value);
    let text = toml::to_string(&document).unwrap_or_default();
    match FileLayer::parse(Path::new("(api)"), &text) {
        Ok(_) => Ok(()),
        Err(ConfigError::Parse { message, .. }) => {
            // toml's message ends with serde's reason (`invalid type: string "abc", expected
            // u32`) after the excerpt of the one-line document.
            let reason = config::plain_reason(message.lines().last().unwrap_or(&message).trim());
            Err(invalid(format!("{reason} (got {value})")))
        }
        Err(e) => Err(invalid(e.to_string())),
    }
}

/// Sets the dotted `key` in `table`, creating the sections on the way.
fn insert_toml(table: &mut toml::Table, key: &str, value: toml::Value) {
    let mut segments: Vec<&str> = key.split('.').collect();
    let last = segments.pop().unwrap_or(key);
    let mut current = table;
    for segment in segments {
        let entry = current
            .entry(segment)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(inner) = entry else {
            unreachable!("made a table just above")
        };
        current = inner;
    }
    current.insert(last.to_owned(), value);
}

impl Reply {
    pub(crate) fn with_key(mut self, key: &str) -> Self {
        self.body["key"] = key.into();
        self
    }
}

/// Merges a JSON patch, already checked by [`patched_keys`], into a TOML document; dotted
/// names at any level are split.
fn merge(table: &mut toml::Table, patch: &Map<String, Value>, prefix: &str) {
    for (name, value) in patch {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match (find_key_exact(&path), value) {
            (Some(key), value) => {
                if let Some(value) = to_toml(value) {
                    insert_toml(table, key.key, value);
                }
            }
            (None, Value::Object(inner)) => merge(table, inner, &path),
            // Refused by `patched_keys` before anything is merged.
            (None, _) => {}
        }
    }
}

fn to_toml(value: &Value) -> Option<toml::Value> {
    Some(match value {
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64()?),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(items) => {
            toml::Value::Array(items.iter().map(to_toml).collect::<Option<_>>()?)
        }
        Value::Null | Value::Object(_) => return None,
    })
}

/// The keys a layer sets, as a TOML document.
fn to_table(layer: &FileLayer) -> toml::Table {
    let full =
        toml::Value::try_from(&layer.config).unwrap_or(toml::Value::Table(toml::Table::new()));
    let mut out = toml::Table::new();
    for key in &layer.keys {
        let mut value = Some(&full);
        for segment in key.key.split('.') {
            value = value.and_then(|v| v.get(segment));
        }
        if let Some(value) = value {
            insert_toml(&mut out, key.key, value.clone());
        }
    }
    out
}

fn lookup<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    key.split('.').try_fold(value, |v, segment| v.get(segment))
}

fn insert_path(map: &mut Map<String, Value>, key: &str, value: Value) {
    let mut segments: Vec<&str> = key.split('.').collect();
    let last = segments.pop().unwrap_or(key);
    let mut current = map;
    for segment in segments {
        current = current
            .entry(segment)
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .expect("sections are objects");
    }
    current.insert(last.to_owned(), value);
}

/// Serves the API on the control thread's HTTP layer. The route and token checks run first
/// and the body is read only for an authorised request (an unauthenticated client cannot make
/// the server wait for its body); handlers read files and fsync, so both steps run on the
/// bounded blocking pool, never on the control thread itself.
pub fn handler(api: Arc<Api>, body_timeout: Duration) -> Handler {
    Arc::new(move |request: HttpRequest, peer: std::net::SocketAddr| {
        let api = api.clone();
        Box::pin(async move {
            let mut response = serve_one(api, request, peer, body_timeout).await;
            crate::dashboard::add_security_headers(response.headers_mut());
            response
        })
    })
}

async fn serve_one(
    api: Arc<Api>,
    request: HttpRequest,
    peer: std::net::SocketAddr,
    body_timeout: Duration,
) -> Response {
    // The dashboard's pages: everything outside /api/ is an asset or a 404.
    if !request.uri().path().starts_with("/api/") && request.uri().path() != "/internal/zones" {
        return dashboard_routes::asset(&request);
    }
    if request.method() == http::Method::POST && request.uri().path() == "/api/v1/session" {
        return dashboard_routes::sign_in(api, request, peer, body_timeout).await;
    }
    let header = |name: http::header::HeaderName| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let mut parsed = Request {
        method: request.method().as_str().to_ascii_uppercase(),
        path: request.uri().path().to_owned(),
        query: request.uri().query().unwrap_or("").to_owned(),
        authorization: header(http::header::AUTHORIZATION),
        content_type: header(http::header::CONTENT_TYPE),
        accept: header(http::header::ACCEPT),
        body: None,
        cookie: dashboard_routes::cookie_header(request.headers()),
        csrf_token: header(http::header::HeaderName::from_static("x-csrf-token")),
        origin: header(http::header::ORIGIN),
        host: header(http::header::HOST),
    };
    let (api, parsed_back, checked) = match blocking(move || {
        let checked = api.authorize(&parsed);
        (api, parsed, checked)
    })
    .await
    {
        Ok(done) => done,
        Err(e) => return e.into_response(),
    };
    parsed = parsed_back;
    let authorized = match checked {
        Ok(authorized) => authorized,
        Err(reply) => return reply.into_response(),
    };
    if parsed.method == "DELETE" && parsed.path == "/api/v1/session" {
        return api.sign_out(&parsed, &authorized);
    }
    if parsed.path == "/api/v1/lookup" {
        let target = lookup::lookup_target(&api.reloadable.current().validated.listeners);
        return match (parse_lookup(&parsed.query), target) {
            (Err(reply), _) => reply,
            (Ok(_), None) => error(
                409,
                "no_udp_listener",
                "the node has no plain DNS listener over UDP to ask (server.listen)",
            ),
            (Ok(asked), Some(target)) => lookup::run(asked, target).await,
        }
        .into_response();
    }
    let limit = match authorized.route {
        Route::Fixed => MAX_BODY,
        Route::Objects(_) => MAX_OBJECT_BODY,
    };
    if Target::takes_body(&parsed.method) {
        match crate::http::read_body(request, limit, body_timeout).await {
            Ok(body) => parsed.body = Some(body.to_vec()),
            // `dispatch` answers a missing body with its own 413.
            Err(e) if e.status == 413 && matches!(authorized.route, Route::Fixed) => {}
            Err(e) => return e.into_response(),
        }
    }
    let stopping = api.stopping.clone();
    let querylog = api.querylog.clone();
    let purge_audit = crate::querylog::audit::PurgeAudit {
        store: api.store.clone(),
        node: api.node_name(),
    };
    match blocking(move || api.dispatch(&parsed, &authorized)).await {
        Ok(Outcome::Json(reply)) => reply.into_response(),
        Ok(Outcome::Watch(watch)) => watch_response(watch, stopping),
        Ok(Outcome::QueryLog(call)) => {
            crate::querylog::api::respond(&querylog, call, Some(purge_audit), stopping).await
        }
        Err(e) => e.into_response(),
    }
}

/// Streams `watch` as newline-delimited JSON events until the client goes away, the watch
/// ends (an `ERROR` event says why) or the server stops.
fn watch_response(mut watch: Watch, mut stopping: tokio::sync::watch::Receiver<bool>) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(64);
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                event = watch.next() => event,
                _ = stopping.changed() => return,
            };
            let Some(event) = event else { return };
            let ended = event.is_err();
            if tx.send(routes::event_line(&event).into()).await.is_err() || ended {
                return;
            }
        }
    });
    let mut response = http::Response::new(crate::http::channel_body(rx));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-ndjson"),
    );
    response
}

/// Runs `f` on the blocking pool; a 503 when the pool cannot take it.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, HttpError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        tracing::error!(error = %e, "an API request failed on the blocking pool");
        HttpError::new(
            503,
            "unavailable",
            "the request could not be run; try again",
        )
    })
}

impl Reply {
    /// The HTTP response: status, JSON body, `Allow` on a 405; a 204 has no body.
    pub fn into_response(self) -> Response {
        if self.status == 204 {
            let mut response = crate::http::respond(204, "application/json", bytes::Bytes::new());
            response.headers_mut().remove(http::header::CONTENT_TYPE);
            return response;
        }
        crate::http::json_allowing(self.status, &self.body, self.allow.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API over a memory store, with a list manager's mailbox the test reads.
    fn api_with_lists() -> (
        Api,
        tokio::sync::mpsc::UnboundedReceiver<crate::blocking::Command>,
    ) {
        use arc_swap::ArcSwap;
        let inputs =
            crate::layers::Inputs::capture(&crate::cli::ServeArgs::default(), std::iter::empty())
                .unwrap();
        let reloadable = Arc::new(Reloadable::start(inputs).unwrap());
        let settings = reloadable.current().validated.settings.clone();
        let shared_settings = Arc::new(ArcSwap::from_pointee(settings));
        let publisher = Arc::new(crate::blocking::Publisher::new(shared_settings.clone()));
        let blocking = Arc::new(crate::blocking::Shared::new(
            publisher,
            Arc::new(crate::blocking::CoreEngine::new()),
            false,
        ));
        let ops = Arc::new(OpsState {
            ready: Box::new(|| true),
            metrics: Vec::new(),
            settings: shared_settings,
            lameduck: Arc::default(),
            reloads: reloadable.stats.clone(),
            http: Vec::new(),
            blocking: blocking.clone(),
            zones: None,
            querylog: None,
            loops: None,
            cluster: None,
        });
        let store = crate::objects::open_store(Path::new("/nonexistent"), true).unwrap();
        let (_stop, stopping) = tokio::sync::watch::channel(false);
        let mut api = Api::new(
            reloadable,
            TokenStore::new(&std::env::temp_dir()),
            ops,
            store,
            stopping,
        );
        let (commands, inbox) = tokio::sync::mpsc::unbounded_channel();
        api.blocking = Some(crate::blocking::Handle {
            commands,
            shared: blocking,
        });
        (api, inbox)
    }

    /// Every fleet refusal (`not_leader`, `no_leader`, `store_unavailable`, `fenced`;
    /// `managed_by` in the e2e) has the shape of every other error: `code` and `message`,
    /// and `leader` for `not_leader`.
    #[test]
    fn the_fleet_refusals_have_the_shape_of_every_other_error() {
        use crate::cluster::{ClusterHandle, Leadership};
        let (mut api, _inbox) = api_with_lists();
        let shape = |reply: &Reply, status: u16, code: &str| {
            assert_eq!(reply.status, status, "{}", reply.body);
            assert_eq!(reply.body["code"], code, "{}", reply.body);
            assert!(
                reply.body["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
            );
            let keys: Vec<&String> = reply.body.as_object().unwrap().keys().collect();
            for key in &keys {
                assert!(
                    ["code", "message", "key", "currentResourceVersion", "leader"]
                        .contains(&key.as_str()),
                    "{key} is not in the Error schema: {}",
                    reply.body
                );
            }
        };
        let unrouted = Request {
            method: "GET".into(),
            path: "/api/v1/nosuch".into(),
            ..Request::default()
        };
        shape(&Api::route(&unrouted).unwrap_err(), 404, "not_found");
        let leader = "http://192.0.2.7:8080";
        for (leadership, status, code) in [
            (
                Leadership::Follower {
                    leader: leader.into(),
                },
                409,
                "not_leader",
            ),
            (Leadership::NoLeader, 503, "no_leader"),
            (Leadership::Disconnected, 503, "no_leader"),
        ] {
            Arc::get_mut(&mut api.ops).unwrap().cluster = Some(ClusterHandle::fixed(leadership));
            let reply = call(&api, "POST", "/api/v1/blocklists/ads/refresh", "");
            shape(&reply, status, code);
            assert_eq!(
                reply.body.get("leader").and_then(Value::as_str),
                (code == "not_leader").then_some(leader),
                "{}",
                reply.body
            );
        }
        for (e, code) in [
            (
                kudurru_storage::StoreError::Unavailable {
                    reason: "etcd did not answer".into(),
                },
                "store_unavailable",
            ),
            (
                kudurru_storage::StoreError::Fenced {
                    reason: "the leader's election key changed".into(),
                },
                "fenced",
            ),
        ] {
            shape(&routes::store_error(e).into(), 503, code);
        }
    }

    fn call(api: &Api, method: &str, path: &str, query: &str) -> Reply {
        let request = Request {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            ..Request::default()
        };
        let (route, _) = Api::route(&request).map_err(|r| r.status).unwrap();
        let authorized = Authorized {
            route,
            principal: "token:test".into(),
            role: crate::tokens::Role::Admin,
            session: None,
        };
        match api.dispatch(&request, &authorized) {
            Outcome::Json(reply) => reply,
            Outcome::Watch(_) => panic!("a watch"),
            Outcome::QueryLog(call) => panic!("a query-log call: {call:?}"),
        }
    }

    #[test]
    fn refresh_answers_202_404_and_409_for_a_disabled_list() {
        let (api, mut inbox) = api_with_lists();
        let admin = Actor::principal("token:test").unwrap();
        let list = |name: &str, enabled: bool| {
            let mut object = kudurru_storage::Object::new(
                crate::objects::kinds::BLOCK_LIST,
                name,
                json!({"sources": [{"inline": ["ads.example"]}]}),
            );
            if !enabled {
                object
                    .metadata
                    .annotations
                    .insert(kudurru_storage::ENABLED_ANNOTATION.into(), "false".into());
            }
            api.store.create(&admin, &object).unwrap();
        };
        list("ads", true);
        list("off", false);
        let reply = call(&api, "POST", "/api/v1/blocklists/ads/refresh", "");
        assert_eq!(reply.status, 202, "{}", reply.body);
        assert!(matches!(
            inbox.try_recv(),
            Ok(crate::blocking::Command::Refresh(name)) if name == "ads"
        ));
        let reply = call(&api, "POST", "/api/v1/blocklists/nope/refresh", "");
        assert_eq!(
            (reply.status, &reply.body["code"]),
            (404, &json!("not_found"))
        );
        let reply = call(&api, "POST", "/api/v1/blocklists/off/refresh", "");
        assert_eq!(
            (reply.status, &reply.body["code"]),
            (409, &json!("disabled"))
        );
        assert!(inbox.try_recv().is_err(), "nothing sent for 404 or 409");
        let request = Request {
            method: "GET".into(),
            path: "/api/v1/blocklists/ads/refresh".into(),
            ..Request::default()
        };
        let refused = Api::route(&request).unwrap_err();
        assert_eq!(
            (refused.status, refused.allow.as_deref()),
            (405, Some("POST"))
        );
    }

    #[test]
    fn check_names_its_bad_parameter() {
        let (api, _inbox) = api_with_lists();
        let key = |query: &str| {
            let reply = call(&api, "GET", "/api/v1/blocking/check", query);
            (
                reply.status,
                reply.body["key"].as_str().unwrap_or("").to_owned(),
            )
        };
        assert_eq!(key(""), (400, "name".into()));
        assert_eq!(key("name=x&client=nope"), (400, "client".into()));
        assert_eq!(
            key("name=x&client=192.0.2.1&clientId="),
            (400, "clientId".into())
        );
        assert_eq!(key("name=x&at=tomorrow"), (400, "at".into()));
    }

    #[test]
    fn check_explains_a_name_and_refuses_a_bad_time() {
        let (api, _inbox) = api_with_lists();
        let reply = call(
            &api,
            "GET",
            "/api/v1/blocking/check",
            "name=ads.example&client=192.0.2.1",
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body["verdict"], "none");
        assert_eq!(reply.body["groups"], json!(["default"]));
        let reply = call(
            &api,
            "GET",
            "/api/v1/blocking/check",
            "name=ads.example&at=tomorrow",
        );
        assert_eq!((reply.status, &reply.body["key"]), (400, &json!("at")));
    }

    #[test]
    fn templated_routes_match_one_segment_per_name() {
        let refresh = "/api/v1/blocklists/{name}/refresh";
        assert!(path_matches(refresh, "/api/v1/blocklists/ads/refresh"));
        assert!(!path_matches(refresh, "/api/v1/blocklists//refresh"));
        assert!(!path_matches(refresh, "/api/v1/blocklists/ads"));
        assert!(!path_matches(refresh, "/api/v1/blocklists/a/b/refresh"));
        assert!(path_matches("/api/v1/cache", "/api/v1/cache"));
        assert!(!path_matches("/api/v1/cache", "/api/v1/cache/dump"));
    }

    #[test]
    fn rfc9110_11_1_the_auth_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer kdr_a_b"), Some("kdr_a_b"));
        assert_eq!(bearer_token("bearer kdr_a_b"), Some("kdr_a_b"));
        assert_eq!(bearer_token("BEARER   kdr_a_b "), Some("kdr_a_b"));
        assert_eq!(bearer_token("Basic a2RyOmI="), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    fn patch(json: &str) -> Map<String, Value> {
        serde_json::from_str(json).unwrap()
    }

    fn refused(json: &str) -> (u16, String, String) {
        let reply = patched_keys(&patch(json), Scope::Cluster).unwrap_err();
        (
            reply.status,
            reply.body["code"].as_str().unwrap().to_owned(),
            reply.body["key"].as_str().unwrap_or_default().to_owned(),
        )
    }

    #[test]
    fn patched_keys_are_exact_single_and_typed_with_the_key_named() {
        let keys = patched_keys(
            &patch(r#"{"cache":{"maxTTL":60},"ratelimit.qps":5}"#),
            Scope::Cluster,
        )
        .unwrap();
        let mut names: Vec<&str> = keys.iter().map(|k| k.key).collect();
        names.sort_unstable();
        assert_eq!(names, ["cache.maxTTL", "ratelimit.qps"]);
        assert_eq!(
            refused(r#"{"cache.maxTTL":86400,"cache.maxttl":5}"#),
            (400, "unknown_key".into(), "cache.maxttl".into())
        );
        assert_eq!(
            refused(r#"{"cache.maxTTL":86400,"cache":{"maxTTL":5}}"#),
            (400, "duplicate_key".into(), "cache.maxTTL".into())
        );
        assert_eq!(
            refused(r#"{"cache":{"maxTTL":"abc"}}"#),
            (400, "invalid_value".into(), "cache.maxTTL".into())
        );
        let reply =
            patched_keys(&patch(r#"{"cache":{"maxTTL":"abc"}}"#), Scope::Cluster).unwrap_err();
        let message = reply.body["message"].as_str().unwrap();
        assert!(
            message.contains("expected") && message.contains("\"abc\""),
            "{message}"
        );
        assert!(!message.contains("TOML parse error"), "{message}");
        assert_eq!(
            refused(r#"{"cache":{"maxTTL":null}}"#),
            (400, "invalid_value".into(), "cache.maxTTL".into())
        );
    }

    #[test]
    fn merge_writes_each_checked_key_once_at_its_documented_path() {
        let mut document = toml::Table::new();
        merge(
            &mut document,
            &patch(r#"{"cache":{"maxTTL":60},"ratelimit.qps":5}"#),
            "",
        );
        assert_eq!(
            toml::to_string(&document).unwrap(),
            "[cache]\nmaxTTL = 60\n\n[ratelimit]\nqps = 5\n"
        );
    }
}
