//! Starting and stopping the per-core executors.
//!
//! ```text
//! start(): bind every listener N times (SO_REUSEPORT) ─▶ N threads, each a glommio executor
//!          pinned to one CPU ─▶ join the channel mesh ─▶ serve ─▶ report ready
//! stop():  flag ─▶ each core stops its listeners, drains its connections and in-flight
//!          queries (crate::drain, bounded by server.shutdownGrace), waits for its peers to
//!          drain, exits
//! ```

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};

use crate::cache_control::{CacheControl, Mailbox};
use crate::metrics::CoreMetrics;
use crate::settings::SharedSettings;
use crate::sys::{self, SocketKind};
use crate::tls::alt_svc;
use crate::worker::{Ownership, ShardMessage, Worker};
use crate::{deadline, doh, doq, drain, quic, steering, tcp, udp};

pub use crate::sys::{IO_MEMORY_PER_CORE, RING_DEPTH};
pub use crate::tls::{ALPN_DOT, ALPN_H3, ALPN_HTTPS, TlsConfig, TlsServers};

/// Messages buffered between each pair of cores.
const MESH_CAPACITY: usize = 1024;

/// A client-facing listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// Address to bind.
    pub addr: SocketAddr,
    /// What it speaks.
    pub protocol: Protocol,
}

/// The DNS transports a listener speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// Plain DNS (RFC 1035, RFC 7766): over UDP, TCP or both, on one port.
    Dns {
        /// Over UDP.
        udp: bool,
        /// Over TCP.
        tcp: bool,
    },
    /// DNS over TLS (RFC 7858), TCP.
    Tls,
    /// DNS over HTTPS (RFC 8484) on HTTP/2 and HTTP/1.1 at `path`, TCP.
    Https {
        /// The one path served.
        path: String,
    },
    /// DNS over QUIC (RFC 9250), UDP.
    Quic,
    /// DNS over HTTPS on HTTP/3 at `path`, UDP.
    H3 {
        /// The one path served.
        path: String,
    },
}

impl ListenerSpec {
    /// Whether the listener needs a certificate.
    pub fn needs_certificate(&self) -> bool {
        !matches!(self.protocol, Protocol::Dns { .. })
    }

    /// The sockets the listener binds, as (label, kind), all on one port.
    fn sockets(&self) -> Vec<(&'static str, SocketKind)> {
        match self.protocol {
            Protocol::Dns { udp, tcp } => [
                (udp, ("udp", SocketKind::Udp)),
                (tcp, ("tcp", SocketKind::Tcp)),
            ]
            .into_iter()
            .filter_map(|(on, socket)| on.then_some(socket))
            .collect(),
            Protocol::Tls => vec![("tls", SocketKind::Tcp)],
            Protocol::Https { .. } => vec![("https", SocketKind::Tcp)],
            Protocol::Quic => vec![("quic", SocketKind::Udp)],
            Protocol::H3 { .. } => vec![("h3", SocketKind::Udp)],
        }
    }
}

/// What the data plane is started with.
pub struct ServerSpec {
    /// CPUs to pin one executor each to.
    pub cpus: Vec<usize>,
    /// Listeners, each served by every core.
    pub listeners: Vec<ListenerSpec>,
    /// The settings snapshot pointer.
    pub settings: SharedSettings,
    /// Lameduck: while set, the health name answers SERVFAIL (the ops listener flips it).
    pub lameduck: Arc<AtomicBool>,
    /// Certificate and key for `tls` and `https` listeners (required when there is one).
    pub tls: Option<TlsConfig>,
    /// Where NOTIFY and UPDATE go (the control thread); without, they are answered NOTIMP.
    pub inbox: Option<crate::inbox::InboxSender>,
    /// Where query-log records go (the control thread's writer); without, cores record
    /// nothing (`querylog.enabled = false` or `querylog.sink = none`).
    pub querylog: Option<crate::querylog::QueryLogSender>,
}

