//! `kudurru serve`: layer the configuration, start the cores, serve ops, stop on a signal.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use kudurru_transports::{ServerSpec, StartError};
use signal_hook::consts::{SIGINT, SIGTERM};

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Registry, reload};

use crate::cli::ServeArgs;
use crate::config::{Config, ConfigError};
use crate::layers::{Inputs, Sources};
use crate::ops;
use crate::reload::Reloadable;

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
    /// The ops listener did not start, or signals could not be installed.
    #[error("{0}")]
    Other(String),
}

impl ServeError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Config(_) | Self::Certificate(_) => exit::CONFIG,
            Self::Start(StartError::Bind { .. }) => exit::BIND,
            Self::Start(StartError::Memlock { .. } | StartError::IoUring { .. }) => exit::IO_URING,
            Self::Start(_) => exit::START,
            Self::Other(_) => exit::START,
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
pub fn init_logging(config: &Config) -> Option<LogHandle> {
    let filter = EnvFilter::try_new(&config.log.level).unwrap_or_else(|_| "info".into());
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    let installed = if config.log.format == "json" {
        registry.with(fmt.json()).try_init()
    } else {
        registry.with(fmt).try_init()
    };
    installed.ok().map(|()| handle)
}

/// SIGTERM's lameduck: the health name answers SERVFAIL and readiness 503 for `delay` while every
/// other query is still answered, so load balancers stop sending before the listeners close. A
/// second SIGINT or SIGTERM ends the wait early.
fn drain(lameduck: &AtomicBool, delay: Duration, signals: &mut signal_hook::iterator::Signals) {
    lameduck.store(true, Ordering::Relaxed);
    tracing::info!(delay = %humantime::format_duration(delay), "SIGTERM: lameduck before closing the listeners (shutdown.drainDelay)");
    let deadline = Instant::now() + delay;
    while Instant::now() < deadline {
        if signals.pending().next().is_some() {
            tracing::info!("second signal: ending the lameduck wait");
            return;
        }
        std::thread::sleep(Duration::from_millis(20).min(deadline - Instant::now()));
    }
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(args: &ServeArgs) -> Result<(), ServeError> {
    let reloadable = Arc::new(Reloadable::start(Inputs::capture(args, std::env::vars())?)?);
    let running = reloadable.current();
    let config = &running.config;
    let log_handle = init_logging(config);
    let validated = running.validated.clone();
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| ServeError::Other(format!("cannot install signal handlers: {e}")))?;
    let ops_server = Arc::new(ops::bind(validated.ops_address).map_err(ServeError::Other)?);
    let api_server = match validated.api_address {
        Some(addr) => Some(Arc::new(crate::api::bind(addr).map_err(ServeError::Other)?)),
        None => None,
    };
    let settings = Arc::new(ArcSwap::from_pointee(validated.settings.clone()));
    let lameduck = Arc::new(AtomicBool::new(false));
    // DNS over TLS and HTTPS: the pair is loaded before anything binds (a bad file is a startup error),
    // then watched; a bad replacement is logged and the loaded pair keeps serving.
    let (tls, _cert_watch) = if validated
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
        let watch = crate::certs::watch(&cert, &key, tls.clone()).map_err(ServeError::Other)?;
        tracing::info!(cert = %cert.display(), key = %key.display(), "watching the TLS certificate");
        (Some(tls), Some(watch))
    } else {
        (None, None)
    };
    let server = kudurru_transports::start(ServerSpec {
        cpus: validated.cpus.clone(),
        listeners: validated.listeners.clone(),
        settings: settings.clone(),
        lameduck: lameduck.clone(),
        tls,
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
    let state = Arc::new(ops::OpsState {
        ready,
        metrics: server.metrics().to_vec(),
        settings: settings.clone(),
        lameduck: lameduck.clone(),
        reloads: reloadable.stats.clone(),
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
    reloadable.subscribe("data plane settings", move |change| {
        // Cores pick the new snapshot up between queries: cache capacity (maintenance, once a
        // second), TTL clamps (next insert), limiter (next query), upstream set (next resolution; one in
        // flight finishes on the set it started with).
        settings.store(Arc::new(change.new.validated.settings.clone()));
    });
    let _watcher = match reloadable.settings_path() {
        Some(path) => {
            let r = reloadable.clone();
            let watcher = crate::reload::watch(&path, running.settings_sha256, move || {
                r.reload_settings();
            })
            .map_err(ServeError::Other)?;
            tracing::info!(file = %path.display(), "watching the settings file");
            Some(watcher)
        }
        None => None,
    };
    let api_thread = match &api_server {
        Some(server) => {
            let api = Arc::new(crate::api::Api {
                reloadable: reloadable.clone(),
                tokens: crate::tokens::TokenStore::new(&validated.data_dir),
                ops: state.clone(),
            });
            let server = server.clone();
            tracing::info!(address = ?validated.api_address, tokens = %api.tokens.path().display(), "HTTP API");
            Some(
                std::thread::Builder::new()
                    .name("kudurru-api".into())
                    .spawn(move || crate::api::serve(server, api))
                    .map_err(|e| ServeError::Other(format!("cannot start the API thread: {e}")))?,
            )
        }
        None => None,
    };
    let ops_thread = {
        let ops_server = ops_server.clone();
        std::thread::Builder::new()
            .name("kudurru-ops".into())
            .spawn(move || ops::serve(ops_server, state))
            .map_err(|e| ServeError::Other(format!("cannot start the ops thread: {e}")))?
    };
    let signal = signals.forever().next();
    if signal == Some(SIGTERM) && !validated.drain_delay.is_zero() {
        drain(&lameduck, validated.drain_delay, &mut signals);
    }
    tracing::info!(
        ?signal,
        "shutting down: listeners closed, draining in-flight queries"
    );
    ops_server.unblock();
    let _ = ops_thread.join();
    if let (Some(server), Some(thread)) = (api_server, api_thread) {
        server.unblock();
        let _ = thread.join();
    }
    match Arc::try_unwrap(server) {
        Ok(server) => server.stop(),
        Err(server) => server.request_stop(),
    }
    tracing::info!("stopped");
    Ok(())
}
