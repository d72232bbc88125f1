//! The fleet's cluster-scope settings: one TOML document at `/kudurru/<name>/settings`, the
//! same form as a settings file, read at start and watched by every node; a PATCH of
//! `/api/v1/settings` on any node writes it (compare-and-swap on its mod revision), and every
//! node applies it through the same subscribers as a settings file change.
//!
//! A node with a local settings file (`settingsFile`) keeps it: the file owns that node's
//! cluster-scope settings, the node does not follow etcd's, and a PATCH there answers 409
//! `managed_by` naming the file (the API decides that before calling here).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, EventType, Txn, TxnOp, WatchOptions};

use super::EtcdInfo;
use crate::layers::FileLayer;
use crate::reload::Reloadable;

/// The name the settings layer carries in errors and logs.
pub const SETTINGS_SOURCE: &str = "(etcd settings)";
/// The longest a PATCH waits for etcd.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a broken settings watch waits before it reads and watches again.
const REWATCH: Duration = Duration::from_secs(1);

/// Follows the fleet's settings document on the agent's runtime until the process ends:
/// read, apply, watch from the next revision; an invalid document is logged and the last good
/// settings stay; a broken watch reads and watches again.
pub fn follow(cluster: &super::ClusterHandle, reloadable: Arc<Reloadable>) {
    let Some(etcd) = cluster.etcd() else {
        return;
    };
    let cluster = cluster.clone();
    let (client, key) = (etcd.client.clone(), etcd.keys.settings());
    etcd.runtime.spawn(async move {
        let mut last: Option<Vec<u8>> = None;
        loop {
            let mut reader = client.clone();
            let read = tokio::time::timeout(WRITE_TIMEOUT, reader.get(key.clone(), None)).await;
            let revision = match read {
                Ok(Ok(response)) => {
                    let value = response.kvs().first().map(|kv| kv.value().to_vec());
                    apply(&reloadable, &cluster, &mut last, value);
                    response.header().map_or(0, |h| h.revision())
                }
                _ => {
                    tokio::time::sleep(REWATCH).await;
                    continue;
                }
            };
            let mut watcher = client.clone();
            let options = WatchOptions::new().with_start_revision(revision + 1);
            let Ok(Ok((_watch, mut events))) =
                tokio::time::timeout(WRITE_TIMEOUT, watcher.watch(key.clone(), Some(options)))
                    .await
            else {
                tokio::time::sleep(REWATCH).await;
                continue;
            };
            while let Ok(Some(response)) = events.message().await {
                if response.canceled() {
                    break;
                }
                for event in response.events() {
                    let value = match event.event_type() {
                        EventType::Put => event.kv().map(|kv| kv.value().to_vec()),
                        EventType::Delete => None,
                    };
                    apply(&reloadable, &cluster, &mut last, value);
                }
            }
            tokio::time::sleep(REWATCH).await;
        }
    });
}

/// Applies one version of the document (`None`: no document, an empty layer) unless it is the
/// one applied last.
fn apply(
    reloadable: &Reloadable,
    cluster: &super::ClusterHandle,
    last: &mut Option<Vec<u8>>,
    value: Option<Vec<u8>>,
) {
    let bytes = value.unwrap_or_default();
    if last.as_ref() == Some(&bytes) {
        return;
    }
    let text = String::from_utf8_lossy(&bytes);
    let result = FileLayer::parse_settings(Path::new(SETTINGS_SOURCE), &text)
        .and_then(|layer| reloadable.apply(Some(&layer)));
    match result {
        Ok(keys) => {
            if !keys.is_empty() {
                tracing::info!(keys = ?keys, "fleet settings applied");
            }
            cluster.set_fleet_settings(&text);
            *last = Some(bytes);
        }
        Err(e) => {
            tracing::error!(error = %e, "the fleet's settings in etcd are not valid; the last good settings stay");
        }
    }
}

/// Why a settings write did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// etcd did not answer, or refused.
    #[error("etcd: {0}")]
    Unavailable(String),
    /// Another node changed the document in between, every time.
    #[error("the fleet's settings changed concurrently {0} times; retry")]
    Contended(usize),
    /// The stored document does not parse (written by hand?); fix it in etcd first.
    #[error("the fleet's settings document in etcd does not parse: {0}")]
    Stored(String),
    /// The document after the change is not valid.
    #[error(transparent)]
    Invalid(#[from] crate::config::ConfigError),
}

/// Changes the fleet's settings document: `change` gets the current text and returns the new
/// one (or an error that aborts); written only if nobody wrote in between (retried up to three
/// times). Blocks the calling thread (the API's blocking pool), at most about
/// [`WRITE_TIMEOUT`] per step. Returns the text written.
pub fn write(
    etcd: &EtcdInfo,
    change: impl Fn(&str) -> Result<String, WriteError>,
) -> Result<String, WriteError> {
    const ATTEMPTS: usize = 3;
    for _ in 0..ATTEMPTS {
        let (client, key) = (etcd.client.clone(), etcd.keys.settings());
        let (current, mod_revision) = on_runtime(etcd, async move {
            let mut client = client;
            let response = client.get(key, None).await?;
            Ok(response
                .kvs()
                .first()
                .map(|kv| {
                    (
                        String::from_utf8_lossy(kv.value()).into_owned(),
                        kv.mod_revision(),
                    )
                })
                .unwrap_or_default())
        })?;
        let text = change(&current)?;
        let (client, key, value) = (etcd.client.clone(), etcd.keys.settings(), text.clone());
        let written = on_runtime(etcd, async move {
            let mut client = client;
            // mod_revision 0 compares "absent" for a document not written yet.
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    mod_revision,
                )])
                .and_then([TxnOp::put(key, value, None)]);
            Ok(client.txn(txn).await?.succeeded())
        })?;
        if written {
            return Ok(text);
        }
    }
    Err(WriteError::Contended(ATTEMPTS))
}

/// Runs `future` on the agent's runtime and waits for it, for at most [`WRITE_TIMEOUT`].
fn on_runtime<T: Send + 'static>(
    etcd: &EtcdInfo,
    future: impl Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
) -> Result<T, WriteError> {
    let (done, result) = std::sync::mpsc::channel();
    etcd.runtime.spawn(async move {
        let outcome = tokio::time::timeout(WRITE_TIMEOUT, future).await;
        let _ = done.send(outcome);
    });
    match result.recv_timeout(WRITE_TIMEOUT + Duration::from_secs(1)) {
        Ok(Ok(Ok(value))) => Ok(value),
        Ok(Ok(Err(e))) => Err(WriteError::Unavailable(e.to_string())),
        Ok(Err(_)) | Err(_) => Err(WriteError::Unavailable(format!(
            "no answer within {}",
            humantime::format_duration(WRITE_TIMEOUT)
        ))),
    }
}
