//! The etcd driver: the object store, its audit log and the list-body cache in an etcd v3
//! cluster, shared by every node of a fleet (`cluster.driver: etcd`).
//!
//! ```text
//!  caller thread ──call()──▶ driver runtime (own thread) ──gRPC──▶ etcd
//!        │  write: read head + object ─▶ engine ─▶ one Txn (compare head, object[, fence])
//!        │         ─▶ wait until the hub saw the write's revision
//!        ▼
//!  Watch ◀── Hub (history, watchers) ◀── one etcd watch on /kudurru/<prefix>/ (resumes from
//!                                        the last etcd revision seen; compacted → reset, Gone)
//! ```
//!
//! The store's revision is a counter in the head key (`meta/head`, with the audit chain's
//! head), bumped by every object write in the same transaction; every write compares the head's
//! `mod_revision`, so writes from all nodes are serialized exactly as redb's are on one node,
//! and resourceVersions are dense and the same on every node. Values are the redb driver's
//! (same encoding, same checked decoders: what etcd returns is peer input). Watches are served
//! from an in-memory history fed by one etcd watch per store (as Kubernetes' watch cache is):
//! a watch or continue token older than that history answers Gone.
//!
//! Layout, limits and what an operator sees when etcd is down: docs/operations.md, "Cluster →
//! Storage on etcd".

mod bodies;
mod keys;
mod sync;

pub use bodies::BODY_CHUNK_BYTES;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, KvClient, Txn, TxnOp,
    TxnOpResponse, WatchClient,
};

use crate::audit::{self, AuditLog, AuditQuery, AuditRecord, ChainPoint, ChainReport, ChainWalk};
use crate::audit::{Encoded, PruneReport};
use crate::engine::{self, Context, Op, Tx};
use crate::error::{Result, StorageError, StoreError};
use crate::list::{self, Continue};
use crate::memory::record_hash;
use crate::object::Object;
use crate::redb_store::{decode_object, encode_object, object_key};
use crate::store::{
    Actor, DeleteOptions, ListOptions, ObjectList, Store, StoreOptions, WatchOptions,
};
use crate::time::Timestamp;
use crate::watch::{Hub, Watch};

use keys::{Head, Keys, prefix_end};

/// Compare-failed retries of one write before it gives up (other nodes kept winning the head).
const WRITE_ATTEMPTS: usize = 32;
/// Keys per range request: a list of 100,000 objects is read in pages, at one revision.
const RANGE_PAGE: i64 = 256;
/// The largest response accepted from etcd (tonic's default is 4 MiB): a page of
/// [`RANGE_PAGE`] values of etcd's largest (1.5 MiB) fits.
const MAX_RESPONSE_BYTES: usize = 400 << 20;
/// The largest watch message: one transaction's events (an object, its previous value, the
/// head), each under etcd's 1.5 MiB request limit.
const MAX_WATCH_MESSAGE_BYTES: usize = 64 << 20;

/// How to reach etcd, and under which prefix this fleet's keys live.
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// `http://host:port` or `https://host:port` (with [`EtcdOptions::tls`]), one per member.
    pub endpoints: Vec<String>,
    /// The fleet's name (`cluster.name`): every key lives under `/kudurru/<prefix>/`, so several
    /// fleets share one etcd.
    pub prefix: String,
    /// Client TLS; `None` for plain HTTP endpoints.
    pub tls: Option<EtcdTls>,
    /// The longest wait for a connection to an endpoint.
    pub dial_timeout: Duration,
    /// The longest wait for one call (a read, a write's transaction): after it the call answers
    /// [`StoreError::Unavailable`].
    pub request_timeout: Duration,
}

/// Client TLS for etcd: the CA that signed the members' certificates, and this node's client
/// certificate and key when etcd asks for one (`--client-cert-auth`).
#[derive(Clone, Debug)]
pub struct EtcdTls {
    /// PEM file of the CA.
    pub ca_file: PathBuf,
    /// PEM file of the client certificate.
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's key.
    pub key_file: Option<PathBuf>,
}

/// A leader's fence: its election key and that key's `create_revision`.
///
/// While a fence is set on a handle ([`EtcdStore::set_fence`]), every leader write through it —
/// `put_body`, `delete_bodies`, `audit_prune`, and object writes whose actor is `system:…` —
/// carries the compare `create_revision(key) == create_revision` in its transaction. When the
/// leader's lease expired (its key was deleted, or another node's key took its place) the
/// compare fails and the write answers [`StoreError::Fenced`] having changed nothing: a node
/// that lost leadership cannot overwrite the new leader's work, however late its writes arrive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The election key this node holds as leader.
    pub key: Vec<u8>,
    /// The key's `create_revision` when this node won the election.
    pub create_revision: i64,
}