/// Why the data plane did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot bind {kind} {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// `udp` or `tcp`.
        kind: &'static str,
        /// The OS error (`AddrInUse` when the port is taken).
        source: io::Error,
    },
    /// The kernel refused io_uring for lack of locked memory.
    #[error(
        "cannot start the executor on cpu {cpu}: {source}; io_uring needs locked memory: RLIMIT_MEMLOCK is {limit}, \
         raise it (ulimit -l, or LimitMEMLOCK= in the systemd unit) to at least {needed} bytes"
    )]
    Memlock {
        /// The CPU.
        cpu: usize,
        /// The current soft limit, as text.
        limit: String,
        /// A sufficient limit for the configured cores.
        needed: usize,
        /// The OS error.
        source: io::Error,
    },
    /// io_uring is not available (old kernel, seccomp, or `kernel.io_uring_disabled`).
    #[error(
        "cannot start the executor on cpu {cpu}: io_uring is unavailable ({source}); kudurru needs Linux 5.8 or later with io_uring enabled"
    )]
    IoUring {
        /// The CPU.
        cpu: usize,
        /// The OS error.
        source: io::Error,
    },
    /// A `tls` or `https` listener without a certificate.
    #[error(
        "cannot serve DNS over TLS or HTTPS on {addr}: no certificate configured (tls.certFile, tls.keyFile)"
    )]
    NoCertificate {
        /// The listener.
        addr: SocketAddr,
    },
    /// Any other executor start failure.
    #[error("cannot start the executor on cpu {cpu}: {message}")]
    Executor {
        /// The CPU.
        cpu: usize,
        /// What glommio said.
        message: String,
    },
}

/// The running data plane.
pub struct Server {
    threads: Vec<JoinHandle<()>>,
    cache: CacheControl,
    stop: Arc<StopSignal>,
    ready: Arc<AtomicUsize>,
    metrics: Vec<Arc<CoreMetrics>>,
    bound: Vec<(&'static str, SocketAddr)>,
}

impl Server {
    /// Whether every core has its listeners up.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) == self.threads.len()
    }

    /// Each core's counters.
    pub fn metrics(&self) -> &[Arc<CoreMetrics>] {
        &self.metrics
    }

