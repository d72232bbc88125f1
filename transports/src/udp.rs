//! The UDP listener of one core: one SO_REUSEPORT socket, answers sent from the same socket.
//!
//! Hits are answered inline in the receive loop; misses are handed to a task so the loop never
//! waits on an upstream.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use glommio::net::UdpSocket;
use kudurru_core::wire::{self, Query};
use kudurru_core::{Decision, ingress};

use crate::metrics::Transport;
use crate::worker::Worker;

/// Receive buffer: the largest datagram a client can send.
const RECV_BUFFER: usize = 65_535;

/// Serves queries on `socket` until the task is dropped.
pub(crate) async fn serve(worker: Rc<Worker>, socket: Rc<UdpSocket>) {
    let mut buf = vec![0u8; RECV_BUFFER];
    let mut out = Vec::with_capacity(4096);
    loop {
        let (n, peer) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(e) => {
                tracing::debug!(error = %e, "udp receive failed");
                continue;
            }
        };
        worker.metrics.query(Transport::Udp);
        let settings = worker.settings();
        match ingress(&buf[..n], &settings.local, settings.edns_payload, &mut out) {
            Decision::Respond => reply(&worker, &socket, &out, peer).await,
            Decision::Drop => worker.metrics.dropped(),
            Decision::Resolve(query) => {
                let now = Instant::now();
                if let Some(answer) = worker.lookup_local(query.key(), now) {
                    let limit = query.udp_limit(settings.edns_payload);
                    answer.write_response(
                        &query,
                        now,
                        Some(limit),
                        settings.edns_payload,
                        &mut out,
                    );
                    reply(&worker, &socket, &out, peer).await;
                } else {
                    let message = buf[..n].to_vec();
                    glommio::spawn_local(resolve_and_reply(
                        worker.clone(),
                        socket.clone(),
                        message,
                        peer,
                    ))
                    .detach();
                }
            }
        }
    }
}

async fn resolve_and_reply(
    worker: Rc<Worker>,
    socket: Rc<UdpSocket>,
    message: Vec<u8>,
    peer: SocketAddr,
) {
    let _active = crate::worker::Active::enter(&worker);
    // The message already scanned once in the receive loop; it scans the same way again.
    let Ok(query) = Query::parse(&message) else {
        return;
    };
    let answer = worker.resolve(query.key()).await;
    let settings = worker.settings();
    let mut out = Vec::with_capacity(1232);
    let limit = query.udp_limit(settings.edns_payload);
    answer.write_response(
        &query,
        Instant::now(),
        Some(limit),
        settings.edns_payload,
        &mut out,
    );
    reply(&worker, &socket, &out, peer).await;
}

async fn reply(worker: &Worker, socket: &UdpSocket, out: &[u8], peer: SocketAddr) {
    worker
        .metrics
        .response(wire::header_rcode(out).unwrap_or(0));
    if let Err(e) = socket.send_to(out, peer).await {
        tracing::debug!(%peer, error = %e, "udp send failed");
    }
}