/// The object store, audit log and body cache of a fleet, in etcd. See the module docs.
///
/// Calls block the calling thread (the control thread's blocking pool) for at most about
/// `request_timeout` per etcd request; they must not be made from the driver's own runtime
/// ([`EtcdStore::runtime`]). Dropping the store stops its runtime, and with it every clone of
/// [`EtcdStore::client`].
pub struct EtcdStore {
    inner: Arc<Inner>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

pub(crate) struct Inner {
    client: Client,
    pub(crate) kv: KvClient,
    pub(crate) watch_client: WatchClient,
    runtime: tokio::runtime::Handle,
    pub(crate) keys: Keys,
    options: EtcdOptions,
    store: StoreOptions,
    state: Mutex<State>,
    advanced: Condvar,
    fence: Mutex<Option<Fence>>,
    connected: AtomicBool,
    body_watchers: Mutex<Vec<tokio::sync::mpsc::UnboundedSender<String>>>,
}

/// What the watch task maintains.
pub(crate) struct State {
    pub(crate) hub: Hub,
    /// Whether the head was read and the watch from it is live (false until etcd first
    /// answers).
    pub(crate) following: bool,
    /// The etcd revision of the last event (or reset) the hub has applied.
    pub(crate) etcd_revision: i64,
    /// (store revision, etcd revision) of the recent writes, for [`Store::compact`].
    pub(crate) revisions: std::collections::VecDeque<(u64, i64)>,
}

impl EtcdStore {
    /// Connects to etcd, reads the store's head and starts following its changes. Fails with
    /// [`StoreError::Unavailable`] if etcd does not answer within `dial_timeout` +
    /// `request_timeout`.
    pub fn connect(options: EtcdOptions, store: StoreOptions) -> Result<Self> {
        let wait = options.dial_timeout + options.request_timeout;
        let opened = Self::open(options, store)?;
        let deadline = Instant::now() + wait;
        let mut state = opened.inner.state();
        while !state.following {
            let now = Instant::now();
            if now >= deadline {
                drop(state);
                return Err(unavailable_error(&opened.inner.options, None));
            }
            state = opened
                .inner
                .advanced
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(state);
        Ok(opened)
    }

    /// Like [`EtcdStore::connect`], but returns at once, etcd reachable or not: calls answer
    /// [`StoreError::Unavailable`] until etcd answers, and the store starts following its
    /// changes then ([`EtcdStore::connected`] turns true). For a node that starts while etcd is
    /// down and serves its last snapshot meanwhile. Fails only on invalid options.
    pub fn open(options: EtcdOptions, store: StoreOptions) -> Result<Self> {
        validate_prefix(&options.prefix)?;
        if options.endpoints.is_empty() {
            return Err(StoreError::invalid("cluster.etcd.endpoints", "is empty"));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| StorageError::Io {
                path: PathBuf::from("(etcd driver runtime)"),
                source,
            })?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("etcd-store".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(|source| StorageError::Io {
                path: PathBuf::from("(etcd driver thread)"),
                source,
            })?;
        let connect_options = connect_options(&options)?;
        let endpoints = options.endpoints.clone();
        let client = run(
            &handle,
            options.dial_timeout + options.request_timeout,
            async move { Client::connect(endpoints, Some(connect_options)).await },
        )
        .map_err(|error| unavailable_error(&options, error))?;
        let keys = Keys::new(&options.prefix);
        let inner = Arc::new(Inner {
            kv: client
                .kv_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES),
            watch_client: client
                .watch_client()
                .max_decoding_message_size(MAX_WATCH_MESSAGE_BYTES),
            client,
            runtime: handle,
            keys,
            state: Mutex::new(State {
                hub: Hub::new(0, store.watch_history, store.watch_buffer),
                following: false,
                etcd_revision: 0,
                revisions: Default::default(),
            }),
            options,
            store,
            advanced: Condvar::new(),
            fence: Mutex::new(None),
            connected: AtomicBool::new(false),
            body_watchers: Mutex::new(Vec::new()),
        });
        inner.runtime.spawn(sync::follow(inner.clone()));
        Ok(Self {
            inner,
            stop: Some(stop),
        })
    }

    /// A clone of the driver's etcd client (election, leases, membership), bound to
    /// [`EtcdStore::runtime`].
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// The driver's runtime, on which the client's connections are driven.
    pub fn runtime(&self) -> tokio::runtime::Handle {
        self.inner.runtime.clone()
    }

    /// Sets (or, with `None`, clears) the fence leader writes carry. See [`Fence`].
    pub fn set_fence(&self, fence: Option<Fence>) {
        *self
            .inner
            .fence
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = fence;
    }

    /// Whether the last etcd call or watch message reached etcd.
    pub fn connected(&self) -> bool {
        self.inner.connected.load(Ordering::Acquire)
    }

    /// The keys of the bodies that change (are put or deleted, by any node), as they change;
    /// followers recompile a list when the leader stores its new body.
    pub fn watch_bodies(&self) -> tokio::sync::mpsc::UnboundedReceiver<String> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        self.inner
            .body_watchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sender);
        receiver
    }

