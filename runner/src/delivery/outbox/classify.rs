//! Which updates are which: durable (journaled, never given up),
//! intermediate (given up to make room), and which later update makes an
//! earlier one redundant. The outbox's rules, as predicates on a message.

use std::hash::BuildHasher as _;

use agent_runner_proto::runner::{ClientMessage, ItemStatus, TurnStatus, client_message::Payload};

use super::queue::Hashing;

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

/// An update that must survive a crash and a dead connection: terminal
/// (`TurnUpdate COMPLETED`, a COMPLETED item, a `RequestError`),
/// structural (a turn's or thread's status, agent, skill, SDK and
/// thread-name updates, approval requests and how they ended) or a thread's token usage (its totals: the last report of a turn may be the
/// only one; a full outbox still replaces a queued one by the thread's
/// next, forgetting its journal entry). The rest (RUNNING snapshots,
/// heartbeat answers, device codes) is superseded by later updates or only
/// meaningful now.
pub fn is_durable(msg: &ClientMessage) -> bool {
    match &msg.payload {
        Some(Payload::ItemUpdate(i)) => i.status == ItemStatus::Completed as i32,
        Some(
            Payload::TurnUpdate(_) | Payload::ThreadUpdate(_) | Payload::ThreadTokenUsageUpdate(_),
        ) => true,
        Some(
            Payload::RequestError(_)
            | Payload::AgentUpdate(_)
            | Payload::SkillMpUpdate(_)
            | Payload::AgentSdkUpdate(_)
            | Payload::ThreadNameUpdate(_)
            | Payload::ApprovalRequest(_)
            | Payload::ApprovalResolved(_),
        ) => true,
        _ => false,
    }
}

/// For an intermediate update, a hash of what makes it redundant (its
/// item, or its thread's token usage); `None` for every other update.
pub(super) fn supersede_key(keys: &Hashing, msg: &ClientMessage) -> Option<u64> {
    match &msg.payload {
        Some(Payload::ItemUpdate(i)) if i.status == ItemStatus::Running as i32 => {
            Some(keys.hash_one((0u8, &i.sdk_item_id)))
        }
        Some(Payload::ThreadTokenUsageUpdate(u)) => Some(keys.hash_one((1u8, &u.thread_id))),
        _ => None,
    }
}

/// Whether `new` makes the queued `old` redundant.
pub(super) fn supersedes(new: &ClientMessage, old: &ClientMessage) -> bool {
    match (&new.payload, &old.payload) {
        (Some(Payload::ItemUpdate(n)), Some(Payload::ItemUpdate(o))) => {
            n.status == ItemStatus::Running as i32
                && o.status == ItemStatus::Running as i32
                && n.sdk_item_id == o.sdk_item_id
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
