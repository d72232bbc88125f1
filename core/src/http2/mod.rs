//! A sans-IO HTTP/2 server connection (RFC 9113, HPACK RFC 7541) for DNS over HTTPS, and the
//! client side DoH upstreams and kudurru-bench use ([`client`]).
//!
//! ```text
//! bytes from TLS ─▶ Connection::receive ─▶ frames ─▶ streams ─▶ Request { head, body } ─▶ shell
//!                         │ SETTINGS/PING ACKs, WINDOW_UPDATEs, RST_STREAMs, GOAWAY
//!                         ▼
//! bytes to TLS   ◀── Connection::output ◀── HEADERS + DATA ◀── Connection::respond(stream, …)
//! ```
//!
//! Why not the `h2` crate: DNS over HTTPS needs a narrow slice of HTTP/2 (small requests, one
//! response each, no push, no priorities, no upgrades), and at saturation h2's general stream
//! machinery (per-stream queues, `http` types, moves of large frame values) was ~60 % of a
//! core's time per DoH answer (docs/benchmarks.md). This connection keeps exactly the state
//! RFC 9113 requires, hands out a request only once it is complete, and writes every frame
//! straight into one output buffer.
//!
//! What it does, and the limits that keep one client from hurting others:
//! - Requests are delivered whole: the head with its body (at most [`Config::max_body`] bytes;
//!   longer ones are delivered at once as [`BodyError::TooLarge`], so the answer can be 413).
//! - Flow control: each stream may send one full body without waiting; connection credit is
//!   returned as bodies are handed out, so bodies in progress hold at most
//!   [`Config::connection_window`] bytes per connection. Responses respect the client's windows
//!   and frame size; DATA beyond a window waits for WINDOW_UPDATE.
//! - Stream errors (RFC 9113 §5.4.2) reset the stream; connection errors write GOAWAY with the
//!   reason and end the connection. Field blocks over twice [`Config::max_head`] encoded
//!   bytes end the connection (HPACK state cannot be kept without decoding them).
//! - Floods (RFC 9113 §10.5): more than [`MAX_LOCAL_RESETS`] stream errors, clients resetting
//!   more streams than they let finish (past [`RESET_ALLOWANCE`]), and frames that carry no
//!   request beyond [`IDLE_FRAME_ALLOWANCE`] plus four per request end the connection with
//!   ENHANCE_YOUR_CALM. How many requests run at once is the shell's to bound (it stops
//!   reading), as is how much output may wait.

pub mod client;
mod connection;
pub mod frame;
pub mod hpack;

pub use crate::http::{BodyError, Malformed, Method};
pub use connection::{
    Config, Connection, ConnectionError, Field, IDLE_FRAME_ALLOWANCE, MAX_LOCAL_RESETS,
    RESET_ALLOWANCE, Request,
};
pub use frame::ErrorCode;

#[cfg(test)]
mod tests;