    /// The key prefix every key of this store lives under (`/kudurru/<prefix>/`).
    pub fn key_prefix(&self) -> &[u8] {
        self.inner.keys.root()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn validate_prefix(prefix: &str) -> Result<()> {
    let valid = !prefix.is_empty()
        && prefix.len() <= 63
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !valid {
        return Err(StoreError::invalid(
            "cluster.name",
            format!("{prefix:?} must be 1 to 63 letters, digits, '-', '_' or '.'"),
        ));
    }
    Ok(())
}

fn connect_options(options: &EtcdOptions) -> Result<ConnectOptions> {
    let mut connect = ConnectOptions::new()
        .with_connect_timeout(options.dial_timeout)
        // A stopped or partitioned member is noticed by the keepalive, not by waiting forever
        // on the watch stream. Every 10 s: etcd answers pings closer than its
        // --grpc-keepalive-min-time (5 s by default) with GOAWAY `too_many_pings`, which drops
        // the connection and its watch (seen by the cluster agent with 2 s).
        .with_keep_alive(Duration::from_secs(10), options.request_timeout)
        .with_keep_alive_while_idle(true)
        .with_require_leader(true);
    if let Some(tls) = &options.tls {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| StorageError::Io {
                path: path.clone(),
                source,
            })
        };
        let mut config = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(read(&tls.ca_file)?));
        match (&tls.cert_file, &tls.key_file) {
            (Some(cert), Some(key)) => {
                config = config.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?));
            }
            (None, None) => {}
            _ => {
                return Err(StoreError::invalid(
                    "cluster.etcd.tls",
                    "set both the client certificate and its key, or neither",
                ));
            }
        }
        connect = connect.with_tls(config);
    }
    Ok(connect)
}

/// Runs `future` on `runtime` and waits for it at most `timeout` (`None`: it timed out or its
/// task died).
fn run<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    timeout: Duration,
    future: impl Future<Output = std::result::Result<T, etcd_client::Error>> + Send + 'static,
) -> std::result::Result<T, Option<etcd_client::Error>> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let result = tokio::time::timeout(timeout, future).await;
        let _ = sender.send(result);
    });
    match receiver.recv_timeout(timeout + Duration::from_secs(1)) {
        Ok(Ok(Ok(value))) => Ok(value),
        Ok(Ok(Err(error))) => Err(Some(error)),
        Ok(Err(_)) | Err(_) => Err(None),
    }
}

fn unavailable_error(options: &EtcdOptions, error: Option<etcd_client::Error>) -> StoreError {
    let endpoints = options.endpoints.join(",");
    match error {
        None => StoreError::Unavailable {
            reason: format!(
                "etcd ({endpoints}) did not answer within {} ms",
                options.request_timeout.as_millis()
            ),
        },
        Some(error) => StoreError::Unavailable {
            reason: format!("etcd ({endpoints}): {error}"),
        },
    }
}

/// gRPC codes that mean "not reachable now": Cancelled, Unknown, DeadlineExceeded, Unavailable.
fn is_unavailable(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            matches!(i32::from(status.code()), 1 | 2 | 4 | 14)
        }
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// etcd's "etcdserver: request is too large" (gRPC InvalidArgument), or its gRPC server's
/// "received message larger than max" (ResourceExhausted) for requests past the limit + 512 KiB.
fn is_too_large(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if (i32::from(status.code()) == 3 && status.message().contains("too large"))
            || (i32::from(status.code()) == 8 && status.message().contains("larger than max")))
}

/// gRPC OutOfRange: "mvcc: required revision has been compacted".
fn is_compacted(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if i32::from(status.code()) == 11)
}

