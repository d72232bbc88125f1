//! The inbox: NOTIFY (RFC 1996) and UPDATE (RFC 2136) messages from the cores to the control
//! thread, which owns the zones they act on, and its answers back.
//!
//! ```text
//! core: ingress ─ Decision::Control ─▶ try_send ─┬ full / closed ─▶ SERVFAIL at once
//!                                                └ queued ─▶ await reply (INBOX_TIMEOUT) ─┬ answer
//!                                                                                         └ SERVFAIL
//! control thread: InboxReceiver ─▶ control::zones::inbox (NOTIFY, UPDATE) ─▶ reply slot
//! ```
//!
//! One bounded channel for all cores; a core never blocks on it (a full channel answers
//! SERVFAIL, as a timeout does). The channel is futures' mpsc, runtime-agnostic: glommio
//! sends, tokio receives. Only UDP and TCP use it: over DoT, DoH, DoH3 and DoQ these opcodes
//! are answered NOTIMP (no primary or updater speaks them there).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::Duration;

use futures_channel::{mpsc, oneshot};
use kudurru_core::wire;

use crate::deadline::within;

/// How many messages may wait for the control thread across all cores.
pub const INBOX_CAPACITY: usize = 256;

/// How long a core waits for the control thread's answer before answering SERVFAIL.
pub const INBOX_TIMEOUT: Duration = Duration::from_secs(3);

/// The transport a message came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxTransport {
    /// UDP.
    Udp,
    /// TCP.
    Tcp,
}

/// One message for the control thread.
#[derive(Debug)]
pub struct InboxMessage {
    /// The message as received (opcode NOTIFY or UPDATE, QR=0).
    pub message: Vec<u8>,
    /// Who sent it.
    pub client: SocketAddr,
    /// How.
    pub transport: InboxTransport,
    /// Where the answer goes; dropping it makes the core answer SERVFAIL.
    pub reply: oneshot::Sender<Vec<u8>>,
}

/// The cores' end (cloned once per core).
#[derive(Debug, Clone)]
pub struct InboxSender {
    sender: mpsc::Sender<InboxMessage>,
}

/// The control thread's end: a stream of [`InboxMessage`]s.
pub type InboxReceiver = mpsc::Receiver<InboxMessage>;

/// A new inbox of [`INBOX_CAPACITY`].
pub fn inbox() -> (InboxSender, InboxReceiver) {
    let (sender, receiver) = mpsc::channel(INBOX_CAPACITY);
    (InboxSender { sender }, receiver)
}

/// A core's handle on the inbox (none when the control thread takes no messages, as in the
/// transports' own tests: those opcodes are answered NOTIMP).
#[derive(Debug, Default)]
pub(crate) struct CoreInbox {
    sender: RefCell<Option<InboxSender>>,
}

impl CoreInbox {
    /// Connects this core to the control thread.
    pub(crate) fn connect(&self, sender: InboxSender) {
        *self.sender.borrow_mut() = Some(sender);
    }

    /// The control thread's answer to `message`, or SERVFAIL (channel full or closed, or no
    /// answer within [`INBOX_TIMEOUT`]), NOTIMP without an inbox. `None`: the message has no
    /// header to answer.
    pub(crate) async fn ask(
        &self,
        message: &[u8],
        client: SocketAddr,
        transport: InboxTransport,
    ) -> Option<Vec<u8>> {
        let (reply, answer) = oneshot::channel();
        let sent = {
            let mut sender = self.sender.borrow_mut();
            match sender.as_mut() {
                None => return error(message, wire::rcode::NOTIMP),
                Some(inbox) => inbox.sender.try_send(InboxMessage {
                    message: message.to_vec(),
                    client,
                    transport,
                    reply,
                }),
            }
        };
        if sent.is_err() {
            return error(message, wire::rcode::SERVFAIL);
        }
        match within(INBOX_TIMEOUT, answer).await {
            Some(Ok(answer)) => Some(answer),
            _ => error(message, wire::rcode::SERVFAIL),
        }
    }
}

fn error(message: &[u8], rcode: u8) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(wire::HEADER_LEN);
    wire::write_header_error(message, rcode, &mut out).then_some(out)
}
