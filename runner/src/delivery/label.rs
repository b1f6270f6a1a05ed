//! What the delivery path knows of an update once it is encoded: its kind
//! and the few facts the outbox and the link decide by. From the outbox
//! on, an update travels as its bytes and this label; the update itself
//! (its strings, made on the producer's thread) is freed where it was
//! made, as it enters, not by whichever thread settles its delivery.
//! Freeing a `ClientMessage` made on another thread cost more of the
//! runner's CPU than any single step of the delivery path (bench/HISTORY.md,
//! round Z8).

use std::hash::BuildHasher as _;
use std::sync::OnceLock;

use agent_runner_proto::runner::{ClientMessage, ItemStatus, TurnStatus, client_message::Payload};

/// The label of one update (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// Its kind, by [`crate::observe::message_kind::kind_index`].
    kind: u8,
    flags: u8,
    /// For an intermediate update, its [`key_of`]; 0 otherwise.
    key: u64,
    /// Its request id, kept only when this update may be the first reply
    /// to a request the metrics follow (once per request, not per update).
    first_reply: Option<Box<str>>,
}

const DURABLE: u8 = 1;
const INTERMEDIATE: u8 = 2;
const TURN_END: u8 = 4;
const ERROR: u8 = 8;

/// The process's seed for [`Label::key`]s: ids come from agents, and a
/// seed they cannot know keeps them from making two of them collide.
fn keys() -> &'static foldhash::fast::RandomState {
    static KEYS: OnceLock<foldhash::fast::RandomState> = OnceLock::new();
    KEYS.get_or_init(foldhash::fast::RandomState::default)
}

impl Label {
    /// The label of `msg` (masked and about to be encoded).
    pub fn of(msg: &ClientMessage) -> Self {
        let mut flags = 0;
        if is_durable(msg) {
            flags |= DURABLE;
        }
        match &msg.payload {
            Some(Payload::ItemUpdate(i)) if i.status == ItemStatus::Running as i32 => {
                flags |= INTERMEDIATE;
            }
            Some(Payload::ThreadTokenUsageUpdate(_)) => flags |= INTERMEDIATE,
            Some(Payload::TurnUpdate(t)) if t.status == TurnStatus::Completed as i32 => {
                flags |= TURN_END;
            }
            Some(Payload::RequestError(_)) => flags |= ERROR,
            _ => {}
        }
        // Hashed for the intermediate updates only: the others are never
        // replaced (a burst's shedding asks [`key_of`] itself).
        let key = if flags & INTERMEDIATE != 0 {
            key_of(msg).unwrap_or(0)
        } else {
            0
        };
        let first_reply = msg
            .request_id
            .as_deref()
            .filter(|id| crate::observe::metrics::awaits_reply(id))
            .map(Box::from);
        Self {
            kind: crate::observe::message_kind::kind_index(msg) as u8,
            flags,
            key,
            first_reply,
        }
    }

    /// Its kind's short name ([`crate::observe::message_kind::KINDS`]).
    pub fn kind(&self) -> &'static str {
        crate::observe::message_kind::KINDS
            .get(usize::from(self.kind))
            .copied()
            .unwrap_or("empty")
    }

    /// Its kind's index in [`crate::observe::message_kind::KINDS`].
    pub fn kind_index(&self) -> usize {
        usize::from(self.kind)
    }

    /// Durable: journaled, never given up ([`is_durable`]).
    pub fn is_durable(&self) -> bool {
        self.flags & DURABLE != 0
    }

    /// Intermediate: a RUNNING item snapshot or a token-usage report, which
    /// a later update makes redundant.
    pub fn is_intermediate(&self) -> bool {
        self.flags & INTERMEDIATE != 0
    }

    /// A `TurnUpdate COMPLETED`.
    pub fn is_turn_end(&self) -> bool {
        self.flags & TURN_END != 0
    }

    /// A `RequestError`.
    pub fn is_error(&self) -> bool {
        self.flags & ERROR != 0
    }

    /// For an intermediate update, the hash of what makes it redundant.
    pub fn supersede_key(&self) -> Option<u64> {
        self.is_intermediate().then_some(self.key)
    }

    /// Whether this update makes the queued `old` redundant: both
    /// intermediate, of the same item of the same thread (or the same
    /// thread's token usage). Compared by a 64-bit hash, seeded per
    /// process: two different items match with a chance of 2⁻⁶⁴, which
    /// would only give up a RUNNING snapshot early (its item's COMPLETED
    /// update is durable and never given up).
    pub fn supersedes(&self, old: &Label) -> bool {
        self.is_intermediate() && old.is_intermediate() && self.key == old.key
    }

    /// Whether this update, later in a thread's burst, makes the earlier
    /// `old` redundant, `key` being this update's [`key_of`]:
    /// [`Label::supersedes`], or `old` is a RUNNING snapshot of the item
    /// this update completes.
    pub fn outdates(&self, key: Option<u64>, old: &Label) -> bool {
        old.is_intermediate()
            && key == Some(old.key)
            && (self.is_intermediate() || self.is_durable())
    }

    /// The request id, when this update may be a request's first reply.
    pub fn first_reply(&self) -> Option<&str> {
        self.first_reply.as_deref()
    }
}