impl Inner {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // The state is changed by infallible pushes only; a panic elsewhere leaves it whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Release);
    }

    /// Runs one etcd call, bounded by `request_timeout`.
    fn call<T, F, Fut>(&self, call: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(KvClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>> + Send + 'static,
    {
        match run(
            &self.runtime,
            self.options.request_timeout,
            call(self.kv.clone()),
        ) {
            Ok(value) => {
                self.set_connected(true);
                Ok(value)
            }
            Err(Some(error)) if !is_unavailable(&error) => {
                self.set_connected(true);
                if is_too_large(&error) {
                    return Err(StoreError::invalid(
                        "object",
                        format!(
                            "the write is larger than etcd accepts in one request \
                             (--max-request-bytes, 1.5 MiB by default; an object and its audit \
                             record travel together): {error}"
                        ),
                    ));
                }
                if is_compacted(&error) {
                    return Err(StoreError::Gone {
                        requested: 0,
                        oldest: 0,
                    });
                }
                Err(StorageError::Etcd {
                    reason: error.to_string(),
                }
                .into())
            }
            Err(error) => {
                self.set_connected(false);
                Err(unavailable_error(&self.options, error))
            }
        }
    }

    /// Runs `txn` and returns whether its compares held, the header revision, and the kvs of
    /// each of its range operations (in order).
    fn txn(&self, txn: Txn) -> Result<TxnResult> {
        self.call(move |mut client| async move {
            let response = client.txn(txn).await?;
            let revision = response.header().map_or(0, |h| h.revision());
            let mut ranges = Vec::new();
            for op in response.op_responses() {
                if let TxnOpResponse::Get(mut get) = op {
                    ranges.push(get.take_kvs());
                }
            }
            Ok(TxnResult {
                succeeded: response.succeeded(),
                revision,
                ranges,
            })
        })
    }

    /// Range read at the current revision: the kvs and the header revision.
    fn get(&self, key: Vec<u8>, options: GetOptions) -> Result<(Vec<KeyValue>, i64)> {
        self.call(move |mut client| async move {
            let mut response = client.get(key, Some(options)).await?;
            let revision = response.header().map_or(0, |h| h.revision());
            Ok((response.take_kvs(), revision))
        })
    }

    /// Every kv from `start` up to `end` at etcd revision `revision`, read in pages of
    /// [`RANGE_PAGE`] keys.
    fn range_at(&self, start: Vec<u8>, end: Vec<u8>, revision: i64) -> Result<Vec<KeyValue>> {
        let mut kvs = Vec::new();
        self.range_pages(start, end, revision, |kv| {
            kvs.push(kv);
            Ok(true)
        })?;
        Ok(kvs)
    }

    /// Feeds `each` the kvs from `start` up to `end` at etcd revision `revision`, read in pages
    /// of [`RANGE_PAGE`] keys, until it answers false.
    fn range_pages(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        revision: i64,
        mut each: impl FnMut(KeyValue) -> Result<bool>,
    ) -> Result<()> {
        let mut from = start;
        loop {
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_revision(revision)
                .with_limit(RANGE_PAGE);
            let (page, more) = self.call(move |mut kv| async move {
                let mut response = kv.get(from, Some(options)).await?;
                let more = response.more();
                Ok((response.take_kvs(), more))
            })?;
            let last = page.last().map(|kv| kv.key().to_vec());
            for kv in page {
                if !each(kv)? {
                    return Ok(());
                }
            }
            match last {
                Some(mut last) if more => {
                    last.push(0);
                    from = last;
                }
                _ => return Ok(()),
            }
        }
    }

    /// The audit record `seq`'s time at etcd revision `revision`, if it is kept.
    fn audit_time(&self, seq: u64, revision: i64) -> Result<Option<i64>> {
        let (kvs, _) = self.get(
            self.keys.audit(seq),
            GetOptions::new().with_revision(revision),
        )?;
        kvs.first()
            .map(|kv| {
                audit::decode(kv.value(), "audit", &Keys::object_name(kv.key()))
                    .map(|record| record.time.unix_millis())
            })
            .transpose()
    }

    /// The first kept audit record at or after `since` (ms), at `revision`: a binary search
    /// over the sequence (record times never go backwards), so a query reads O(log n) records
    /// before its first match instead of the whole log.
    fn audit_seek(&self, since: i64, first: u64, last: u64, revision: i64) -> Result<u64> {
        let (mut low, mut high) = (first, last.saturating_add(1));
        while low < high {
            let middle = low + (high - low) / 2;
            match self.audit_time(middle, revision)? {
                Some(time) if time >= since => high = middle,
                // Older, or pruned meanwhile (pruning removes the oldest): look later.
                _ => low = middle + 1,
            }
        }
        Ok(low)
    }

    /// The head (a fresh store's is zero) and the etcd revision it was read at.
    fn read_head(&self) -> Result<(Head, i64)> {
        let (kvs, revision) = self.get(self.keys.head(), GetOptions::new())?;
        Ok((head_of(kvs.first())?, revision))
    }

    /// The fence to add to a leader write, if one is set.
    fn fence(&self) -> Option<Fence> {
        self.fence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn fence_compare(fence: &Fence) -> Compare {
        Compare::create_revision(fence.key.clone(), CompareOp::Equal, fence.create_revision)
    }

    /// After a failed compare with `fence`: [`StoreError::Fenced`] if the fence no longer holds.
    fn check_fence(&self, fence: &Fence) -> Result<()> {
        let (kvs, _) = self.get(fence.key.clone(), GetOptions::new())?;
        let current = kvs.first().map_or(0, KeyValue::create_revision);
        if current != fence.create_revision {
            return Err(StoreError::Fenced {
                reason: format!(
                    "the election key {} was created at revision {} but this node's leadership \
                     was at {}: leadership was lost",
                    String::from_utf8_lossy(&fence.key),
                    current,
                    fence.create_revision
                ),
            });
        }
        Ok(())
    }

    /// Runs `ops` in one transaction guarded by the fence (if set); Fenced if it fails.
    fn fenced_txn(&self, mut compares: Vec<Compare>, ops: Vec<TxnOp>) -> Result<TxnResult> {
        let fence = self.fence();
        if let Some(fence) = &fence {
            compares.push(Self::fence_compare(fence));
        }
        let result = self.txn(Txn::new().when(compares).and_then(ops))?;
        if !result.succeeded
            && let Some(fence) = &fence
        {
            self.check_fence(fence)?;
        }
        Ok(result)
    }

    /// Waits (at most `request_timeout`) until the hub has applied store revision `revision`;
    /// whether it has.
    fn wait_for(&self, revision: u64) -> (bool, MutexGuard<'_, State>) {
        let deadline = Instant::now() + self.options.request_timeout;
        let mut state = self.state();
        while state.hub.revision() < revision {
            let now = Instant::now();
            if now >= deadline {
                return (false, state);
            }
            state = self
                .advanced
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        (true, state)
    }

    pub(crate) fn notify_advanced(&self) {
        self.advanced.notify_all();
    }

    pub(crate) fn body_changed(&self, key: &str) {
        self.body_watchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|sender| sender.send(key.to_owned()).is_ok());
    }

    fn write(&self, actor: &Actor, op: Op<'_>) -> Result<Object> {
        let fence = actor
            .as_str()
            .starts_with("system:")
            .then(|| self.fence())
            .flatten();
        let context = Context {
            registry: &self.store.registry,
            clock: &self.store.clock,
            actor,
        };
        for _ in 0..WRITE_ATTEMPTS {
            let mut tx = EtcdTx {
                inner: self,
                head: None,
                reads: Vec::new(),
                ops: Vec::new(),
                next: Head::default(),
            };
            let outcome = engine::execute(&mut tx, &context, op_again(&op))?;
            let Some(change) = outcome.change else {
                return Ok(outcome.object);
            };
            let Some((head, head_mod)) = tx.head else {
                return Err(StorageError::Corrupt {
                    table: "etcd",
                    key: "meta/head".into(),
                    reason: "a write did not read the head".into(),
                }
                .into());
            };
            let mut compares = vec![Compare::mod_revision(
                self.keys.head(),
                CompareOp::Equal,
                head_mod,
            )];
            for (key, mod_revision) in &tx.reads {
                compares.push(Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    *mod_revision,
                ));
            }
            if let Some(fence) = &fence {
                compares.push(Self::fence_compare(fence));
            }
            let mut ops = tx.ops;
            let next = Head {
                revision: tx.next.revision,
                point: if tx.next.point.seq == 0 {
                    head.point
                } else {
                    tx.next.point
                },
            };
            ops.push(TxnOp::put(self.keys.head(), next.encode(), None));
            let result = self.txn(Txn::new().when(compares).and_then(ops))?;
            if result.succeeded {
                // Read-your-writes for watches: the write returns once its event is in the hub
                // (bounded; a broken watch stream delivers it on reconnect).
                drop(self.wait_for(change.revision));
                return Ok(outcome.object);
            }
            if let Some(fence) = &fence {
                self.check_fence(fence)?;
            }
            // Another write (from this node or another) moved the head or the object: run the
            // rules again on the new state (a changed object now answers Conflict).
        }
        Err(StoreError::Unavailable {
            reason: format!(
                "the write lost the race for the store's head {WRITE_ATTEMPTS} times in a row \
                 (other nodes are writing); retry"
            ),
        })
    }

    /// The objects of `kind` named after `after` ("" for all) and the head, at one revision.
    fn snapshot(&self, kind: &str, after: &str) -> Result<(Vec<Result<Object>>, Head)> {
        let prefix = self.keys.kind(kind);
        let start = if after.is_empty() {
            prefix.clone()
        } else {
            let mut start = self.keys.object(kind, after);
            start.push(0);
            start
        };
        let (head, revision) = self.read_head()?;
        let objects = self
            .range_at(start, prefix_end(&prefix), revision)?
            .iter()
            .map(|kv| decode_kv(&self.keys, kv.key(), kv.value()))
            .collect();
        Ok((objects, head))
    }
}

struct TxnResult {
    succeeded: bool,
    revision: i64,
    ranges: Vec<Vec<KeyValue>>,
}

fn head_of(kv: Option<&KeyValue>) -> Result<Head> {
    kv.map_or(Ok(Head::default()), |kv| Head::decode(kv.value()))
}

/// Decodes an object value read under [`Keys::objects`].
pub(crate) fn decode_kv(keys: &Keys, key: &[u8], value: &[u8]) -> Result<Object> {
    let name = key
        .strip_prefix(keys.objects().as_slice())
        .and_then(|key| std::str::from_utf8(key).ok())
        .ok_or_else(|| StorageError::Corrupt {
            table: "etcd",
            key: Keys::object_name(key),
            reason: "not an object key".into(),
        })?;
    decode_object(name, value)
}

fn op_again<'a>(op: &Op<'a>) -> Op<'a> {
    match op {
        Op::Create(object) => Op::Create(object),
        Op::Update(object) => Op::Update(object),
        Op::UpdateStatus(object) => Op::UpdateStatus(object),
        Op::Delete {
            kind,
            name,
            precondition,
        } => Op::Delete {
            kind,
            name,
            precondition: *precondition,
        },
    }
}

