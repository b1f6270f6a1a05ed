//! What the delivery module hands the link for the wire: an update's
//! bytes (encoded once, as it entered the outbox) with its label and the
//! sequence number to write after them.

use agent_runner_proto::runner::ClientMessage;
use bytes::Bytes;
use prost::Message as _;

use crate::delivery::label::Label;

/// An update on its way to the wire: its bytes shared with whatever else
/// holds them (the re-send store, the journal), and its sequence number in
/// acknowledged mode (0: none).
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// What the update is ([`Label`]).
    pub label: Label,
    /// The update encoded (unnumbered), as the outbox encoded it (and the
    /// journal holds it): written as it is.
    pub encoded: Bytes,
    /// What goes on the wire as its `sequence`.
    pub sequence: u64,
}

/// An update's bytes as the outbox encoded them, decoded again: for the
/// few paths that need a field (a log line, a re-mask, start-up) and the
/// tests. The runner's own bytes always decode; a default message if not.
pub fn decode(encoded: &[u8]) -> ClientMessage {
    ClientMessage::decode(encoded).unwrap_or_default()
}

impl Outgoing {
    /// The update as the control plane decodes it (numbered): decoded from
    /// its bytes, for the tests and the rare paths that need its fields
    /// (the runner's own bytes always decode; a default message if not).
    pub fn decode(&self) -> ClientMessage {
        let mut message = decode(&self.encoded);
        if self.sequence != 0 {
            message.sequence = self.sequence;
        }
        message
    }
}
