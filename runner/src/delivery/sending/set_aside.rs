//! Setting aside an update the control plane keeps rejecting, so that it
//! cannot block everything behind it.
//!
//! A control plane that cannot take an update (too large for it, a field
//! it refuses, a bug) may end the stream right after it arrives, without
//! acknowledging it. Re-sent first on every new connection, that update
//! would end every one of them, and nothing behind it would ever be
//! processed. So, in acknowledged mode, when a connection ends (not
//! cleanly) the oldest unacknowledged update sent on it takes a strike;
//! when the same update (by its sequence number) is the first one
//! unacknowledged at [`STRIKES`] connection ends in a row, it is set aside:
//! it is not sent again, its journal entry is forgotten, it is counted
//! (`agent_runner_delivery_set_aside_total{kind}`) and logged at WARN by
//! kind, thread, turn and request id — never its content — and a
//! `RequestError` with its request id takes its place and its sequence
//! number, saying what happened. Taking its number keeps the order (the
//! error goes where the update was) and is safe: had the control plane
//! processed the update after all, its registration's `acked_sequence`
//! covers that number and the error is dropped with it.
//!
//! An error update rejected [`STRIKES`] times in turn is dropped without
//! a replacement (one replacement per update, not an endless chain).
//!
//! A connection that ends before anything was sent on it (a refused
//! registration, a control plane that is down) strikes nothing: only
//! updates handed to the ended connection are unacknowledged by it. A
//! legacy control plane says nothing of what it processed, so there is
//! no telling which update it refused: nothing is set aside there.

use std::time::Instant;

use agent_runner_proto::runner::ClientMessage;
use agent_runner_proto::runner::client_message::Payload;

use super::{Inner, Sending};
use crate::delivery::in_flight::Sent;

/// Connection ends in a row, each with the same update first among the
/// unacknowledged, after which that update is set aside.
pub const STRIKES: u32 = 3;

/// The update first among the unacknowledged at the last connection ends.
#[derive(Debug, Default)]
pub(super) struct Strikes {
    /// Its sequence number (0: none yet).
    sequence: u64,
    /// Connection ends in a row it was first at.
    count: u32,
    /// It is itself the error update that replaced one set aside.
    replacement: bool,
}

impl Sending {
    /// Acked mode: a connection ended, not cleanly, with `again`
    /// unacknowledged (oldest first, every one sent on it). Strikes the
    /// first; sets it aside (see the module doc) at its [`STRIKES`]th strike
    /// in a row, replacing it in `again`.
    pub(super) fn strike(&self, inner: &mut Inner, again: &mut Vec<Sent>) {
        let Some(sequence) = again.first().and_then(|s| s.sequence) else {
            return;
        };
        let strikes = &mut inner.strikes;
        if strikes.sequence == sequence {
            strikes.count += 1;
        } else {
            *strikes = Strikes {
                sequence,
                count: 1,
                replacement: false,
            };
        }
        let (count, replacement) = (strikes.count, strikes.replacement);
        // Decoded for what the log and the error say of it (a rare path).
        let first = crate::delivery::outgoing::decode(&again[0].encoded);
        if count < STRIKES {
            tracing::warn!(
                kind = again[0].label.kind(),
                thread_id = crate::delivery::transcript::thread_of(&first).unwrap_or(""),
                sequence,
                strike = count,
                "the connection ended with this update sent and not acknowledged, the first such; it is set aside if {STRIKES} connections in a row end so"
            );
            return;
        }
        let aside = again.remove(0);
        self.forget(aside.journal.into_iter().collect());
        crate::observe::metrics::delivery_set_aside(aside.label.kind());
        let what = describe(&first);
        tracing::warn!(
            kind = aside.label.kind(),
            thread_id = crate::delivery::transcript::thread_of(&first).unwrap_or(""),
            turn_id = turn_of(&first).unwrap_or(""),
            request_id = first.request_id.as_deref().unwrap_or(""),
            sequence,
            replacement,
            "update set aside: {STRIKES} connections in a row ended with it sent and not acknowledged; it is not sent again{}",
            if replacement {
                " (it replaced one set aside before: no replacement for it)"
            } else {
                "; a RequestError with its request id takes its place"
            }
        );
        inner.strikes = Strikes {
            sequence,
            count: 0,
            replacement: true,
        };
        if replacement {
            return;
        }
        let error = crate::delivery::messages::request_error(
            first.request_id.clone(),
            format!(
                "an update was set aside and will not be delivered: {what}; the control plane ended the stream {STRIKES} times in a row right after it was sent, without acknowledging it"
            ),
        );
        let placed = self.outbox.reply_to_place(error);
        again.insert(
            0,
            Sent {
                sequence: Some(sequence),
                journal: placed.journal,
                label: placed.label,
                encoded: placed.encoded,
                at: Instant::now(),
            },
        );
    }
}