/// One write: reads go to etcd (and are compared at commit), writes are collected.
struct EtcdTx<'s> {
    inner: &'s Inner,
    /// The head as read, and its mod_revision (0: absent).
    head: Option<(Head, i64)>,
    /// Object keys read, with their mod_revision (0: absent).
    reads: Vec<(Vec<u8>, i64)>,
    ops: Vec<TxnOp>,
    next: Head,
}

impl EtcdTx<'_> {
    fn head(&mut self) -> Result<Head> {
        if let Some((head, _)) = self.head {
            return Ok(head);
        }
        let (kvs, _) = self.inner.get(self.inner.keys.head(), GetOptions::new())?;
        let head = head_of(kvs.first())?;
        self.head = Some((head, kvs.first().map_or(0, KeyValue::mod_revision)));
        Ok(head)
    }
}

impl Tx for EtcdTx<'_> {
    fn object(&mut self, kind: &str, name: &str) -> Result<Option<Object>> {
        let key = self.inner.keys.object(kind, name);
        let mut ops = vec![TxnOp::get(key.clone(), None)];
        if self.head.is_none() {
            ops.push(TxnOp::get(self.inner.keys.head(), None));
        }
        let result = self.inner.txn(Txn::new().and_then(ops))?;
        let mut ranges = result.ranges.into_iter();
        let object = ranges.next().unwrap_or_default();
        if let Some(head) = ranges.next() {
            self.head = Some((
                head_of(head.first())?,
                head.first().map_or(0, KeyValue::mod_revision),
            ));
        }
        let kv = object.first();
        self.reads.push((key, kv.map_or(0, KeyValue::mod_revision)));
        kv.map(|kv| decode_object(&object_key(kind, name), kv.value()))
            .transpose()
    }

    fn put_object(&mut self, object: &Object) -> Result<()> {
        let key = self.inner.keys.object(&object.kind, &object.metadata.name);
        self.ops.push(TxnOp::put(key, encode_object(object)?, None));
        Ok(())
    }

    fn remove_object(&mut self, kind: &str, name: &str) -> Result<()> {
        self.ops
            .push(TxnOp::delete(self.inner.keys.object(kind, name), None));
        Ok(())
    }

    fn revision(&mut self) -> Result<u64> {
        Ok(self.head()?.revision)
    }

    fn set_revision(&mut self, revision: u64) -> Result<()> {
        self.next.revision = revision;
        Ok(())
    }

    fn audit_head(&mut self) -> Result<ChainPoint> {
        Ok(self.head()?.point)
    }

    fn append_audit(&mut self, record: &Encoded) -> Result<()> {
        self.ops.push(TxnOp::put(
            self.inner.keys.audit(record.point.seq),
            record.value.clone(),
            None,
        ));
        self.next.point = record.point;
        Ok(())
    }
}