    /// The bound listener addresses, as (`udp`|`tcp`, address).
    pub fn bound(&self) -> &[(&'static str, SocketAddr)] {
        &self.bound
    }

    /// The handle that runs operator commands on every core's cache.
    pub fn cache_control(&self) -> CacheControl {
        self.cache.clone()
    }

    /// Asks every core to stop (non-blocking).
    pub fn request_stop(&self) {
        self.stop.raise();
    }

    /// Stops and waits for every core to exit.
    pub fn stop(self) {
        self.request_stop();
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

struct CoreStart {
    cpu: usize,
    udp: Vec<OwnedFd>,
    tcp: Vec<OwnedFd>,
    tls: Vec<OwnedFd>,
    /// DoH sockets with their path and `Alt-Svc` value.
    https: Vec<(OwnedFd, Arc<str>, Option<Arc<str>>)>,
    quic: Vec<OwnedFd>,
    h3: Vec<(OwnedFd, Arc<str>)>,
}

impl CoreStart {
    fn fds(&self) -> impl Iterator<Item = &OwnedFd> {
        self.udp
            .iter()
            .chain(&self.tcp)
            .chain(&self.tls)
            .chain(self.https.iter().map(|(fd, ..)| fd))
            .chain(&self.quic)
            .chain(self.h3.iter().map(|(fd, _)| fd))
    }
}

/// Times a listener asked for on port 0 is bound again on a new ephemeral port when its UDP
/// socket got a port whose TCP twin another socket holds.
const EPHEMERAL_TRIES: usize = 8;

/// One bound socket kind of a listener: its label, kind, address and one descriptor per core.
type BoundSockets = (&'static str, SocketKind, SocketAddr, Vec<OwnedFd>);

/// Binds `listener`'s sockets (UDP and TCP of one listener share the port) `cores` times each:
/// their label, kind, address and descriptors. On port 0 the kernel picks the first socket's
/// port; when another socket already holds it for the second kind (a client's ephemeral port,
/// say), the pair is bound again on a new port rather than failing.
fn bind_listener(listener: &ListenerSpec, cores: usize) -> Result<Vec<BoundSockets>, StartError> {
    let mut tries = 0;
    'again: loop {
        tries += 1;
        let mut addr = listener.addr;
        let mut sockets = Vec::new();
        for (label, kind) in listener.sockets() {
            match sys::bind_reuseport(addr, kind, cores) {
                Ok((at, fds)) => {
                    addr = at;
                    sockets.push((label, kind, at, fds));
                }
                Err(source)
                    if listener.addr.port() == 0
                        && !sockets.is_empty()
                        && source.kind() == io::ErrorKind::AddrInUse
                        && tries < EPHEMERAL_TRIES =>
                {
                    tracing::debug!(%addr, kind = label, "ephemeral port taken for this kind; binding the listener again");
                    continue 'again;
                }
                Err(source) => {
                    return Err(StartError::Bind {
                        addr,
                        kind: label,
                        source,
                    });
                }
            }
        }
        return Ok(sockets);
    }
}

/// Binds the listeners and starts one pinned executor per CPU.
pub fn start(spec: ServerSpec) -> Result<Server, StartError> {
    let cores = spec.cpus.len().max(1);
    let mut per_core: Vec<CoreStart> = spec
        .cpus
        .iter()
        .map(|&cpu| CoreStart {
            cpu,
            udp: Vec::new(),
            tcp: Vec::new(),
            tls: Vec::new(),
            https: Vec::new(),
            quic: Vec::new(),
            h3: Vec::new(),
        })
        .collect();
    let mut bound = Vec::new();
    let mut https = Vec::new();
    let mut h3 = Vec::new();
    for listener in &spec.listeners {
        if listener.needs_certificate() && spec.tls.is_none() {
            return Err(StartError::NoCertificate {
                addr: listener.addr,
            });
        }
        for (label, kind, at, fds) in bind_listener(listener, cores)? {
            bound.push((label, at));
            for (core, fd) in per_core.iter_mut().zip(fds) {
                match &listener.protocol {
                    Protocol::Dns { .. } if kind == SocketKind::Udp => core.udp.push(fd),
                    Protocol::Dns { .. } => core.tcp.push(fd),
                    Protocol::Tls => core.tls.push(fd),
                    Protocol::Https { path } => core.https.push((fd, Arc::from(&**path), None)),
                    Protocol::Quic => core.quic.push(fd),
                    Protocol::H3 { path } => core.h3.push((fd, Arc::from(&**path))),
                }
            }
            match &listener.protocol {
                Protocol::Https { path } => https.push((at, path.as_str())),
                Protocol::H3 { path } => h3.push((at, path.as_str())),
                _ => {}
            }
        }
    }
    let offers: Vec<Option<Arc<str>>> = https
        .iter()
        .map(|&(addr, path)| alt_svc(addr, path, &h3))
        .collect();
    for core in &mut per_core {
        for ((_, _, offer), advertised) in core.https.iter_mut().zip(&offers) {
            *offer = advertised.clone();
        }
    }

    // Steer each client prefix to one core when the limiter is on (core 0 re-attaches when the
    // settings change). Without the program, limits are per core and a client spread over N
    // cores gets up to N times its rate.
    let initial = steering::program(&spec.settings.load().ratelimit, cores);
    let groups: Vec<RawFd> = per_core.first().map_or_else(Vec::new, |core| {
        core.fds().map(AsRawFd::as_raw_fd).collect()
    });
    for &fd in &groups {
        if let Err(e) = sys::attach_reuseport_program(fd, &initial) {
            tracing::warn!(error = %e, "cannot attach the client steering program; rate limits are per core");
        }
    }
    let stop = Arc::new(StopSignal::default());
    let ready = Arc::new(AtomicUsize::new(0));
    let drained = Arc::new(AtomicUsize::new(0));
    let ownership = Ownership::new(rand::random(), cores);
    let mesh = (cores > 1).then(|| MeshBuilder::<ShardMessage, _>::full(cores, MESH_CAPACITY));
    let metrics: Vec<Arc<CoreMetrics>> = (0..cores)
        .map(|_| Arc::new(CoreMetrics::default()))
        .collect();
    let cache = CacheControl::new(cores);
    let (started_tx, started_rx) = mpsc::channel::<Result<(), StartError>>();
    let mut threads = Vec::with_capacity(cores);
    for (index, core) in per_core.into_iter().enumerate() {
        let setup = CoreSetup {
            tls: spec.tls.clone(),
            inbox: spec.inbox.clone(),
            querylog: spec.querylog.clone(),
            settings: spec.settings.clone(),
            metrics: metrics[index].clone(),
            ownership: ownership.clone(),
            mesh: mesh.clone(),
            stop: stop.clone(),
            ready: ready.clone(),
            drained: drained.clone(),
            lameduck: spec.lameduck.clone(),
            mailbox: cache.mailbox(index),
            steering: if index == 0 {
                groups.clone()
            } else {
                Vec::new()
            },
            cores,
        };
        let started = started_tx.clone();
        let cpu = core.cpu;
        let thread = std::thread::Builder::new()
            .name(format!("kudurru-core-{index}"))
            .spawn(move || {
                let executor = LocalExecutorBuilder::new(Placement::Fixed(core.cpu))
                    .name(&format!("core-{index}"))
                    .io_memory(IO_MEMORY_PER_CORE)
                    .ring_depth(RING_DEPTH)
                    .make();
                let executor = match executor {
                    Ok(executor) => {
                        let _ = started.send(Ok(()));
                        executor
                    }
                    Err(e) => {
                        let _ = started.send(Err(classify_start_error(core.cpu, cores, e)));
                        return;
                    }
                };
                executor.run(run_core(setup, core));
            })
            .map_err(|e| StartError::Executor {
                cpu,
                message: e.to_string(),
            })?;
        threads.push(thread);
    }
    drop(started_tx);
    let mut failure = None;
    for _ in 0..cores {
        match started_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(_) => {
                failure = failure.or(Some(StartError::Executor {
                    cpu: 0,
                    message: "executor thread died".into(),
                }))
            }
        }
    }
    let server = Server {
        cache,
        threads,
        stop,
        ready,
        metrics,
        bound,
    };
    if let Some(e) = failure {
        server.stop();
        return Err(e);
    }
    Ok(server)
}

fn classify_start_error(cpu: usize, cores: usize, error: glommio::GlommioError<()>) -> StartError {
    let io = match error {
        glommio::GlommioError::IoError(io) => io,
        other => {
            return StartError::Executor {
                cpu,
                message: other.to_string(),
            };
        }
    };
    match io.raw_os_error() {
        Some(libc::ENOMEM) => StartError::Memlock {
            cpu,
            limit: sys::memlock_limit().map_or("unlimited".into(), |l| format!("{l} bytes")),
            needed: cores * (IO_MEMORY_PER_CORE + 4 * RING_DEPTH * 64 * 3) + (8 << 20),
            source: io,
        },
        Some(libc::ENOSYS | libc::EPERM) => StartError::IoUring { cpu, source: io },
        _ => StartError::Executor {
            cpu,
            message: io.to_string(),
        },
    }
}

struct CoreSetup {
    settings: SharedSettings,
    metrics: Arc<CoreMetrics>,
    ownership: Ownership,
    mesh: Option<MeshBuilder<ShardMessage, glommio::channels::channel_mesh::Full>>,
    stop: Arc<StopSignal>,
    ready: Arc<AtomicUsize>,
    drained: Arc<AtomicUsize>,
    lameduck: Arc<AtomicBool>,
    /// Operator commands to this core's cache.
    mailbox: Arc<Mailbox>,
    /// One socket of each reuseport group, on core 0 only: where the steering program is attached.
    steering: Vec<RawFd>,
    cores: usize,
    tls: Option<TlsConfig>,
    inbox: Option<crate::inbox::InboxSender>,
    querylog: Option<crate::querylog::QueryLogSender>,
}

/// The request to stop, raised once by the control thread and awaited by every core.
///
/// A waiting core sleeps until it is raised: the control thread wakes each waiter's task
/// (glommio delivers a wake from another thread through the core's eventfd), so an idle core
/// has no timer to service for it.
#[derive(Default)]
struct StopSignal {
    raised: AtomicBool,
    waiters: Mutex<Vec<Waker>>,
}

impl StopSignal {
    fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        let waiters = std::mem::take(&mut *self.lock());
        for waker in waiters {
            waker.wake();
        }
    }

    fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waker>> {
        // A waker list has no invariant a panicking holder could break.
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves once the signal is raised.
    fn wait(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.is_raised() {
                return Poll::Ready(());
            }
            {
                let mut waiters = self.lock();
                if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                    waiters.push(cx.waker().clone());
                }
            }
            // Raised between the first check and the registration: `raise` may have taken
            // the list before this waker joined it.
            if self.is_raised() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

async fn run_core(setup: CoreSetup, sockets: CoreStart) {
    let CoreSetup {
        settings,
        metrics,
        ownership,
        mesh,
        stop,
        ready,
        drained,
        lameduck,
        mailbox,
        steering,
        cores,
        tls,
        inbox,
        querylog,
    } = setup;
    let (shard, senders, receivers) = match mesh {
        None => (0, None, None),
        Some(mesh) => {
            let joined = futures_lite::future::or(async { Some(mesh.join().await) }, async {
                stop.wait().await;
                None
            })
            .await;
            match joined {
                Some(Ok((senders, receivers))) => {
                    (senders.peer_id(), Some(senders), Some(receivers))
                }
                _ => return,
            }
        }
    };
    let worker = Rc::new(Worker::new(
        shard, ownership, settings, metrics, senders, lameduck,
    ));
    if let Some(inbox) = inbox {
        worker.context().inbox.connect(inbox);
    }
    if let Some(querylog) = querylog {
        worker.context().querylog.connect(querylog);
    }
    let mut tasks = Vec::new();
    if let Some(mut receivers) = receivers {
        for (_, receiver) in receivers.streams() {
            let worker = worker.clone();
            tasks.push(glommio::spawn_local(async move {
                while let Some(message) = receiver.recv().await {
                    worker.on_message(message);
                }
            }));
        }
    }
    tasks.push(glommio::spawn_local(worker.clone().run_refreshes()));
    {
        let worker = worker.clone();
        tasks.push(glommio::spawn_local(async move {
            loop {
                let (command, reply) = mailbox.recv().await;
                let report = worker.cache_command(&command, Instant::now());
                // The control thread gave up waiting (timeout): nobody reads the report.
                let _ = reply.try_send((shard, report));
            }
        }));
    }
    let mut listeners = Vec::new();
    // QUIC endpoints, closed once the core has drained (their connections serve until then).
    let mut endpoints: Vec<quinn::Endpoint> = Vec::new();
    if !steering.is_empty() {
        // First in the list: cancelled before the sockets it names are closed.
        listeners.push(glommio::spawn_local(steer(worker.clone(), cores, steering)));
    }
    for fd in sockets.udp {
        listeners.push(glommio::spawn_local(udp::serve(
            worker.clone(),
            Rc::new(sys::glommio_udp(fd)),
        )));
    }
    for fd in sockets.tcp {
        listeners.push(glommio::spawn_local(tcp::serve(
            worker.clone(),
            sys::glommio_tcp_listener(fd),
        )));
    }
    if let Some(config) = &tls {
        for fd in sockets.tls {
            listeners.push(glommio::spawn_local(tcp::serve_tls(
                worker.clone(),
                sys::glommio_tcp_listener(fd),
                config.clone(),
            )));
        }
        for (fd, path, alt_svc) in sockets.https {
            listeners.push(glommio::spawn_local(doh::serve(
                worker.clone(),
                sys::glommio_tcp_listener(fd),
                config.clone(),
                path,
                alt_svc,
            )));
        }
        for fd in sockets.quic {
            match quic::endpoint(fd, &config.load().doq) {
                Ok(endpoint) => {
                    endpoints.push(endpoint.clone());
                    listeners.push(glommio::spawn_local(doq::serve(
                        worker.clone(),
                        endpoint,
                        config.clone(),
                    )));
                }
                Err(e) => tracing::error!(error = %e, "cannot serve DNS over QUIC on this core"),
            }
        }
        for (fd, path) in sockets.h3 {
            match quic::endpoint(fd, &config.load().h3) {
                Ok(endpoint) => {
                    endpoints.push(endpoint.clone());
                    listeners.push(glommio::spawn_local(doh::h3::serve(
                        worker.clone(),
                        endpoint,
                        config.clone(),
                        path,
                    )));
                }
                Err(e) => tracing::error!(error = %e, "cannot serve DNS over HTTP/3 on this core"),
            }
        }
    }
    let maintenance = {
        let worker = worker.clone();
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(Duration::from_secs(1)).await;
                worker.maintain(Instant::now());
            }
        })
    };
    // The query log's timer: hands over a partial batch every 100 ms (none when off).
    let querylog_flushes = {
        let worker = worker.clone();
        glommio::spawn_local(async move { worker.context().querylog.run_flushes().await })
    };
    // Upstream health probes (issue 37): dropped with the maintenance task.
    let health = {
        let worker = worker.clone();
        glommio::spawn_local(async move { worker.run_health_checks().await })
    };
    ready.fetch_add(1, Ordering::AcqRel);
    stop.wait().await;

