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

/// How many messages may wait for the control thread across all cores (futures' channel
/// adds one slot per core's sender).
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
    /// Where the answer goes (empty: send nothing); dropping it makes the core answer
    /// SERVFAIL.
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
            // An empty answer: the control thread sends nothing (a message without a header).
            Some(Ok(answer)) => (!answer.is_empty()).then_some(answer),
            _ => error(message, wire::rcode::SERVFAIL),
        }
    }
}

fn error(message: &[u8], rcode: u8) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(wire::HEADER_LEN);
    wire::write_header_error(message, rcode, &mut out).then_some(out)
}

#[cfg(test)]
mod tests {
    use futures_lite::StreamExt;
    use glommio::{LocalExecutorBuilder, Placement};

    use super::*;
    use crate::sys::{IO_MEMORY_PER_CORE, RING_DEPTH};

    /// A NOTIFY for `corp.example.` SOA.
    fn notify() -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x20, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(b"\x04corp\x07example\x00\x00\x06\x00\x01");
        m
    }

    fn rcode(answer: &[u8]) -> u8 {
        answer[3] & 0x0f
    }

    #[test]
    fn answers_pass_through_a_full_or_closed_inbox_answers_servfail_none_is_notimp() {
        let client: SocketAddr = "127.0.0.1:5300".parse().unwrap();
        let (sender, mut receiver) = inbox();
        // The control thread's side: answers every message with its ID and REFUSED.
        let control = std::thread::spawn(move || {
            futures_lite::future::block_on(async {
                let message = receiver.next().await.expect("one message");
                let mut answer = message.message.clone();
                answer[2] |= 0x80;
                answer[3] = 5;
                message.reply.send(answer).unwrap();
                // The rest are never answered: the receiver goes.
            });
        });
        LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(IO_MEMORY_PER_CORE)
            .ring_depth(RING_DEPTH)
            .spawn(move || async move {
                let core = CoreInbox::default();
                let answer = core
                    .ask(&notify(), client, InboxTransport::Udp)
                    .await
                    .unwrap();
                assert_eq!(rcode(&answer), wire::rcode::NOTIMP, "no inbox: NOTIMP");
                core.connect(sender);
                let answer = core
                    .ask(&notify(), client, InboxTransport::Udp)
                    .await
                    .unwrap();
                assert_eq!(
                    rcode(&answer),
                    wire::rcode::REFUSED,
                    "the control thread's answer"
                );
                assert_eq!(answer[..2], [0x12, 0x34]);
                // The control side is gone: SERVFAIL at once, without waiting.
                control.join().unwrap();
                let started = std::time::Instant::now();
                let answer = core
                    .ask(&notify(), client, InboxTransport::Tcp)
                    .await
                    .unwrap();
                assert_eq!(rcode(&answer), wire::rcode::SERVFAIL);
                assert!(started.elapsed() < INBOX_TIMEOUT);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn a_full_inbox_answers_servfail_without_waiting() {
        let client: SocketAddr = "127.0.0.1:5300".parse().unwrap();
        let (sender, _receiver) = inbox();
        LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(IO_MEMORY_PER_CORE)
            .ring_depth(RING_DEPTH)
            .spawn(move || async move {
                let core = CoreInbox::default();
                let mut fill = sender.clone();
                let mut queued = 0;
                while fill
                    .sender
                    .try_send(InboxMessage {
                        message: notify(),
                        client,
                        transport: InboxTransport::Udp,
                        reply: oneshot::channel().0,
                    })
                    .is_ok()
                {
                    queued += 1;
                }
                assert!(queued >= INBOX_CAPACITY, "bounded at about its capacity");
                // futures' channel keeps one more slot per sender: a core's first message
                // waits there (and times out), its next one is refused at once.
                core.connect(sender);
                let core = std::rc::Rc::new(core);
                let waiting = glommio::spawn_local({
                    let core = core.clone();
                    async move { core.ask(&notify(), client, InboxTransport::Udp).await }
                });
                glommio::yield_if_needed().await;
                glommio::executor().yield_now().await;
                let started = std::time::Instant::now();
                let answer = core
                    .ask(&notify(), client, InboxTransport::Udp)
                    .await
                    .unwrap();
                assert_eq!(rcode(&answer), wire::rcode::SERVFAIL);
                assert!(started.elapsed() < Duration::from_millis(500));
                let answer = waiting.await.unwrap();
                assert_eq!(rcode(&answer), wire::rcode::SERVFAIL, "no answer in time");
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
