//! One run: the plan, the per-core executors and their flows, the merged result.
//!
//! ```text
//! main ─ plan ─▶ core 0 (glommio, pinned) ─ flow 0 … flow C-1 ─┐
//!             ─▶ core 1 (glommio, pinned) ─ flow C … ──────────┼▶ tallies ─▶ merged report
//!             ◀─ progress counters (atomics, read once a second) ┘
//! ```
//! A flow is one UDP socket or one stream connection with its own IDs in flight. The offered
//! load is split evenly over every flow of every core: in an open loop each flow sends at
//! `rate / flows` on its own schedule (staggered so flows do not send in lockstep); in a closed
//! loop each keeps `concurrency / flows` queries outstanding. Every flow stops sending at the
//! end of `duration`, then waits up to `timeout` for the replies still due.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use glommio::{LocalExecutorBuilder, Placement};

use crate::queries::{QueryMix, Rng};
use crate::tally::{Progress, Tally};
use crate::target::{Protocol, Target};
use crate::{tcp, udp};

/// How load is offered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// A fixed rate in queries per second; latency counts from each query's intended send
    /// time, so a stall of the target (or of the generator) shows up in the latencies instead
    /// of silently lowering the rate (no coordinated omission).
    Open {
        /// Queries per second, over all cores.
        rate: f64,
    },
    /// A fixed number of queries outstanding; a new one goes out when one is answered or
    /// times out. Latency counts from the actual send.
    Closed {
        /// Queries outstanding, over all cores.
        concurrency: usize,
    },
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Where to send.
    pub target: Target,
    /// What to ask.
    pub mix: Arc<QueryMix>,
    /// What the mix asks, in words ([`crate::queries::describe`]), for the report.
    pub questions: String,
    /// How load is offered.
    pub load: Load,
    /// How long queries are sent.
    pub duration: Duration,
    /// How long a query may wait for its reply.
    pub timeout: Duration,
    /// Generator cores (one pinned executor each).
    pub cores: usize,
    /// UDP sockets or stream connections per core.
    pub connections: usize,
    /// Queries in flight per stream connection at most.
    pub streams: usize,
    /// Seed of the query mix and the IDs.
    pub seed: u64,
    /// The TLS client side, for `tls://` and `https://` targets.
    pub tls: Option<crate::tls::TlsClient>,
    /// How DoH queries are sent (`https://` targets).
    pub method: crate::doh::Method,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// More cores asked for than this process may run on.
    #[error("--cores {asked}: only {available} CPUs are available to this process (see taskset)")]
    Cores {
        /// Cores asked for.
        asked: usize,
        /// CPUs in the affinity mask.
        available: usize,
    },
    /// Fewer outstanding queries than flows.
    #[error(
        "--concurrency {concurrency} is below the {flows} flows (cores × connections); lower --connections"
    )]
    Concurrency {
        /// Queries outstanding asked for.
        concurrency: usize,
        /// Flows.
        flows: usize,
    },
    /// A rate that is not a positive number.
    #[error("--rate must be above 0")]
    Rate,
    /// An executor or socket could not be set up.
    #[error("core {core}: {message}")]
    Core {
        /// Index of the generator core.
        core: usize,
        /// What failed.
        message: String,
    },
}

/// The outcome of a run.
#[derive(Debug)]
pub struct Outcome {
    /// Everything counted, over all flows.
    pub tally: Tally,
    /// How long queries were sent (shorter than the plan when interrupted).
    pub elapsed: Duration,
}

/// What one flow gets from its core.
pub(crate) struct Flow {
    pub(crate) plan: Arc<Plan>,
    /// Index over all flows of the run.
    pub(crate) index: usize,
    /// Flows in the run.
    pub(crate) flows: usize,
    pub(crate) clock: Clock,
    pub(crate) progress: Arc<Progress>,
    pub(crate) stop: Arc<AtomicBool>,
}

impl Flow {
    /// Queries this flow keeps outstanding in a closed loop (the remainder of the split goes
    /// to the first flows).
    pub(crate) fn concurrency(&self, total: usize) -> usize {
        total / self.flows + usize::from(self.index < total % self.flows)
    }

