//! `kudurru serve`: layer the configuration, start the cores, serve ops, stop on a signal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use kudurru_transports::{ServerSpec, StartError};
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::cli::ServeArgs;
use crate::config::{Config, ConfigError, find_key};
use crate::ops;

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
    /// The ops listener did not start, or signals could not be installed.
    #[error("{0}")]
    Other(String),
}

impl ServeError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Config(_) => exit::CONFIG,
            Self::Start(StartError::Bind { .. }) => exit::BIND,
            Self::Start(StartError::Memlock { .. } | StartError::IoUring { .. }) => exit::IO_URING,
            Self::Start(_) => exit::START,
            Self::Other(_) => exit::START,
        }
    }
}

/// Layers defaults, the node file, the environment and the flags.
pub fn effective_config(args: &ServeArgs) -> Result<Config, ConfigError> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    config.apply_env(std::env::vars())?;
    let set = |config: &mut Config, key: &str, value: String| -> Result<(), ConfigError> {
        find_key(key)
            .expect("flag maps to a known key")
            .set(config, &value)
    };
    if let Some(cores) = args.cores {
        set(&mut config, "server.cores", cores.to_string())?;
    }
    if let Some(cpus) = &args.cpus {
        config.server.cpus = cpus.clone();
    }
    if !args.listen.is_empty() {
        config.server.listen = args.listen.clone();
    }
    if !args.upstream.is_empty() {
        config.upstreams = args.upstream.clone();
    }
    if let Some(addr) = &args.ops_address {
        set(&mut config, "ops.address", addr.clone())?;
    }
    if let Some(level) = &args.log_level {
        set(&mut config, "log.level", level.clone())?;
    }
    Ok(config)
}

/// Installs the tracing subscriber for `log.level` and `log.format`.
pub fn init_logging(config: &Config) {
    let filter =
        tracing_subscriber::EnvFilter::try_new(&config.log.level).unwrap_or_else(|_| "info".into());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = if config.log.format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
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
    let config = effective_config(args)?;
    init_logging(&config);
    let validated = config.validate()?;
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| ServeError::Other(format!("cannot install signal handlers: {e}")))?;
    let ops_server = Arc::new(ops::bind(validated.ops_address).map_err(ServeError::Other)?);
    let settings = Arc::new(ArcSwap::from_pointee(validated.settings.clone()));
    let lameduck = Arc::new(AtomicBool::new(false));
    let server = kudurru_transports::start(ServerSpec {
        cpus: validated.cpus.clone(),
        listeners: validated.listeners.clone(),
        settings: settings.clone(),
        lameduck: lameduck.clone(),
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
        settings,
        lameduck: lameduck.clone(),
    });
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
    match Arc::try_unwrap(server) {
        Ok(server) => server.stop(),
        Err(server) => server.request_stop(),
    }
    tracing::info!("stopped");
    Ok(())
}
