//! One query in, one answer out: the pipeline for transports that carry a single message per
//! request (DoH, and later DoH3 and DoQ), where each request already runs in its own task.
//!
//! ```text
//! message ─▶ ingress ─┬ Respond ─────────────────────────────▶ Some(answer)
//!                     ├ Drop ────────────────────────────────▶ None (the transport aborts)
//!                     └ Resolve ─▶ hit on this core / resolve ─▶ Some(answer)
//! ```

use std::rc::Rc;
use std::time::Instant;

use kudurru_core::wire::{self, ReplyOptions};
use kudurru_core::{Client, Decision, Stage, ingress};

use crate::worker::{Active, Worker};

/// Answers `message` from `client`; `None` when the pipeline drops it (nothing may be sent).
/// Counts the response (or the drop) in the core's metrics.
pub(crate) async fn answer(
    worker: &Rc<Worker>,
    message: &[u8],
    client: Client,
    options: &ReplyOptions,
) -> Option<Vec<u8>> {
    let _active = Active::enter(worker);
    let mut out = Vec::with_capacity(512);
    let query = {
        let settings = worker.settings();
        let stage = Stage {
            local: &settings.local,
            options,
            ratelimit: &settings.ratelimit,
            lameduck: worker.lameduck(),
        };
        let now = Instant::now();
        let decision = ingress(
            message,
            &stage,
            client,
            &mut worker.limiter.borrow_mut(),
            now,
            &mut out,
        );
        match decision {
            Decision::Respond => None,
            Decision::Drop => {
                worker.metrics.dropped();
                return None;
            }
            Decision::Resolve(query) => {
                let hit = worker.serve_local(query.key(), now, |answer| {
                    answer.write_response(&query, now, None, options, &mut out)
                });
                if hit.is_some() { None } else { Some(query) }
            }
        }
    };
    if let Some(query) = query {
        let answer = worker.resolve(query.key()).await;
        answer.write_response(&query, Instant::now(), None, options, &mut out);
    }
    worker
        .metrics
        .response(wire::header_rcode(&out).unwrap_or(0));
    Some(out)
}

/// Spawns a request's task behind the tasks already queued on this core, detached. glommio's
/// `spawn_local` runs a new task at once, inside its spawner: a connection loop that spawned
/// that way would answer, and its transport flush, request by request. Queued, the loop first
/// takes every request that has arrived, then they are answered, and one flush carries them
/// all.
pub(crate) fn spawn_queued(request: impl Future<Output = ()> + 'static) {
    let queue = glommio::executor().current_task_queue();
    // The running task's own queue always exists.
    if let Ok(task) = glommio::spawn_local_into(request, queue) {
        task.detach();
    }
}
