//! `GET /api/v1/blocking/check`: why a name is (or is not) blocked for a client. Without
//! `at`, the live index answers; with `at`, a throwaway index is built from the same inputs at
//! that instant (schedules resolved then), on the caller's thread (the API's blocking pool).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use kudurru_core::policy::{
    BuildInputs, ClientGroupSpec, Explanation, Format, GroupSpec, ListId, Matcher, PolicySource,
    PolicySpec,
};
use serde_json::{Value, json};

use super::Shared;
use crate::http::HttpError;

/// What an index was built from, kept to build it again at another instant.
#[derive(Debug)]
pub struct CheckInputs {
    /// The matcher.
    pub matcher: Arc<Matcher>,
    /// Loaded lists.
    pub lists: HashMap<String, (ListId, Format)>,
    /// Enabled client groups.
    pub groups: Vec<(String, ClientGroupSpec)>,
    /// Enabled policies.
    pub policies: Vec<(String, PolicySpec)>,
    /// `blocking.blockTTL`.
    pub block_ttl: Duration,
    /// `blocking.clientIdDomains`.
    pub client_id_domains: Vec<Box<[u8]>>,
    /// Cores counting blocks.
    pub cores: usize,
}

impl CheckInputs {
    /// The inputs of [`kudurru_core::policy::PolicyIndex::build`] at `now`, handed to `f`.
    pub fn with_build_inputs<T>(
        &self,
        now: jiff::Timestamp,
        f: impl FnOnce(BuildInputs<'_>) -> T,
    ) -> T {
        let groups: Vec<GroupSpec<'_>> = self
            .groups
            .iter()
            .map(|(name, spec)| GroupSpec { name, spec })
            .collect();
        let policies: Vec<PolicySource<'_>> = self
            .policies
            .iter()
            .map(|(name, spec)| PolicySource { name, spec })
            .collect();
        f(BuildInputs {
            matcher: &self.matcher,
            lists: &self.lists,
            groups: &groups,
            policies: &policies,
            now,
            block_ttl: self.block_ttl,
            client_id_domains: &self.client_id_domains,
            cores: self.cores,
        })
    }
}

/// A check request, its parameters still text.
#[derive(Debug, Clone, Default)]
pub struct CheckQuery<'a> {
    /// `name`: the query name.
    pub name: Option<&'a str>,
    /// `client`: the client's address (default 0.0.0.0: a client no group holds by address).
    pub client: Option<&'a str>,
    /// `clientId`: the client ID (DoH path segment or SNI label).
    pub client_id: Option<&'a str>,
    /// `at`: RFC 3339; the live index when absent.
    pub at: Option<&'a str>,
}

/// The explanation as the API answers it.
pub fn explanation_json(e: &Explanation) -> Value {
    json!({
        "groups": e.groups,
        "policies": e.policies,
        "verdict": e.verdict,
        "policy": e.policy,
        "list": e.list,
        "rule": e.rule,
    })
}

impl Shared {
    /// Answers a check: the explanation, or a 400 naming the bad parameter.
    pub fn check(&self, query: &CheckQuery<'_>) -> Result<Value, HttpError> {
        let invalid = |key: &str, message: String| {
            HttpError::new(400, "invalid_value", message).with_key(key)
        };
        let Some(name) = query.name else {
            return Err(invalid("name", "name= is required".into()));
        };
        let client = match query.client {
            None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Some(text) => text.parse().map_err(|_| {
                invalid("client", format!("{text:?} is not an IPv4 or IPv6 address"))
            })?,
        };
        if let Some(id) = query.client_id
            && (id.is_empty() || id.len() > 63)
        {
            return Err(invalid("clientId", "a client ID is 1 to 63 bytes".into()));
        }
        let at = query
            .at
            .map(|text| {
                text.parse::<jiff::Timestamp>().map_err(|e| {
                    invalid(
                        "at",
                        format!("{text:?} is not an RFC 3339 time (2026-05-04T08:30:00Z): {e}"),
                    )
                })
            })
            .transpose()?;
        let qname = kudurru_core::policy::name::to_wire(name)
            .map_err(|e| invalid("name", format!("{name:?} is not a domain name: {e}")))?;
        let explanation = match at {
            None => self
                .publisher
                .index()
                .explain(&qname, client, query.client_id),
            Some(at) => {
                let Some(inputs) = self.check_inputs() else {
                    return Err(HttpError::new(
                        503,
                        "not_ready",
                        "the policy index has not been built yet",
                    ));
                };
                let (index, _) = inputs.with_build_inputs(at, |inputs| self.engine.build(inputs));
                index.explain(&qname, client, query.client_id)
            }
        };
        let mut body = explanation_json(&explanation);
        body["name"] = name.into();
        body["client"] = client.to_string().into();
        if let Some(at) = query.at {
            body["at"] = at.into();
        }
        Ok(body)
    }
}
