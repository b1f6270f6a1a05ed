//! The outbox: every update on its way to the control plane, in order.
//!
//! Producers (thread and agent tasks) push; the live ControlChannel's sender
//! pops. While disconnected, updates wait here and go out in order after the
//! reconnect; an update is taken out exactly once, so nothing is sent twice.
//! (One caveat no runner can lift without acknowledgements in the protocol:
//! frames already handed to HTTP/2 when a connection dies are lost with it.)
//!
//! Bounded by `capacity`. When full, room is made by giving up intermediate
//! updates, never terminal ones:
//! 1. a RUNNING item update replaces the queued RUNNING update of the same
//!    item (its text is newer; coalesced), a token-usage update replaces the
//!    queued one of the same thread;
//! 2. else the oldest queued RUNNING item update or token-usage update is
//!    dropped;
//! 3. else, if the new update is itself intermediate, it is dropped;
//! 4. else (only terminal/structural updates queued) the producer waits for
//!    room: backpressure reaches the turn, which pauses; nothing is lost.
//!
//! Replies produced by the read loop itself (validation errors, heartbeats)
//! use [`Outbox::push_reply`], which never waits: they may exceed the bound by
//! at most what the control plane sends while connected.
//! Coalesced and dropped updates are counted and logged.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_runner_proto::runner::{ClientMessage, ItemStatus, client_message::Payload};
use tokio::sync::Notify;

pub struct Outbox {
    queue: Mutex<VecDeque<ClientMessage>>,
    capacity: usize,
    /// Woken when an update is queued.
    filled: Notify,
    /// Woken when room is made.
    drained: Notify,
    coalesced: AtomicU64,
    dropped: AtomicU64,
}

/// Counters for status and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxStats {
    pub depth: usize,
    pub coalesced: u64,
    pub dropped: u64,
}

