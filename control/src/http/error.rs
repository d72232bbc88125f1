//! The error every handler answers with: one JSON shape, built in one place.

use serde_json::json;

/// An HTTP error: status, a stable machine-readable `code`, a message for people and, when one
/// input is to blame, the offending field (`key`). The body is
/// `{"code": …, "message": …[, "key": …][, "currentResourceVersion": …][, "leader": …]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// HTTP status.
    pub status: u16,
    /// Stable code (`unauthorized`, `too_large`, `invalid_value`, …).
    pub code: &'static str,
    /// What was wrong, for a person.
    pub message: String,
    /// The offending field, when there is one.
    pub key: Option<String>,
    /// The `Allow` header of a 405 (RFC 9110 §15.5.6).
    pub allow: Option<String>,
    /// One more field of the body, by name: `currentResourceVersion` of a resourceVersion
    /// conflict (read it, retry), `leader` of a `not_leader` (send the request there). Boxed:
    /// every handler's `Result` carries this type.
    pub detail: Option<Box<(&'static str, String)>>,
}

impl HttpError {
    /// An error without a field.
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            key: None,
            allow: None,
            detail: None,
        }
    }

    /// The same error, blaming `key`.
    #[must_use]
    pub fn with_key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }

    /// The same error with the object's current resourceVersion (a conflict).
    #[must_use]
    pub fn with_current_resource_version(mut self, version: String) -> Self {
        self.detail = Some(Box::new(("currentResourceVersion", version)));
        self
    }

    /// The same error, naming the fleet's leader (send the request there).
    #[must_use]
    pub fn with_leader(mut self, leader: &str) -> Self {
        self.detail = Some(Box::new(("leader", leader.to_owned())));
        self
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        let mut body = json!({ "code": self.code, "message": self.message });
        if let Some(key) = &self.key {
            body["key"] = key.as_str().into();
        }
        if let Some(detail) = &self.detail {
            body[detail.0] = detail.1.as_str().into();
        }
        body
    }

    /// The response: status, JSON body and, for a 405, `Allow`.
    pub fn into_response(self) -> super::Response {
        super::json_allowing(self.status, &self.body(), self.allow.as_deref())
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for HttpError {}