    /// The open-loop schedule of this flow: intended send time of query `k`, in nanoseconds.
    pub(crate) fn intended_ns(&self, rate: f64, k: u64) -> u64 {
        let interval = 1e9 * self.flows as f64 / rate;
        let phase = interval * self.index as f64 / self.flows as f64;
        (phase + interval * k as f64) as u64
    }

    /// Queries this flow's open-loop schedule holds within the run's duration.
    pub(crate) fn scheduled(&self, rate: f64) -> u64 {
        let duration = self.plan.duration.as_nanos() as u64;
        let mut k = (duration as f64 * rate / 1e9 / self.flows as f64) as u64;
        while k > 0 && self.intended_ns(rate, k - 1) >= duration {
            k -= 1;
        }
        while self.intended_ns(rate, k) < duration {
            k += 1;
        }
        k
    }

    /// Whether this flow should still send at `now_ns`.
    pub(crate) fn sending(&self, now_ns: u64) -> bool {
        now_ns < self.plan.duration.as_nanos() as u64 && !self.stop.load(Ordering::Relaxed)
    }

    /// A generator seeded for this flow. Its state starts at a hashed, not merely shifted,
    /// value: splitmix64 walks one fixed cycle, so seeds a multiple of its step apart would
    /// replay each other's sequence (and ask each other's fresh names).
    pub(crate) fn rng(&self) -> Rng {
        Rng::new(Rng::new(self.plan.seed ^ self.index as u64).next_u64())
    }

    /// Where this flow starts in the fixed questions (flows spread over the list).
    pub(crate) fn first_question(&self) -> usize {
        self.plan.mix.fixed_len() * self.index / self.flows
    }
}

/// Nanoseconds since the run's common start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn now_ns(self) -> u64 {
        Instant::now().saturating_duration_since(self.0).as_nanos() as u64
    }

    pub(crate) fn instant(self, ns: u64) -> Instant {
        self.0 + Duration::from_nanos(ns)
    }
}

/// Sleeps until `deadline_ns`, or returns at once when it has passed.
pub(crate) async fn sleep_until(clock: Clock, deadline_ns: u64) {
    let left = clock
        .instant(deadline_ns)
        .saturating_duration_since(Instant::now());
    if !left.is_zero() {
        glommio::timer::sleep(left).await;
    }
}

