//! The runner's shared state: adapters, store, workspaces, outbox, and the
//! mailboxes of the per-agent and per-thread tasks.
//!
//! Concurrency model: the ControlChannel read loop only validates and routes
//! ([`crate::dispatch`]); it never awaits an adapter. Each agent has a task
//! ([`crate::agent`]) and each thread a task ([`crate::thread`]) with a
//! bounded mailbox of [`MAILBOX`] requests, so a thread's requests run in
//! arrival order while different threads run in parallel. A full mailbox
//! answers the request with a `RequestError` at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use agent_runner_proto::runner::TurnStatus;
use sdk_adapter::{AgentSpec, ThreadSpec, TurnOutcome};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::task::TaskTracker;

use crate::agent::{self, AgentCmd};
use crate::credentials::GitEnv;
use crate::github::TokenBroker;
use crate::outbox::Outbox;
use crate::redact::Redactor;
use crate::sdks::Sdks;
use crate::state::{Store, StoreError, ThreadRow};
use crate::thread::{self, ThreadCmd};
use crate::updates;
use crate::workspace::Workspaces;

/// Requests a single agent or thread may have waiting.
pub const MAILBOX: usize = 64;

/// How long an interrupted turn may take to stop before it is cut loose.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

pub struct ThreadEntry {
    pub agent_id: String,
    pub tx: mpsc::Sender<ThreadCmd>,
}

/// A turn running now (for status, metrics and the turn-duration histogram).
#[derive(Debug, Clone)]
pub struct RunningTurn {
    pub agent_id: String,
    pub thread_id: String,
    pub sdk: String,
    pub turn_id: String,
    pub started: Instant,
}

