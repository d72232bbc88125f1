//! `kudurru-bench`: a thread-per-core DNS load generator.
//!
//! ```sh
//! kudurru-bench udp://127.0.0.1:5300 --rate 50000 --duration 10s
//! kudurru-bench tcp://127.0.0.1:5300 --concurrency 200 --connections 4 --queries names.txt
//! kudurru-bench --compare before.json after.json
//! ```
//! Arguments are parsed into a validated [`Plan`] first, then run; see docs/benchmarks.md.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use kudurru_bench::doh::Method;
use kudurru_bench::queries::{self, QueryMix, Shape};
use kudurru_bench::report::{self, Report};
use kudurru_bench::run::{self, Load, Plan};
use kudurru_bench::tally::Progress;
use kudurru_bench::target::{Protocol, Target};
use kudurru_bench::tls::{self, TlsClient, Verify};

/// Load-tests a DNS server over UDP, TCP, TLS, HTTPS, QUIC or HTTP/3 and reports answers,
/// errors and latency.
#[derive(Debug, Parser)]
#[command(name = "kudurru-bench", version)]
struct Args {
    /// Where to send: udp://HOST[:PORT] or tcp://HOST[:PORT] (port 53 by default), or
    /// tls://HOST[:PORT][#NAME] (DNS over TLS, port 853), https://HOST[:PORT][/PATH][#NAME]
    /// (DNS over HTTPS, HTTP/2, port 443, /dns-query), quic://HOST[:PORT][#NAME] (DNS over
    /// QUIC, UDP port 853) or h3://HOST[:PORT][/PATH][#NAME] (DNS over HTTPS on HTTP/3, UDP
    /// port 443); certificates are checked for NAME or HOST.
    #[arg(required_unless_present = "compare")]
    target: Option<String>,
    /// Questions, dnsperf format (`name [type]` per line, `;` or `#` comments), asked in
    /// order and over again. Without it, a pool of `--pool` names under `--suffix`.
    #[arg(long, value_name = "FILE")]
    queries: Option<PathBuf>,
    /// Names in the generated pool (`p0.SUFFIX` …) when no --queries file is given.
    #[arg(long, default_value_t = 1000)]
    pool: usize,
    /// Suffix of pool names and of fresh names. The default is an ordinary name that the
    /// target's upstream answers (kudurru-echo --mode answer does), so pool names are cache
    /// hits; a name under .test or .localhost would be answered by the target itself.
    #[arg(long, default_value = queries::DEFAULT_SUFFIX)]
    suffix: String,
    /// Share of queries (0 to 1) for fresh random names under --suffix, never asked before:
    /// cache misses for the target.
    #[arg(long, default_value_t = 0.0)]
    miss_ratio: f64,
    /// Type of pool and fresh names.
    #[arg(long, default_value = "A")]
    qtype: String,
    /// Open loop: offer this many queries per second (over all cores); latency counts from
    /// each query's intended send time.
    #[arg(long, conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// Closed loop: keep this many queries outstanding (over all cores) [default: 100].
    #[arg(long)]
    concurrency: Option<usize>,
    /// How long to send.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// How long a query may wait for its reply.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
    /// Generator cores: one executor pinned to each of the first N CPUs this process may use.
    #[arg(long, default_value_t = 1)]
    cores: usize,
    /// UDP sockets, or TCP or QUIC connections, per core.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Queries in flight per connection at most (TCP, TLS; streams at once on HTTPS, QUIC,
    /// HTTP/3).
    #[arg(long, default_value_t = 100)]
    streams: usize,
    /// Add an EDNS(0) OPT record with this UDP payload size.
    #[arg(long, value_name = "BYTES")]
    edns: Option<u16>,
    /// Set the DO bit (adds an OPT record, payload 1232 unless --edns says otherwise).
    #[arg(long)]
    dnssec: bool,
    /// DoH: send queries as `post` (application/dns-message body) or `get` (`?dns=`).
    #[arg(long, default_value = "post")]
    method: String,
    /// TLS: trust only the certificates in this PEM file [default: the system's trust store].
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    ca: Option<PathBuf>,
    /// TLS: accept any certificate for any name (handshake signatures are still checked).
    #[arg(long)]
    insecure: bool,
    /// Seed for the query mix and IDs [default: random].
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the full report as JSON to FILE (`-` for standard output, which then holds
    /// only the JSON).
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Print two JSON reports side by side with ratios (B/A) instead of running.
    #[arg(long, num_args = 2, value_names = ["A", "B"], conflicts_with = "target")]
    compare: Option<Vec<PathBuf>>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("`{text}`: {e}"))
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(files) = &args.compare {
        let read = |path: &PathBuf| -> Result<Report> {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let report: Report = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a kudurru-bench report", path.display()))?;
            if report.format != report::FORMAT {
                bail!(
                    "{}: report format {} (this kudurru-bench reads {})",
                    path.display(),
                    report.format,
                    report::FORMAT
                );
            }
            Ok(report)
        };
        let (a, b) = (read(&files[0])?, read(&files[1])?);
        print!(
            "{}",
            report::compare(
                &a,
                &b,
                &files[0].display().to_string(),
                &files[1].display().to_string()
            )
        );
        return Ok(());
    }
    let plan = plan(&args)?;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
        .context("installing the SIGINT handler")?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())
        .context("installing the SIGTERM handler")?;
    let live = std::io::stderr().is_terminal();
    let done = Arc::new(AtomicBool::new(false));
    let mut printer = None;
    let outcome = run::run(plan.clone(), stop, |counters, start| {
        if live {
            let done = done.clone();
            printer = Some(std::thread::spawn(move || {
                progress(&counters, start, &done)
            }));
        }
    });
    done.store(true, Ordering::Relaxed);
    if let Some(printer) = printer {
        let _ = printer.join();
    }
    let outcome = outcome?;
    let report = Report::new(&plan, &outcome);
    match args.json.as_deref() {
        Some("-") => {
            println!("{}", serde_json::to_string_pretty(&report)?);
            eprint!("{}", report.human());
        }
        Some(path) => {
            std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
                .with_context(|| format!("writing {path}"))?;
            print!("{}", report.human());
        }
        None => print!("{}", report.human()),
    }
    Ok(())
}

