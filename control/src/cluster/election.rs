//! The agent: one etcd session after another (lease, member key, campaign, leader watch),
//! each ended by the first sign that the lease is in doubt; the handle's state follows.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use etcd_client::{
    Client, EventType, GetOptions, LeaderKey, PutOptions, SortOrder, SortTarget, WatchOptions,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::members::Member;
use super::{Keys, Leadership};
use crate::config::EtcdCluster;

/// Why the agent could not start, or why a session ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// A TLS file of `cluster.etcd.*` could not be read.
    #[error("cannot read {file}: {reason}")]
    Tls {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// The client could not be built (a bad endpoint).
    #[error("cannot set up the etcd client: {0}")]
    Connect(String),
    /// The agent's runtime or thread could not start.
    #[error("cannot start the cluster agent: {0}")]
    Runtime(String),
    /// An etcd call failed.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// No keep-alive succeeded for half the lease TTL, or etcd says the lease is gone.
    #[error("the lease is in doubt: {0}")]
    Lease(String),
    /// An etcd call took longer than its bound.
    #[error("etcd did not answer {call} within {}", humantime::format_duration(*.after))]
    Timeout {
        /// The call.
        call: &'static str,
        /// Its bound.
        after: Duration,
    },
    /// The leader key of this node was removed.
    #[error("this node's election key was deleted")]
    Deposed,
    /// The node is leaving (shutdown).
    #[error("leaving the fleet")]
    Leaving,
}

/// The agent's state; [`Agent::run`] is its task.
pub struct Agent {
    pub(super) settings: EtcdCluster,
    pub(super) keys: Keys,
    pub(super) client: Client,
    pub(super) leadership: watch::Sender<Leadership>,
    pub(super) leading: watch::Sender<bool>,
    pub(super) connected: Arc<AtomicBool>,
    pub(super) snapshot_revision: Arc<AtomicI64>,
    pub(super) leave: mpsc::UnboundedReceiver<()>,
}

/// The first wait after a failed session; doubled up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(250);
/// The longest wait between sessions.
const MAX_RETRY: Duration = Duration::from_secs(5);
/// How often the member key's snapshot revision is refreshed.
const MEMBER_REFRESH: Duration = Duration::from_secs(5);

