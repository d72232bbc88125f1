//! Health probes: every `upstream.healthCheckInterval`, each core asks each upstream its own
//! selectors hold down (three failures in a row) one cheap question, over the same pools as
//! client queries; a good answer puts it back in rotation. Clients never ask a down upstream
//! while another is up, so without probes a recovered one would never come back.
//!
//! ```text
//! every interval ─▶ down upstreams of the global selector  ─▶ `. NS`        ─┐
//!                   down upstreams of each forward zone's   ─▶ `<apex> SOA` ─┴▶ ask ─▶ on_success
//! ```
//!
//! The question is `. NS` for the global upstreams (every recursive resolver answers it from
//! its priming data) and the zone's apex SOA for a forward zone's (its servers are often
//! authoritative and refuse the root). Each core probes for its own selectors: the state is
//! per core, and a probe on another core would not bring this one's back.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future;
use kudurru_core::wire::{class, rtype};
use kudurru_core::zone::Route;
use kudurru_core::{CacheKey, UpstreamSpec};

use super::{Target, UpstreamSet, Upstreams, ask, counter_slot};
use crate::metrics::CoreMetrics;

/// The shortest interval between probe rounds, whatever `upstream.healthCheckInterval` says.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// One probe to send: where the upstream sits and what to ask it.
struct Probe {
    route: Route,
    index: usize,
    spec: UpstreamSpec,
    set: Arc<[UpstreamSpec]>,
    question: CacheKey,
}

impl Upstreams {
    /// Probes the down upstreams every `upstream.healthCheckInterval` (read each round, so a
    /// reload applies at the next one), until the task is dropped.
    pub(crate) async fn run_health_checks(&self) {
        loop {
            let interval = self.settings.load().upstream_health_interval;
            glommio::timer::sleep(interval.max(MIN_INTERVAL)).await;
            self.hold_looping_down();
            self.probe_down().await;
        }
    }

    /// The global upstreams the control thread found a forwarding loop through
    /// (`kudurru_core::loop_probe`), a bit per index of `set`.
    fn looping(&self, set: &Arc<[UpstreamSpec]>) -> u32 {
        let id = Arc::as_ptr(set).cast::<()>() as usize;
        self.metrics.loop_probe.looping_in(id)
    }

    /// Takes the global upstreams a forwarding loop runs through out of rotation; they are not
    /// probed back while the loop lasts (a health probe would come back through the loop and
    /// succeed on another upstream's answer).
    fn hold_looping_down(&self) {
        let settings = self.settings.load();
        let (set, looping) = {
            let mut state = self.selector.borrow_mut();
            if !Arc::ptr_eq(&state.0, &settings.upstreams) {
                // No query since the set was published: follow it here, as a miss would.
                self.follow_global(&mut state, &settings.upstreams);
            }
            (state.0.clone(), self.looping(&state.0))
        };
        if looping == 0 {
            return;
        }
        for index in (0..set.len().min(32)).filter(|i| looping & (1 << i) != 0) {
            let global = UpstreamSet {
                route: Route::Global,
                upstreams: &set,
            };
            if let Some(spec) = set.get(index) {
                self.with_selector(global, index, spec, |selector| selector.take_down(index));
            }
        }
    }

    /// The down upstreams of the current snapshot's sets, with their probe questions.
    fn probes(&self) -> Vec<Probe> {
        let settings = self.settings.load();
        let mut probes = Vec::new();
        let root = CacheKey::new(&[0], rtype::NS, class::IN, false, false);
        {
            let (set, selector) = &*self.selector.borrow();
            if Arc::ptr_eq(set, &settings.upstreams)
                && let Some(question) = root
            {
                let looping = self.looping(set);
                for index in selector.down() {
                    if index < 32 && looping & (1 << index) != 0 {
                        continue;
                    }
                    if let Some(spec) = set.get(index) {
                        probes.push(Probe {
                            route: Route::Global,
                            index,
                            spec: spec.clone(),
                            set: set.clone(),
                            question,
                        });
                    }
                }
            }
        }
        let forwards = self.forwards.borrow();
        if Arc::ptr_eq(&forwards.zones, &settings.zones) {
            for (zone, (set, selector)) in forwards.sets.iter().enumerate() {
                let apex = settings.zones.forward(zone).map(|f| &f.apex);
                let Some(question) =
                    apex.and_then(|apex| CacheKey::new(apex, rtype::SOA, class::IN, false, false))
                else {
                    continue;
                };
                for index in selector.down() {
                    if let Some(spec) = set.get(index) {
                        probes.push(Probe {
                            route: Route::Forward(zone),
                            index,
                            spec: spec.clone(),
                            set: set.clone(),
                            question,
                        });
                    }
                }
            }
        }
        probes
    }

    /// Sends one probe to every down upstream at once and waits for them all (each bounded by
    /// `upstream.timeout`); a good answer puts its upstream back.
    async fn probe_down(&self) {
        let probes = self.probes();
        if probes.is_empty() {
            return;
        }
        let settings = self.settings.load_full();
        let rounds = probes.iter().map(|probe| self.probe(probe, &settings));
        // Few probes (down upstreams only): joined one by one into a single future.
        let mut all: std::pin::Pin<Box<dyn Future<Output = ()> + '_>> = Box::pin(async {});
        for round in rounds {
            all = Box::pin(async move {
                future::zip(all, round).await;
            });
        }
        all.await;
    }

    async fn probe(&self, probe: &Probe, settings: &kudurru_core::Settings) {
        let set = UpstreamSet {
            route: probe.route,
            upstreams: &probe.set,
        };
        let slot = counter_slot(probe.route, probe.index, &probe.spec, settings);
        let counters = self.metrics.upstream(slot);
        CoreMetrics::bump(&counters.probes);
        let now = Instant::now();
        let deadline = now + settings.upstream_timeout;
        let target = Target {
            slot,
            spec: &probe.spec,
        };
        let connection = Rc::new(Cell::new(0));
        let result = ask(
            self,
            target,
            &probe.question,
            now,
            deadline,
            &settings.ttl,
            connection,
        )
        .await;
        match result {
            Ok((_, answered)) => {
                let rtt = answered.saturating_duration_since(now);
                self.with_selector(set, probe.index, &probe.spec, |selector| {
                    selector.on_success(probe.index, rtt);
                });
                tracing::info!(upstream = %probe.spec, rtt_ms = rtt.as_millis() as u64, "upstream back in rotation after a health probe");
            }
            Err(error) => {
                CoreMetrics::bump(&counters.probe_failures);
                tracing::debug!(upstream = %probe.spec, error = error.label(), "health probe failed; upstream stays down");
            }
        }
    }
}
