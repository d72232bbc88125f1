//! What the suite needs from a driver, and the test kinds, clock and directories it uses.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use kudurru_storage::{
    Actor, AuditLog, BodyCache, EtcdOptions, EtcdStore, FieldError, KindRegistry, KindSchema,
    MemoryStore, Object, RedbStore, Store, StoreOptions, Timestamp,
};
use serde_json::{Value, json};

/// A driver under test.
pub(crate) trait Harness: Sized {
    /// The driver's store.
    type Store: Store + AuditLog + BodyCache + 'static;
    /// A fresh, empty store.
    fn open(options: StoreOptions) -> Self;
    /// The store.
    fn store(&self) -> &Self::Store;
}

/// The memory driver.
pub(crate) struct Memory(MemoryStore);

impl Harness for Memory {
    type Store = MemoryStore;
    fn open(options: StoreOptions) -> Self {
        Self(MemoryStore::new(options))
    }
    fn store(&self) -> &MemoryStore {
        &self.0
    }
}

/// The redb driver, in a directory of its own.
pub(crate) struct Redb {
    pub(crate) store: Option<RedbStore>,
    pub(crate) options: StoreOptions,
    pub(crate) dir: TempDir,
}

impl Redb {
    /// Closes the database and opens it again, as a restart does.
    pub(crate) fn restart(&mut self) {
        drop(self.store.take());
        self.store = Some(RedbStore::open(self.dir.path(), self.options.clone()).unwrap());
    }
}

impl Harness for Redb {
    type Store = RedbStore;
    fn open(options: StoreOptions) -> Self {
        let dir = TempDir::new();
        let store = RedbStore::open(dir.path(), options.clone()).unwrap();
        Self {
            store: Some(store),
            options,
            dir,
        }
    }
    fn store(&self) -> &RedbStore {
        self.store
            .as_ref()
            .expect("the store is open between restarts")
    }
}

/// The etcd driver, on the test binary's one etcd server, under a prefix of its own (so tests
/// run in parallel on one server).
pub(crate) struct Etcd {
    pub(crate) store: EtcdStore,
    pub(crate) options: EtcdOptions,
}

impl Etcd {
    /// Another handle on the same store, as a second node has.
    pub(crate) fn second_node(&self, options: StoreOptions) -> EtcdStore {
        EtcdStore::connect(self.options.clone(), options).unwrap()
    }
}

impl Harness for Etcd {
    type Store = EtcdStore;
    fn open(options: StoreOptions) -> Self {
        let etcd_options = EtcdServer::shared().options(&unique_prefix());
        let store = EtcdStore::connect(etcd_options.clone(), options).unwrap();
        Self {
            store,
            options: etcd_options,
        }
    }
    fn store(&self) -> &EtcdStore {
        &self.store
    }
}

/// A prefix (`cluster.name`) no other test uses.
pub(crate) fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}-{:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        rand::random::<u32>()
    )
}

/// A real etcd (Debian's `etcd-server`) on random loopback ports with a temporary data
/// directory, automatic compaction off. It is killed when the test binary ends: a shell
/// watchdog kills it once the test process is gone, so an aborted run leaves nothing behind.
pub(crate) struct EtcdServer {
    pub(crate) url: String,
    /// With TLS: the CA, the client certificate and its key (etcd asks for a client
    /// certificate).
    pub(crate) tls: Option<kudurru_storage::EtcdTls>,
    server_tls: Option<(PathBuf, PathBuf)>,
    peer_url: String,
    watchdog: std::process::Child,
    pid: u32,
    dir: TempDir,
}

const ETCD: &str = "/usr/bin/etcd";