/// Runs `call` for at most `after`.
async fn bounded<T>(
    call: &'static str,
    after: Duration,
    future: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, AgentError> {
    match tokio::time::timeout(after, future).await {
        Ok(result) => result.map_err(AgentError::from),
        Err(_) => Err(AgentError::Timeout { call, after }),
    }
}

/// Runs `call` until `deadline` at the latest: the instant the lease is in doubt, so a call
/// that hangs cannot keep a node leading past it.
async fn until<T>(
    call: &'static str,
    deadline: Instant,
    future: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, AgentError> {
    bounded(
        call,
        deadline.saturating_duration_since(Instant::now()),
        future,
    )
    .await
}

impl Agent {
    /// The bound of one unary call: half the lease TTL.
    fn call_bound(&self) -> Duration {
        self.settings.lease_ttl / 2
    }

    /// Runs sessions until the process ends (or the node leaves).
    pub async fn run(mut self) {
        let started = kudurru_storage::Timestamp::now().to_string();
        let mut retry = FIRST_RETRY;
        loop {
            let began = Instant::now();
            let ended = self.session(&started).await;
            self.set(Leadership::Disconnected);
            self.connected.store(false, Ordering::Relaxed);
            match ended {
                AgentError::Leaving => {
                    tracing::info!("left the fleet: lease revoked");
                    return;
                }
                e => {
                    tracing::warn!(error = %e, "cluster session ended; leader work stopped; reconnecting")
                }
            }
            if began.elapsed() > MAX_RETRY * 2 {
                retry = FIRST_RETRY;
            }
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                _ = self.leave.recv() => return,
            }
            retry = (retry * 2).min(MAX_RETRY);
        }
    }

    fn set(&self, leadership: Leadership) {
        let leading = leadership.is_leader();
        self.leadership.send_if_modified(|current| {
            if *current == leadership {
                return false;
            }
            match &leadership {
                Leadership::Leader { revision, .. } => {
                    tracing::info!(
                        role = "leader",
                        election_revision = revision,
                        "cluster leadership"
                    );
                }
                Leadership::Follower { leader } => {
                    tracing::info!(role = "follower", %leader, "cluster leadership");
                }
                other => tracing::info!(role = other.role(), "cluster leadership"),
            }
            *current = leadership;
            true
        });
        self.leading.send_if_modified(|current| {
            let changed = *current != leading;
            *current = leading;
            changed
        });
    }

    /// One session: returns why it ended (never `Ok`).
    async fn session(&mut self, started: &str) -> AgentError {
        let ttl = self.settings.lease_ttl;
        let mut client = self.client.clone();
        let ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(60).max(2);
        let sent = Instant::now();
        let lease = match bounded(
            "lease grant",
            self.call_bound(),
            client.lease_grant(ttl_secs, None),
        )
        .await
        {
            Ok(lease) => lease.id(),
            Err(e) => return e,
        };
        let ended = self.with_lease(started, lease, sent).await;
        // Leader work stops before anything else is tried.
        self.set(Leadership::Disconnected);
        self.connected.store(false, Ordering::Relaxed);
        // Best effort, bounded: a revoked lease lets another node lead at once instead of
        // after the TTL; when etcd is unreachable the lease expires on its own.
        let mut revoke = self.client.clone();
        let _ = tokio::time::timeout(Duration::from_secs(1), revoke.lease_revoke(lease)).await;
        ended
    }

    async fn with_lease(&mut self, started: &str, lease: i64, granted_at: Instant) -> AgentError {
        let ttl = self.settings.lease_ttl;
        let mut client = self.client.clone();
        let (mut keeper, mut keep_alives) = match bounded(
            "lease keep-alive",
            self.call_bound(),
            client.lease_keep_alive(lease),
        )
        .await
        {
            Ok(pair) => pair,
            Err(e) => return e,
        };
        // Sent times of keep-alives not answered yet, oldest first (answers come in order).
        let mut pending: VecDeque<Instant> = VecDeque::new();
        let mut renewed_at = granted_at;
        if let Err(e) = self.put_member(lease, started, granted_at + ttl / 2).await {
            return e;
        }
        let mut campaign_client = self.client.clone();
        let election = self.keys.election();
        let advertise = self.settings.advertise_address.clone();
        let campaign = campaign_client.campaign(election.clone(), advertise, lease);
        tokio::pin!(campaign);
        let mut elected: Option<LeaderKey> = None;
        let mut watch_client = self.client.clone();
        let watched = watch_client.watch(
            format!("{election}/"),
            Some(WatchOptions::new().with_prefix()),
        );
        let (_watcher, mut leader_events) = match bounded("watch", self.call_bound(), watched).await
        {
            Ok(pair) => pair,
            Err(e) => return e,
        };
        self.connected.store(true, Ordering::Relaxed);
        if let Err(e) = self.observe(&elected, lease, granted_at + ttl / 2).await {
            return e;
        }
        let mut keep_alive = tokio::time::interval(ttl / 4);
        keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut member_refresh = tokio::time::interval(MEMBER_REFRESH);
        member_refresh.tick().await;
        loop {
            let doubt_at = renewed_at + ttl / 2;
            tokio::select! {
                _ = keep_alive.tick() => {
                    pending.push_back(Instant::now());
                    if let Err(e) = until("keep-alive", doubt_at, keeper.keep_alive()).await {
                        return e;
                    }
                }
                answer = keep_alives.message() => match answer {
                    Ok(Some(answer)) => {
                        let sent = pending.pop_front();
                        if answer.ttl() <= 0 {
                            return AgentError::Lease("etcd says the lease expired".into());
                        }
                        if let Some(sent) = sent {
                            renewed_at = renewed_at.max(sent);
                        }
                        self.connected.store(true, Ordering::Relaxed);
                    }
                    Ok(None) => return AgentError::Lease("the keep-alive stream ended".into()),
                    Err(e) => return e.into(),
                },
                () = tokio::time::sleep_until(doubt_at) => {
                    return AgentError::Lease(format!(
                        "no keep-alive succeeded for {} (half the lease TTL)",
                        humantime::format_duration(ttl / 2)
                    ));
                }
                won = &mut campaign, if elected.is_none() => match won {
                    Ok(mut won) => {
                        elected = won.take_leader();
                        if let Err(e) = self.observe(&elected, lease, doubt_at).await {
                            return e;
                        }
                    }
                    Err(e) => return e.into(),
                },
                event = leader_events.message() => match event {
                    Ok(Some(response)) => {
                        if response.canceled() {
                            return AgentError::Lease(format!("the leader watch was cancelled: {}", response.cancel_reason()));
                        }
                        let deleted_ours = elected.as_ref().is_some_and(|ours| {
                            response.events().iter().any(|e| {
                                e.event_type() == EventType::Delete
                                    && e.kv().is_some_and(|kv| kv.key() == ours.key())
                            })
                        });
                        if deleted_ours {
                            return AgentError::Deposed;
                        }
                        if let Err(e) = self.observe(&elected, lease, doubt_at).await {
                            return e;
                        }
                    }
                    Ok(None) => return AgentError::Lease("the leader watch ended".into()),
                    Err(e) => return e.into(),
                },
                _ = member_refresh.tick() => {
                    if let Err(e) = self.put_member(lease, started, doubt_at).await {
                        return e;
                    }
                }
                _ = self.leave.recv() => return AgentError::Leaving,
            }
        }
    }

    /// Writes this node's member key, attached to `lease`.
    async fn put_member(
        &self,
        lease: i64,
        started: &str,
        deadline: Instant,
    ) -> Result<(), AgentError> {
        let member = Member {
            name: self.settings.node_name.clone(),
            advertise_address: self.settings.advertise_address.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started: started.to_owned(),
            snapshot_revision: self.snapshot_revision.load(Ordering::Relaxed),
            leader: self.leadership.borrow().is_leader(),
        };
        let value = serde_json::to_vec(&member).unwrap_or_default();
        let mut client = self.client.clone();
        let put = client.put(
            self.keys.member(&self.settings.node_name),
            value,
            Some(PutOptions::new().with_lease(lease)),
        );
        until("member put", deadline, put).await?;
        Ok(())
    }

    /// Reads who leads now (the campaign key with the lowest create revision) and sets the
    /// handle's state: `Leader` only when that key is the one this node's campaign won.
    async fn observe(
        &self,
        elected: &Option<LeaderKey>,
        lease: i64,
        deadline: Instant,
    ) -> Result<(), AgentError> {
        let mut client = self.client.clone();
        let prefix = format!("{}/", self.keys.election());
        let get = client.get(
            prefix,
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_limit(1),
            ),
        );
        let response = until("leader read", deadline, get).await?;
        let first = response.kvs().first();
        let leadership = match (first, elected) {
            (Some(kv), Some(ours)) if kv.key() == ours.key() => Leadership::Leader {
                revision: kv.create_revision(),
                key: kv.key().to_vec(),
            },
            (Some(_), Some(_)) => return Err(AgentError::Deposed),
            // This node's own campaign key leads, and the campaign's answer is on its way.
            (Some(kv), None) if kv.lease() == lease => return Ok(()),
            (Some(kv), None) => Leadership::Follower {
                leader: String::from_utf8_lossy(kv.value()).into_owned(),
            },
            (None, Some(_)) => return Err(AgentError::Deposed),
            (None, None) => Leadership::NoLeader,
        };
        self.set(leadership);
        Ok(())
    }
}
