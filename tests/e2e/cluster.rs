//! A fleet end to end: a three-member etcd cluster (Debian's etcd 3.4, three processes on
//! loopback, random ports, temporary data directories) and three kudurru nodes with
//! `cluster.driver = etcd` and `cluster.leaseTTL = 3s`, shared by the scenarios below, which
//! run in order on it (each leaves the fleet whole for the next):
//!
//! 1. one leader; refresh answers 202 on it and 409 naming it on the followers;
//! 2. an object written through any node changes DNS answers on all three (propagation
//!    p50/p99 printed);
//!    a settings PATCH on one node reaches every node; a fourth node with a settings file
//!    answers its settings PATCH and rollback with 409 managed_by naming the file while the
//!    fleet's nodes accept theirs; a secondary zone is transferred by the leader alone (Knot
//!    counts one AXFR) and served by all three; a primary zone changed through one node is
//!    served under the same serial by every member, as `GET /api/v1/cluster` lists them;
//! 3. a URL list is fetched once per refresh across the fleet (the list server counts);
//! 4. the leader killed: leadership moves within leaseTTL + 2 s and fetching with it (still
//!    exactly one fetch per refresh); the killed node comes back as a follower;
//! 5. every etcd member killed: all nodes keep answering (blocked names stay blocked), API
//!    writes answer 503, refresh answers 503 no_leader; etcd back: the nodes converge;
//! 6. a node restarted while etcd is down serves its last snapshot (blocked names blocked,
//!    reads answered, writes 503) and rejoins the fleet once etcd answers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use kudurru_e2e::{Kudurru, Scratch, TestUpstream, dig, free_port};
use serde_json::{Value, json};

use crate::blocking::{ListServer, call};
use crate::transfer::{Knot, a_records, knot_config, zone_file};

const ETCD: &str = "/usr/bin/etcd";
/// The nodes' lease TTL.
const LEASE_TTL: Duration = Duration::from_secs(3);

/// One etcd member, killed when dropped; a shell watchdog also kills it when the test process
/// is gone (an aborted run leaves nothing behind).
struct EtcdMember {
    name: String,
    client: String,
    peer: String,
    dir: PathBuf,
    pid: Option<u32>,
    watchdog: Option<Child>,
}

/// Three members on loopback.
struct EtcdCluster {
    members: Vec<EtcdMember>,
}

