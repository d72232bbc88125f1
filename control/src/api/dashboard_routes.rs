//! The dashboard's routes on the API: its assets, sign-in and sign-out, the session behind a
//! request (cookie checks: live session, token still valid with its role, CSRF and Origin on
//! writes), and the tokens API.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Api, Authorized, Reply, Request, Route, blocking, error, json_body, ok};
use crate::dashboard::assets::Assets;
use crate::dashboard::session::{
    self, CsrfRefusal, MAX_SIGN_IN_BODY, check_csrf, is_unsafe, parse_sign_in,
};
use crate::http::{HttpError, Request as HttpRequest, Response};
use crate::tokens::{Permission, Role};

/// Longest token name.
const MAX_TOKEN_NAME: usize = crate::tokens::MAX_NAME;

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Unix seconds as RFC 3339 (`2026-12-07T18:00:00Z`).
fn rfc3339(unix: u64) -> String {
    i64::try_from(unix)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(String::new, |t| t.to_string())
}

/// The `Cookie` headers of a request, joined with `; ` (HTTP/2 may split them).
pub(super) fn cookie_header(headers: &http::HeaderMap) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join("; "))
}

/// A request outside `/api/`: an embedded asset, or the API's 404.
pub(super) fn asset(request: &HttpRequest) -> Response {
    let header = |name| {
        request
            .headers()
            .get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
    };
    let path = request.uri().path();
    Assets::embedded()
        .serve(
            request.method().as_str(),
            path,
            header(http::header::IF_NONE_MATCH),
            header(http::header::ACCEPT_ENCODING),
        )
        .unwrap_or_else(|| error(404, "not_found", format!("no route {path}")).into_response())
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = http::HeaderValue::from_str(cookie) {
        response
            .headers_mut()
            .insert(http::header::SET_COOKIE, value);
    }
    // A session's answer is for its browser only.
    response.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    response
}

/// `POST /api/v1/session` `{"token": "kdr_..."}`: a session cookie for a valid token; 401
/// otherwise, and 429 once the address failed [`session::SIGN_IN_FAILURES`] times within
/// [`session::SIGN_IN_WINDOW`].
pub(super) async fn sign_in(
    api: Arc<Api>,
    request: HttpRequest,
    peer: std::net::SocketAddr,
    body_timeout: Duration,
) -> Response {
    if let Some(wait) = api.sign_ins.check(peer.ip(), Instant::now()) {
        let mut response = error(
            429,
            "too_many_sign_ins",
            format!(
                "more than {} failed sign-ins from this address within {}; try again in {} s",
                session::SIGN_IN_FAILURES,
                humantime::format_duration(session::SIGN_IN_WINDOW),
                wait.as_secs().max(1)
            ),
        )
        .into_response();
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from(wait.as_secs().max(1)),
        );
        return response;
    }
    // A sign-in from another site's page (login CSRF) is refused like a forged write.
    let header = |name| {
        request
            .headers()
            .get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
    };
    if let Some(origin) = header(http::header::ORIGIN)
        && !session::origin_is_own(origin, header(http::header::HOST), api.tls)
    {
        let mut reply = error(
            403,
            "csrf",
            "a sign-in must come from this API's own origin",
        );
        reply.body["error"] = "csrf".into();
        return reply.into_response();
    }
    let json_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return error(
            415,
            "unsupported_media_type",
            "send Content-Type: application/json",
        )
        .into_response();
    }
    let body = match crate::http::read_body(request, MAX_SIGN_IN_BODY, body_timeout).await {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    let token = match parse_sign_in(&body) {
        Ok(token) => token,
        Err(e) => {
            return HttpError::new(400, "invalid_json", e.to_string())
                .with_key("token")
                .into_response();
        }
    };
    let checked = blocking(move || {
        let running = api.reloadable.current();
        let max_lifetime = running.validated.token_max_lifetime;
        let identified = api.tokens.identify(&token, max_lifetime);
        let entry = identified
            .ok()
            .and_then(|(_, id)| api.tokens.list().ok()?.into_iter().find(|e| e.id == id));
        let Some(entry) = entry else {
            api.sign_ins.failed(peer.ip(), Instant::now());
            return Err(error(
                401,
                "unauthorized",
                "unknown, revoked or expired token",
            ));
        };
        // Never past the token's lifetime cap either.
        let cap = entry
            .created
            .saturating_add(max_lifetime.as_secs())
            .saturating_sub(now_unix());
        let ttl = running.validated.session_ttl.min(Duration::from_secs(cap));
        let (cookie, session) = api.sessions.create(&entry, ttl, Instant::now(), now_unix());
        tracing::info!(token = %entry.id, role = entry.role.name(), %peer, "dashboard sign-in");
        Ok((cookie, session, api.tls))
    })
    .await;
    match checked {
        Ok(Ok((cookie, session, tls))) => {
            let max_age = Duration::from_secs(session.expires_unix.saturating_sub(now_unix()));
            let body = session_body(&session);
            with_cookie(
                ok(body).into_response(),
                &session::set_cookie(&cookie, max_age, tls),
            )
        }
        Ok(Err(reply)) => reply.into_response(),
        Err(e) => e.into_response(),
    }
}