impl Outbox {
    pub fn new(capacity: usize) -> Self {
        Self {
            queue: Mutex::new(VecDeque::with_capacity(capacity.min(1024))),
            capacity,
            filled: Notify::new(),
            drained: Notify::new(),
            coalesced: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<ClientMessage>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue an update, making room or waiting as the module doc says.
    pub async fn push(&self, msg: ClientMessage) {
        let mut msg = Some(msg);
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.try_push(&mut msg) {
                return;
            }
            drained.await;
        }
    }

    /// Queue at once, even past the bound (replies from the read loop).
    pub fn push_reply(&self, msg: ClientMessage) {
        self.lock().push_back(msg);
        self.filled.notify_one();
    }

    /// Queue ahead of everything else (heartbeat answers).
    pub fn push_urgent(&self, msg: ClientMessage) {
        self.lock().push_front(msg);
        self.filled.notify_one();
    }

    /// Queue the message in `slot` (taking it) or make room for it; leaves
    /// it there and returns false when the producer must wait.
    fn try_push(&self, slot: &mut Option<ClientMessage>) -> bool {
        let Some(msg) = slot.take() else {
            return true;
        };
        let mut queue = self.lock();
        if queue.len() < self.capacity {
            queue.push_back(msg);
            drop(queue);
            self.filled.notify_one();
            return true;
        }
        if let Some(slot) = queue.iter_mut().rev().find(|q| supersedes(&msg, q)) {
            *slot = msg;
            drop(queue);
            self.count(&self.coalesced, "coalesced");
            crate::metrics::outbox_coalesced();
            return true;
        }
        if let Some(pos) = queue.iter().position(is_intermediate) {
            queue.remove(pos);
            queue.push_back(msg);
            drop(queue);
            self.count(&self.dropped, "dropped");
            crate::metrics::outbox_dropped();
            self.filled.notify_one();
            return true;
        }
        if is_intermediate(&msg) {
            drop(queue);
            self.count(&self.dropped, "dropped");
            crate::metrics::outbox_dropped();
            return true;
        }
        *slot = Some(msg);
        false
    }

    fn count(&self, counter: &AtomicU64, what: &str) {
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        // Log at 1, 2, 4, 8… so a long disconnect cannot flood the log.
        if n.is_power_of_two() {
            tracing::warn!(
                total = n,
                capacity = self.capacity,
                "outbox full: {what} intermediate updates"
            );
        }
    }

    /// Take the oldest update, waiting for one. Cancel-safe: an update is
    /// removed only when this returns it.
    pub async fn pop(&self) -> ClientMessage {
        loop {
            let filled = self.filled.notified();
            tokio::pin!(filled);
            filled.as_mut().enable();
            let next = self.lock().pop_front();
            if let Some(msg) = next {
                self.drained.notify_waiters();
                // Let another waiting consumer see what is left.
                self.filled.notify_one();
                return msg;
            }
            filled.await;
        }
    }

    pub fn stats(&self) -> OutboxStats {
        OutboxStats {
            depth: self.lock().len(),
            coalesced: self.coalesced.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// An update the control plane can do without: a RUNNING item snapshot (a
/// later snapshot or the COMPLETED update carries the same text) or a token
/// usage report (a later one carries the totals).
fn is_intermediate(msg: &ClientMessage) -> bool {
    match &msg.payload {
        Some(Payload::ItemUpdate(i)) => i.status == ItemStatus::Running as i32,
        Some(Payload::ThreadTokenUsageUpdate(_)) => true,
        _ => false,
    }
}

/// Whether `new` makes the queued `old` redundant.
fn supersedes(new: &ClientMessage, old: &ClientMessage) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::updates;
    use agent_runner_proto::runner::{ThreadStatus, TurnStatus};
    use sdk_adapter::{ItemEvent, ItemKind};
    use std::sync::Arc;
    use std::time::Duration;

    fn running(item: &str, text: &str) -> ClientMessage {
        updates::item(
            None,
            "t",
            "u",
            ItemEvent {
                item_id: item.into(),
                kind: ItemKind::AgentMessage,
                status: sdk_adapter::ItemStatus::Running,
                text: Some(text.into()),
                command: None,
            },
        )
    }

    fn completed(turn: &str) -> ClientMessage {
        updates::turn(None, "t", turn, TurnStatus::Completed)
    }

    async fn drain(o: &Outbox) -> Vec<ClientMessage> {
        let mut out = vec![];
        while !o.is_empty() {
            out.push(o.pop().await);
        }
        out
    }

    #[tokio::test]
    async fn order_kept_below_capacity() {
        let o = Outbox::new(16);
        for i in 0..10 {
            o.push(completed(&i.to_string())).await;
        }
        let got = drain(&o).await;
        assert_eq!(
            got,
            (0..10)
                .map(|i| completed(&i.to_string()))
                .collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn full_outbox_coalesces_then_drops_intermediate_never_terminal() {
        // Process-wide counters: other tests may add to them, never take away.
        let (dropped_before, coalesced_before) = crate::metrics::outbox_totals();
        let o = Outbox::new(16);
        o.push(running("i1", "a")).await;
        for i in 0..15 {
            o.push(completed(&i.to_string())).await;
        }
        // Same item: coalesced in place.
        o.push(running("i1", "ab")).await;
        assert_eq!(o.stats().coalesced, 1);
        // Another item: the oldest intermediate goes.
        o.push(running("i2", "x")).await;
        assert_eq!(o.stats().dropped, 1);
        // Terminal update with room only from intermediates: i2's snapshot goes.
        o.push(completed("last")).await;
        let got = drain(&o).await;
        assert_eq!(got.len(), 16);
        assert!(got.iter().all(|m| !is_intermediate(m)));
        assert_eq!(got.last(), Some(&completed("last")));
        assert_eq!(o.stats().dropped, 2);
        let (dropped, coalesced) = crate::metrics::outbox_totals();
        assert!(dropped >= dropped_before + 2, "the metric counts drops");
        assert!(coalesced > coalesced_before, "the metric counts coalescing");
    }

    #[tokio::test]
    async fn terminal_updates_wait_for_room_instead_of_dropping() {
        let o = Arc::new(Outbox::new(16));
        for i in 0..16 {
            o.push(completed(&i.to_string())).await;
        }
        let o2 = o.clone();
        let pusher = tokio::spawn(async move { o2.push(completed("16")).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !pusher.is_finished(),
            "a terminal update must wait, not drop"
        );
        assert_eq!(o.pop().await, completed("0"));
        pusher.await.unwrap();
        let got = drain(&o).await;
        assert_eq!(got.len(), 16);
        assert_eq!(got.last(), Some(&completed("16")));
        assert_eq!(o.stats().dropped, 0);
    }

    #[tokio::test]
    async fn urgent_goes_first_and_replies_never_wait() {
        let o = Outbox::new(16);
        for i in 0..16 {
            o.push(completed(&i.to_string())).await;
        }
        o.push_reply(updates::thread(None, "t", ThreadStatus::Ready));
        o.push_urgent(updates::heartbeat(Some("hb".into())));
        assert_eq!(o.pop().await, updates::heartbeat(Some("hb".into())));
        assert_eq!(o.stats().depth, 17);
    }
}
