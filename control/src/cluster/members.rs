//! The member keys: each node's `/kudurru/<name>/members/<node>`, attached to its lease, so a
//! node that stops keeping its lease alive leaves the list by itself.

use std::time::Duration;

use etcd_client::GetOptions;
use serde::{Deserialize, Serialize};

use super::EtcdInfo;

/// What a node says of itself in its member key (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// `cluster.nodeName`.
    pub name: String,
    /// `cluster.advertiseAddress`.
    pub advertise_address: String,
    /// The node's kudurru version.
    pub version: String,
    /// When the node started (RFC 3339).
    pub started: String,
    /// The store revision its objects reflect.
    pub snapshot_revision: i64,
    /// Whether it led when it last wrote the key.
    #[serde(default)]
    pub leader: bool,
}

/// The fleet's members as etcd holds them now, with the store revision of the read; a value
/// that does not decode (another version's, or damaged) is skipped with a warning.
pub async fn list_members(etcd: &EtcdInfo, bound: Duration) -> Result<(Vec<Member>, i64), String> {
    let mut client = etcd.client.clone();
    let get = client.get(etcd.keys.members(), Some(GetOptions::new().with_prefix()));
    let response = tokio::time::timeout(bound, get)
        .await
        .map_err(|_| {
            format!(
                "etcd did not answer within {}",
                humantime::format_duration(bound)
            )
        })?
        .map_err(|e| e.to_string())?;
    let revision = response.header().map_or(0, |h| h.revision());
    let mut members = Vec::new();
    for kv in response.kvs() {
        match serde_json::from_slice::<Member>(kv.value()) {
            Ok(member) => members.push(member),
            Err(e) => tracing::warn!(
                key = %String::from_utf8_lossy(kv.key()),
                error = %e,
                "a member key does not decode; skipped"
            ),
        }
    }
    Ok((members, revision))
}
