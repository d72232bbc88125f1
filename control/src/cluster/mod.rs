//! The fleet: this node's membership, the leader election and the connection state, on etcd
//! (`cluster.driver = etcd`), or a single node that is always its own leader (`none`).
//!
//! ```text
//! agent thread (own tokio runtime, so a busy control thread cannot delay a keep-alive)
//!   lease (TTL = cluster.leaseTTL) ──keep-alive every TTL/4──▶ etcd
//!   /kudurru/<name>/members/<node>   {advertiseAddress, version, started, snapshotRevision}
//!   campaign /kudurru/<name>/leader  (etcd's election API, with the lease)
//!   watch    /kudurru/<name>/leader/ (lowest create revision = the leader, its value = address)
//!        │
//!        ▼ watch channels
//!   Leadership: Leader { revision } | Follower { leader } | NoLeader | Disconnected
//!        └─▶ leader-only work (list fetching, audit pruning), refresh 202/409/503, metrics
//! ```
//!
//! Fencing: the agent stops leader work (Leadership leaves `Leader`) when no keep-alive has
//! succeeded for TTL/2, counted from when the last successful keep-alive was *sent*: the
//! server renewed the lease at or after that instant, so it cannot expire, and no other node
//! can be elected, before TTL has passed since then. Leader writes also carry the election
//! key's create revision as a precondition in the store (etcd-store's fence).

mod election;
mod members;
pub mod peers;
pub mod settings;
pub mod snapshot;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::config::EtcdCluster;

pub use election::{Agent, AgentError};
pub use members::{Member, list_members};

/// How long the API waits for etcd to list the members.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether this node leads the fleet's periodic work, as last known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leadership {
    /// This node leads; its election key and that key's create revision are the fence.
    Leader {
        /// The election key's create revision.
        revision: i64,
        /// The election key this node holds.
        key: Vec<u8>,
    },
    /// Another node leads.
    Follower {
        /// The leader's advertised API address.
        leader: String,
    },
    /// Connected, and no node is elected.
    NoLeader,
    /// etcd cannot be reached (or this node's lease is in doubt).
    Disconnected,
}

impl Leadership {
    /// This node leads.
    pub fn is_leader(&self) -> bool {
        matches!(self, Self::Leader { .. })
    }

    /// A word for logs, metrics and the API.
    pub fn role(&self) -> &'static str {
        match self {
            Self::Leader { .. } => "leader",
            Self::Follower { .. } => "follower",
            Self::NoLeader => "no_leader",
            Self::Disconnected => "disconnected",
        }
    }
}

/// The etcd keys of one fleet.
#[derive(Debug, Clone)]
pub struct Keys {
    root: String,
}

impl Keys {
    /// The keys of fleet `name`: everything under `/kudurru/<name>/`.
    pub fn new(name: &str) -> Self {
        Self {
            root: format!("/kudurru/{name}/"),
        }
    }

    /// `/kudurru/<name>/leader`: the election's name (campaign keys are below it).
    pub fn election(&self) -> String {
        format!("{}leader", self.root)
    }

    /// `/kudurru/<name>/members/`.
    pub fn members(&self) -> String {
        format!("{}members/", self.root)
    }

    /// `/kudurru/<name>/members/<node>`.
    pub fn member(&self, node: &str) -> String {
        format!("{}members/{node}", self.root)
    }

    /// `/kudurru/<name>/settings`: the cluster-scope settings layer (TOML).
    pub fn settings(&self) -> String {
        format!("{}settings", self.root)
    }
}