impl EtcdServer {
    /// The test binary's shared server, started on first use.
    pub(crate) fn shared() -> &'static Self {
        static SHARED: std::sync::OnceLock<EtcdServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(Self::start)
    }

    /// A server of the caller's own (for tests that stop or kill it).
    pub(crate) fn start() -> Self {
        Self::start_with(false)
    }

    /// A server of the caller's own that speaks TLS only and requires a client certificate
    /// signed by its CA.
    pub(crate) fn start_tls() -> Self {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> Self {
        assert!(
            Path::new(ETCD).exists(),
            "{ETCD} is missing: the etcd driver's tests need a real etcd. Install Debian's \
             etcd-server and etcd-client (.ci/test-deps does)."
        );
        let dir = TempDir::new();
        std::fs::create_dir_all(dir.path()).unwrap();
        let scheme = if tls { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{}", free_port());
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let (client_tls, server_tls) = if tls {
            let (client, server) = make_pki(dir.path());
            (Some(client), Some(server))
        } else {
            (None, None)
        };
        let mut server = Self {
            url,
            tls: client_tls,
            server_tls,
            peer_url,
            watchdog: spawn_placeholder(),
            pid: 0,
            dir,
        };
        server.run();
        server
    }

    // Starts etcd (again, on the same data directory and ports) and waits until it answers.
    fn run(&mut self) {
        let data = self.dir.path().join("data");
        let log = self.dir.path().join("etcd.log");
        let pid_file = self.dir.path().join("etcd.pid");
        let _ = std::fs::remove_file(&pid_file);
        let tls_flags = match (&self.server_tls, &self.tls) {
            (Some((cert, key)), Some(client)) => format!(
                "--cert-file {} --key-file {} --trusted-ca-file {} --client-cert-auth",
                cert.display(),
                key.display(),
                client.ca_file.display()
            ),
            _ => String::new(),
        };
        let command = format!(
            "{ETCD} --name conformance --data-dir {data} --listen-client-urls {url} \
             --advertise-client-urls {url} --listen-peer-urls {peer} \
             --initial-advertise-peer-urls {peer} --initial-cluster conformance={peer} \
             --auto-compaction-retention 0 {tls_flags} >>{log} 2>&1 & echo $! > {pid_file}; \
             while kill -0 {test} 2>/dev/null && kill -0 $(cat {pid_file}) 2>/dev/null; do \
             sleep 0.5; done; kill -9 $(cat {pid_file}) 2>/dev/null",
            data = data.display(),
            url = self.url,
            peer = self.peer_url,
            log = log.display(),
            pid_file = pid_file.display(),
            test = std::process::id(),
        );
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
        self.watchdog = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("sh starts");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let healthy = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|pid| pid.trim().parse().ok())
                .inspect(|pid| self.pid = *pid)
                .is_some()
                && std::process::Command::new("etcdctl")
                    .env("ETCDCTL_API", "3")
                    .args(["--endpoints", &self.url, "--dial-timeout", "1s"])
                    .args(self.tls.iter().flat_map(|tls| {
                        [
                            "--cacert".to_owned(),
                            tls.ca_file.display().to_string(),
                            "--cert".to_owned(),
                            tls.cert_file.as_ref().unwrap().display().to_string(),
                            "--key".to_owned(),
                            tls.key_file.as_ref().unwrap().display().to_string(),
                        ]
                    }))
                    .args(["endpoint", "health"])
                    .output()
                    .is_ok_and(|out| out.status.success());
            if healthy {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "etcd did not become healthy in 30 s: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Driver options for `prefix` on this server (5 s to connect, 5 s per request).
    pub(crate) fn options(&self, prefix: &str) -> EtcdOptions {
        EtcdOptions {
            endpoints: vec![self.url.clone()],
            prefix: prefix.to_owned(),
            tls: self.tls.clone(),
            dial_timeout: std::time::Duration::from_secs(5),
            request_timeout: std::time::Duration::from_secs(5),
        }
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`) to etcd.
    pub(crate) fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {}", self.pid);
    }

    /// Kills etcd and waits until its process is gone.
    pub(crate) fn kill(&mut self) {
        self.signal("KILL");
        let _ = self.watchdog.wait();
    }

    /// Starts etcd again on the same data and ports.
    pub(crate) fn restart(&mut self) {
        self.run();
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg("-9")
            .arg(self.pid.to_string())
            .status();
        let _ = self.watchdog.wait();
    }
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir`: the client's
/// TLS options, and the server's certificate and key files.
fn make_pki(dir: &Path) -> (kudurru_storage::EtcdTls, (PathBuf, PathBuf)) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "kudurru etcd test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let issue = |name: &str, usage: rcgen::ExtendedKeyUsagePurpose| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress([127, 0, 0, 1].into()));
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &issuer).unwrap();
        let cert_file = dir.join(format!("{name}.pem"));
        let key_file = dir.join(format!("{name}.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert_file, key_file)
    };
    let server = issue("localhost", rcgen::ExtendedKeyUsagePurpose::ServerAuth);
    let client = issue("node-1", rcgen::ExtendedKeyUsagePurpose::ClientAuth);
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    (
        kudurru_storage::EtcdTls {
            ca_file,
            cert_file: Some(client.0),
            key_file: Some(client.1),
        },
        server,
    )
}

fn spawn_placeholder() -> std::process::Child {
    std::process::Command::new("true")
        .spawn()
        .expect("true runs")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A directory removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "kudurru-storage-{}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            rand::random::<u32>()
        ));
        Self(path)
    }
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A clock the test moves.
#[derive(Clone, Default)]
pub(crate) struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub(crate) fn set(&self, millis: i64) {
        self.0.store(millis, Ordering::SeqCst);
    }
    pub(crate) fn now(&self) -> Timestamp {
        Timestamp::from_unix_millis(self.0.load(Ordering::SeqCst))
    }
}

