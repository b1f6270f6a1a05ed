//! The routing tables: each live agent's and thread's mailbox, by id.
//!
//! The read loop routes through them without waiting ([`crate::dispatch`]);
//! the tasks themselves add and remove their entries. They hold senders
//! only: starting tasks is the business of [`crate::agent`] and
//! [`crate::thread`], so these tables depend on nothing but the commands.
//!
//! Each mailbox holds [`MAILBOX`] requests; a full one answers the request
//! with a `RequestError` at once (the read loop never waits).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::commands::{AgentCmd, ThreadCmd};

/// Requests a single agent or thread may have waiting.
pub const MAILBOX: usize = 64;

struct ThreadEntry {
    agent_id: String,
    tx: mpsc::Sender<ThreadCmd>,
}

/// Where a thread request went.
pub enum ThreadRoute {
    /// Queued in the thread's mailbox.
    Sent,
    /// No such thread (the command is handed back).
    Unknown(ThreadCmd),
    /// The thread belongs to this other agent.
    WrongAgent(String, ThreadCmd),
    /// Its mailbox is full.
    Busy(ThreadCmd),
}

/// The agent and thread mailboxes.
#[derive(Default)]
pub struct Mailboxes {
    agents: Mutex<HashMap<String, mpsc::Sender<AgentCmd>>>,
    threads: Mutex<HashMap<String, ThreadEntry>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Mailboxes {
    /// Empty tables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `cmd` for `agent_id`'s task, starting the task with `start`
    /// if it has none. Never waits; a full mailbox hands `cmd` back.
    pub fn send_agent(
        &self,
        agent_id: &str,
        cmd: AgentCmd,
        start: impl FnOnce() -> mpsc::Sender<AgentCmd>,
    ) -> Result<(), AgentCmd> {
        let mut agents = lock(&self.agents);
        let tx = agents.entry(agent_id.to_owned()).or_insert_with(start);
        tx.try_send(cmd).map_err(|e| match e {
            mpsc::error::TrySendError::Full(c) | mpsc::error::TrySendError::Closed(c) => c,
        })
    }

    /// Called by an agent task with an empty mailbox that has nothing left to
    /// do; returns false (stay) if a request arrived meanwhile.
    pub fn retire_agent(
        &self,
        agent_id: &str,
        tx: &mpsc::Sender<AgentCmd>,
        rx_empty: impl Fn() -> bool,
    ) -> bool {
        let mut agents = lock(&self.agents);
        if !rx_empty() {
            return false;
        }
        if agents.get(agent_id).is_some_and(|t| t.same_channel(tx)) {
            agents.remove(agent_id);
        }
        true
    }

    /// Registers a thread task's mailbox.
    pub fn add_thread(&self, agent_id: &str, thread_id: &str, tx: mpsc::Sender<ThreadCmd>) {
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
        match entry.tx.try_send(cmd) {
            Ok(()) => ThreadRoute::Sent,
            Err(mpsc::error::TrySendError::Full(c)) => ThreadRoute::Busy(c),
            Err(mpsc::error::TrySendError::Closed(c)) => ThreadRoute::Unknown(c),
        }
    }

    /// Mailboxes of an agent's threads.
    pub fn agent_threads(&self, agent_id: &str) -> Vec<mpsc::Sender<ThreadCmd>> {
        lock(&self.threads)
            .values()
            .filter(|t| t.agent_id == agent_id)
            .map(|t| t.tx.clone())
            .collect()
    }

    /// Every thread's mailbox.
    pub fn all_threads(&self) -> Vec<mpsc::Sender<ThreadCmd>> {
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
