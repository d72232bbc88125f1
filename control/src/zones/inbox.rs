//! The control thread's end of the cores' inbox (kudurru_transports::inbox): NOTIFY to the
//! secondaries' handler, UPDATE to the dynamic-update handler, one message at a time (an
//! UPDATE is applied whole before the next is read).

use futures_lite::StreamExt;
use kudurru_core::wire::ControlOpcode;
use kudurru_transports::inbox::InboxReceiver;

use super::ZoneHandle;
use super::secondary::Secondaries;
use super::update::{self, UpdateRequest};

/// What the inbox dispatches to.
pub struct InboxContext {
    /// The zone manager.
    pub zones: ZoneHandle,
    /// The secondary zones' transfer loops (NOTIFY).
    pub secondaries: Secondaries,
}

/// Answers the inbox's messages until every core's sender is gone.
pub async fn serve(mut receiver: InboxReceiver, context: InboxContext) {
    while let Some(message) = receiver.next().await {
        let answer = match ControlOpcode::of(&message.message) {
            Some(ControlOpcode::Notify) => {
                let keys = context.zones.shared().keys();
                context
                    .secondaries
                    .notify(&message.message, message.client, &keys)
            }
            Some(ControlOpcode::Update) => {
                update::handle(UpdateRequest {
                    message: &message.message,
                    client: message.client,
                    transport: message.transport,
                    zones: &context.zones,
                })
                .await
            }
            // The cores send only these two; anything else is dropped (the core answers
            // SERVFAIL when the reply slot goes).
            None => continue,
        };
        let _ = message.reply.send(answer);
    }
}
