//! What the delivery module hands the link for the wire: an update's
//! bytes (encoded once, as it entered the outbox) with the update they
//! encode and the sequence number to write after them.

use std::sync::Arc;

use agent_runner_proto::runner::ClientMessage;
use bytes::Bytes;

/// An update on its way to the wire: shared with whatever else holds it
/// (the re-send store, a transcript line not yet written), and its
/// sequence number in acknowledged mode (0: none).
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The update, never changed to number it.
    pub message: Arc<ClientMessage>,
    /// `message` encoded (unnumbered), as the outbox encoded it (and the
    /// journal holds it): written as it is.
    pub encoded: Bytes,
    /// What goes on the wire as its `sequence`.
    pub sequence: u64,
}

impl Outgoing {
    /// The update as the control plane decodes it (numbered); a copy only
    /// if it is shared and its own number differs.
    pub fn into_message(self) -> ClientMessage {
        let mut message = Arc::unwrap_or_clone(self.message);
        message.sequence = self.sequence;
        message
    }
}