/// Validates the arguments into a plan.
fn plan(args: &Args) -> Result<Plan> {
    let target: Target = args
        .target
        .as_deref()
        .unwrap_or_default()
        .parse()
        .context("the target")?;
    let fixed = match &args.queries {
        Some(path) => queries::read_query_file(path)?,
        None => queries::pool(&args.suffix, args.pool, &args.qtype).context("--pool names")?,
    };
    let source = match &args.queries {
        Some(path) => queries::Source::File {
            path,
            count: fixed.len(),
        },
        None => queries::Source::Pool { count: args.pool },
    };
    let questions = queries::describe(source, &args.suffix, &args.qtype, args.miss_ratio);
    let shape = Shape {
        edns_payload: args.edns,
        dnssec_ok: args.dnssec,
    };
    let mix = QueryMix::new(fixed, &args.suffix, &args.qtype, args.miss_ratio, shape)?;
    let load = match (args.rate, args.concurrency) {
        (Some(rate), _) => Load::Open { rate },
        (None, concurrency) => Load::Closed {
            concurrency: concurrency.unwrap_or(100),
        },
    };
    if args.connections == 0 || args.streams == 0 {
        bail!("--connections and --streams must be at least 1");
    }
    if args.timeout.is_zero() {
        bail!("--timeout must be above 0");
    }
    let tls = match target.protocol {
        protocol if protocol.is_encrypted() => {
            let verify = match (&args.ca, args.insecure) {
                (Some(ca), _) => Verify::Ca(ca.clone()),
                (None, true) => Verify::Insecure,
                (None, false) => Verify::System,
            };
            Some(TlsClient {
                config: tls::client_config(
                    &verify,
                    match target.protocol {
                        Protocol::Tls => &[b"dot"],
                        Protocol::Https => &[b"h2"],
                        Protocol::Quic => &[b"doq"],
                        _ => &[b"h3"],
                    },
                )?,
                server_name: tls::server_name(&target.server_name).map_err(anyhow::Error::msg)?,
            })
        }
        _ if args.ca.is_some() || args.insecure => {
            bail!(
                "--ca and --insecure apply to encrypted targets only (tls://, https://, quic://, h3://)"
            )
        }
        _ => None,
    };
    Ok(Plan {
        target,
        mix: Arc::new(mix),
        questions,
        load,
        duration: args.duration,
        timeout: args.timeout,
        cores: args.cores,
        connections: args.connections,
        streams: args.streams,
        tls,
        method: match args.method.as_str() {
            "post" | "POST" => Method::Post,
            "get" | "GET" => Method::Get,
            other => bail!("--method {other}: expected post or get"),
        },
        seed: args.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        }),
    })
}

/// The live line on a terminal, once a second, until `done`.
fn progress(counters: &[Arc<Progress>], start: Instant, done: &AtomicBool) {
    let mut last_answered = 0;
    let mut tick = start + Duration::from_secs(1);
    let mut err = std::io::stderr();
    while !done.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < tick {
            std::thread::sleep((tick - now).min(Duration::from_millis(50)));
            continue;
        }
        let (mut sent, mut answered, mut failed) = (0, 0, 0);
        for c in counters {
            let (s, a, f) = c.read();
            (sent, answered, failed) = (sent + s, answered + a, failed + f);
        }
        let elapsed = tick.saturating_duration_since(start).as_secs();
        let _ = write!(
            err,
            "\r\x1b[K{elapsed:>4} s  sent {sent}  answered {answered}  {} /s  failed {failed}",
            answered - last_answered
        );
        let _ = err.flush();
        last_answered = answered;
        tick += Duration::from_secs(1);
    }
    let _ = write!(err, "\r\x1b[K");
    let _ = err.flush();
}