fn session_body(session: &session::Session) -> Value {
    json!({
        "role": session.role.name(),
        "tokenId": session.token_id,
        "expiresAt": rfc3339(session.expires_unix),
        "csrfToken": session.csrf,
        "via": "session",
        "permissions": permissions(session.role),
    })
}

/// The names of the permissions `role` grants, so a page can hide what it cannot do.
fn permissions(role: Role) -> Vec<&'static str> {
    Permission::ALL
        .iter()
        .filter(|p| role.grants(**p))
        .map(|p| p.name())
        .collect()
}

impl Api {
    /// The checks of a request authenticated by a session cookie (see the module docs).
    pub(super) fn authorize_session(
        &self,
        request: &Request,
        cookie: &str,
        route: Route,
        permission: Permission,
    ) -> Result<Authorized, Reply> {
        let Some(session) = self.sessions.get(cookie, Instant::now()) else {
            return Err(error(
                401,
                "unauthorized",
                "no such session (signed out, expired, or the server restarted): sign in again",
            ));
        };
        let max_lifetime = self.reloadable.current().validated.token_max_lifetime;
        let entries = self.tokens.list().unwrap_or_default();
        if !session.token_still_valid(&entries, max_lifetime, now_unix()) {
            self.sessions.remove(cookie);
            return Err(error(
                401,
                "unauthorized",
                "the session's token was revoked, expired or changed role: sign in again",
            ));
        }
        if is_unsafe(&request.method) {
            let refused = check_csrf(
                &session,
                request.csrf_token.as_deref(),
                request.origin.as_deref(),
                request.host.as_deref(),
                self.tls,
            );
            let message = match refused {
                Ok(()) => None,
                Err(CsrfRefusal::Token) => Some(
                    "a write with a session cookie needs the X-CSRF-Token header with the session's csrfToken",
                ),
                Err(CsrfRefusal::Origin) => {
                    Some("a write with a session cookie must come from this API's own origin")
                }
            };
            if let Some(message) = message {
                let mut reply = error(403, "csrf", message);
                reply.body["error"] = "csrf".into();
                return Err(reply);
            }
        }
        if !session.role.grants(permission) {
            return Err(error(
                403,
                "forbidden",
                format!("role {} lacks {}", session.role.name(), permission.name()),
            ));
        }
        Ok(Authorized {
            route,
            principal: format!("token:{}", session.token_id),
            role: session.role,
            session: Some(session),
        })
    }

    /// `GET /api/v1/session`: the session's role and CSRF token, or for a bearer token its
    /// role (`"via": "bearer"`).
    pub(super) fn session_info(&self, authorized: &Authorized) -> Reply {
        if let Some(session) = &authorized.session {
            return ok(session_body(session));
        }
        let id = authorized.principal.trim_start_matches("token:");
        let expires = self
            .tokens
            .list()
            .ok()
            .and_then(|list| list.into_iter().find(|e| e.id == id))
            .map(|e| rfc3339(e.expires));
        ok(json!({
            "role": authorized.role.name(),
            "tokenId": id,
            "expiresAt": expires,
            "via": "bearer",
            "permissions": permissions(authorized.role),
        }))
    }