pub struct Runtime {
    /// When the runtime was made (the runner's uptime).
    pub started: Instant,
    pub sdks: Sdks,
    pub store: Store,
    pub workspaces: Workspaces,
    pub outbox: Arc<Outbox>,
    agents: Mutex<HashMap<String, mpsc::Sender<AgentCmd>>>,
    threads: Mutex<HashMap<String, ThreadEntry>>,
    pub turn_slots: Arc<Semaphore>,
    pub max_turns: usize,
    /// Largest skill package accepted (`--skill-max-bytes`).
    pub skill_max_bytes: u64,
    draining: AtomicBool,
    /// The running turn of each thread, by thread id; drain watches it
    /// empty.
    running: watch::Sender<HashMap<String, RunningTurn>>,
    pub tasks: TaskTracker,
    /// Masks installation tokens in updates and logs; the token broker
    /// registers every token it mints here (the process-wide set, see
    /// [`Redactor::process`], which the log writer uses too).
    pub redactor: Redactor,
    /// The git credential-helper environment every thread's agent gets;
    /// unset while the credential socket is not running.
    git_env: OnceLock<GitEnv>,
    /// GitHub installation tokens (control plane or the runner's own App);
    /// set once by [`crate::runner::Runner::start`], unset in bare runtimes.
    github: OnceLock<TokenBroker>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    pub fn new(
        sdks: Sdks,
        store: Store,
        workspaces: Workspaces,
        outbox_capacity: usize,
        max_turns: usize,
        skill_max_bytes: u64,
    ) -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            sdks,
            store,
            workspaces,
            outbox: Arc::new(Outbox::new(outbox_capacity)),
            agents: Mutex::new(HashMap::new()),
            threads: Mutex::new(HashMap::new()),
            turn_slots: Arc::new(Semaphore::new(max_turns)),
            max_turns,
            skill_max_bytes,
            draining: AtomicBool::new(false),
            running: watch::Sender::new(HashMap::new()),
            tasks: TaskTracker::new(),
            redactor: Redactor::process(),
            git_env: OnceLock::new(),
            github: OnceLock::new(),
        })
    }

    /// Bring back what the store knows: agents and threads are re-opened in
    /// their SDKs, and every turn that was running when the runner died is
    /// reported ended (`RequestError` + `TurnUpdate COMPLETED`).
    pub async fn restore(self: &Arc<Self>) -> Result<(), StoreError> {
        for row in self.store.running_turns()? {
            let rid = row.request_id.clone();
            self.outbox.push_reply(updates::request_error(
                rid.clone(),
                format!(
                    "the runner restarted while turn {} was running; the turn was interrupted",
                    row.sdk_turn_id
                ),
            ));
            self.outbox.push_reply(updates::turn(
                rid,
                &row.thread_id,
                &row.sdk_turn_id,
                TurnStatus::Completed,
            ));
            self.store.finish_turn(&row.thread_id, &row.sdk_turn_id)?;
            tracing::warn!(thread_id = %row.thread_id, turn_id = %row.sdk_turn_id, "turn lost in a restart reported as interrupted");
        }
        let agents = self.store.agents()?;
        for a in &agents {
            if let Some(adapter) = self.sdks.get(&a.sdk) {
                let spec = AgentSpec {
                    agent_id: a.agent_id.clone(),
                    home: self.workspaces.agent_home(&a.agent_id),
                };
                if let Err(e) = adapter.create_agent(&spec).await {
                    crate::metrics::adapter_error(&a.sdk, "create_agent");
                    tracing::warn!(agent_id = %a.agent_id, error = %e, "re-opening agent failed");
                }
            } else {
                tracing::warn!(agent_id = %a.agent_id, sdk = %a.sdk, "agent's SDK is not enabled; its requests will fail");
            }
        }
        for row in self.store.threads()? {
            let Some(sdk) = agents.iter().find(|a| a.agent_id == row.agent_id) else {
                continue;
            };
            let spec = self.thread_spec(&row);
            if let Some(adapter) = self.sdks.get(&sdk.sdk)
                && let Err(e) = adapter.create_thread(&spec).await
            {
                crate::metrics::adapter_error(&sdk.sdk, "create_thread");
                tracing::warn!(thread_id = %row.thread_id, error = %e, "re-opening thread failed");
            }
            self.spawn_thread(sdk.sdk.clone(), spec, row.last_turn_id.clone());
        }
        Ok(())
    }

    /// The runner's GitHub token broker (set once, before threads are
    /// restored; later calls are ignored).
    pub fn set_github(&self, broker: TokenBroker) {
        let _ = self.github.set(broker);
    }

    /// The runner's GitHub token broker, once set.
    pub fn github(&self) -> Option<&TokenBroker> {
        self.github.get()
    }

    /// From now on, threads' agents use the runner's git credential helper
    /// (set once, before threads are restored; later calls are ignored).
    pub fn set_git_env(&self, env: GitEnv) {
        let _ = self.git_env.set(env);
    }

    /// The extra environment of every process `thread_id`'s agent starts.
    pub fn thread_env(&self, thread_id: &str) -> Vec<(String, String)> {
        self.git_env
            .get()
            .map(|env| env.for_thread(thread_id))
            .unwrap_or_default()
    }

    pub fn thread_spec(&self, row: &ThreadRow) -> ThreadSpec {
        ThreadSpec {
            agent_id: row.agent_id.clone(),
            thread_id: row.thread_id.clone(),
            workspace: self.workspaces.thread_dir(&row.agent_id, &row.thread_id),
            model: row.model.clone(),
            reasoning_level: row.reasoning_level.clone(),
            sdk_thread_id: Some(row.sdk_thread_id.clone()),
            env: self.thread_env(&row.thread_id),
        }
    }

    /// Route to an agent's task, starting it if needed. Never waits.
    pub fn send_agent(self: &Arc<Self>, agent_id: &str, cmd: AgentCmd) -> Result<(), AgentCmd> {
        let mut agents = lock(&self.agents);
        let tx = agents
            .entry(agent_id.to_owned())
            .or_insert_with(|| agent::spawn(self.clone(), agent_id.to_owned()));
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

    pub fn spawn_thread(
        self: &Arc<Self>,
        sdk: String,
        spec: ThreadSpec,
        last_turn: Option<String>,
    ) {
        let mut threads = lock(&self.threads);
        let tx = thread::spawn(self.clone(), sdk, spec.clone(), last_turn);
        threads.insert(
            spec.thread_id.clone(),
            ThreadEntry {
                agent_id: spec.agent_id,
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

    pub fn thread_count(&self) -> usize {
        lock(&self.threads).len()
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub fn turn_started(&self, turn: RunningTurn) {
        crate::metrics::turn_started(&turn.sdk);
        self.running.send_modify(|turns| {
            turns.insert(turn.thread_id.clone(), turn);
        });
    }

    pub fn turn_finished(&self, thread_id: &str, outcome: &TurnOutcome) {
        let mut ended = None;
        self.running
            .send_modify(|turns| ended = turns.remove(thread_id));
        if let Some(turn) = ended {
            crate::metrics::turn_ended(&turn.sdk, outcome, turn.started.elapsed());
        }
    }

    /// Every running turn, oldest first.
    pub fn running_turn_list(&self) -> Vec<RunningTurn> {
        let mut turns: Vec<RunningTurn> = self.running.borrow().values().cloned().collect();
        turns.sort_by_key(|t| t.started);
        turns
    }

    pub fn running_turns(&self) -> usize {
        self.running.borrow().len()
    }

    /// Stop taking new turns; let running ones go on for `timeout`, then
    /// interrupt them and wait (up to [`INTERRUPT_GRACE`]) for them to end.
    pub async fn drain(&self, timeout: Duration) {
        self.draining.store(true, Ordering::SeqCst);
        let mut running = self.running.subscribe();
        let idle = |turns: &HashMap<String, RunningTurn>| turns.is_empty();
        if tokio::time::timeout(timeout, running.wait_for(idle))
            .await
            .is_ok()
        {
            return;
        }
        tracing::info!(
            running = self.running_turns(),
            "drain timeout reached; interrupting running turns"
        );
        for tx in self.all_threads() {
            let _ = tx.send(ThreadCmd::Drain).await;
        }
        let _ = tokio::time::timeout(INTERRUPT_GRACE, running.wait_for(idle)).await;
    }
}

/// Where a thread request went.
pub enum ThreadRoute {
    Sent,
    /// No such thread (the command is handed back).
    Unknown(ThreadCmd),
    /// The thread belongs to this other agent.
    WrongAgent(String, ThreadCmd),
    /// Its mailbox is full.
    Busy(ThreadCmd),
}