    // Stop accepting: cancelling the listener tasks closes their sockets.
    for task in listeners {
        task.cancel().await;
    }
    // New QUIC connection attempts are dropped from now on; the open ones drain.
    for endpoint in &endpoints {
        endpoint.set_server_config(None);
    }
    // Every connection finishes what it read and closes; what is left at the grace is cut.
    let grace = worker.context().settings().shutdown_grace;
    drain::drain(worker.context(), grace).await;
    // Keep answering peers until every core has drained its own queries.
    drained.fetch_add(1, Ordering::AcqRel);
    let peers_deadline = Instant::now() + grace + Duration::from_secs(1);
    while drained.load(Ordering::Acquire) < cores && Instant::now() < peers_deadline {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    // Tell QUIC clients (CONNECTION_CLOSE, DOQ_NO_ERROR / H3_NO_ERROR are both 0) and give
    // the packets a moment to leave.
    for endpoint in &endpoints {
        endpoint.close(quinn::VarInt::from_u32(0), b"shutting down");
    }
    for endpoint in &endpoints {
        let _ = deadline::within(QUIC_CLOSE_WAIT, endpoint.wait_idle()).await;
    }
    worker.maintain(Instant::now());
    // What the last queries wrote goes to the control thread before the core exits.
    drop(querylog_flushes);
    worker.context().querylog.flush();
    drop(maintenance);
    drop(health);
    drop(tasks);
}

/// How long a stopping core waits for its QUIC endpoints to send their closes.
const QUIC_CLOSE_WAIT: Duration = Duration::from_millis(100);

/// Re-attaches the steering program when the limiter settings change it (allowlist, prefixes,
/// on/off) for `cores` cores. Runs on core 0, which owns the sockets named in `groups` while
/// this task lives.
async fn steer(worker: Rc<Worker>, cores: usize, groups: Vec<RawFd>) {
    let mut attached = steering::program(&worker.context().settings().ratelimit, cores);
    loop {
        glommio::timer::sleep(Duration::from_secs(1)).await;
        let program = steering::program(&worker.context().settings().ratelimit, cores);
        if program == attached {
            continue;
        }
        for &fd in &groups {
            if let Err(e) = sys::attach_reuseport_program(fd, &program) {
                tracing::warn!(error = %e, "cannot re-attach the client steering program");
            }
        }
        attached = program;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os_error(code: i32) -> glommio::GlommioError<()> {
        glommio::GlommioError::IoError(io::Error::from_raw_os_error(code))
    }

    #[test]
    fn executor_start_errors_say_what_to_fix() {
        let memlock = classify_start_error(3, 2, os_error(libc::ENOMEM));
        assert!(matches!(memlock, StartError::Memlock { cpu: 3, .. }));
        assert!(memlock.to_string().contains("ulimit -l"), "{memlock}");
        let missing = classify_start_error(0, 1, os_error(libc::ENOSYS));
        assert!(matches!(missing, StartError::IoUring { .. }));
        assert!(
            missing.to_string().contains("io_uring is unavailable"),
            "{missing}"
        );
        assert!(matches!(
            classify_start_error(0, 1, os_error(libc::EPERM)),
            StartError::IoUring { .. }
        ));
        assert!(matches!(
            classify_start_error(0, 1, os_error(libc::EINVAL)),
            StartError::Executor { .. }
        ));
    }

    /// Runs `waiters` tasks on a glommio executor, each waiting on `stop` or giving up after
    /// 10 s; returns how many saw the signal.
    fn core_waiting_on(stop: Arc<StopSignal>, waiters: usize) -> JoinHandle<usize> {
        std::thread::spawn(move || {
            let executor = LocalExecutorBuilder::new(Placement::Unbound)
                .io_memory(IO_MEMORY_PER_CORE)
                .ring_depth(RING_DEPTH)
                .make()
                .expect("a glommio executor");
            executor.run(async move {
                let tasks: Vec<_> = (0..waiters)
                    .map(|_| {
                        let stop = stop.clone();
                        glommio::spawn_local(async move {
                            futures_lite::future::or(
                                async {
                                    stop.wait().await;
                                    true
                                },
                                async {
                                    glommio::timer::sleep(Duration::from_secs(10)).await;
                                    false
                                },
                            )
                            .await
                        })
                    })
                    .collect();
                let mut seen = 0;
                for task in tasks {
                    seen += usize::from(task.await);
                }
                seen
            })
        })
    }

    #[test]
    fn a_stop_raised_on_another_thread_wakes_every_waiting_task() {
        let stop = Arc::new(StopSignal::default());
        let core = core_waiting_on(stop.clone(), 3);
        // Let the tasks park on the signal first: the wake, not a first poll, must end them.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            stop.lock().len(),
            3,
            "each waiting task registers one waker"
        );
        stop.raise();
        assert_eq!(
            core.join().unwrap(),
            3,
            "woken by the raise, not by their 10 s timeout"
        );
        assert!(stop.lock().is_empty(), "raise hands every waker back");
    }

    #[test]
    fn a_stop_raised_before_anyone_waits_is_seen_at_once() {
        let stop = Arc::new(StopSignal::default());
        stop.raise();
        assert_eq!(core_waiting_on(stop.clone(), 2).join().unwrap(), 2);
        assert!(stop.lock().is_empty(), "nothing registers after the raise");
    }

    #[test]
    fn port_taken_by_a_reuseport_socket_is_still_an_error() {
        // Another process's SO_REUSEPORT socket would silently share traffic; the probe bind
        // without SO_REUSEPORT refuses instead.
        let (addr, _held) =
            sys::bind_reuseport("127.0.0.1:0".parse().unwrap(), SocketKind::Udp, 1).unwrap();
        let err = sys::bind_reuseport(addr, SocketKind::Udp, 2).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        let (tcp_addr, fds) =
            sys::bind_reuseport("127.0.0.1:0".parse().unwrap(), SocketKind::Tcp, 2).unwrap();
        assert_eq!(fds.len(), 2);
        assert_ne!(tcp_addr.port(), 0);
    }

    /// A port released shortly after startup began (a previous kudurru whose sockets the
    /// kernel frees a moment after it exited) is bound once it is free, not refused.
    #[test]
    fn a_port_freed_within_the_retry_window_is_bound() {
        for kind in [SocketKind::Udp, SocketKind::Tcp] {
            let (addr, held) =
                sys::bind_reuseport("127.0.0.1:0".parse().unwrap(), kind, 1).unwrap();
            let release = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                drop(held);
            });
            let (bound, fds) = sys::bind_reuseport(addr, kind, 2)
                .unwrap_or_else(|e| panic!("{kind:?} {addr}: {e}"));
            assert_eq!(bound, addr);
            assert_eq!(fds.len(), 2);
            release.join().unwrap();
        }
    }
}