    /// `DELETE /api/v1/session`: ends the cookie's session and clears the cookie.
    pub(super) fn sign_out(&self, request: &Request, authorized: &Authorized) -> Response {
        if authorized.session.is_none() {
            return error(
                400,
                "no_session",
                "this request came with a bearer token, not a session cookie",
            )
            .into_response();
        }
        if let Some(cookie) = request
            .cookie
            .as_deref()
            .and_then(|c| session::session_cookie([c]))
        {
            self.sessions.remove(cookie);
        }
        tracing::info!(principal = %authorized.principal, "dashboard sign-out");
        let mut response = crate::http::respond(204, "application/json", bytes::Bytes::new());
        response.headers_mut().remove(http::header::CONTENT_TYPE);
        with_cookie(response, &session::clear_cookie(self.tls))
    }

    /// `GET /api/v1/tokens`: every token's id, name, role and times; never a secret or hash.
    pub(super) fn list_tokens(&self) -> Reply {
        match self.tokens.list() {
            Ok(list) => ok(json!({
                "tokens": list.iter().map(|e| json!({
                    "id": e.id,
                    "name": e.name,
                    "role": e.role.name(),
                    "created": rfc3339(e.created),
                    "expiresAt": rfc3339(e.expires),
                })).collect::<Vec<_>>()
            })),
            Err(e) => error(500, "tokens_unreadable", e.to_string()),
        }
    }

    /// `POST /api/v1/tokens` `{"name", "role"[, "ttl"]}`: 201 with the token, shown once.
    pub(super) fn create_token(&self, request: &Request, authorized: &Authorized) -> Reply {
        let body = match json_body(request) {
            Ok(body) => body,
            Err(reply) => return reply,
        };
        let (name, role, ttl) = match parse_token_request(&body) {
            Ok(parsed) => parsed,
            Err(reply) => return reply,
        };
        let max_lifetime = self.reloadable.current().validated.token_max_lifetime;
        let ttl = match crate::tokens::lifetime(ttl, max_lifetime) {
            Ok(ttl) => ttl,
            Err(e) => {
                return error(400, "invalid_value", e.to_string().replace("--ttl", "ttl"))
                    .with_key("ttl");
            }
        };
        match self.tokens.create_named(&name, role, ttl) {
            Ok((token, entry)) => {
                // A credential nobody can trace is not handed out: unaudited, it is taken back.
                if let Err(e) = self.audit_token(&authorized.principal, &entry, None) {
                    let taken_back = self.tokens.revoke(&entry.id);
                    tracing::warn!(principal = %authorized.principal, token = %entry.id, error = %e, taken_back = taken_back.is_ok(), "token not created: its audit record could not be written");
                    return error(
                        503,
                        "not_audited",
                        format!(
                            "the token's audit record could not be written, so it was not created: {e}"
                        ),
                    );
                }
                tracing::info!(principal = %authorized.principal, token = %entry.id, role = role.name(), "token created over the API");
                Reply {
                    status: 201,
                    body: json!({
                        "token": token,
                        "id": entry.id,
                        "name": entry.name,
                        "role": entry.role.name(),
                        "created": rfc3339(entry.created),
                        "expiresAt": rfc3339(entry.expires),
                    }),
                    allow: None,
                }
            }
            Err(e) => error(500, "tokens_unwritable", e.to_string()),
        }
    }

