//! Which updates of a thread's burst are which, before they enter: which
//! are intermediate, which end a turn, and which later update of the burst
//! makes an earlier one redundant ([`super::Outbox::push_burst`]). Once an
//! update is in, the outbox decides by its [`crate::delivery::label::Label`].

use agent_runner_proto::runner::{ClientMessage, ItemStatus, TurnStatus, client_message::Payload};

/// An update the control plane can do without: a RUNNING item snapshot (a
/// later snapshot or the COMPLETED update carries the same text) or a token
/// usage report (a later one carries the totals).
pub(super) fn is_intermediate(msg: &ClientMessage) -> bool {
    match &msg.payload {
        Some(Payload::ItemUpdate(i)) => i.status == ItemStatus::Running as i32,
        Some(Payload::ThreadTokenUsageUpdate(_)) => true,
        _ => false,
    }
}

/// A `TurnUpdate COMPLETED`.
pub(super) fn is_turn_end(msg: &ClientMessage) -> bool {
    matches!(&msg.payload, Some(Payload::TurnUpdate(t)) if t.status == TurnStatus::Completed as i32)
}

/// Whether `new` makes the earlier `old` redundant.
pub(super) fn supersedes(new: &ClientMessage, old: &ClientMessage) -> bool {
    match (&new.payload, &old.payload) {
        (Some(Payload::ItemUpdate(n)), Some(Payload::ItemUpdate(o))) => {
            n.status == ItemStatus::Running as i32
                && o.status == ItemStatus::Running as i32
                && n.sdk_item_id == o.sdk_item_id
                && n.thread_id == o.thread_id
        }
        (Some(Payload::ThreadTokenUsageUpdate(n)), Some(Payload::ThreadTokenUsageUpdate(o))) => {
            n.thread_id == o.thread_id
        }
        _ => false,
    }
}

/// Whether `new`, a later update of the same thread, makes the
/// intermediate `old` redundant: [`supersedes`], or `old`'s item finished.
pub(super) fn outdates(new: &ClientMessage, old: &ClientMessage) -> bool {
    let finishes = matches!(
        (&new.payload, &old.payload),
        (Some(Payload::ItemUpdate(n)), Some(Payload::ItemUpdate(o)))
            if n.status == ItemStatus::Completed as i32
                && o.status == ItemStatus::Running as i32
                && n.sdk_item_id == o.sdk_item_id
                && n.thread_id == o.thread_id
    );
    finishes || supersedes(new, old)
}
