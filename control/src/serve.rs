//! `kudurru serve`: layer the configuration, start the cores, serve ops, stop on a signal.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use kudurru_transports::{ServerSpec, StartError};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Registry, reload};

use crate::cli::ServeArgs;
use crate::config::{Config, ConfigError};
use crate::http::{self, Limits, Listener};
use crate::layers::{Inputs, Sources};
use crate::noise::PeerNoise;
use crate::ops;
use crate::reload::Reloadable;
use crate::watch::FileWatcher;

/// Process exit codes (documented in docs/operations.md).
pub mod exit {
    /// Clean shutdown.
    pub const OK: i32 = 0;
    /// Invalid configuration.
    pub const CONFIG: i32 = 1;
    /// A listener address could not be bound (port taken, address not local, permission).
    pub const BIND: i32 = 3;
    /// io_uring unavailable or locked memory too small.
    pub const IO_URING: i32 = 4;
    /// Any other start failure.
    pub const START: i32 = 5;
}

/// A failure of `kudurru serve`, with its exit code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data plane did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The DNS-over-TLS certificate could not be loaded.
    #[error(transparent)]
    Certificate(#[from] crate::certs::CertError),
    /// The ops or API listener could not be bound.
    #[error(transparent)]
    Listen(#[from] http::ListenError),
    /// A file could not be watched.
    #[error(transparent)]
    Watch(#[from] crate::watch::WatchError),
    /// The object store could not be opened.
    #[error("cannot open the object store: {0}")]
    Store(#[from] kudurru_storage::StoreError),
    /// The query log could not start (`querylog.db` would not open).
    #[error(transparent)]
    QueryLog(#[from] crate::querylog::StartError),
    /// The TSIG key file (`zones.tsigKeyFile`) could not be read or parsed.
    #[error("cannot load the TSIG keys: {0}")]
    TsigKeys(#[from] crate::zones::keys::KeyFileError),
    /// The cluster agent could not start (`cluster.*`).
    #[error(transparent)]
    Cluster(#[from] crate::cluster::AgentError),
    /// The control thread's runtime or its signal handlers could not be set up.
    #[error("cannot start the control thread: {0}")]
    Runtime(#[source] std::io::Error),
}

impl ServeError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Config(_) | Self::Certificate(_) | Self::TsigKeys(_) => exit::CONFIG,
            Self::Start(StartError::Bind { .. }) => exit::BIND,
            Self::Start(StartError::Memlock { .. } | StartError::IoUring { .. }) => exit::IO_URING,
            Self::Start(_)
            | Self::Listen(_)
            | Self::Watch(_)
            | Self::Store(_)
            | Self::QueryLog(_)
            | Self::Cluster(_)
            | Self::Runtime(_) => exit::START,
        }
    }
}

/// Layers defaults, the node file, the settings file, the environment and the flags.
pub fn effective_config(args: &ServeArgs) -> Result<(Config, Sources), ConfigError> {
    let inputs = Inputs::capture(args, std::env::vars())?;
    let settings = inputs.read_settings()?;
    inputs.layer(settings.as_ref())
}

/// Handle to change the log filter of a running process.
pub type LogHandle = reload::Handle<EnvFilter, Registry>;

/// Installs the tracing subscriber for `log.level` and `log.format`; the handle changes the
/// level later (`log.level` is hot).
pub fn init_logging(config: &Config, noise: &PeerNoise) -> Option<LogHandle> {
    let filter = EnvFilter::try_new(&config.log.level).unwrap_or_else(|_| "info".into());
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    let installed = if config.log.format == "json" {
        registry
            .with(fmt.json().with_filter(noise.clone()))
            .try_init()
    } else {
        registry.with(fmt.with_filter(noise.clone())).try_init()
    };
    installed.ok().map(|()| handle)
}

/// Threads of the control thread's blocking pool (file reads and writes, fsync, large
/// compiles); started on demand, kept for [`BLOCKING_KEEP_ALIVE`].
pub const BLOCKING_THREADS: usize = 4;
/// How long an idle blocking-pool thread is kept: long, so a busy API does not start threads
/// again and again, and a process short of threads keeps the ones it has.
pub const BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(3600);
/// How long shutdown waits for blocking work still running (a settings write).
const SHUTDOWN_BLOCKING: Duration = Duration::from_secs(5);

/// Runs the server until SIGINT or SIGTERM. The calling thread becomes the control thread: a
/// tokio current-thread runtime running the ops and API listeners, the file watchers and the
/// signal handlers as tasks, with a bounded pool for blocking work.
pub fn run(args: &ServeArgs) -> Result<(), ServeError> {
    // Before any thread starts: large blocks (block lists) mapped on their own.
    kudurru_transports::sys::tune_allocator();
    let inputs = Inputs::capture(args, std::env::vars())?;
    let ignored_env = inputs.ignored_env.clone();
    let reloadable = Arc::new(Reloadable::start(inputs)?);
    let noise = PeerNoise::default();
    let log_handle = init_logging(&reloadable.current().config, &noise);
    if !ignored_env.is_empty() {
        tracing::warn!(variables = ?ignored_env, "ignoring KUDURRU_ variables that name no configuration key (a Kubernetes Service named kudurru sets such variables)");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("kudurru-blocking")
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .build()
        .map_err(ServeError::Runtime)?;
    runtime.spawn(crate::noise::summarize(noise));
    let server = runtime.block_on(control(reloadable, log_handle, args.ephemeral))?;
    // Ends the watcher tasks and any connection still open past the grace; a blocking task
    // (a settings write) gets a moment to finish. Their handles to the data plane go with them.
    runtime.shutdown_timeout(SHUTDOWN_BLOCKING);
    match Arc::try_unwrap(server) {
        Ok(server) => server.stop(),
        Err(server) => server.request_stop(),
    }
    tracing::info!("stopped");
    Ok(())
}

/// The signals `serve` handles.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn install() -> Result<Self, ServeError> {
        let install = |kind| signal(kind).map_err(ServeError::Runtime);
        Ok(Self {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        })
    }

    /// The next SIGINT or SIGTERM; a SIGHUP in between runs `hangup` (reload) and waits on.
    async fn stop(&mut self, hangup: impl Fn()) -> SignalKind {
        loop {
            tokio::select! {
                _ = self.interrupt.recv() => return SignalKind::interrupt(),
                _ = self.terminate.recv() => return SignalKind::terminate(),
                _ = self.hangup.recv() => hangup(),
            }
        }
    }
}

/// The control thread's work: listeners, watchers and signals; returns the running data
/// plane once a signal asked to stop and the HTTP listeners have finished their requests.
async fn control(
    reloadable: Arc<Reloadable>,
    log_handle: Option<LogHandle>,
    ephemeral: bool,
) -> Result<Arc<kudurru_transports::Server>, ServeError> {
    let mut signals = Signals::install()?;
    let running = reloadable.current();
    if let Some(note) = &running.validated.data_dir_note {
        tracing::warn!("{note}");
    }
    let config = &running.config;
    let validated = running.validated.clone();
    // In a fleet the objects, the audit log and the list bodies live in etcd; a node that
    // cannot reach etcd at start serves its last snapshot (cluster::snapshot), read-only.
    let mut snapshot_store = None;
    let etcd_store = match validated.cluster.clone() {
        crate::config::ClusterSettings::Etcd(settings) => {
            let opened = {
                let settings = settings.clone();
                tokio::task::spawn_blocking(move || crate::objects::open_etcd_store(&settings))
                    .await
                    .map_err(|e| ServeError::Runtime(std::io::Error::other(e)))?
            };
            match opened {
                Ok(store) => Some(store),
                Err(e @ kudurru_storage::StoreError::Unavailable { .. }) => {
                    let data_dir = validated.data_dir.clone();
                    let snapshot = tokio::task::spawn_blocking(move || {
                        crate::cluster::snapshot::open(&data_dir)
                    })
                    .await
                    .map_err(|e| ServeError::Runtime(std::io::Error::other(e)))??;
                    let Some((store, settings_text)) = snapshot else {
                        tracing::error!(error = %e, "etcd cannot be reached and this node has no snapshot of the fleet to serve");
                        return Err(e.into());
                    };
                    tracing::warn!(error = %e, "etcd cannot be reached: serving this node's last snapshot of the fleet, read-only; the node starts again once etcd answers");
                    if reloadable.settings_path().is_none() {
                        let applied = crate::layers::FileLayer::parse_settings(
                            std::path::Path::new(crate::cluster::settings::SETTINGS_SOURCE),
                            &settings_text,
                        )
                        .and_then(|layer| reloadable.apply(Some(&layer)));
                        if let Err(e) = applied {
                            tracing::error!(error = %e, "the snapshot's fleet settings are not valid; not applied");
                        }
                    }
                    tokio::spawn(crate::cluster::snapshot::rejoin(settings));
                    snapshot_store = Some(store);
                    None
                }
                Err(e) => return Err(e.into()),
            }
        }
        crate::config::ClusterSettings::None => None,
    };
    let store: Arc<dyn crate::objects::ObjectStore> = match (&etcd_store, &snapshot_store) {
        (Some(etcd), _) => etcd.clone(),
        (None, Some(snapshot)) => snapshot.clone(),
        (None, None) => {
            let data_dir = validated.data_dir.clone();
            tokio::task::spawn_blocking(move || crate::objects::open_store(&data_dir, ephemeral))
                .await
                .map_err(|e| ServeError::Runtime(std::io::Error::other(e)))??
        }
    };
    // The fleet (cluster.driver = etcd): the agent registers this node and campaigns on a
    // thread of its own; etcd down now is not an error (the node starts disconnected).
    let cluster = match validated.cluster.clone() {
        crate::config::ClusterSettings::None => crate::cluster::ClusterHandle::single(),
        // Serving the snapshot: not a member until the node starts again.
        crate::config::ClusterSettings::Etcd(_) if snapshot_store.is_some() => {
            crate::cluster::ClusterHandle::detached()
        }
        crate::config::ClusterSettings::Etcd(settings) => {
            tracing::info!(endpoints = ?settings.endpoints, name = %settings.name, node = %settings.node_name, advertise = %settings.advertise_address, "joining the fleet on etcd");
            tokio::task::spawn_blocking(move || crate::cluster::start(settings))
                .await
                .map_err(|e| ServeError::Runtime(std::io::Error::other(e)))??
        }
    };
    // Leader work (list fetching, audit pruning) runs while this node leads and its writes
    // carry the fence; on a single node, always.
    let leading = match (&etcd_store, &snapshot_store) {
        (Some(etcd), _) => crate::cluster::follow_leadership(&cluster, etcd.clone()),
        // Serving a snapshot: no leader work here, whatever the election says.
        (None, Some(_)) => watch::channel(false).1,
        (None, None) => cluster.leading(),
    };
    if etcd_store.is_some() {
        tracing::info!("object store: etcd (shared by the fleet)");
    } else if ephemeral {
        tracing::warn!("--ephemeral: objects are kept in memory and lost when the process ends");
    } else {
        tracing::info!(file = %validated.data_dir.join(kudurru_storage::FILE_NAME).display(), "object store");
    }
    let mut watcher = FileWatcher::new()?;
    // What SIGHUP re-reads: the certificates here, the settings file below.
    let mut on_hangup: Vec<crate::certs::Reload> = Vec::new();
    let ops_listener = Listener::bind("ops", validated.ops_address, None, Limits::default())?;
    let api_listener = match validated.api_address {
        Some(addr) => {
            let tls = match &validated.api_tls {
                Some((cert, key)) => Some(api_tls(&mut watcher, &mut on_hangup, cert, key)?),
                None => None,
            };
            Some(Listener::bind("api", addr, tls, Limits::default())?)
        }
        None => None,
    };
    // Upstreams named by a host are left out until the bootstrap resolver has their address
    // (crate::bootstrap): the cores never see an unresolved one.
    let settings = {
        let mut settings = validated.settings.clone();
        crate::bootstrap::apply(&mut settings, &Default::default());
        Arc::new(ArcSwap::from_pointee(settings))
    };
    let lameduck = Arc::new(AtomicBool::new(false));
    // DNS over TLS, HTTPS and QUIC: the pair is loaded before anything binds (a bad file is a
    // startup error), then watched; a bad replacement is logged and the loaded pair stays.
    let tls = if validated
        .listeners
        .iter()
        .any(kudurru_transports::ListenerSpec::needs_certificate)
    {
        let (cert, key) = (
            PathBuf::from(&config.tls.cert_file),
            PathBuf::from(&config.tls.key_file),
        );
        let tls: kudurru_transports::TlsConfig = Arc::new(ArcSwap::from_pointee(
            crate::certs::server_configs(&cert, &key)?,
        ));
        let installed = tls.clone();
        on_hangup.push(crate::certs::watch(
            &mut watcher,
            "dns",
            &cert,
            &key,
            crate::certs::server_configs,
            move |configs| installed.store(Arc::new(configs)),
        )?);
        tracing::info!(cert = %cert.display(), key = %key.display(), "watching the TLS certificate");
        Some(tls)
    } else {
        None
    };
    // The query log: the sink (querylog.db opened here: a file that will not open stops the
    // start) and the cores' channel; the writer starts below, once the client groups are read.
    let querylog =
        crate::querylog::Setup::open(&validated.querylog, validated.cpus.len(), ephemeral).await?;
    let querylog_handle = querylog.log.clone();
    on_hangup.extend(querylog.on_hangup.clone());
    let (inbox_sender, inbox_receiver) = kudurru_transports::inbox::inbox();
    let server = kudurru_transports::start(ServerSpec {
        cpus: validated.cpus.clone(),
        listeners: validated.listeners.clone(),
        settings: settings.clone(),
        lameduck: lameduck.clone(),
        tls,
        inbox: Some(inbox_sender),
        // (merge of ql-writer and ql-core: the writer's channel; the bench hook without it.)
        querylog: querylog
            .sender
            .clone()
            .or_else(|| bench_querylog(validated.cpus.len())),
    })?;
    for (kind, addr) in server.bound() {
        tracing::info!(%kind, %addr, "listening");
    }
    tracing::info!(cores = validated.cpus.len(), cpus = ?validated.cpus, ops = %validated.ops_address, upstreams = ?config.upstreams, "kudurru serving");
    let server = Arc::new(server);
    let ready = {
        let server = server.clone();
        Box::new(move || server.is_ready())
    };
    let mut http_stats = vec![(ops_listener.name, ops_listener.stats.clone())];
    if let Some(api) = &api_listener {
        http_stats.push((api.name, api.stats.clone()));
    }
    // Blocking: the publisher is the one writer of the snapshot from here on (settings reloads
    // and index rebuilds both go through it); the list manager starts below, once the file
    // watcher has its other files.
    let publisher = Arc::new(crate::blocking::Publisher::new(settings.clone()));
    // The snapshot holds the upstreams without the named ones (not resolved yet); the
    // publisher keeps the configured set, to resolve them into.
    publisher.settings_changed(validated.settings.clone());
    let engine: crate::blocking::SharedEngine = Arc::new(crate::blocking::CoreEngine::new());
    let blocking = Arc::new(crate::blocking::Shared::new(
        publisher.clone(),
        engine.clone(),
        validated.blocking.allow_degraded,
    ));
    let fetcher = crate::blocking::Fetcher::new(crate::blocking::USER_AGENT)
        .map_err(|e| ServeError::Runtime(std::io::Error::other(e)))?;
    let mut manager = crate::blocking::Manager::new(crate::blocking::ManagerParts {
        store: store.clone(),
        // The store keeps the last body of each source, so a restart keeps its lists.
        bodies: store.clone(),
        engine,
        fetcher: Arc::new(crate::blocking::HttpFetcher(fetcher)),
        shared: blocking.clone(),
        settings: validated.blocking.clone(),
        cores: validated.cpus.len(),
        follow: None,
        leading: cluster.is_fleet().then(|| leading.clone()),
    });
    let list_commands = manager.commands();
    // Zones: the manager publishes through the same publisher; its handle is what transfers,
    // NOTIFY and UPDATE reach it by.
    let zones = Arc::new(crate::zones::Shared::new(publisher.clone()));
    // TSIG keys (zones.tsigKeyFile, read once: a restart applies a change); a bad file stops
    // the start with its file and line.
    if let Some(path) = &validated.zones.tsig_key_file {
        let keys = crate::zones::keys::TsigKeys::load(path)?;
        tracing::info!(file = %path.display(), keys = keys.len(), "TSIG keys");
        zones.set_keys(keys);
    }
    let zone_manager = crate::zones::Manager::new(crate::zones::ManagerParts {
        store: store.clone(),
        shared: zones.clone(),
        settings: validated.zones.clone(),
    });
    let zone_commands = zone_manager.commands();
    let zone_commands_for_bodies = zone_commands.clone();
    let zone_handle = crate::zones::ZoneHandle::new(zone_commands.clone(), zones.clone());
    tokio::spawn(zone_manager.run());
    // Transfers in, NOTIFY in and out, and the cores' inbox (NOTIFY, UPDATE).
    let secondaries = crate::zones::secondary::Secondaries::start_gated(
        zone_handle.clone(),
        cluster.is_fleet().then(|| leading.clone()),
    );
    tokio::spawn(crate::zones::notify::run(zone_handle.clone()));
    tokio::spawn(crate::zones::inbox::serve(
        inbox_receiver,
        crate::zones::inbox::InboxContext {
            zones: zone_handle,
            secondaries,
        },
    ));
    // Forwarding-loop probes of the published upstreams (at start, on a change, periodically).
    let loops = Arc::new(crate::loop_probe::LoopProbes::default());
    {
        let reloadable = reloadable.clone();
        tokio::spawn(
            loops
                .clone()
                .run(settings.clone(), server.metrics().to_vec(), move || {
                    reloadable.current().config.upstream.loop_probe
                }),
        );
    }
    let state = Arc::new(ops::OpsState {
        ready,
        metrics: server.metrics().to_vec(),
        settings: settings.clone(),
        lameduck: lameduck.clone(),
        reloads: reloadable.stats.clone(),
        http: http_stats,
        blocking: blocking.clone(),
        zones: Some(zones.clone()),
        querylog: Some(querylog_handle.clone()),
        loops: Some(loops.clone()),
        cluster: Some(cluster.clone()),
    });
    // Subscribers, in order: the log filter, then the data plane's snapshot.
    reloadable.subscribe("log.level", move |change| {
        if change.keys.contains(&"log.level")
            && let Some(handle) = &log_handle
            && let Ok(filter) = EnvFilter::try_new(&change.new.config.log.level)
        {
            let _ = handle.reload(filter);
        }
    });
    // Host names in upstream URLs: resolved through upstream.bootstrap, re-resolved when a
    // reload changes either.
    let bootstrap = Arc::new(crate::bootstrap::Bootstrap::default());
    {
        let publisher = publisher.clone();
        tokio::spawn(bootstrap.clone().run(reloadable.clone(), move |addresses| {
            publisher.addresses_changed(addresses);
        }));
    }
    {
        let bootstrap = bootstrap.clone();
        reloadable.subscribe("bootstrap", move |change| {
            if change
                .keys
                .iter()
                .any(|k| *k == "upstreams" || *k == "upstream.bootstrap")
            {
                bootstrap.config_changed();
            }
        });
    }
    {
        // The writer reads the client groups (spec.queryLog) from the list manager's builds.
        let live = querylog.spawn(Some(blocking.clone()));
        reloadable.subscribe("query log", move |change| {
            if change.keys.iter().any(|k| k.starts_with("querylog.")) {
                live.send_replace(crate::querylog::writer::LiveSettings::of(
                    &change.new.validated.querylog,
                ));
            }
        });
    }
    let commands = list_commands.clone();
    reloadable.subscribe("data plane settings", move |change| {
        // Cores pick the new snapshot up between queries: cache capacity (maintenance, once a
        // second), TTL clamps (next insert), access list and limiter (next query), upstream
        // set (next resolution; one in flight finishes on the set it started with). The
        // policy index in effect stays; blocking keys go to the list manager, which rebuilds
        // it when blockTTL or clientIdDomains changed.
        publisher.settings_changed(change.new.validated.settings.clone());
        if change.keys.iter().any(|k| k.starts_with("blocking.")) {
            let _ = commands.send(crate::blocking::Command::Settings(
                change.new.validated.blocking.clone(),
            ));
        }
        if change.keys.iter().any(|k| k.starts_with("zones.")) {
            let _ = zone_commands.send(crate::zones::Command::Settings(
                change.new.validated.zones.clone(),
            ));
        }
    });
    // The fleet's settings in etcd, unless a local settings file owns this node's (below).
    if let Some(etcd) = cluster.etcd().filter(|_| etcd_store.is_some()) {
        match reloadable.settings_path() {
            None => {
                crate::cluster::settings::follow(&cluster, reloadable.clone());
                tracing::info!(key = %etcd.keys.settings(), "following the fleet's settings in etcd");
            }
            Some(path) => {
                tracing::warn!(file = %path.display(), "settingsFile is set: it owns this node's cluster settings; the fleet's settings in etcd are not followed")
            }
        }
    }
    if let Some(path) = reloadable.settings_path() {
        let removed = crate::files::remove_stale_temporaries(&path);
        if removed > 0 {
            tracing::info!(file = %path.display(), removed, "removed temporary files a killed write left behind");
        }
        let r = reloadable.clone();
        watcher.follow(&path, running.settings_sha256, move || {
            r.reload_settings();
        })?;
        tracing::info!(file = %path.display(), "watching the settings file");
        let r = reloadable.clone();
        on_hangup.push(Arc::new(move || {
            r.reload_settings();
        }));
    }
    // The list manager: `file` sources are followed by the same watcher (it lives as long as
    // the manager's task, which the runtime's end stops).
    let commands = list_commands.clone();
    manager.set_follow(Box::new(move |path, hash| {
        let (commands, changed) = (commands.clone(), path.to_owned());
        let followed = watcher.follow(path, hash, move || {
            let _ = commands.send(crate::blocking::Command::FileChanged(changed.clone()));
        });
        if let Err(e) = followed {
            tracing::warn!(file = %path.display(), error = %e, "a block list file is read on refresh only");
        }
    }));
    // The node's snapshot of the fleet, for a start while etcd is down.
    if let Some(etcd) = &etcd_store {
        tokio::spawn(crate::cluster::snapshot::keep(
            store.clone(),
            etcd.watch_bodies(),
            cluster.clone(),
            validated.data_dir.clone(),
        ));
    }
    // In a fleet, a follower compiles the bodies the leader stores as they change.
    if let Some(etcd) = &etcd_store {
        let mut changed = etcd.watch_bodies();
        let commands = list_commands.clone();
        let zones = zone_commands_for_bodies.clone();
        let leading = leading.clone();
        tokio::spawn(async move {
            while let Some(key) = changed.recv().await {
                if key.starts_with("zone/") {
                    // A secondary's transfer the leader stored; the leader has it already.
                    if !*leading.borrow() {
                        let _ = zones.send(crate::zones::Command::StoredChanged(key));
                    }
                    continue;
                }
                if commands
                    .send(crate::blocking::Command::BodyChanged(key))
                    .is_err()
                {
                    return;
                }
            }
        });
    }
    tokio::spawn(manager.run());
    let (stop_http, stopped) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(listener) = api_listener {
        let mut api = crate::api::Api::new(
            reloadable.clone(),
            crate::tokens::TokenStore::new(&validated.data_dir),
            state.clone(),
            store.clone(),
            stopped.clone(),
        );
        api.cache = Some(server.cache_control());
        api.blocking = Some(crate::blocking::Handle {
            commands: list_commands.clone(),
            shared: blocking.clone(),
        });
        api.zones = Some(zones.clone());
        api.bootstrap = Some(bootstrap.clone());
        api.querylog = querylog_handle.clone();
        // The dashboard's cookie is `Secure` and its origin `https://` on an HTTPS listener.
        api.tls = validated.api_tls.is_some();
        let api = Arc::new(api);
        crate::files::remove_stale_temporaries(api.tokens.path());
        tracing::info!(address = ?listener.local_addr(), tokens = %api.tokens.path().display(), "HTTP API");
        tasks.spawn(http::serve(
            listener,
            crate::api::handler(api, Limits::default().body_timeout),
            stopped.clone(),
        ));
    }
    // Not in `tasks`: they never end on their own, and the runtime's end stops them.
    tokio::spawn(crate::health::watch(state.clone()));
    tokio::spawn(crate::objects::prune_audit(
        store.clone(),
        validated.audit_retention,
        leading.clone(),
    ));
    tokio::spawn(crate::objects::bookmarks(store.clone()));
    // The store revision this node's objects reflect, for its member key.
    if cluster.is_fleet() {
        let (cluster, store) = (cluster.clone(), store.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            loop {
                tick.tick().await;
                let store = store.clone();
                if let Ok(Ok(revision)) =
                    tokio::task::spawn_blocking(move || store.revision()).await
                {
                    cluster.set_snapshot_revision(i64::try_from(revision).unwrap_or(i64::MAX));
                }
            }
        });
    }
    tasks.spawn(http::serve(ops_listener, ops::handler(state), stopped));
    let hangup = || {
        tracing::info!(
            reloads = on_hangup.len(),
            "SIGHUP: re-reading the settings file and the certificates"
        );
        for reload in &on_hangup {
            let reload = reload.clone();
            tokio::task::spawn_blocking(move || reload());
        }
    };
    let signal = signals.stop(hangup).await;
    // Leader work moves to another node at once instead of after the lease TTL.
    cluster.leave();
    if signal == SignalKind::terminate() && !validated.drain_delay.is_zero() {
        lameduck.store(true, Ordering::Relaxed);
        tracing::info!(delay = %humantime::format_duration(validated.drain_delay), "SIGTERM: lameduck before closing the listeners (shutdown.drainDelay)");
        tokio::select! {
            () = tokio::time::sleep(validated.drain_delay) => {}
            _ = signals.stop(|| {}) => tracing::info!("second signal: ending the lameduck wait"),
        }
    }
    tracing::info!(
        signal = signal_name(signal),
        "shutting down: listeners closed, draining in-flight queries"
    );
    // The cores drain their connections while the HTTP listeners finish theirs:
    // both within server.shutdownGrace, together.
    server.request_stop();
    let _ = stop_http.send(true);
    while tasks.join_next().await.is_some() {}
    // The cores' last records reach the sink before the runtime goes: the writer ends when
    // every core has exited (within server.shutdownGrace), then the sink closes (dnstap:
    // the queued events, STOP, FINISH).
    querylog_handle
        .close(validated.settings.shutdown_grace + QUERYLOG_CLOSE_MARGIN)
        .await;
    Ok(server)
}

/// How long past server.shutdownGrace shutdown waits for the query-log writer.
const QUERYLOG_CLOSE_MARGIN: Duration = Duration::from_secs(2);

/// HTTPS for the API: the pair is loaded now (a bad file is a startup error), then watched
/// like the DNS listeners' pair.
fn api_tls(
    watcher: &mut FileWatcher,
    on_hangup: &mut Vec<crate::certs::Reload>,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<http::TlsAcceptor, ServeError> {
    let source: http::TlsSource = Arc::new(ArcSwap::from_pointee(crate::certs::api_server_config(
        cert, key,
    )?));
    let installed = source.clone();
    on_hangup.push(crate::certs::watch(
        watcher,
        "api",
        cert,
        key,
        crate::certs::api_server_config,
        move |config| installed.store(Arc::new(config)),
    )?);
    tracing::info!(cert = %cert.display(), key = %key.display(), "HTTPS on the API; watching its certificate");
    Ok(http::TlsAcceptor::new(source))
}

/// A signal's name for logs.
fn signal_name(kind: SignalKind) -> &'static str {
    if kind == SignalKind::terminate() {
        "SIGTERM"
    } else {
        "SIGINT"
    }
}

/// For the hot-path benchmark (benches/peers/querylog.py): `KUDURRU_BENCH_QUERYLOG` gives the
/// cores a query-log channel of its own in place of the configured sink's, so the cores' cost
/// is measured with records produced: `summarize`, this thread decodes and summarizes every
/// record and drops it (what any sink's writer does first); `discard`, it drops the batches
/// unread (the cores' cost alone). Any other value, or none, leaves the configured query log.
/// Only in a binary built with `--features bench-hooks`: a default build has no such hook (the
/// variable is one of the ignored `KUDURRU_` variables it warns about).
#[cfg(feature = "bench-hooks")]
fn bench_querylog(cores: usize) -> Option<kudurru_transports::querylog::QueryLogSender> {
    let mode = std::env::var("KUDURRU_BENCH_QUERYLOG").ok()?;
    let summarize = match mode.as_str() {
        "summarize" => true,
        "discard" => false,
        _ => return None,
    };
    let (sender, mut receiver) = kudurru_transports::querylog::channel(cores);
    tokio::spawn(async move {
        use futures_lite::StreamExt as _;
        use kudurru_core::querylog::{Records, summarize as summary};
        while let Some(batch) = receiver.next().await {
            if summarize {
                for record in Records::new(&batch.bytes).flatten() {
                    std::hint::black_box(summary(record.query, record.response));
                }
            }
        }
    });
    tracing::warn!(%mode, "KUDURRU_BENCH_QUERYLOG: query-log records go to the benchmark's receiver");
    Some(sender)
}

/// A default build: no benchmark hook.
#[cfg(not(feature = "bench-hooks"))]
fn bench_querylog(_cores: usize) -> Option<kudurru_transports::querylog::QueryLogSender> {
    None
}