    /// `DELETE /api/v1/tokens/{id}`: 204; its sessions end with it.
    pub(super) fn revoke_token(&self, id: &str, authorized: &Authorized) -> Reply {
        let entry = self
            .tokens
            .list()
            .ok()
            .and_then(|list| list.into_iter().find(|e| e.id == id));
        match self.tokens.revoke(id) {
            Ok(()) => {
                // The revocation stands whatever happens to its record: a token is never kept
                // alive because the store is down.
                if let Some(entry) = &entry
                    && let Err(e) = self.audit_token(&authorized.principal, entry, Some(now_unix()))
                {
                    tracing::warn!(principal = %authorized.principal, token = id, error = %e, "token revoked, but its audit record could not be written");
                }
                tracing::info!(principal = %authorized.principal, token = id, "token revoked over the API");
                Reply {
                    status: 204,
                    body: Value::Null,
                    allow: None,
                }
            }
            Err(crate::tokens::TokenError::NotFound { .. }) => {
                error(404, "not_found", format!("no token {id}"))
            }
            Err(e) => error(500, "tokens_unwritable", e.to_string()),
        }
    }
}

impl Api {
    /// This node's name in the fleet, as audit records written outside an object change name
    /// it (query-log purges, tokens); `None` off a fleet.
    pub(super) fn node_name(&self) -> Option<String> {
        self.ops
            .cluster
            .as_ref()
            .and_then(|c| c.etcd())
            .map(|etcd| etcd.settings.node_name.clone())
    }

    /// Writes token `entry`'s audit record as `principal` (`objects::kinds::TOKEN`, named by
    /// its id): created when `revoked` is `None`, else marked revoked at that time (created
    /// so when the token was made outside the API, by `kudurru token create`).
    fn audit_token(
        &self,
        principal: &str,
        entry: &crate::tokens::Entry,
        revoked: Option<u64>,
    ) -> Result<(), kudurru_storage::StoreError> {
        use crate::objects::kinds::TOKEN;
        use kudurru_storage::{Actor, Object, StoreError};
        let actor = Actor::principal(principal)?;
        let mut spec = json!({
            "name": entry.name,
            "role": entry.role.name(),
            "created": rfc3339(entry.created),
            "expiresAt": rfc3339(entry.expires),
        });
        if let Some(node) = self.node_name() {
            spec["node"] = json!(node);
        }
        let Some(at) = revoked else {
            return self
                .store
                .create(&actor, &Object::new(TOKEN, &entry.id, spec))
                .map(drop);
        };
        spec["revoked"] = json!(rfc3339(at));
        match self.store.get(TOKEN, &entry.id) {
            Ok(mut object) => {
                object.spec = spec;
                self.store.update(&actor, &object).map(drop)
            }
            Err(StoreError::NotFound { .. }) => self
                .store
                .create(&actor, &Object::new(TOKEN, &entry.id, spec))
                .map(drop),
            Err(e) => Err(e),
        }
    }
}

/// The body of `POST /api/v1/tokens`: a name (1 to 64 printable characters), a role and an
/// optional lifetime (`"30d"`).
pub fn parse_token_request(
    body: &serde_json::Map<String, Value>,
) -> Result<(String, Role, Option<Duration>), Reply> {
    if let Some(other) = body
        .keys()
        .find(|k| !matches!(k.as_str(), "name" | "role" | "ttl"))
    {
        return Err(error(
            400,
            "unknown_key",
            format!("no field {other:?}: send name, role and optionally ttl"),
        )
        .with_key(other));
    }
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim();
    if name.is_empty() || crate::tokens::check_name(name).is_err() {
        return Err(error(
            400,
            "invalid_value",
            format!("name must be 1 to {MAX_TOKEN_NAME} characters, no control characters"),
        )
        .with_key("name"));
    }
    let role = body
        .get("role")
        .and_then(Value::as_str)
        .and_then(|r| Role::parse(r).ok())
        .ok_or_else(|| {
            error(
                400,
                "invalid_value",
                "role must be viewer, operator or admin",
            )
            .with_key("role")
        })?;
    let ttl = match body.get("ttl") {
        None => None,
        Some(Value::String(text)) => match humantime::parse_duration(text) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                return Err(error(
                    400,
                    "invalid_value",
                    format!("ttl {text:?} is not a duration such as \"30d\""),
                )
                .with_key("ttl"));
            }
        },
        Some(_) => {
            return Err(error(
                400,
                "invalid_value",
                "ttl must be a duration string such as \"30d\"",
            )
            .with_key("ttl"));
        }
    };
    Ok((name.to_owned(), role, ttl))
}