/// The test kinds: `Widget` (spec.size 1..=100 required, spec.color a string) and `Gadget`
/// (any object spec).
pub(crate) fn registry() -> KindRegistry {
    let mut registry = KindRegistry::new();
    registry
        .register(KindSchema {
            kind: "Widget",
            validate_spec: validate_widget,
        })
        .unwrap()
        .register(KindSchema {
            kind: "Gadget",
            validate_spec: |_| Ok(()),
        })
        .unwrap();
    registry
}

fn validate_widget(spec: &Value) -> Result<(), FieldError> {
    match spec.get("size") {
        None => return Err(FieldError::new("spec.size", "required")),
        Some(size) => match size.as_u64() {
            Some(1..=100) => {}
            _ => {
                return Err(FieldError::new(
                    "spec.size",
                    "must be an integer from 1 to 100",
                ));
            }
        },
    }
    if spec.get("color").is_some_and(|color| !color.is_string()) {
        return Err(FieldError::new("spec.color", "must be a string"));
    }
    Ok(())
}

/// Options with `clock`, the test kinds, a history of 64 changes and a buffer of 16 events.
pub(crate) fn options(clock: &ManualClock) -> StoreOptions {
    let mut options = StoreOptions::new(registry().into_shared());
    let clock = clock.clone();
    options.clock = Arc::new(move || clock.now());
    options.watch_history = 64;
    options.watch_buffer = 16;
    options
}

/// A fresh store of `H` with a manual clock at 1,000,000 ms.
pub(crate) fn setup<H: Harness>() -> (H, ManualClock) {
    let clock = ManualClock::default();
    clock.set(1_000_000);
    (H::open(options(&clock)), clock)
}

pub(crate) fn widget(name: &str, size: u64) -> Object {
    Object::new("Widget", name, json!({ "size": size }))
}

pub(crate) fn labeled(mut object: Object, labels: &[(&str, &str)]) -> Object {
    for (key, value) in labels {
        object
            .metadata
            .labels
            .insert((*key).to_owned(), (*value).to_owned());
    }
    object
}

pub(crate) fn alice() -> Actor {
    Actor::principal("alice").unwrap()
}

pub(crate) fn controller() -> Actor {
    Actor::system("controller")
}
