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

    /// A member on loopback that answers each connection with `answer` (raw HTTP), or never
    /// answers when `answer` is `None`; returns its address.
    async fn member(answer: Option<Vec<u8>>) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut head = [0u8; 4096];
                    let _ = stream.read(&mut head).await;
                    match answer {
                        Some(answer) => {
                            let _ = stream.write_all(&answer).await;
                        }
                        None => tokio::time::sleep(Duration::from_secs(30)).await,
                    }
                });
            }
        });
        address
    }

    fn http(status: &str, body: &[u8]) -> Vec<u8> {
        let mut answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        answer.extend_from_slice(body);
        answer
    }

    #[tokio::test]
    async fn a_member_is_asked_and_every_failure_is_an_error_naming_it() {
        let client = client().unwrap();
        let good = member(Some(http(
            "200 OK",
            br#"{"snapshotRevision": 9, "zones": [{"zone": "a.example.", "serial": 3}]}"#,
        )))
        .await;
        let view = ask(&client, &good, Some("kdr_x_y")).await.unwrap();
        assert_eq!(view.snapshot_revision, 9);
        assert_eq!(view.zones[0].serial, 3);

        let refused = member(Some(http(
            "401 Unauthorized",
            br#"{"code": "unauthorized", "message": "unknown token"}"#,
        )))
        .await;
        let e = ask(&client, &refused, Some("kdr_x_y")).await.unwrap_err();
        assert!(
            e.contains("401") && e.contains("unknown token") && e.contains(&refused),
            "{e}"
        );

        let large = member(Some(http("200 OK", &vec![b' '; MAX_VIEW + 1]))).await;
        let e = ask(&client, &large, Some("kdr_x_y")).await.unwrap_err();
        assert!(e.contains("larger"), "{e}");

        let silent = member(None).await;
        let started = std::time::Instant::now();
        let e = ask(&client, &silent, Some("kdr_x_y")).await.unwrap_err();
        assert!(
            started.elapsed() < PEER_TIMEOUT + Duration::from_secs(2),
            "{e}"
        );
        assert!(e.contains(&silent), "{e}");

        // Nothing listens on a port just released.
        let gone = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", listener.local_addr().unwrap())
        };
        assert!(ask(&client, &gone, Some("kdr_x_y")).await.is_err());
        assert!(
            ask(&client, &good, None)
                .await
                .unwrap_err()
                .contains("bearer token")
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
