//! The DNS-over-HTTPS listener of one core (RFC 8484): HTTP/2 and HTTP/1.1 on one TLS port,
//! chosen by ALPN.
//!
//! ```text
//! accept ─▶ TLS handshake (ALPN h2, http/1.1) ─┬ h2 ─▶ connection loop ─ stream ─▶ task ─┐
//!                                              └ http/1.1 ─▶ request after request ──────┤
//!       request ─▶ core::doh::request (status 4xx) ─▶ answer::answer ─▶ 200 | stream abort ◀┘
//! ```
//! Request rules (paths, methods, media type, base64url, sizes) live in `kudurru_core::doh`;
//! this module moves bytes. HTTP/2 takes up to `tcp.maxPipelined` concurrent streams per
//! connection, HTTP/1.1 answers pipelined requests in order. A connection with nothing in
//! flight for `tcp.idleTimeout` is closed (HTTP/2 with GOAWAY). A pipeline drop aborts the
//! request: RST_STREAM(CANCEL) on HTTP/2, the connection closed without a response on HTTP/1.1.
//!
//! `endpoint` holds what the versions share; `h1`, `h2` and `h3` (DoH3, on QUIC) are siblings
//! that do not import each other.

mod endpoint;
mod h1;
mod h2;
pub(crate) mod h3;

use std::rc::Rc;
use std::sync::Arc;

use glommio::net::TcpListener;

use crate::accept;
use crate::metrics::{CoreMetrics, HttpVersion};
use crate::tls::TlsConfig;
use crate::worker::Worker;
use endpoint::Endpoint;

/// Accepts DNS-over-HTTPS connections for `path` until the task is dropped.
pub(crate) async fn serve(
    worker: Rc<Worker>,
    listener: TcpListener,
    tls: TlsConfig,
    path: Arc<str>,
    alt_svc: Option<Arc<str>>,
) {
    let path: Rc<str> = Rc::from(&*path);
    let alt_svc: Option<Rc<str>> = alt_svc.map(|value| Rc::from(&*value));
    accept::tcp(worker, listener, move |worker, stream, peer, admission| {
        let config = tls.load().https.clone();
        let (path, alt_svc) = (path.clone(), alt_svc.clone());
        async move {
            let Some(stream) = accept::tls_handshake(worker.context(), stream, config).await else {
                return;
            };
            let sni = accept::tls_server_name(&stream);
            let endpoint = Endpoint::new(worker, path, peer, sni, alt_svc, admission);
            if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                CoreMetrics::bump(
                    &endpoint.worker.context().metrics.doh_connections[HttpVersion::H2 as usize],
                );
                h2::serve(Rc::new(endpoint), stream).await;
            } else {
                CoreMetrics::bump(
                    &endpoint.worker.context().metrics.doh_connections[HttpVersion::Http1 as usize],
                );
                h1::serve(&endpoint, stream).await;
            }
        }
    })
    .await;
}