impl Store for EtcdStore {
    fn create(&self, actor: &Actor, object: &Object) -> Result<Object> {
        self.inner.write(actor, Op::Create(object))
    }

    fn get(&self, kind: &str, name: &str) -> Result<Object> {
        self.inner.store.registry.schema(kind)?;
        let (kvs, _) = self
            .inner
            .get(self.inner.keys.object(kind, name), GetOptions::new())?;
        match kvs.first() {
            None => Err(StoreError::not_found(kind, name)),
            Some(kv) => decode_object(&object_key(kind, name), kv.value()),
        }
    }

    fn list(&self, kind: &str, options: &ListOptions) -> Result<ObjectList> {
        let inner = &self.inner;
        inner.store.registry.schema(kind)?;
        let start = options
            .continue_token
            .as_deref()
            .map(Continue::decode)
            .transpose()?;
        let after = start.as_ref().map_or("", |start| start.after.as_str());
        let (current, head) = inner.snapshot(kind, after)?;
        let (revision, undo) = match &start {
            None => (head.revision, Default::default()),
            Some(start) => {
                if start.revision > head.revision {
                    return Err(StoreError::invalid("continue", "token from the future"));
                }
                let (caught_up, state) = inner.wait_for(head.revision);
                if !caught_up {
                    return Err(behind(head.revision, state.hub.revision()));
                }
                let undo =
                    state
                        .hub
                        .undo_between(kind, start.revision, head.revision, &start.after)?;
                (start.revision, undo)
            }
        };
        let (items, continue_token) = list::page(
            current.into_iter(),
            undo,
            &options.label_selector,
            options.limit,
            revision,
        )?;
        Ok(ObjectList {
            resource_version: revision,
            items,
            continue_token,
        })
    }