impl EtcdCluster {
    fn start(scratch: &Path) -> Self {
        assert!(
            Path::new(ETCD).exists(),
            "{ETCD} is missing: the cluster tests need a real etcd. Install Debian's etcd-server \
             and etcd-client (.ci/test-deps does)."
        );
        let members: Vec<EtcdMember> = (1..=3)
            .map(|i| EtcdMember {
                name: format!("e{i}"),
                client: format!("http://127.0.0.1:{}", free_port()),
                peer: format!("http://127.0.0.1:{}", free_port()),
                dir: scratch.join(format!("etcd{i}")),
                pid: None,
                watchdog: None,
            })
            .collect();
        let mut cluster = Self { members };
        cluster.run_all();
        cluster
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts every member (again, on the same data and ports) and waits until all answer.
    fn run_all(&mut self) {
        let initial = self.initial_cluster();
        for member in &mut self.members {
            member.run(&initial);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for member in &mut self.members {
            member.wait_healthy(deadline);
        }
    }

    /// Kills every member.
    fn kill_all(&mut self) {
        for member in &mut self.members {
            member.kill();
        }
    }
}

impl EtcdMember {
    fn run(&mut self, initial_cluster: &str) {
        std::fs::create_dir_all(&self.dir).unwrap();
        let pid_file = self.dir.join("etcd.pid");
        let _ = std::fs::remove_file(&pid_file);
        let command = format!(
            "{ETCD} --name {name} --data-dir {data} --listen-client-urls {client} \
             --advertise-client-urls {client} --listen-peer-urls {peer} \
             --initial-advertise-peer-urls {peer} --initial-cluster {initial_cluster} \
             --initial-cluster-state new --initial-cluster-token kudurru-e2e \
             >>{log} 2>&1 & echo $! > {pid_file}; \
             while kill -0 {test} 2>/dev/null && kill -0 $(cat {pid_file}) 2>/dev/null; do \
             sleep 0.5; done; kill -9 $(cat {pid_file}) 2>/dev/null",
            name = self.name,
            data = self.dir.join("data").display(),
            client = self.client,
            peer = self.peer,
            log = self.dir.join("etcd.log").display(),
            pid_file = pid_file.display(),
            test = std::process::id(),
        );
        self.watchdog = Some(
            Command::new("sh")
                .arg("-c")
                .arg(command)
                .stdin(Stdio::null())
                .spawn()
                .expect("sh starts"),
        );
    }

    fn wait_healthy(&mut self, deadline: Instant) {
        let pid_file = self.dir.join("etcd.pid");
        loop {
            self.pid = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|pid| pid.trim().parse().ok());
            let healthy = self.pid.is_some()
                && Command::new("etcdctl")
                    .env("ETCDCTL_API", "3")
                    .args(["--endpoints", &self.client, "--dial-timeout", "1s"])
                    .args(["endpoint", "health"])
                    .output()
                    .is_ok_and(|out| out.status.success());
            if healthy {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd member {} did not become healthy: {}",
                self.name,
                std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn kill(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.wait();
        }
    }
}

impl Drop for EtcdMember {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One kudurru node of the fleet and its admin token.
struct Node {
    name: String,
    kudurru: Option<Kudurru>,
    token: String,
    data_dir: PathBuf,
}

impl Node {
    fn k(&self) -> &Kudurru {
        self.kudurru.as_ref().expect("the node runs")
    }

    /// The advertised address (the default: the API listener's).
    fn advertised(&self) -> String {
        format!("http://{}", self.k().api)
    }

    fn leads(&self) -> bool {
        self.k().metric("kudurru_cluster_leader") == Some(1.0)
    }

    fn connected(&self) -> bool {
        self.k().metric("kudurru_cluster_connected") == Some(1.0)
    }
}

fn start_node(name: &str, upstream: &str, endpoints: &str, data_dir: &Path, log: &Path) -> Kudurru {
    node_builder(name, upstream, endpoints, data_dir, log).start()
}

fn node_builder(
    name: &str,
    upstream: &str,
    endpoints: &str,
    data_dir: &Path,
    log: &Path,
) -> kudurru_e2e::KudurruBuilder {
    Kudurru::builder(&[upstream.to_owned()])
        .data_dir(data_dir)
        .log_level(Some("info"))
        .stderr_to(log)
        .env("KUDURRU_CLUSTER__DRIVER", "etcd")
        .env("KUDURRU_CLUSTER__ETCD__ENDPOINTS", endpoints)
        .env("KUDURRU_CLUSTER__NAME", "e2e")
        .env("KUDURRU_CLUSTER__NODENAME", name)
        .env(
            "KUDURRU_CLUSTER__LEASETTL",
            &format!("{}s", LEASE_TTL.as_secs()),
        )
}

/// Polls `check` every 50 ms for up to `limit`; panics with `what` if it never holds.
fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

fn rcode(addr: SocketAddr, name: &str) -> String {
    dig(addr, &[name, "A"]).status
}

/// The node that leads, once exactly one does.
fn leader(nodes: &[Node]) -> usize {
    let mut found = None;
    eventually("exactly one leader", Duration::from_secs(30), || {
        let leading: Vec<usize> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.kudurru.is_some() && n.leads())
            .map(|(i, _)| i)
            .collect();
        found = (leading.len() == 1).then(|| leading[0]);
        found.is_some()
    });
    found.expect("one leader")
}

fn refresh(node: &Node, list: &str) -> (u16, Value) {
    call(
        node.k(),
        "POST",
        &format!("/api/v1/blocklists/{list}/refresh"),
        &node.token,
        None,
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

#[test]
fn a_fleet_of_three_shares_objects_fails_over_and_serves_through_an_etcd_outage() {
    let scratch = Scratch::new("cluster");
    let mut etcd = EtcdCluster::start(&scratch);
    let endpoints = etcd.endpoints();
    let upstream = TestUpstream::start();
    let lists = ListServer::start();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| {
            let name = format!("n{i}");
            let data_dir = scratch.join(&name);
            let log = scratch.join(format!("{name}.log"));
            let kudurru = start_node(&name, &upstream.udp_url(), &endpoints, &data_dir, &log);
            let token = kudurru.token("admin", None);
            Node {
                name,
                kudurru: Some(kudurru),
                token,
                data_dir,
            }
        })
        .collect();
    // One token file for the fleet (operators distribute it): `GET /api/v1/cluster` asks
    // the other members with its caller's token.
    let shared = nodes[0].data_dir.join("tokens.json");
    for node in &mut nodes[1..] {
        std::fs::copy(&shared, node.data_dir.join("tokens.json")).expect("tokens.json copies");
    }
    let fleet_token = nodes[0].token.clone();
    for node in &mut nodes {
        node.token = fleet_token.clone();
    }

    // 1. One leader; refresh 202 on it, 409 naming it elsewhere.
    let first = leader(&nodes);
    eprintln!("cluster: {} leads", nodes[first].name);
    crate::blocking::create(
        nodes[0].k(),
        &nodes[0].token,
        "policies",
        "fleet",
        json!({"clientGroups": ["default"], "denyLists": ["prop", "fetched"]}),
    );
    crate::blocking::create(
        nodes[1].k(),
        &nodes[1].token,
        "blocklists",
        "fetched",
        json!({"sources": [{"url": lists.url("/domains")}]}),
    );
    for node in &nodes {
        eventually(
            "the fetched list to block on every node",
            Duration::from_secs(30),
            || rcode(node.k().addr, "domains-blocked.example") == "NXDOMAIN",
        );
    }
    assert_eq!(lists.hits("/domains", 200), 1, "one fetch for the fleet");
    for (i, node) in nodes.iter().enumerate() {
        let (code, body) = refresh(node, "fetched");
        if i == first {
            assert_eq!(code, 202, "{body}");
        } else {
            assert_eq!(code, 409, "{body}");
            assert_eq!(body["code"], "not_leader", "{body}");
            assert_eq!(body["leader"], nodes[first].advertised(), "{body}");
        }
    }
    eventually("the refresh's fetch", Duration::from_secs(20), || {
        lists.hits("/domains", 200) == 2
    });

    // 2. Propagation: a BlockList changed through each node in turn; every node answers.
    let mut samples = Vec::new();
    for round in 0..15 {
        let writer = &nodes[round % 3];
        let name = format!("prop-{round}.blocked.example");
        let body = json!({"metadata": {"name": "prop"}, "spec": {"sources": [{"inline": [name.clone()]}]}});
        let started = Instant::now();
        let (code, reply) = if round == 0 {
            call(
                writer.k(),
                "POST",
                "/api/v1/blocklists",
                &writer.token,
                Some(&body),
            )
        } else {
            call(
                writer.k(),
                "PATCH",
                "/api/v1/blocklists/prop",
                &writer.token,
                Some(&body),
            )
        };
        assert!(
            code == 201 || code == 200,
            "write through {}: {code} {reply}",
            writer.name
        );
        for node in &nodes {
            eventually(
                "a change to reach every node's answers",
                Duration::from_secs(20),
                || rcode(node.k().addr, &name) == "NXDOMAIN",
            );
        }
        samples.push(started.elapsed());
    }
    samples.sort();
    eprintln!(
        "cluster: propagation of an object change to DNS answers on 3 nodes, {} changes: p50 {:?}, p99 {:?}, max {:?}",
        samples.len(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        samples.last().copied().unwrap_or_default()
    );

    // `kudurru cluster status` on a follower lists the three members and the leader.
    let asked = (first + 1) % 3;
    let eventually_listed = || {
        let out = Command::new(kudurru_e2e::kudurru_bin())
            .args(["cluster", "status", "--api"])
            .arg(format!("http://{}", nodes[asked].k().api))
            .args(["--token", &nodes[asked].token])
            .output()
            .expect("kudurru cluster status runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success()
            && ["n1", "n2", "n3"].iter().all(|n| text.contains(n))
            && text.contains(&format!("leader: {}", nodes[first].advertised())))
        .then_some(text)
    };
    let mut listed = None;
    eventually(
        "cluster status to list the fleet",
        Duration::from_secs(20),
        || {
            listed = eventually_listed();
            listed.is_some()
        },
    );
    eprintln!(
        "cluster: kudurru cluster status\n{}",
        listed.unwrap_or_default()
    );
    let (code, doctor) = call(
        nodes[asked].k(),
        "GET",
        "/api/v1/doctor",
        &nodes[asked].token,
        None,
    );
    assert_eq!(code, 200);
    let check = doctor["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "cluster")
        .cloned()
        .unwrap_or_default();
    assert_eq!(check["status"], "ok", "{doctor}");

    // Cluster settings: a PATCH on one node reaches every node.
    let (code, body) = call(
        nodes[2].k(),
        "PATCH",
        "/api/v1/settings",
        &nodes[2].token,
        Some(&json!({"blocking": {"blockTTL": "42s"}})),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["persisted"], true, "{body}");
    for node in &nodes {
        eventually(
            "the fleet's settings on every node",
            Duration::from_secs(20),
            || {
                let (_, settings) = call(node.k(), "GET", "/api/v1/settings", &node.token, None);
                settings["values"]["blocking"]["blockTTL"] == "42s"
            },
        );
    }

    // Secondary zones: only the leader transfers (Knot counts one AXFR), every node serves.
    let knot_dir = scratch.join("knot");
    std::fs::create_dir_all(&knot_dir).unwrap();
    std::fs::write(
        knot_dir.join("corp.example.zone"),
        zone_file(1, "3600 600 86400", ""),
    )
    .unwrap();
    let knot_port = free_port();
    let knot = Knot::start(
        &knot_dir,
        &knot_config(
            &knot_dir,
            knot_port,
            &format!(
                "acl:\n  - id: xfr\n    address: 127.0.0.1\n    action: transfer\n\
                 template:\n  - id: default\n    storage: {d}\n\
                 zone:\n  - domain: corp.example\n    file: corp.example.zone\n    acl: xfr\n",
                d = knot_dir.display()
            ),
        ),
        knot_port,
    );
    crate::blocking::create(
        nodes[1].k(),
        &nodes[1].token,
        "zones",
        "corp-example",
        json!({"zone": "corp.example.", "type": "secondary",
               "primaries": [{"address": knot.addr().to_string()}]}),
    );
    for node in &nodes {
        eventually(
            "every node to serve the secondary zone",
            Duration::from_secs(30),
            || a_records(node.k().addr, "www.corp.example") == ["192.0.2.10"],
        );
    }
    assert_eq!(
        knot.log()
            .lines()
            .filter(|l| l.contains("AXFR, outgoing") && l.contains("started"))
            .count(),
        1,
        "one transfer for the fleet: {}",
        knot.log()
    );

    // A fourth node with its own settings file follows the file, not the fleet: its settings
    // writes (PATCH, rollback) answer 409 managed_by naming the file, while the fleet's nodes
    // go on accepting theirs.
    let managed_file = scratch.join("n4-settings.toml");
    std::fs::write(&managed_file, "[blocking]\nblockTTL = \"7s\"\n").unwrap();
    let n4_dir = scratch.join("n4");
    std::fs::create_dir_all(&n4_dir).unwrap();
    std::fs::copy(&shared, n4_dir.join("tokens.json")).expect("tokens.json copies");
    let mut managed = Node {
        name: "n4".into(),
        kudurru: Some(
            node_builder(
                "n4",
                &upstream.udp_url(),
                &endpoints,
                &n4_dir,
                &scratch.join("n4.log"),
            )
            .env("KUDURRU_SETTINGS_FILE", managed_file.to_str().unwrap())
            .start(),
        ),
        token: fleet_token.clone(),
        data_dir: n4_dir,
    };
    eventually("n4 to connect", Duration::from_secs(20), || {
        managed.connected()
    });
    let block_ttl = |node: &Node| {
        let (_, settings) = call(node.k(), "GET", "/api/v1/settings", &node.token, None);
        settings["values"]["blocking"]["blockTTL"].clone()
    };
    assert_eq!(
        block_ttl(&managed),
        "7s",
        "the file wins over the fleet's 42s"
    );
    let refused = [
        call(
            managed.k(),
            "PATCH",
            "/api/v1/settings",
            &managed.token,
            Some(&json!({"blocking": {"blockTTL": "9s"}})),
        ),
        call(
            managed.k(),
            "POST",
            "/api/v1/settings/rollback",
            &managed.token,
            Some(&json!({"version": 1})),
        ),
    ];
    for (code, body) in refused {
        assert_eq!(code, 409, "{body}");
        assert_eq!(body["code"], "managed_by", "{body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains(managed_file.to_str().unwrap())),
            "names the file: {body}"
        );
        let mut fields: Vec<&String> = body.as_object().unwrap().keys().collect();
        fields.sort();
        assert_eq!(fields, ["code", "message"], "the Error shape: {body}");
    }
    let (code, body) = call(
        nodes[0].k(),
        "PATCH",
        "/api/v1/settings",
        &nodes[0].token,
        Some(&json!({"blocking": {"blockTTL": "43s"}})),
    );
    assert_eq!(code, 200, "a fleet node still accepts: {body}");
    for node in &nodes {
        eventually(
            "the fleet's second PATCH on every fleet node",
            Duration::from_secs(20),
            || block_ttl(node) == "43s",
        );
    }
    assert_eq!(block_ttl(&managed), "7s", "n4 still follows its file");
    managed.kudurru.as_mut().expect("runs").terminate();
    managed.kudurru = None;

    // Zone serials per member: a zone changed through one node; every member, as it tells
    // `GET /api/v1/cluster` on another, serves the same serial.
    crate::blocking::create(
        nodes[0].k(),
        &nodes[0].token,
        "zones",
        "fleet",
        json!({"zone": "fleet.example.", "type": "primary", "nameServers": ["ns1.fleet.example."]}),
    );
    crate::blocking::create(
        nodes[0].k(),
        &nodes[0].token,
        "recordsets",
        "fleet-www",
        json!({"zone": "fleet", "name": "www", "type": "A", "records": ["192.0.2.31"]}),
    );
    let first_serial = same_serial_on_every_member(&nodes, 2, "fleet.example.", None);
    let (code, body) = call(
        nodes[1].k(),
        "PATCH",
        "/api/v1/recordsets/fleet-www",
        &nodes[1].token,
        Some(
            &json!({"metadata": {"name": "fleet-www"}, "spec": {"zone": "fleet", "name": "www", "type": "A", "records": ["192.0.2.32"]}}),
        ),
    );
    assert_eq!(code, 200, "{body}");
    let changed = same_serial_on_every_member(&nodes, 2, "fleet.example.", Some(first_serial));
    eprintln!("cluster: fleet.example. serial {first_serial} then {changed} on every member");
    same_serial_on_every_member(&nodes, 0, "corp.example.", None);
    let out = Command::new(kudurru_e2e::kudurru_bin())
        .args(["cluster", "status", "--api"])
        .arg(format!("http://{}", nodes[1].k().api))
        .args(["--token", &nodes[1].token])
        .output()
        .expect("kudurru cluster status runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .filter(|l| l.contains(&format!("fleet.example. {changed}")))
            .count()
            == 3,
        "{text}"
    );
    eprintln!("cluster: kudurru cluster status\n{text}");
    // A member that refuses the caller is listed with its error, not dropped: a token only
    // nodes[2] knows.
    let own_token = nodes[2].k().token("viewer", None);
    let (code, status) = call(nodes[2].k(), "GET", "/api/v1/cluster", &own_token, None);
    assert_eq!(code, 200, "{status}");
    let members = status["members"].as_array().cloned().unwrap_or_default();
    assert_eq!(members.len(), 3, "{status}");
    for m in &members {
        if m["name"] == nodes[2].name {
            assert!(m["zones"].is_array(), "{status}");
        } else {
            assert!(m["zones"].is_null(), "{status}");
            assert!(
                m["error"].as_str().is_some_and(|e| e.contains("401")),
                "{status}"
            );
        }
    }

    // 3 and 4. Kill the leader: leadership moves within leaseTTL + 2 s, and fetching with it.
    assert_eq!(lists.hits("/domains", 200), 2, "no fetch without a refresh");
    let killed = leader(&nodes);
    nodes[killed].kudurru.as_mut().expect("runs").kill();
    let killed_at = Instant::now();
    nodes[killed].kudurru = None;
    let elected = eventually(
        "another node to lead",
        LEASE_TTL + Duration::from_secs(2),
        || nodes.iter().any(|n| n.kudurru.is_some() && n.leads()),
    );
    eprintln!(
        "cluster: {} killed; a new leader in {:?} (lease TTL {:?})",
        nodes[killed].name, elected, LEASE_TTL
    );
    let second = leader(&nodes);
    assert_ne!(second, killed);
    assert!(killed_at.elapsed() < Duration::from_secs(30));
    assert_eq!(
        lists.hits("/domains", 200),
        2,
        "the new leader does not fetch again before the interval or a refresh"
    );
    let (code, body) = refresh(&nodes[second], "fetched");
    assert_eq!(code, 202, "{body}");
    eventually("the new leader's fetch", Duration::from_secs(20), || {
        lists.hits("/domains", 200) == 3
    });
    let follower = (0..3)
        .find(|i| *i != second && *i != killed)
        .expect("a follower");
    let (code, body) = refresh(&nodes[follower], "fetched");
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["leader"], nodes[second].advertised(), "{body}");
    // The killed node comes back (same data directory) as a follower.
    let log = scratch.join(format!("{}-restarted.log", nodes[killed].name));
    let restarted = start_node(
        &nodes[killed].name,
        &upstream.udp_url(),
        &endpoints,
        &nodes[killed].data_dir,
        &log,
    );
    nodes[killed].kudurru = Some(restarted);
    eventually(
        "the restarted node to connect",
        Duration::from_secs(20),
        || nodes[killed].connected(),
    );
    assert!(!nodes[killed].leads());
    assert_eq!(leader(&nodes), second);
    assert_eq!(
        lists.hits("/domains", 200),
        3,
        "exactly one fetch per refresh"
    );
    eventually(
        "the restarted node to block",
        Duration::from_secs(20),
        || rcode(nodes[killed].k().addr, "domains-blocked.example") == "NXDOMAIN",
    );
    assert_eq!(
        a_records(nodes[killed].k().addr, "www.corp.example"),
        ["192.0.2.10"],
        "the restarted follower serves the stored transfer"
    );
    let axfrs = knot
        .log()
        .lines()
        .filter(|l| l.contains("AXFR, outgoing") && l.contains("started"))
        .count();
    assert_eq!(axfrs, 1, "the new leader checks the serial: no second AXFR");

    // 5. Every etcd member down: answers stay, writes 503, refresh 503; then convergence.
    etcd.kill_all();
    for node in &nodes {
        eventually("the node to see etcd gone", Duration::from_secs(20), || {
            !node.connected()
        });
    }
    for node in &nodes {
        assert_eq!(rcode(node.k().addr, "domains-blocked.example"), "NXDOMAIN");
        assert_eq!(rcode(node.k().addr, "prop-14.blocked.example"), "NXDOMAIN");
        let (code, body) = call(
            node.k(),
            "POST",
            "/api/v1/blocklists",
            &node.token,
            Some(
                &json!({"metadata": {"name": "during-outage"}, "spec": {"sources": [{"inline": ["x.example"]}]}}),
            ),
        );
        assert_eq!(code, 503, "{}: {body}", node.name);
        let (code, body) = refresh(node, "fetched");
        assert_eq!(code, 503, "{}: {body}", node.name);
        assert_eq!(body["code"], "no_leader", "{body}");
    }
    etcd.run_all();
    let back = leader(&nodes);
    eprintln!("cluster: etcd back; {} leads", nodes[back].name);
    let body = json!({"metadata": {"name": "prop"}, "spec": {"sources": [{"inline": ["after-outage.blocked.example"]}]}});
    let writer = &nodes[(back + 1) % 3];
    eventually(
        "a write to succeed after the outage",
        Duration::from_secs(20),
        || {
            call(
                writer.k(),
                "PATCH",
                "/api/v1/blocklists/prop",
                &writer.token,
                Some(&body),
            )
            .0 == 200
        },
    );
    for node in &nodes {
        eventually("every node to converge", Duration::from_secs(30), || {
            rcode(node.k().addr, "after-outage.blocked.example") == "NXDOMAIN"
        });
    }
    // 6. A node restarted while etcd is down serves its last snapshot, read-only, and
    // rejoins once etcd answers.
    let converged_at = std::time::SystemTime::now();
    let restarted = (back + 1) % 3;
    let snapshot = nodes[restarted]
        .data_dir
        .join("cluster-snapshot")
        .join("objects.redb");
    let fresh = || {
        std::fs::metadata(&snapshot)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > converged_at)
    };
    let waited = Instant::now();
    while !fresh() && waited.elapsed() < Duration::from_secs(60) {
        thread::sleep(Duration::from_millis(100));
    }
    if !fresh() {
        dump_logs(&scratch, "snapshot");
        panic!("no snapshot taken after the change within 60 s");
    }
    etcd.kill_all();
    nodes[restarted].kudurru.as_mut().expect("runs").terminate();
    nodes[restarted].kudurru = None;
    let log = scratch.join(format!("{}-snapshot.log", nodes[restarted].name));
    nodes[restarted].kudurru = Some(start_node(
        &nodes[restarted].name,
        &upstream.udp_url(),
        &endpoints,
        &nodes[restarted].data_dir,
        &log,
    ));
    let node = &nodes[restarted];
    eventually(
        "the snapshot's lists to block",
        Duration::from_secs(30),
        || rcode(node.k().addr, "after-outage.blocked.example") == "NXDOMAIN",
    );
    assert_eq!(rcode(node.k().addr, "domains-blocked.example"), "NXDOMAIN");
    assert!(!node.connected());
    let (code, body) = call(
        node.k(),
        "POST",
        "/api/v1/blocklists",
        &node.token,
        Some(
            &json!({"metadata": {"name": "on-snapshot"}, "spec": {"sources": [{"inline": ["y.example"]}]}}),
        ),
    );
    assert_eq!(code, 503, "{body}");
    let (code, listed) = call(
        node.k(),
        "GET",
        "/api/v1/blocklists/prop",
        &node.token,
        None,
    );
    assert_eq!(code, 200, "reads answer from the snapshot: {listed}");
    etcd.run_all();
    // It starts itself again (exec, same pid and ports): the ops listener is briefly away.
    eventually(
        "the snapshot node to rejoin",
        Duration::from_secs(40),
        || {
            let out = Command::new("curl")
                .args(["-s", "--max-time", "2"])
                .arg(format!("http://{}/metrics", node.k().ops))
                .output();
            out.is_ok_and(|out| {
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .any(|l| l == "kudurru_cluster_connected 1")
            })
        },
    );
    leader(&nodes);

    // What each node said about the fleet, for the record.
    dump_logs(&scratch, "cluster");
}

/// Waits until `GET /api/v1/cluster` on `nodes[asked]` lists three members that all serve
/// `zone` under one serial (above `above`, when given) and returns it.
fn same_serial_on_every_member(
    nodes: &[Node],
    asked: usize,
    zone: &str,
    above: Option<u64>,
) -> u64 {
    let node = &nodes[asked];
    let mut last = Value::Null;
    let mut agreed = None;
    let waited = Instant::now();
    while agreed.is_none() && waited.elapsed() < Duration::from_secs(30) {
        let (code, status) = call(node.k(), "GET", "/api/v1/cluster", &node.token, None);
        let serials: Vec<Option<u64>> = status["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                m["zones"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|z| z["zone"] == zone)
                    .and_then(|z| z["serial"].as_u64())
            })
            .collect();
        if code == 200
            && serials.len() == 3
            && serials.iter().all(|s| s.is_some() && *s == serials[0])
            && serials[0] > above
        {
            agreed = serials[0];
        } else {
            last = status;
            thread::sleep(Duration::from_millis(100));
        }
    }
    agreed.unwrap_or_else(|| panic!("no common serial of {zone} on three members: {last:#}"))
}

/// Prints the nodes' log lines that contain `word`.
fn dump_logs(scratch: &Path, word: &str) {
    for entry in std::fs::read_dir(scratch).expect("scratch").flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "log") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains(word)) {
                eprintln!("{}: {line}", path.display());
            }
        }
    }
}
