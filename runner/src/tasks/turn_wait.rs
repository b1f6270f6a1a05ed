//! A thread's user messages waiting for a turn slot.
//!
//! `--max-concurrent-turns` bounds the turns running at once. A user
//! message that would start one more waits here instead of being refused:
//! no control plane of this protocol retries a refused message. What bounds
//! the waiting is the request queue (`--max-queued-requests`,
//! [`crate::tasks::mailboxes`]): a waiting message keeps its slot of it until
//! its turn starts or it is answered, so only a full queue refuses.
//!
//! Slots come from one semaphore, and tokio's semaphore is FIFO: threads
//! get slots in the order they asked (a `try_acquire` cannot overtake a
//! waiter). A thread waits for one slot at a time; its messages arriving
//! meanwhile wait behind that one ([`Waiting::hold`]) and are handled once
//! its turn started, exactly as they would have been had it started at
//! once (a steer joins it, anything else is refused as busy), so a later
//! message never starts before an earlier one.
//!
//! The wait is a future the thread's task polls beside its mailbox and its
//! running turn ([`next_slot`]), so an interrupt, a delete or the drain is
//! handled while a message waits; what each answers is the thread task's
//! ([`crate::tasks::thread`]). The wait ends without a slot once the drain
//! begins. While a thread waits it is in the runtime's registry
//! ([`Runtime::turn_waiting`]: `/status`, the admin socket, the metrics);
//! it leaves it when its [`Registration`] drops.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use sdk_adapter::{ThreadSpec, TurnInput};
use tokio::sync::OwnedSemaphorePermit;

use crate::delivery::messages::RequestId;
use crate::tasks::context::{Runtime, WaitingTurn};
use crate::tasks::mail::UserMessage;

/// The wait for a turn slot (the slot, or `None` once the drain began),
/// run as a task of its own so the thread task's state stays `Sync` (it
/// is borrowed across awaits); aborted when dropped, so a cancelled wait
/// gives up its place in line.
struct SlotWait(tokio::task::JoinHandle<Option<OwnedSemaphorePermit>>);

impl Drop for SlotWait {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A message that arrived while its thread waits for a slot.
pub struct Held {
    /// The message.
    pub msg: UserMessage,
    /// Its steering tag (its place among the thread's commands).
    pub tag: u64,
    /// Its slot of the request queue, kept while it waits.
    pub queued: Option<OwnedSemaphorePermit>,
}

/// The thread's entry in the runtime's registry of waiting turns; removed
/// when dropped.
pub struct Registration {
    rt: Arc<Runtime>,
    turn: WaitingTurn,
}

impl Registration {
    fn update(&self) {
        self.rt.turn_waiting(self.turn.clone());
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.rt.turn_wait_over(&self.turn.thread_id);
    }
}

/// A thread's turn waiting for a slot, and the messages behind it.
pub struct Waiting {
    /// The request id of the message whose turn waits.
    rid: RequestId,
    /// Its turn's input, resolved (model and level checked) before it waited.
    input: TurnInput,
    /// Its slot of the request queue.
    _queued: Option<OwnedSemaphorePermit>,
    /// Messages that arrived after it, in arrival order.
    behind: VecDeque<Held>,
    slot: SlotWait,
    registration: Registration,
}

/// What a waiting turn is made of once its slot came.
pub struct Started {
    /// The request id of the message whose turn starts.
    pub rid: RequestId,
    /// The turn's input.
    pub input: TurnInput,
    /// The messages that arrived behind it, in arrival order.
    pub behind: VecDeque<Held>,
    /// The thread's registry entry: drop it once the turn is registered as
    /// running, so the drain never sees the turn in neither registry.
    pub registration: Registration,
}

impl Waiting {
    /// `rid`'s turn (of `input`, on `sdk`) waits for a slot from now on;
    /// the thread is registered as waiting.
    pub fn start(
        rt: &Arc<Runtime>,
        spec: &ThreadSpec,
        sdk: &str,
        rid: RequestId,
        input: TurnInput,
        queued: Option<OwnedSemaphorePermit>,
    ) -> Self {
        let registration = Registration {
            rt: rt.clone(),
            turn: WaitingTurn {
                agent_id: spec.agent_id.clone(),
                thread_id: spec.thread_id.clone(),
                sdk: sdk.to_owned(),
                since: Instant::now(),
                messages: 1,
            },
        };
        registration.update();
        Self {
            rid,
            input,
            _queued: queued,
            behind: VecDeque::new(),
            slot: wait_for_slot(rt.clone()),
            registration,
        }
    }

    /// `held` arrived while the turn waits: it waits behind it.
    pub fn hold(&mut self, held: Held) {
        self.behind.push_back(held);
        self.registration.turn.messages = 1 + self.behind.len();
        self.registration.update();
    }

    /// The request ids of every waiting message, in arrival order (to
    /// answer them when the wait is cancelled).
    pub fn rids(&self) -> Vec<RequestId> {
        std::iter::once(self.rid.clone())
            .chain(self.behind.iter().map(|h| h.msg.rid.clone()))
            .collect()
    }

