//! Each member's own view of itself, for `kudurru cluster status`: its snapshot revision and
//! the serials of the zones it serves, asked of the member at `<advertiseAddress>/internal/zones`.
//!
//! ```text
//! GET /api/v1/cluster (a bearer token) ─▶ members from etcd
//!   ─▶ this node: its own view, no request
//!   ─▶ every other member, concurrently: GET <advertiseAddress>/internal/zones with the
//!      caller's bearer token, ≤ PEER_TIMEOUT, ≤ MAX_VIEW bytes ─▶ its view, or its error
//! ```
//! The fleet has no credential of its own between nodes, so the caller's token is what the
//! member checks (`info.read`): a member whose token file does not know it is listed with its
//! 401, not dropped.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long one member may take to answer.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest view accepted from a member (a few thousand zones fit).
pub const MAX_VIEW: usize = 4 << 20;

/// What a member says of itself at `/internal/zones`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    /// The store revision its objects reflect.
    #[serde(default)]
    pub snapshot_revision: i64,
    /// The zones it serves (forward zones left out).
    pub zones: Vec<ZoneSerial>,
}

/// One served zone and its serial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneSerial {
    /// The apex, absolute (`corp.example.`).
    pub zone: String,
    /// The SOA serial served.
    pub serial: u32,
}

/// Decodes a member's `/internal/zones` answer; fields it does not name are ignored.
pub fn parse_view(bytes: &[u8]) -> Result<MemberView, String> {
    if bytes.len() > MAX_VIEW {
        return Err(format!(
            "the answer is larger than {MAX_VIEW} bytes ({})",
            bytes.len()
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("the answer does not decode: {e}"))
}

/// The HTTP client members are asked with: system roots, no proxy (members are on the
/// fleet's own network), HTTP/1.1.
pub fn client() -> Result<reqwest::Client, String> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(certificate);
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    reqwest::Client::builder()
        .user_agent(concat!(
            "kudurru/",
            env!("CARGO_PKG_VERSION"),
            " (cluster status)"
        ))
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .http1_only()
        .timeout(PEER_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())
}

/// Asks the member at `address` (its `advertiseAddress`) for its view, with `token` as the
/// bearer; an answer that is not a 200, too large or not a view is an error naming why.
pub async fn ask(
    client: &reqwest::Client,
    address: &str,
    token: Option<&str>,
) -> Result<MemberView, String> {
    let Some(token) = token else {
        return Err(
            "not asked: a dashboard session is valid on one node only; ask with a bearer token"
                .into(),
        );
    };
    let url = format!("{}/internal/zones", address.trim_end_matches('/'));
    let ask = async {
        let mut response = client
            .get(&url)
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| format!("{url}: {}", chain(&e)))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("{url}: {}", chain(&e)))?
        {
            if body.len() + chunk.len() > MAX_VIEW {
                return Err(format!("{url}: the answer is larger than {MAX_VIEW} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let said = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or_default();
            return Err(format!("{url}: HTTP {} {said}", status.as_u16())
                .trim_end()
                .to_owned());
        }
        parse_view(&body).map_err(|e| format!("{url}: {e}"))
    };
    tokio::time::timeout(PEER_TIMEOUT, ask)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "{url}: no answer within {}",
                humantime::format_duration(PEER_TIMEOUT)
            ))
        })
}

/// An error and its sources, joined (reqwest's top message alone says little).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_decodes_and_ignores_the_fields_it_does_not_name() {
        let view = parse_view(
            br#"{"snapshotRevision": 42, "node": "n1", "zones": [
                {"zone": "corp.example.", "name": "corp", "type": "primary", "serial": 7, "records": 3}
            ]}"#,
        )
        .unwrap();
        assert_eq!(view.snapshot_revision, 42);
        assert_eq!(
            view.zones,
            [ZoneSerial {
                zone: "corp.example.".into(),
                serial: 7
            }]
        );
    }

    #[test]
    fn a_bad_view_is_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            b"[]",
            b"{\"zones\": 3}",
            b"{\"zones\": [{\"zone\": \"a.\", \"serial\": -1}]}",
            b"{\"zones\": [{\"zone\": \"a.\", \"serial\": 4294967296}]}",
            b"\xff\xfe",
        ] {
            assert!(parse_view(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let large = vec![b' '; MAX_VIEW + 1];
        assert!(parse_view(&large).unwrap_err().contains("larger"));
    }
}
