//! Dynamic updates (RFC 2136) on the control thread: an UPDATE from the cores' inbox,
//! checked (zone, allowUpdate clients and TSIG key, prerequisites) and applied through
//! [`ZoneHandle::update`].

use std::net::SocketAddr;

use kudurru_core::wire;
use kudurru_transports::inbox::InboxTransport;

use super::ZoneHandle;

/// An UPDATE as the inbox hands it over.
#[derive(Clone, Copy)]
pub struct UpdateRequest<'a> {
    /// The message as received.
    pub message: &'a [u8],
    /// Who sent it.
    pub client: SocketAddr,
    /// How.
    pub transport: InboxTransport,
    /// The zone manager (zones, their `allowUpdate`, the TSIG keys in `shared().keys()`).
    pub zones: &'a ZoneHandle,
}

/// The answer to an UPDATE. Not implemented yet: NOTIMP.
pub async fn handle(request: UpdateRequest<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(wire::HEADER_LEN);
    wire::write_header_error(request.message, wire::rcode::NOTIMP, &mut out);
    out
}
