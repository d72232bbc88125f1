//! The dashboard's server side: the embedded pages ([`assets`]), browser sessions signed in
//! with an API token ([`session`]), and the security headers every answer of the API listener
//! carries.
//!
//! ```text
//! GET / , /ui/<path> ─▶ assets (no auth: they hold no data) ─▶ ETag/304, gzip
//! POST /api/v1/session {token} ─▶ rate limit per address ─▶ token ─▶ session + cookie
//! /api/v1/... with Cookie ─▶ session ─▶ token entry still there, same role? ─▶ CSRF + Origin
//!                          ─▶ the same role checks as a bearer token
//! every answer ─▶ CSP, nosniff, no-referrer, frame DENY
//! ```

pub mod assets;
pub mod session;

/// The Content-Security-Policy of every answer on the API listener: scripts, styles and
/// connections only from the node itself, no inline script, never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Adds the security headers (CSP, `X-Content-Type-Options`, `Referrer-Policy`,
/// `X-Frame-Options`) to `headers`.
pub fn add_security_headers(headers: &mut http::HeaderMap) {
    use http::HeaderValue;
    use http::header::{
        CONTENT_SECURITY_POLICY as CSP, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
    };
    headers.insert(CSP, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}