    /// The slot came: the turn's parts (its request-queue slot is freed).
    pub fn started(self) -> Started {
        Started {
            rid: self.rid,
            input: self.input,
            behind: self.behind,
            registration: self.registration,
        }
    }
}

/// Waits for a turn slot, in line with every other thread (FIFO); `None`
/// once the drain began (the message is answered instead).
fn wait_for_slot(rt: Arc<Runtime>) -> SlotWait {
    SlotWait(tokio::spawn(async move {
        let slots = rt.turn_slots.clone();
        tokio::select! {
            biased;
            () = rt.draining_started() => None,
            slot = slots.acquire_owned() => slot.ok(),
        }
    }))
}

/// The waiting turn's slot (or `None`: the drain began); never resolves
/// while nothing waits. Once it resolved, the caller takes `waiting`.
pub async fn next_slot(waiting: &mut Option<Waiting>) -> Option<OwnedSemaphorePermit> {
    match waiting {
        // A wait that ended without its slot (the runtime shutting down)
        // is answered as the drain's.
        Some(waiting) => (&mut waiting.slot.0).await.ok().flatten(),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt as _;

    use super::*;
    use crate::host::store::Store;
    use crate::host::workspace::Workspaces;
    use crate::tasks::sdks::Sdks;

    fn runtime(dir: &std::path::Path, max_turns: usize) -> Arc<Runtime> {
        let sdks = Sdks::from_adapters(vec![Arc::new(sdk_scripted::ScriptedAdapter::new())]);
        let store = Store::open(&dir.join("state")).unwrap();
        let ws = Workspaces::new(dir.join("ws")).unwrap();
        Runtime::bare(sdks, store, ws, 64, max_turns, 1024)
    }

    fn spec(dir: &std::path::Path, thread: &str) -> ThreadSpec {
        ThreadSpec {
            agent_id: "a".into(),
            thread_id: thread.into(),
            workspace: dir.join("ws/a/threads").join(thread),
            model: "scripted-fast".into(),
            reasoning_level: None,
            sdk_thread_id: None,
            env: Vec::new(),
            sandbox: sdk_adapter::Sandbox::refused("turn_wait test: no processes"),
            instructions: None,
            mcp_servers: Default::default(),
        }
    }

    fn input() -> TurnInput {
        TurnInput {
            text: "say hi".into(),
            model: "scripted-fast".into(),
            reasoning_level: None,
        }
    }

    fn message(rid: &str) -> Held {
        Held {
            msg: UserMessage {
                text: "say later".into(),
                allow_steer: true,
                model: None,
                reasoning_level: None,
                rid: Some(rid.into()),
            },
            tag: 2,
            queued: None,
        }
    }

    /// Threads get freed slots in the order they began to wait; each is
    /// registered (with its message count) until its slot came.
    #[tokio::test]
    async fn slots_go_to_waiting_threads_in_arrival_order() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path(), 1);
        let Ok(running) = rt.turn_slots.clone().try_acquire_owned() else {
            panic!("a free slot");
        };
        let mut first = Some(Waiting::start(
            &rt,
            &spec(dir.path(), "t1"),
            "scripted",
            Some("r1".into()),
            input(),
            None,
        ));
        let mut second = Some(Waiting::start(
            &rt,
            &spec(dir.path(), "t2"),
            "scripted",
            Some("r2".into()),
            input(),
            None,
        ));
        // Both are in line (polled once) before the slot frees.
        for waiting in [&mut first, &mut second] {
            assert!(
                next_slot(waiting).now_or_never().is_none(),
                "no slot is free yet"
            );
        }
        if let Some(w) = second.as_mut() {
            w.hold(message("r3"));
        }
        let listed = rt.waiting_turn_list();
        let counts: Vec<(&str, usize)> = listed
            .iter()
            .map(|t| (t.thread_id.as_str(), t.messages))
            .collect();
        assert_eq!(counts, [("t1", 1), ("t2", 2)]);
        drop(running);
        // The second still waits: the freed slot went to the first.
        let polled = next_slot(&mut second).now_or_never();
        assert!(polled.is_none(), "the second overtook the first");
        let slot = next_slot(&mut first).await;
        assert!(slot.is_some(), "the first thread gets the slot");
        let started = first.take().unwrap().started();
        assert_eq!(started.rid.as_deref(), Some("r1"));
        drop(started.registration);
        assert_eq!(rt.waiting_turns(), 1);
        assert_eq!(
            second.as_ref().unwrap().rids(),
            [Some("r2".to_owned()), Some("r3".to_owned())]
        );
        drop(slot);
        assert!(next_slot(&mut second).await.is_some());
        drop(second);
        assert_eq!(rt.waiting_turns(), 0);
    }

    /// The drain ends every wait without a slot.
    #[tokio::test]
    async fn the_drain_ends_a_wait_without_a_slot() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path(), 1);
        let Ok(_running) = rt.turn_slots.clone().try_acquire_owned() else {
            panic!("a free slot");
        };
        let mut waiting = Some(Waiting::start(
            &rt,
            &spec(dir.path(), "t"),
            "scripted",
            Some("r".into()),
            input(),
            None,
        ));
        let rt2 = rt.clone();
        let drain = tokio::spawn(async move { rt2.drain(Duration::from_secs(600)).await });
        assert!(next_slot(&mut waiting).await.is_none());
        // The drain waits until the waiting message is answered (dropped).
        assert!(!drain.is_finished());
        drop(waiting);
        drain.await.unwrap();
    }
}