    fn update(&self, actor: &Actor, object: &Object) -> Result<Object> {
        self.inner.write(actor, Op::Update(object))
    }

    fn update_status(&self, actor: &Actor, object: &Object) -> Result<Object> {
        self.inner.write(actor, Op::UpdateStatus(object))
    }

    fn delete(
        &self,
        actor: &Actor,
        kind: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Object> {
        self.inner.write(
            actor,
            Op::Delete {
                kind,
                name,
                precondition: options.resource_version,
            },
        )
    }

    fn watch(&self, kind: &str, options: &WatchOptions) -> Result<Watch> {
        let inner = &self.inner;
        inner.store.registry.schema(kind)?;
        match options.resource_version {
            Some(from) => {
                // A resourceVersion this node has not applied yet (written through another
                // node, or just listed): wait for it, so nothing at or before it is replayed.
                let (_, mut state) = inner.wait_for(from);
                state.hub.watch(kind, options, || Ok(Vec::new()))
            }
            None => {
                let (objects, head) = inner.snapshot(kind, "")?;
                let objects = objects.into_iter().collect::<Result<Vec<_>>>()?;
                let (caught_up, mut state) = inner.wait_for(head.revision);
                if !caught_up {
                    return Err(behind(head.revision, state.hub.revision()));
                }
                state
                    .hub
                    .watch_snapshot(kind, options, objects, head.revision)
            }
        }
    }

    fn revision(&self) -> Result<u64> {
        Ok(self.inner.read_head()?.0.revision)
    }

    fn compact(&self, revision: u64) -> Result<()> {
        let etcd_revision = {
            let mut state = self.inner.state();
            state.hub.compact(revision);
            let etcd_revision = state
                .revisions
                .iter()
                .rev()
                .find(|(store, _)| *store <= revision)
                .map(|(_, etcd)| *etcd);
            state.revisions.retain(|(store, _)| *store > revision);
            etcd_revision
        };
        if let Some(etcd_revision) = etcd_revision {
            match self.inner.call(move |mut kv| async move {
                kv.compact(etcd_revision, None).await.map(|_| ())
            }) {
                // Already compacted further (by another node or etcd's own retention).
                Err(StoreError::Gone { .. }) | Ok(()) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    fn progress_notify(&self) -> Result<()> {
        self.inner.state().hub.progress_notify();
        Ok(())
    }
}

fn behind(wanted: u64, hub: u64) -> StoreError {
    StoreError::Unavailable {
        reason: format!(
            "this node's watch of etcd is behind (at revision {hub}, etcd at {wanted}); retry"
        ),
    }
}

impl AuditLog for EtcdStore {
    fn audit_query(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        let inner = &self.inner;
        let prefix = inner.keys.audit_prefix();
        let result = inner.txn(Txn::new().and_then(vec![
            TxnOp::get(inner.keys.anchor(), None),
            TxnOp::get(inner.keys.head(), None),
        ]))?;
        let mut ranges = result.ranges.into_iter();
        let anchor = match ranges.next().unwrap_or_default().first() {
            None => ChainPoint::default(),
            Some(kv) => ChainPoint::decode(kv.value(), "meta/anchor")?,
        };
        let head = head_of(ranges.next().unwrap_or_default().first())?;
        let (since, until) = query.time_range();
        let first = anchor.seq.saturating_add(1);
        let start = if since > 0 {
            inner.audit_seek(since, first, head.point.seq, result.revision)?
        } else {
            first
        };
        let mut records = Vec::new();
        inner.range_pages(
            inner.keys.audit(start),
            prefix_end(&prefix),
            result.revision,
            |kv| {
                if query.limit > 0 && records.len() == query.limit {
                    return Ok(false);
                }
                let key = Keys::object_name(kv.key());
                let record = audit::decode(kv.value(), "audit", &key)?;
                let time = record.time.unix_millis();
                if time >= until {
                    return Ok(false);
                }
                if time >= since && query.matches(&record) {
                    records.push(record);
                }
                Ok(true)
            },
        )?;
        Ok(records)
    }

    fn audit_prune(&self, before: Timestamp) -> Result<PruneReport> {
        let inner = &self.inner;
        let prefix = inner.keys.audit_prefix();
        let anchor_key = inner.keys.anchor();
        for _ in 0..WRITE_ATTEMPTS {
            let (anchor_kv, revision) = inner.get(anchor_key.clone(), GetOptions::new())?;
            let records = inner.range_at(prefix.clone(), prefix_end(&prefix), revision)?;
            let anchor_mod = anchor_kv.first().map_or(0, KeyValue::mod_revision);
            let mut anchor = match anchor_kv.first() {
                None => ChainPoint::default(),
                Some(kv) => ChainPoint::decode(kv.value(), "meta/anchor")?,
            };
            let mut removed = 0u64;
            let mut first_kept_mod = None;
            for kv in records {
                let key = Keys::object_name(kv.key());
                let record = audit::decode(kv.value(), "audit", &key)?;
                if record.time.unix_millis() >= before.unix_millis().max(0) {
                    first_kept_mod = Some((kv.key().to_vec(), kv.mod_revision()));
                    break;
                }
                anchor = ChainPoint {
                    seq: record.seq,
                    hash: record_hash(kv.value())?,
                    time_millis: record.time.unix_millis(),
                };
                removed += 1;
            }
            if removed == 0 {
                return Ok(PruneReport {
                    removed: 0,
                    anchor_seq: anchor.seq,
                });
            }
            let mut compares = vec![Compare::mod_revision(
                anchor_key.clone(),
                CompareOp::Equal,
                anchor_mod,
            )];
            if let Some((key, mod_revision)) = first_kept_mod {
                compares.push(Compare::mod_revision(key, CompareOp::Equal, mod_revision));
            }
            let end = inner.keys.audit(anchor.seq.saturating_add(1));
            let result = inner.fenced_txn(
                compares,
                vec![
                    TxnOp::delete(
                        prefix.clone(),
                        Some(etcd_client::DeleteOptions::new().with_range(end)),
                    ),
                    TxnOp::put(anchor_key.clone(), anchor.encode().to_vec(), None),
                ],
            )?;
            if result.succeeded {
                return Ok(PruneReport {
                    removed,
                    anchor_seq: anchor.seq,
                });
            }
        }
        Err(StoreError::Unavailable {
            reason: "the audit prune raced other nodes' prunes; retry".into(),
        })
    }

    fn audit_verify(&self) -> Result<ChainReport> {
        let inner = &self.inner;
        let result = inner.txn(Txn::new().and_then(vec![
            TxnOp::get(inner.keys.anchor(), None),
            TxnOp::get(inner.keys.head(), None),
        ]))?;
        let mut ranges = result.ranges.into_iter();
        let anchor = match ranges.next().unwrap_or_default().first() {
            None => ChainPoint::default(),
            Some(kv) => ChainPoint::decode(kv.value(), "meta/anchor")?,
        };
        let head = head_of(ranges.next().unwrap_or_default().first())?;
        let mut walk = ChainWalk::new(anchor);
        let prefix = inner.keys.audit_prefix();
        for kv in inner.range_at(prefix.clone(), prefix_end(&prefix), result.revision)? {
            let key = Keys::object_name(kv.key());
            let seq = kv
                .key()
                .strip_prefix(prefix.as_slice())
                .and_then(|seq| std::str::from_utf8(seq).ok())
                .and_then(|seq| seq.parse::<u64>().ok())
                .ok_or_else(|| StorageError::Corrupt {
                    table: "audit",
                    key: key.clone(),
                    reason: "the key is not a sequence number".into(),
                })?;
            let record = audit::decode(kv.value(), "audit", &key)?;
            walk.step(record.time.unix_millis(), seq, kv.value())?;
        }
        walk.finish(head.point)
    }
}

/// Decodes `value` as the etcd driver would if etcd returned it under `key` (a key of the store
/// `/kudurru/fuzz/`): the head, an object, an audit record or a body's metadata. For the fuzz
/// target `etcd_values`: what etcd returns is peer input, and no value may panic a decoder.
#[doc(hidden)]
pub fn fuzz_decode_value(key: &[u8], value: &[u8]) -> Result<()> {
    let keys = Keys::new("fuzz");
    match keys.classify(key) {
        keys::KeyClass::Head => Head::decode(value).map(drop),
        keys::KeyClass::Object(_) => decode_kv(&keys, key, value).map(drop),
        keys::KeyClass::BodyMeta(body) => {
            crate::body_cache::decode_header("bodies", body, value).map(drop)
        }
        keys::KeyClass::Other => {
            if key.starts_with(&keys.audit_prefix()) {
                audit::decode(value, "audit", "fuzz").map(drop)
            } else {
                Ok(())
            }
        }
    }
}