/// What an update's redundancy is judged by, hashed: its thread and item
/// for an item update, its thread for a token-usage update (`None`
/// otherwise). Seeded per process: ids come from agents.
pub fn key_of(msg: &ClientMessage) -> Option<u64> {
    match &msg.payload {
        Some(Payload::ItemUpdate(i)) => Some(keys().hash_one((0u8, &i.thread_id, &i.sdk_item_id))),
        Some(Payload::ThreadTokenUsageUpdate(u)) => Some(keys().hash_one((1u8, &u.thread_id))),
        _ => None,
    }
}

/// An update that must survive a crash and a dead connection: terminal
/// (`TurnUpdate COMPLETED`, a COMPLETED item, a `RequestError`),
/// structural (a turn's or thread's status, agent, skill, SDK and
/// thread-name updates, approval requests and how they ended) or a
/// thread's token usage (its totals: the last report of a turn may be the
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

#[cfg(test)]
mod tests {
    use sdk_adapter::{ItemEvent, ItemKind, ItemStatus as Status};

    use super::*;
    use crate::delivery::messages;

    fn item_update(thread: &str, id: &str, status: Status) -> ClientMessage {
        let event = ItemEvent {
            item_id: id.to_owned(),
            kind: ItemKind::AgentMessage,
            status,
            text: Some("x".into()),
            command: None,
        };
        messages::item(None, thread, "turn", event)
    }

    fn item(thread: &str, id: &str, status: Status) -> Label {
        Label::of(&item_update(thread, id, status))
    }

    /// A RUNNING snapshot is superseded by its item's next one only: not
    /// by another item's, not by the same item id in another thread, never
    /// by or for a COMPLETED update.
    #[test]
    fn a_snapshot_is_superseded_by_its_own_items_next_only() {
        let old = item("t", "i", Status::Running);
        assert!(old.is_intermediate() && !old.is_durable());
        assert!(item("t", "i", Status::Running).supersedes(&old));
        assert!(!item("t", "j", Status::Running).supersedes(&old));
        assert!(!item("u", "i", Status::Running).supersedes(&old));
        let done = item("t", "i", Status::Completed);
        assert!(done.is_durable() && !done.is_intermediate());
        assert!(!done.supersedes(&old));
        assert!(!old.supersedes(&done));
    }

    /// Later in a burst, a snapshot is outdated by its item's next
    /// snapshot or its COMPLETED update, nothing else; a token-usage
    /// report by its thread's next.
    #[test]
    fn a_snapshot_is_outdated_by_its_items_next_update_or_its_end() {
        let outdates = |new: &ClientMessage, old: &ClientMessage| {
            Label::of(new).outdates(key_of(new), &Label::of(old))
        };
        let old = item_update("t", "i", Status::Running);
        let done = item_update("t", "i", Status::Completed);
        assert!(outdates(&item_update("t", "i", Status::Running), &old));
        assert!(outdates(&done, &old));
        assert!(!outdates(&item_update("t", "j", Status::Completed), &old));
        assert!(!outdates(&item_update("u", "i", Status::Completed), &old));
        assert!(!outdates(&old, &done), "never a COMPLETED one");
        let usage = |thread: &str| {
            messages::token_usage(None, thread, "u", sdk_adapter::TokenUsage::default())
        };
        assert!(outdates(&usage("t"), &usage("t")));
        assert!(!outdates(&usage("u"), &usage("t")));
        assert!(!outdates(&done, &usage("t")) && !outdates(&usage("t"), &old));
    }

    /// The flags and the kind as the message's.
    #[test]
    fn says_what_the_message_is() {
        let end = Label::of(&messages::turn(None, "t", "u", TurnStatus::Completed));
        assert!(end.is_turn_end() && end.is_durable() && !end.is_error());
        assert_eq!(end.kind(), "turn_update");
        let error = Label::of(&messages::request_error(Some("r".into()), "no"));
        assert!(error.is_error() && error.is_durable() && !error.is_turn_end());
        assert_eq!(error.kind(), "request_error");
        assert_eq!(error.first_reply(), None, "no request is followed here");
    }
}