/// What an update was, for the error that replaces it: its kind, thread
/// and turn (never its content).
fn describe(msg: &ClientMessage) -> String {
    let kind = crate::observe::message_kind::kind(msg);
    match (crate::delivery::transcript::thread_of(msg), turn_of(msg)) {
        (Some(thread), Some(turn)) => format!("{kind} (thread {thread}, turn {turn})"),
        (Some(thread), None) => format!("{kind} (thread {thread})"),
        _ => kind.to_owned(),
    }
}

/// The turn an update belongs to, if it names one.
fn turn_of(msg: &ClientMessage) -> Option<&str> {
    let id = match msg.payload.as_ref()? {
        Payload::TurnUpdate(t) => &t.sdk_turn_id,
        Payload::ItemUpdate(i) => &i.sdk_turn_id,
        Payload::ThreadTokenUsageUpdate(u) => &u.sdk_turn_id,
        _ => return None,
    };
    (!id.is_empty()).then_some(id.as_str())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use agent_runner_proto::runner::TurnStatus;
    use sdk_adapter::{ItemEvent, ItemKind, ItemStatus};

    use super::*;
    use crate::delivery::journal::Recovered;
    use crate::delivery::messages;
    use crate::delivery::outbox::Outbox;
    use crate::delivery::outgoing::Outgoing;
    use crate::util::redact::Redactor;

    fn said(rid: &str, text: &str) -> ClientMessage {
        let event = ItemEvent {
            item_id: format!("{rid}-item"),
            kind: ItemKind::AgentMessage,
            status: ItemStatus::Completed,
            text: Some(text.to_owned()),
            command: None,
        };
        messages::item(Some(rid.to_owned()), "thr", "turn-1", event)
    }

    /// What a batch carries: (sequence, kind, request id).
    fn shape(out: &[Outgoing]) -> Vec<(u64, &'static str, String)> {
        out.iter()
            .map(|o| {
                let kind = o.label.kind();
                let rid = o.decode().request_id.unwrap_or_default();
                (o.sequence, kind, rid)
            })
            .collect()
    }

    /// One connection: registered (nothing acknowledged), one batch sent,
    /// ended without an acknowledgement.
    async fn rejected(sending: &Sending) -> Vec<(u64, &'static str, String)> {
        sending.registered(true, 0);
        let sent = shape(&sending.next_batch(sending.epoch()).await);
        sending.connection_ended(false);
        sent
    }

    /// The same update first unacknowledged at three connection ends in a
    /// row is set aside: a RequestError with its request id goes in its
    /// place, with its number, and what was behind it follows. A
    /// connection that sent nothing strikes nothing. An error update
    /// rejected as often is dropped with no replacement.
    #[tokio::test]
    async fn an_update_rejected_three_times_in_a_row_is_replaced_by_an_error() {
        let outbox = Arc::new(Outbox::new(16, Redactor::new()));
        let sending = Sending::new(
            outbox.clone(),
            None,
            Recovered::default(),
            Duration::from_secs(10),
        );
        outbox.push(said("r-poison", "the-content")).await;
        outbox
            .push(messages::turn(
                Some("r-next".into()),
                "thr",
                "turn-1",
                TurnStatus::Completed,
            ))
            .await;
        let both = vec![
            (1, "item_update", "r-poison".to_owned()),
            (2, "turn_update", "r-next".to_owned()),
        ];
        for strike in 1..STRIKES {
            assert_eq!(rejected(&sending).await, both, "strike {strike}");
            // A connection that ends before it sent anything: no strike.
            sending.connection_ended(false);
        }
        assert_eq!(rejected(&sending).await, both, "strike {STRIKES}");
        let replaced = vec![
            (1, "request_error", "r-poison".to_owned()),
            (2, "turn_update", "r-next".to_owned()),
        ];
        sending.registered(true, 0);
        let out = sending.next_batch(sending.epoch()).await;
        assert_eq!(shape(&out), replaced);
        let text = format!("{:?}", out[0].decode());
        assert!(
            text.contains("set aside") && text.contains("item_update (thread thr, turn turn-1)"),
            "{text}"
        );
        assert!(!text.contains("the-content"), "never its content: {text}");
        sending.connection_ended(false);
        for _ in 1..STRIKES {
            assert_eq!(rejected(&sending).await, replaced);
        }
        sending.registered(true, 0);
        assert_eq!(
            shape(&sending.next_batch(sending.epoch()).await),
            vec![(2, "turn_update", "r-next".to_owned())],
            "the rejected error update is dropped, not replaced again"
        );
    }
}
