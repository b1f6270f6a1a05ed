//! Following a request from its arrival to its first reply: how long it
//! took, and what became of it (counted once, by the dispatcher or by the
//! reply, whichever says the last word).

use std::collections::HashMap;
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::labels::{KindLabel, RequestLabels};
use super::{Metrics, get, kinds};

/// Requests whose first reply is still awaited, at most (beyond it new
/// requests are counted but not timed, so a control plane that never gets
/// answers cannot grow memory).
const MAX_PENDING_REQUESTS: usize = 10_000;

/// A request whose outcome is not counted yet, or whose first reply has
/// not left yet. The dispatcher and the first reply may come in either
/// order (a reply can leave before the dispatcher is done with it).
pub(super) struct Pending {
    kind: &'static str,
    arrived: Instant,
    /// What the dispatcher did, once it is done: `None` while dispatching.
    dispatched: Option<RequestOutcome>,
    /// Whether the first reply was a `RequestError`, once it left.
    replied: Option<bool>,
}

/// What became of a request as the dispatcher saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// Handed to an agent's or thread's task: counted when its first reply
    /// leaves, as `completed` (anything but a `RequestError`) or `failed`
    /// (a `RequestError`: unknown SDK, model or thread…); counted
    /// `accepted` only when it cannot be followed (no request id).
    Accepted,
    /// Answered by the dispatcher itself (heartbeat, deleting an unknown thread).
    Answered,
    /// Failed validation (`buf.validate`, ids, no request set).
    Invalid,
    /// Valid but refused at once (mailbox full, unknown thread, wrong agent).
    Rejected,
}

impl RequestOutcome {
    fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Accepted => "accepted",
            RequestOutcome::Answered => "answered",
            RequestOutcome::Invalid => "invalid",
            RequestOutcome::Rejected => "rejected",
        }
    }
}

impl Metrics {
    /// The requests waiting for their first reply, locked.
    pub(super) fn pending(&self) -> Pendings<'_> {
        Pendings {
            map: self.pending.lock().unwrap_or_else(|p| p.into_inner()),
            len: &self.pending_len,
        }
    }
}

/// The requests waiting for their first reply, locked; their number is
/// published as the lock is released.
pub(super) struct Pendings<'a> {
    map: MutexGuard<'a, HashMap<String, Pending>>,
    len: &'a AtomicUsize,
}

impl std::ops::Deref for Pendings<'_> {
    type Target = HashMap<String, Pending>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Pendings<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

impl Drop for Pendings<'_> {
    fn drop(&mut self) {
        // Before the lock is released (fields drop after this): a request
        // is counted before anything can reply to it.
        self.len.store(self.map.len(), Ordering::Relaxed);
    }
}

/// A request of `kind` arrived: when it has an id, time it until the first
/// update answering it is sent. Call before any reply can be queued, so the
/// reply cannot beat the clock.
pub fn request_arrived(kind: &'static str, request_id: Option<&str>) {
    if let Some(id) = request_id {
        let mut pending = get().pending();
        if pending.len() < MAX_PENDING_REQUESTS || pending.contains_key(id) {
            pending.insert(
                id.to_owned(),
                Pending {
                    kind,
                    arrived: Instant::now(),
                    dispatched: None,
                    replied: None,
                },
            );
        }
    }
}

/// Count a request by what the dispatcher did with it; one it handed to a
/// task is counted when it ends instead (see [`RequestOutcome::Accepted`]).
pub fn request_handled(kind: &'static str, request_id: Option<&str>, outcome: RequestOutcome) {
    let m = get();
    let mut pending = m.pending();
    let Some((id, p)) = request_id.and_then(|id| pending.get_mut(id).map(|p| (id, p))) else {
        // Not followed (no request id): counted as the dispatcher left it.
        drop(pending);
        count_request(kind, outcome.as_str());
        return;
    };
    let counted = match (outcome, p.replied) {
        // Handed over and already answered: by that answer.
        (RequestOutcome::Accepted, Some(failed)) => Some(reply_outcome(failed)),
        // Handed over: its first reply will count it.
        (RequestOutcome::Accepted, None) => None,
        // Ended in the dispatcher.
        (other, _) => Some(other.as_str()),
    };
    p.dispatched = Some(outcome);
    if p.replied.is_some() {
        pending.remove(id);
    }
    drop(pending);
    if let Some(outcome) = counted {
        count_request(kind, outcome);
    }
}

/// How a request handed to a task ended, by its first reply.
fn reply_outcome(failed: bool) -> &'static str {
    if failed { "failed" } else { "completed" }
}

/// Counts one request of `kind` that ended as `outcome`.
fn count_request(kind: &'static str, outcome: &'static str) {
    get()
        .requests
        .get_or_create(&RequestLabels { kind, outcome })
        .inc();
}

/// Whether an update answering request `id` may be its first reply: the
/// request is followed and has none yet. Asked once per update as it
/// enters the outbox, so that only those updates carry their request id
/// on to [`update_sent`].
pub fn awaits_reply(id: &str) -> bool {
    let m = get();
    if m.pending_len.load(Ordering::Relaxed) == 0 {
        return false;
    }
    m.pending().get(id).is_some_and(|p| p.replied.is_none())
}

/// An update of kind `kind` ([`kinds::kind_index`]) was handed to the
/// ControlChannel; `first_reply`: the request id it answers, when it may be
/// that request's first reply ([`awaits_reply`]); `failed`: it is a
/// `RequestError`.
pub fn update_sent(kind: usize, first_reply: Option<&str>, failed: bool) {
    let m = get();
    if let Some(sent) = m.sent_by_kind.get(kind) {
        sent.get_or_init(|| {
            m.updates_sent
                .get_or_create(&KindLabel {
                    kind: kinds::KINDS[kind],
                })
                .clone()
        })
        .inc();
    }
    let Some(id) = first_reply else {
        return;
    };
    if m.pending_len.load(Ordering::Relaxed) == 0 {
        // Nothing waits for a first reply (the request was counted, under
        // the lock, before it was dispatched).
        return;
    }
    let mut pending = m.pending();
    let Some(p) = pending.get_mut(id) else {
        return;
    };
    if p.replied.is_some() {
        return;
    }
    p.replied = Some(failed);
    let (kind, arrived, dispatched) = (p.kind, p.arrived, p.dispatched);
    if dispatched.is_some() {
        pending.remove(id);
    }
    drop(pending);
    m.request_duration
        .get_or_create(&KindLabel { kind })
        .observe(arrived.elapsed().as_secs_f64());
    if dispatched == Some(RequestOutcome::Accepted) {
        count_request(kind, reply_outcome(failed));
    }
}