/// Runs `plan`: one pinned executor per core on the CPUs this process may use, in order.
/// `progress` receives every core's live counters before the flows start; `stop` ends the
/// sending phase early (the replies still due are waited for as usual).
pub fn run(
    plan: Plan,
    stop: Arc<AtomicBool>,
    progress: impl FnOnce(Vec<Arc<Progress>>, Instant),
) -> Result<Outcome, RunError> {
    let cpus = kudurru_transports::sys::available_cpus();
    if plan.cores == 0 || plan.cores > cpus.len() {
        return Err(RunError::Cores {
            asked: plan.cores,
            available: cpus.len(),
        });
    }
    let flows = plan.cores * plan.connections;
    match plan.load {
        Load::Closed { concurrency } if concurrency < flows => {
            return Err(RunError::Concurrency { concurrency, flows });
        }
        Load::Open { rate } if !(rate > 0.0 && rate.is_finite()) => return Err(RunError::Rate),
        _ => {}
    }
    let plan = Arc::new(plan);
    // A common start a little ahead, so every core's schedule begins at the same instant.
    let start = Instant::now() + Duration::from_millis(50);
    let counters: Vec<Arc<Progress>> = (0..plan.cores).map(|_| Arc::default()).collect();
    let mut threads = Vec::with_capacity(plan.cores);
    for (core, cpu) in cpus.into_iter().take(plan.cores).enumerate() {
        let plan = plan.clone();
        let stop = stop.clone();
        let counter = counters[core].clone();
        let thread = std::thread::Builder::new()
            .name(format!("bench-core-{core}"))
            .spawn(move || -> Result<Tally, String> {
                let executor = LocalExecutorBuilder::new(Placement::Fixed(cpu))
                    .name(&format!("bench-{core}"))
                    .io_memory(kudurru_transports::runtime::IO_MEMORY_PER_CORE)
                    .ring_depth(kudurru_transports::runtime::RING_DEPTH)
                    .make()
                    .map_err(|e| format!("cannot start an executor on CPU {cpu}: {e}"))?;
                executor.run(run_core(core, plan, Clock(start), counter, stop))
            })
            .map_err(|e| RunError::Core {
                core,
                message: e.to_string(),
            })?;
        threads.push(thread);
    }
    progress(counters, start);
    let mut tally = Tally::new();
    let mut failure = None;
    for (core, thread) in threads.into_iter().enumerate() {
        match thread.join() {
            Ok(Ok(core_tally)) => tally.merge(&core_tally),
            Ok(Err(message)) => failure = failure.or(Some(RunError::Core { core, message })),
            Err(_) => {
                failure = failure.or(Some(RunError::Core {
                    core,
                    message: "generator thread panicked".into(),
                }));
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let elapsed = Duration::from_nanos(tally.sending_ns).min(plan.duration);
    Ok(Outcome { tally, elapsed })
}

async fn run_core(
    core: usize,
    plan: Arc<Plan>,
    clock: Clock,
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
) -> Result<Tally, String> {
    let flows = plan.cores * plan.connections;
    let mut core_flows = (0..plan.connections).map(|i| Flow {
        plan: plan.clone(),
        index: core * plan.connections + i,
        flows,
        clock,
        progress: progress.clone(),
        stop: stop.clone(),
    });
    if plan.target.protocol == Protocol::Udp {
        // One loop for all of the core's sockets; it blocks this thread, which runs nothing
        // else (see the udp module).
        return udp::run_core(core_flows.collect());
    }
    let tasks: Vec<_> = core_flows
        .by_ref()
        .map(|flow| glommio::spawn_local(tcp::flow(flow)))
        .collect();
    let mut tally = Tally::new();
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(flow_tally) => tally.merge(&flow_tally),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    failure.map_or(Ok(tally), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queries::{Shape, pool};

    fn flow(index: usize, flows: usize, duration: Duration) -> Flow {
        let shape = Shape {
            edns_payload: None,
            dnssec_ok: false,
        };
        let mix = QueryMix::new(pool("s.test", 10, "A").unwrap(), "s.test", "A", 0.0, shape);
        Flow {
            plan: Arc::new(Plan {
                target: "udp://127.0.0.1:53".parse().unwrap(),
                mix: Arc::new(mix.unwrap()),
                questions: String::new(),
                load: Load::Open { rate: 1000.0 },
                duration,
                timeout: Duration::from_secs(1),
                cores: 1,
                connections: flows,
                streams: 1,
                seed: 1,
                tls: None,
                method: crate::doh::Method::Post,
            }),
            index,
            flows,
            clock: Clock(Instant::now()),
            progress: Arc::default(),
            stop: Arc::default(),
        }
    }

    #[test]
    fn open_loop_schedules_add_up_to_the_rate() {
        let duration = Duration::from_secs(2);
        for flows in [1, 3, 7] {
            let total: u64 = (0..flows)
                .map(|i| flow(i, flows, duration).scheduled(1000.0))
                .sum();
            assert!((1999..=2001).contains(&total), "{flows} flows: {total}");
        }
        let f = flow(1, 4, duration);
        // 250 per second per flow: every 4 ms, flow 1 offset by 1 ms.
        assert_eq!(f.intended_ns(1000.0, 0), 1_000_000);
        assert_eq!(f.intended_ns(1000.0, 1), 5_000_000);
    }

    #[test]
    fn flows_draw_unrelated_sequences() {
        let sequences: Vec<Vec<u64>> = (0..4)
            .map(|i| {
                let mut rng = flow(i, 4, Duration::ZERO).rng();
                (0..64).map(|_| rng.next_u64()).collect()
            })
            .collect();
        let mut all: Vec<u64> = sequences.concat();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4 * 64, "no value shared between flows");
    }

    #[test]
    fn closed_loop_split_keeps_the_total() {
        let shares: Vec<usize> = (0..3)
            .map(|i| flow(i, 3, Duration::ZERO).concurrency(10))
            .collect();
        assert_eq!(shares, [4, 3, 3]);
    }
}
