//! The routing tables: each live agent's and thread's mailbox, by id.
//!
//! The read loop routes through them without waiting ([`crate::tasks::dispatch`]);
//! the tasks themselves add and remove their entries. They hold senders
//! only: starting tasks is the business of [`crate::tasks::agent`] and
//! [`crate::tasks::thread`], so these tables depend on nothing but the commands.
//!
//! One bound covers every mailbox: at most `--max-queued-requests`
//! (default [`DEFAULT_MAX_QUEUED`]) requests wait at once, whichever
//! agents and threads they are for, so a burst for one agent (a control
//! plane starting 200 tasks) queues like any other; past the bound the
//! request is answered with a `RequestError` at once (the read loop never
//! waits). A request's slot is freed when its task takes it, or, for a
//! user message waiting for a turn slot (`crate::tasks::turn_wait`), when
//! its turn starts or it is answered. Commands the runner sends itself
//! (drain, an agent deleting its threads) need no slot.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::tasks::mail::{AgentCmd, ThreadCmd};

pub use crate::config::DEFAULT_MAX_QUEUED_REQUESTS as DEFAULT_MAX_QUEUED;

/// A command in a mailbox, holding its slot until its task takes it.
pub struct Queued<C> {
    cmd: C,
    _slot: Option<OwnedSemaphorePermit>,
}

impl<C> Queued<C> {
    /// A command the runner sends itself (no slot).
    pub fn internal(cmd: C) -> Self {
        Self { cmd, _slot: None }
    }

    /// The command; its slot is freed.
    pub fn take(self) -> C {
        self.cmd
    }

    /// The command and its slot, for a command that waits on in its task:
    /// a user message waiting for a turn slot keeps its place in the bound.
    pub fn into_parts(self) -> (C, Option<OwnedSemaphorePermit>) {
        (self.cmd, self._slot)
    }
}

/// An agent task's mailbox (sending side).
pub type AgentTx = mpsc::UnboundedSender<Queued<AgentCmd>>;
/// A thread task's mailbox (sending side).
pub type ThreadTx = mpsc::UnboundedSender<Queued<ThreadCmd>>;
/// A thread task's mailbox (receiving side).
pub type ThreadRx = mpsc::UnboundedReceiver<Queued<ThreadCmd>>;

struct ThreadEntry {
    agent_id: String,
    tx: ThreadTx,
}

/// Where a thread request went.
pub enum ThreadRoute {
    /// Queued in the thread's mailbox.
    Sent,
    /// No such thread (the command is handed back).
    Unknown(ThreadCmd),
    /// The thread belongs to this other agent.
    WrongAgent(String, ThreadCmd),
    /// The runner has as many requests queued as it may.
    Busy(ThreadCmd),
}