/// What the rest of the node reads of the fleet: cheap to clone.
#[derive(Clone)]
pub struct ClusterHandle {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` for a single node (and a detached one).
    etcd: Option<EtcdInfo>,
    /// One of a fleet (`cluster.driver = etcd`), connected or not.
    fleet: bool,
    leadership: watch::Receiver<Leadership>,
    /// Follows `leadership`: true while it is `Leader` (the list manager's gate).
    leading: watch::Receiver<bool>,
    connected: Arc<AtomicBool>,
    /// The store revision this node's objects reflect (reported in its member key).
    snapshot_revision: Arc<AtomicI64>,
    /// The fleet's settings document as last applied (kept in the snapshot).
    fleet_settings: std::sync::Mutex<String>,
    /// Set when the agent is asked to leave (shutdown): it revokes its lease.
    leave: Option<tokio::sync::mpsc::UnboundedSender<()>>,
    /// Holds the single node's senders open.
    _senders: Option<(watch::Sender<Leadership>, watch::Sender<bool>)>,
}

/// What the handle knows of the fleet's etcd.
#[derive(Clone)]
pub struct EtcdInfo {
    /// The checked `cluster.*`.
    pub settings: EtcdCluster,
    /// The fleet's keys.
    pub keys: Keys,
    /// A client for reads (status, members); it shares the agent's connection.
    pub client: etcd_client::Client,
    /// The runtime the client's connection lives on (the agent's).
    pub runtime: tokio::runtime::Handle,
}

impl ClusterHandle {
    /// A single node (`cluster.driver = none`): always connected, always the leader.
    pub fn single() -> Self {
        let (leadership_tx, leadership) = watch::channel(Leadership::Leader {
            revision: 0,
            key: Vec::new(),
        });
        let (leading_tx, leading) = watch::channel(true);
        Self {
            inner: Arc::new(Inner {
                etcd: None,
                fleet: false,
                leadership,
                leading,
                connected: Arc::new(AtomicBool::new(true)),
                snapshot_revision: Arc::new(AtomicI64::new(0)),
                fleet_settings: std::sync::Mutex::new(String::new()),
                leave: None,
                _senders: Some((leadership_tx, leading_tx)),
            }),
        }
    }

    /// A fleet member that serves its snapshot without etcd (started while etcd was down):
    /// disconnected, never the leader, no agent.
    pub fn detached() -> Self {
        Self::fixed(Leadership::Disconnected)
    }

    /// A fleet member without etcd or agent whose leadership stays `leadership` (detached
    /// nodes; tests of what the API answers in each role).
    pub fn fixed(leadership: Leadership) -> Self {
        let leads = leadership.is_leader();
        let (leadership_tx, leadership) = watch::channel(leadership);
        let (leading_tx, leading) = watch::channel(leads);
        Self {
            inner: Arc::new(Inner {
                etcd: None,
                fleet: true,
                leadership,
                leading,
                connected: Arc::new(AtomicBool::new(false)),
                snapshot_revision: Arc::new(AtomicI64::new(0)),
                fleet_settings: std::sync::Mutex::new(String::new()),
                leave: None,
                _senders: Some((leadership_tx, leading_tx)),
            }),
        }
    }

    /// Whether this node is one of a fleet.
    pub fn is_fleet(&self) -> bool {
        self.inner.fleet
    }

    /// The fleet's etcd, `None` for a single node.
    pub fn etcd(&self) -> Option<&EtcdInfo> {
        self.inner.etcd.as_ref()
    }

    /// The current leadership.
    pub fn leadership(&self) -> Leadership {
        self.inner.leadership.borrow().clone()
    }

    /// A receiver of leadership changes.
    pub fn leadership_changes(&self) -> watch::Receiver<Leadership> {
        self.inner.leadership.clone()
    }

    /// A receiver that is true while this node leads (the list manager's gate).
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.inner.leading.clone()
    }

    /// Whether etcd answered the last keep-alive (always true for a single node).
    pub fn connected(&self) -> bool {
        self.inner.connected.load(Ordering::Relaxed)
    }

    /// Records the store revision this node's objects reflect (reported in its member key).
    pub fn set_snapshot_revision(&self, revision: i64) {
        self.inner
            .snapshot_revision
            .fetch_max(revision, Ordering::Relaxed);
    }

    /// The store revision this node's objects reflect.
    pub fn snapshot_revision(&self) -> i64 {
        self.inner.snapshot_revision.load(Ordering::Relaxed)
    }

    /// The fleet's settings document as last applied (empty: none).
    pub fn fleet_settings(&self) -> String {
        self.inner
            .fleet_settings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records the fleet's settings document just applied.
    pub(crate) fn set_fleet_settings(&self, text: &str) {
        *self
            .inner
            .fleet_settings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = text.to_owned();
    }

    /// Asks the agent to revoke its lease (shutdown): another node takes over at once.
    pub fn leave(&self) {
        if let Some(leave) = &self.inner.leave {
            let _ = leave.send(());
        }
    }
}

/// The connect options of the fleet's etcd: connect timeout, HTTP/2 pings and TLS. No
/// per-request timeout: a campaign waits as long as another node leads; the agent bounds
/// each unary call itself.
pub fn connect_options(settings: &EtcdCluster) -> Result<etcd_client::ConnectOptions, AgentError> {
    let mut options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        // etcd answers pings more often than every 5 s, or without a stream, with GOAWAY
        // (too_many_pings), which broke sessions; the lease keep-alive is what notices a
        // silent etcd here.
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
        .with_keep_alive_while_idle(false)
        // A member cut off from the raft leader refuses rather than answers stale.
        .with_require_leader(true);
    if settings.endpoints.iter().any(|e| e.starts_with("https://")) {
        let mut tls = etcd_client::TlsOptions::new();
        if let Some(ca) = &settings.ca_file {
            let pem = std::fs::read(ca).map_err(|e| AgentError::Tls {
                file: ca.display().to_string(),
                reason: e.to_string(),
            })?;
            tls = tls.ca_certificate(etcd_client::Certificate::from_pem(pem));
        }
        if let Some((cert, key)) = &settings.client_pair {
            let read = |path: &std::path::Path| {
                std::fs::read(path).map_err(|e| AgentError::Tls {
                    file: path.display().to_string(),
                    reason: e.to_string(),
                })
            };
            tls = tls.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?));
        }
        options = options.with_tls(tls);
    }
    Ok(options)
}

/// Starts the agent for `settings` on a thread of its own and returns the node's handle. The
/// agent connects, registers the node, campaigns and keeps the handle's state current until
/// the process ends; etcd down at start is not an error (the node starts `Disconnected`).
pub fn start(settings: EtcdCluster) -> Result<ClusterHandle, AgentError> {
    let options = connect_options(&settings)?;
    let (leadership_tx, leadership) = watch::channel(Leadership::Disconnected);
    let (leading_tx, leading) = watch::channel(false);
    let connected = Arc::new(AtomicBool::new(false));
    let snapshot_revision = Arc::new(AtomicI64::new(0));
    let (leave_tx, leave_rx) = tokio::sync::mpsc::unbounded_channel();
    let keys = Keys::new(&settings.name);
    // The client is built on the agent's runtime (its connection's tasks live there), then
    // handed back.
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let agent_settings = settings.clone();
    let agent_keys = keys.clone();
    let agent_connected = connected.clone();
    let agent_revision = snapshot_revision.clone();
    std::thread::Builder::new()
        .name("kudurru-cluster".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(AgentError::Runtime(e.to_string())));
                    return;
                }
            };
            let connected = runtime.block_on(etcd_client::Client::connect(
                &agent_settings.endpoints,
                Some(options),
            ));
            let client = match connected {
                Ok(client) => client,
                Err(e) => {
                    let _ = ready_tx.send(Err(AgentError::Connect(e.to_string())));
                    return;
                }
            };
            let _ = ready_tx.send(Ok((client.clone(), runtime.handle().clone())));
            let agent = Agent {
                settings: agent_settings,
                keys: agent_keys,
                client,
                leadership: leadership_tx,
                leading: leading_tx,
                connected: agent_connected,
                snapshot_revision: agent_revision,
                leave: leave_rx,
            };
            runtime.block_on(agent.run());
        })
        .map_err(|e| AgentError::Runtime(e.to_string()))?;
    let (client, runtime) = ready
        .recv()
        .map_err(|_| AgentError::Runtime("the agent thread ended".into()))??;
    Ok(ClusterHandle {
        inner: Arc::new(Inner {
            fleet: true,
            etcd: Some(EtcdInfo {
                settings,
                keys,
                client,
                runtime,
            }),
            leadership,
            leading,
            connected,
            snapshot_revision,
            fleet_settings: std::sync::Mutex::new(String::new()),
            leave: Some(leave_tx),
            _senders: None,
        }),
    })
}

/// Keeps the store's fence in step with leadership: the election key and its create revision
/// from the moment this node leads. The fence is never cleared: after leadership is lost the
/// stale fence makes any late leader write fail (`Fenced`) instead of landing. Returns the
/// gate of leader work: true only once the fence of the current term is set.
pub fn follow_leadership(
    cluster: &ClusterHandle,
    store: Arc<kudurru_storage::EtcdStore>,
) -> watch::Receiver<bool> {
    let mut changes = cluster.leadership_changes();
    let (gate, gated) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            let leadership = changes.borrow_and_update().clone();
            match leadership {
                Leadership::Leader { revision, key } => {
                    tracing::info!(revision, "leader writes carry the election fence");
                    store.set_fence(Some(kudurru_storage::Fence {
                        key,
                        create_revision: revision,
                    }));
                    gate.send_replace(true);
                }
                _ => {
                    gate.send_replace(false);
                }
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
    gated
}

impl EtcdInfo {
    /// Runs `future` on the agent's runtime and waits for it from a blocking thread (the
    /// API's blocking pool), for at most `bound`.
    pub fn block_on<T: Send + 'static>(
        &self,
        bound: Duration,
        future: impl Future<Output = Result<T, String>> + Send + 'static,
    ) -> Result<T, String> {
        let (done, result) = std::sync::mpsc::channel();
        self.runtime.spawn(async move {
            let outcome = tokio::time::timeout(bound, future).await;
            let _ = done.send(outcome);
        });
        match result.recv_timeout(bound + Duration::from_secs(1)) {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) | Err(_) => Err(format!(
                "etcd did not answer within {}",
                humantime::format_duration(bound)
            )),
        }
    }
}

/// What [`status`] asks the members for: nothing (the doctor), or each member's own view
/// (snapshot revision, zone serials), this node's being `own` and the others asked with
/// `token` (the caller's bearer token; `None`: the caller has none to pass on).
pub struct AskMembers {
    /// This node's view.
    pub own: peers::MemberView,
    /// The caller's bearer token.
    pub token: Option<String>,
}

/// The fleet as this node sees it, for `GET /api/v1/cluster` and the doctor: its own state
/// and, when etcd answers, the members and the store revision; with `ask`, each member's
/// snapshot revision and zone serials as the member itself tells (or the error it gave).
pub fn status(cluster: &ClusterHandle, ask: Option<AskMembers>) -> serde_json::Value {
    let leadership = cluster.leadership();
    let Some(etcd) = cluster.etcd() else {
        if cluster.is_fleet() {
            return serde_json::json!({
                "driver": "etcd",
                "role": leadership.role(),
                "leader": null,
                "connected": false,
                "members": null,
                "error": "etcd could not be reached at start: this node serves its last snapshot of the fleet and starts again once etcd answers",
            });
        }
        return serde_json::json!({
            "driver": "none",
            "role": "leader",
            "connected": true,
            "members": [],
        });
    };
    let leader = match &leadership {
        Leadership::Leader { .. } => Some(etcd.settings.advertise_address.clone()),
        Leadership::Follower { leader } => Some(leader.clone()),
        Leadership::NoLeader | Leadership::Disconnected => None,
    };
    let mut body = serde_json::json!({
        "driver": "etcd",
        "name": etcd.settings.name,
        "node": etcd.settings.node_name,
        "advertiseAddress": etcd.settings.advertise_address,
        "role": leadership.role(),
        "leader": leader,
        "connected": cluster.connected(),
        "snapshotRevision": cluster.snapshot_revision(),
    });
    let info = etcd.clone();
    let own_name = etcd.settings.node_name.clone();
    let bound = if ask.is_some() {
        STATUS_TIMEOUT + peers::PEER_TIMEOUT
    } else {
        STATUS_TIMEOUT
    };
    let listed = etcd.block_on(bound, async move {
        let (members, revision) = list_members(&info, STATUS_TIMEOUT).await?;
        let mut listed: Vec<serde_json::Value> = members
            .iter()
            .map(|m| serde_json::to_value(m).unwrap_or_default())
            .collect();
        if let Some(ask) = ask {
            let views = ask_members(&members, &own_name, ask).await;
            for (value, view) in listed.iter_mut().zip(views) {
                match view {
                    Ok(view) => {
                        value["snapshotRevision"] = view.snapshot_revision.into();
                        value["zones"] = serde_json::to_value(view.zones).unwrap_or_default();
                    }
                    Err(e) => {
                        value["zones"] = serde_json::Value::Null;
                        value["error"] = e.into();
                    }
                }
            }
        }
        Ok((listed, revision))
    });
    match listed {
        Ok((members, revision)) => {
            body["members"] = members.into();
            body["revision"] = revision.into();
        }
        Err(e) => {
            body["members"] = serde_json::Value::Null;
            body["error"] = e.into();
        }
    }
    body
}

/// Each member's view, in the order of `members`: this node's own, the others asked
/// concurrently (on the agent's runtime, where the client's connections live).
async fn ask_members(
    members: &[Member],
    own_name: &str,
    ask: AskMembers,
) -> Vec<Result<peers::MemberView, String>> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    let client = CLIENT.get_or_init(peers::client).clone();
    let mut asks = tokio::task::JoinSet::new();
    for (i, member) in members.iter().enumerate() {
        if member.name == own_name {
            continue;
        }
        let (client, address, token) = (
            client.clone(),
            member.advertise_address.clone(),
            ask.token.clone(),
        );
        asks.spawn(async move {
            let view = match client {
                Ok(client) => peers::ask(&client, &address, token.as_deref()).await,
                Err(e) => Err(format!("no HTTP client: {e}")),
            };
            (i, view)
        });
    }
    let mut views: Vec<Result<peers::MemberView, String>> = members
        .iter()
        .map(|m| {
            if m.name == own_name {
                Ok(ask.own.clone())
            } else {
                Err("no answer: the request to the member failed".into())
            }
        })
        .collect();
    while let Some(done) = asks.join_next().await {
        if let Ok((i, view)) = done
            && let Some(slot) = views.get_mut(i)
        {
            *slot = view;
        }
    }
    views
}