/// The agent and thread mailboxes.
pub struct Mailboxes {
    agents: Mutex<HashMap<String, AgentTx>>,
    threads: Mutex<HashMap<String, ThreadEntry>>,
    /// Thread ids being created right now (see [`Mailboxes::claim_thread`]).
    claimed: Arc<Mutex<HashSet<String>>>,
    slots: Arc<Semaphore>,
    max_queued: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Mailboxes {
    /// Empty tables; at most `max_queued` requests wait at once.
    pub fn new(max_queued: usize) -> Self {
        Self {
            agents: Mutex::new(HashMap::new()),
            threads: Mutex::new(HashMap::new()),
            claimed: Arc::default(),
            slots: Arc::new(Semaphore::new(max_queued)),
            max_queued,
        }
    }

    /// How many requests may wait at once.
    pub fn max_queued(&self) -> usize {
        self.max_queued
    }

    /// A slot for one more waiting request, if the bound allows.
    fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// Queues `cmd` for `agent_id`'s task, starting the task with `start`
    /// if it has none. Never waits; with no slot left `cmd` is handed back.
    pub fn send_agent(
        &self,
        agent_id: &str,
        cmd: AgentCmd,
        start: impl FnOnce() -> AgentTx,
    ) -> Result<(), AgentCmd> {
        let Some(slot) = self.slot() else {
            return Err(cmd);
        };
        let mut agents = lock(&self.agents);
        let tx = agents.entry(agent_id.to_owned()).or_insert_with(start);
        tx.send(Queued {
            cmd,
            _slot: Some(slot),
        })
        .map_err(|e| e.0.cmd)
    }

    /// Called by an agent task with an empty mailbox that has nothing left to
    /// do; returns false (stay) if a request arrived meanwhile.
    pub fn retire_agent(&self, agent_id: &str, tx: &AgentTx, rx_empty: impl Fn() -> bool) -> bool {
        let mut agents = lock(&self.agents);
        if !rx_empty() {
            return false;
        }
        if agents.get(agent_id).is_some_and(|t| t.same_channel(tx)) {
            agents.remove(agent_id);
        }
        true
    }

    /// Claims `thread_id` for a thread being created, so no other agent's
    /// task creates one with the same id at the same time (control planes
    /// choose thread ids); `None` if it is live or claimed already. The
    /// claim ends when the guard drops.
    pub fn claim_thread(&self, thread_id: &str) -> Option<ThreadClaim> {
        let threads = lock(&self.threads);
        let mut claimed = lock(&self.claimed);
        if threads.contains_key(thread_id) || !claimed.insert(thread_id.to_owned()) {
            return None;
        }
        Some(ThreadClaim {
            claimed: self.claimed.clone(),
            thread_id: thread_id.to_owned(),
        })
    }

    /// Registers a thread task's mailbox.
    pub fn add_thread(&self, agent_id: &str, thread_id: &str, tx: ThreadTx) {
        lock(&self.threads).insert(
            thread_id.to_owned(),
            ThreadEntry {
                agent_id: agent_id.to_owned(),
                tx,
            },
        );
    }

    /// Route to a thread's task (which belongs to `agent_id`). Never waits.
    pub fn send_thread(&self, agent_id: &str, thread_id: &str, cmd: ThreadCmd) -> ThreadRoute {
        let threads = lock(&self.threads);
        let Some(entry) = threads.get(thread_id) else {
            return ThreadRoute::Unknown(cmd);
        };
        if entry.agent_id != agent_id {
            return ThreadRoute::WrongAgent(entry.agent_id.clone(), cmd);
        }
        let Some(slot) = self.slot() else {
            return ThreadRoute::Busy(cmd);
        };
        match entry.tx.send(Queued {
            cmd,
            _slot: Some(slot),
        }) {
            Ok(()) => ThreadRoute::Sent,
            Err(e) => ThreadRoute::Unknown(e.0.cmd),
        }
    }

    /// The agent of live thread `thread_id`.
    pub fn thread_agent(&self, thread_id: &str) -> Option<String> {
        lock(&self.threads)
            .get(thread_id)
            .map(|t| t.agent_id.clone())
    }

    /// Mailboxes of an agent's threads.
    pub fn agent_threads(&self, agent_id: &str) -> Vec<ThreadTx> {
        lock(&self.threads)
            .values()
            .filter(|t| t.agent_id == agent_id)
            .map(|t| t.tx.clone())
            .collect()
    }

    /// Every thread's mailbox.
    pub fn all_threads(&self) -> Vec<ThreadTx> {
        lock(&self.threads).values().map(|t| t.tx.clone()).collect()
    }

    /// A deleted thread's task leaves the routing table.
    pub fn forget_thread(&self, thread_id: &str) {
        lock(&self.threads).remove(thread_id);
    }

    /// Whether `thread_id` is a live thread of this runner.
    pub fn has_thread(&self, thread_id: &str) -> bool {
        lock(&self.threads).contains_key(thread_id)
    }

    /// How many threads are live.
    pub fn thread_count(&self) -> usize {
        lock(&self.threads).len()
    }
}

/// A thread id claimed by [`Mailboxes::claim_thread`]; released on drop.
pub struct ThreadClaim {
    claimed: Arc<Mutex<HashSet<String>>>,
    thread_id: String,
}

impl Drop for ThreadClaim {
    fn drop(&mut self) {
        lock(&self.claimed).remove(&self.thread_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_id_is_claimed_once_until_released_and_never_while_live() {
        let m = Mailboxes::new(4);
        let claim = m.claim_thread("t").unwrap();
        assert!(m.claim_thread("t").is_none());
        drop(claim);
        assert!(m.claim_thread("t").is_some());
        let (tx, _rx) = mpsc::unbounded_channel();
        m.add_thread("a", "live", tx);
        assert!(m.claim_thread("live").is_none());
    }
}
