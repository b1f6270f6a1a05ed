//! What every task is given: adapters, store, workspaces, outbox, the
//! routing tables, the GitHub token broker and git environment, the limits,
//! and the registries of running turns and of turns waiting for a turn
//! slot. Complete when constructed: nothing is filled in later, so no task
//! can see it half made.
//!
//! Concurrency model: the ControlChannel read loop only validates and routes
//! ([`crate::tasks::dispatch`]); it never awaits an adapter. Each agent has a task
//! ([`crate::tasks::agent`]) and each thread a task ([`crate::tasks::thread`]) with a
//! bounded mailbox ([`crate::tasks::mailboxes`]), so a thread's requests run in
//! arrival order while different threads run in parallel.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sdk_adapter::{McpServer, ThreadSpec, TurnOutcome};
use tokio::sync::{Semaphore, watch};
use tokio_util::task::TaskTracker;

use crate::delivery::outbox::Outbox;
use crate::host::credentials::GitEnv;
use crate::host::github::TokenBroker;
use crate::host::sandbox::AgentSandboxes;
use crate::host::skills::SkillSettings;
use crate::host::store::{Store, ThreadRow};
use crate::host::workspace::Workspaces;
use crate::tasks::mail::ThreadCmd;
use crate::tasks::mailboxes::{DEFAULT_MAX_QUEUED, Mailboxes, Queued};
use crate::tasks::sdks::Sdks;
use crate::util::redact::Redactor;

/// How long an interrupted turn may take to stop before it is cut loose.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// A turn running now (for status, metrics and the turn-duration histogram).
#[derive(Debug, Clone)]
pub struct RunningTurn {
    /// The agent.
    pub agent_id: String,
    /// The thread.
    pub thread_id: String,
    /// The SDK running it.
    pub sdk: String,
    /// The SDK's turn id.
    pub turn_id: String,
    /// When it started.
    pub started: Instant,
}

/// A thread whose next turn waits for a turn slot (`--max-concurrent-turns`;
/// see [`crate::tasks::turn_wait`]): for status, the admin socket, metrics
/// and the drain.
#[derive(Debug, Clone)]
pub struct WaitingTurn {
    /// The agent.
    pub agent_id: String,
    /// The thread.
    pub thread_id: String,
    /// The SDK the turn will run on.
    pub sdk: String,
    /// When its message began to wait.
    pub since: Instant,
    /// The thread's messages waiting: the one whose turn waits and those
    /// that arrived behind it.
    pub messages: usize,
}

/// What every task is given (see the module doc).
pub struct Runtime {
    /// When the runtime was made (the runner's uptime).
    pub started: Instant,
    /// The enabled SDK adapters.
    pub sdks: Sdks,
    /// Durable state.
    pub store: Store,
    /// Agent homes and thread workspaces.
    pub workspaces: Workspaces,
    /// Updates on their way out.
    pub outbox: Arc<Outbox>,
    /// The agent and thread mailboxes.
    pub mailboxes: Arc<Mailboxes>,
    /// One permit per turn allowed at once.
    pub turn_slots: Arc<Semaphore>,
    /// Turns allowed at once.
    pub max_turns: usize,
    /// Skill package limits and sources (`--skill-*`).
    pub skills: SkillSettings,
    /// Whether shutdown began; thread tasks waiting for a turn slot watch it.
    draining: watch::Sender<bool>,
    /// When the last request (heartbeats aside) arrived or a turn started or
    /// ended: `--exit-when-idle` counts from it.
    last_activity: std::sync::Mutex<Instant>,
    /// The running turn of each thread, by thread id; drain watches it
    /// empty.
    running: watch::Sender<HashMap<String, RunningTurn>>,
    /// The threads whose next turn waits for a turn slot, by thread id;
    /// drain watches it empty (their messages are answered).
    waiting: watch::Sender<HashMap<String, WaitingTurn>>,
    /// Every task the runtime started (shutdown waits for them).
    pub tasks: TaskTracker,
    /// Masks installation tokens in updates and logs; the token broker
    /// registers every token it mints here (the process-wide set, see
    /// [`Redactor::process`], which the log writer uses too).
    pub redactor: Redactor,
    /// The git credential-helper environment every thread's agent gets
    /// (`None`: no credential socket, as in bare runtimes).
    git_env: Option<GitEnv>,
    /// GitHub installation tokens (control plane or the runner's own App;
    /// `None` in bare runtimes).
    github: Option<TokenBroker>,
    /// The launcher and every thread's sandbox: every agent process starts
    /// through it and every kill path goes through it.
    pub sandboxes: Arc<AgentSandboxes>,
    /// Each live thread's MCP servers, by thread id: in memory only, never
    /// in the store (their tokens, headers and environment are secrets), so
    /// a thread re-opened after a restart has none (docs/protocol.md, "Behaviour
    /// the control plane can rely on").
    mcp_servers: std::sync::Mutex<HashMap<String, Arc<[McpServer]>>>,
    /// Per-thread transcripts (set by the runner at start; bare runtimes
    /// keep none).
    pub transcripts: std::sync::OnceLock<crate::delivery::transcript::Transcripts>,
    /// Set once at start-up when the runner speaks protocol 0.7 (implicit
    /// agents, unique model names, the agent API); unset: 0.2.
    pub thread_only: std::sync::OnceLock<crate::tasks::thread_only::ThreadOnly>,
    /// `approvals/1`: whether the control plane decides, the settings, and
    /// every request waiting for its decision.
    pub approvals: crate::tasks::approvals::Approvals,
}

/// Everything a [`Runtime`] is made of.
pub struct RuntimeParts {
    /// The enabled SDK adapters.
    pub sdks: Sdks,
    /// Durable state.
    pub store: Store,
    /// Agent homes and thread workspaces.
    pub workspaces: Workspaces,
    /// Updates on their way out.
    pub outbox: Arc<Outbox>,
    /// The routing tables (made first: the credential socket asks them
    /// which threads are live).
    pub mailboxes: Arc<Mailboxes>,
    /// Turns allowed at once.
    pub max_turns: usize,
    /// Skill package limits and sources.
    pub skills: SkillSettings,
    /// The git credential-helper environment for agents, if any.
    pub git_env: Option<GitEnv>,
    /// The GitHub token broker, if any.
    pub github: Option<TokenBroker>,
    /// The agent sandbox (built at start; see [`crate::host::sandbox`]).
    pub sandboxes: Arc<AgentSandboxes>,
}

impl Runtime {
    /// A runtime made of `parts`.
    pub fn new(parts: RuntimeParts) -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            sdks: parts.sdks,
            store: parts.store,
            workspaces: parts.workspaces,
            outbox: parts.outbox,
            mailboxes: parts.mailboxes,
            turn_slots: Arc::new(Semaphore::new(parts.max_turns)),
            max_turns: parts.max_turns,
            skills: parts.skills,
            draining: watch::Sender::new(false),
            last_activity: std::sync::Mutex::new(Instant::now()),
            running: watch::Sender::new(HashMap::new()),
            waiting: watch::Sender::new(HashMap::new()),
            tasks: TaskTracker::new(),
            redactor: Redactor::process(),
            git_env: parts.git_env,
            github: parts.github,
            sandboxes: parts.sandboxes,
            mcp_servers: std::sync::Mutex::new(HashMap::new()),
            transcripts: std::sync::OnceLock::new(),
            thread_only: std::sync::OnceLock::new(),
            approvals: crate::tasks::approvals::Approvals::new(),
        })
    }

    /// A runtime without GitHub tokens or a credential socket, whose agent
    /// processes run unconfined (sandbox mode `off`: the environment
    /// allowlist and process tracking only) — tests, fuzzing, benchmarks.
    pub fn bare(
        sdks: Sdks,
        store: Store,
        workspaces: Workspaces,
        outbox_capacity: usize,
        max_turns: usize,
        skill_max_bytes: u64,
    ) -> Arc<Self> {
        Self::new(RuntimeParts {
            sdks,
            store,
            workspaces,
            outbox: Arc::new(Outbox::new(outbox_capacity, Redactor::process())),
            mailboxes: Arc::new(Mailboxes::new(DEFAULT_MAX_QUEUED)),
            max_turns,
            skills: SkillSettings::with_max_bytes(skill_max_bytes),
            git_env: None,
            github: None,
            sandboxes: Arc::new(AgentSandboxes::unconfined("bare-runtime")),
        })
    }

    /// The runner's GitHub token broker, if any.
    pub fn github(&self) -> Option<&TokenBroker> {
        self.github.as_ref()
    }

    /// The extra environment of every process `thread_id`'s agent starts
    /// (issues the thread's git credential capability in its private home).
    /// Blocking: a file written and the redactor rebuilt; call it off the
    /// async workers.
    pub fn thread_env(&self, agent_id: &str, thread_id: &str) -> Vec<(String, String)> {
        self.git_env
            .as_ref()
            .map(|env| env.for_thread(thread_id, &self.workspaces.thread_home(agent_id, thread_id)))
            .unwrap_or_default()
    }

    /// The sandbox of `thread_id` (made on first use; see
    /// [`AgentSandboxes::thread`]). Blocking, briefly (directories).
    pub fn thread_sandbox(&self, agent_id: &str, thread_id: &str) -> sdk_adapter::Sandbox {
        self.sandboxes.thread(&self.workspaces, agent_id, thread_id)
    }

    /// `thread_id` was deleted: its git credential capability dies.
    pub fn thread_deleted(&self, thread_id: &str) {
        if let Some(env) = &self.git_env {
            env.revoke(thread_id);
        }
    }

    /// Everything a thread left on this machine goes: its processes (the
    /// sandbox is closed), its workspace and private dir (removed on the
    /// blocking pool: a HOME full of caches takes a while), its git
    /// credential capability. Shared by thread delete and by a creation
    /// that failed half-way, so neither leaves a piece behind.
    pub async fn discard_thread(&self, agent_id: &str, thread_id: &str) {
        self.set_thread_mcp_servers(thread_id, Arc::from([]));
        if let Some(t) = self.transcripts.get() {
            t.remove(thread_id).await;
        }
        self.sandboxes.close_thread(thread_id).await;
        let dirs = [
            self.workspaces.thread_dir(agent_id, thread_id),
            self.workspaces.thread_private(agent_id, thread_id),
        ];
        let workspaces = self.workspaces.clone();
        let removed = tokio::task::spawn_blocking(move || {
            dirs.iter()
                .filter_map(|dir| {
                    workspaces
                        .remove(dir)
                        .err()
                        .map(|e| format!("{}: {e}", dir.display()))
                })
                .collect::<Vec<_>>()
        })
        .await;
        match removed {
            Ok(errors) if errors.is_empty() => {}
            Ok(errors) => {
                tracing::warn!(%thread_id, errors = %errors.join("; "), "removing the thread's directories failed")
            }
            Err(e) => {
                tracing::warn!(%thread_id, error = %e, "removing the thread's directories failed")
            }
        }
        self.thread_deleted(thread_id);
    }

    /// The protocol 0.7 state, when the runner speaks 0.7.
    pub fn thread_only(&self) -> Option<&crate::tasks::thread_only::ThreadOnly> {
        self.thread_only.get()
    }

    /// The environment and instructions of a thread holding agent API
    /// `token` (protocol 0.7), added to `env` and `instructions`.
    pub fn with_agent_api(
        &self,
        token: Option<&str>,
        env: &mut Vec<(String, String)>,
        instructions: Option<String>,
    ) -> Option<String> {
        match (token, self.thread_only()) {
            (Some(token), Some(t)) => {
                env.extend(t.env(token));
                t.instructions(instructions)
            }
            (Some(token), None) => {
                // A 0.7 thread restored by a runner now speaking 0.2: its
                // token still reaches its processes, the URL is not known.
                env.push((
                    crate::tasks::thread_only::TOKEN_VAR.to_owned(),
                    token.to_owned(),
                ));
                instructions
            }
            (None, _) => instructions,
        }
    }

    /// What the thread's adapter is given for `row`.
    pub fn thread_spec(&self, row: &ThreadRow) -> ThreadSpec {
        let mut env = self.thread_env(&row.agent_id, &row.thread_id);
        let instructions = self.with_agent_api(
            row.agent_api_token.as_deref(),
            &mut env,
            row.instructions.clone(),
        );
        ThreadSpec {
            sandbox: self.thread_sandbox(&row.agent_id, &row.thread_id),
            agent_id: row.agent_id.clone(),
            thread_id: row.thread_id.clone(),
            workspace: self.workspaces.thread_dir(&row.agent_id, &row.thread_id),
            model: row.model.clone(),
            reasoning_level: row.reasoning_level.clone().filter(|l| !l.is_empty()),
            sdk_thread_id: Some(row.sdk_thread_id.clone()).filter(|id| !id.is_empty()),
            env,
            instructions,
            mcp_servers: self.thread_mcp_servers(&row.thread_id),
        }
    }

    /// Remembers `thread_id`'s MCP servers (memory only) for every spec of
    /// the thread made from now on.
    pub fn set_thread_mcp_servers(&self, thread_id: &str, servers: Arc<[McpServer]>) {
        let mut map = self
            .mcp_servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if servers.is_empty() {
            map.remove(thread_id);
        } else {
            map.insert(thread_id.to_owned(), servers);
        }
    }

    /// `thread_id`'s MCP servers (none after a runner restart).
    pub fn thread_mcp_servers(&self, thread_id: &str) -> Arc<[McpServer]> {
        self.mcp_servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(thread_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether shutdown began (new turns are refused).
    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// Resolves once shutdown began (at once if it has).
    pub async fn draining_started(&self) {
        let mut draining = self.draining.subscribe();
        // The sender lives as long as `self`: no error while this waits.
        let _ = draining.wait_for(|draining| *draining).await;
    }

    /// Something happened that makes the runner not idle (a request other
    /// than a heartbeat, a turn starting or ending).
    pub fn note_activity(&self) {
        *self.last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// How long the runner has been idle: no turn running or waiting and no
    /// activity (see [`Runtime::note_activity`]); `None` while a turn runs
    /// or waits for a slot.
    pub fn idle_for(&self) -> Option<Duration> {
        if self.running_turns() > 0 || self.waiting_turns() > 0 {
            return None;
        }
        Some(
            self.last_activity
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed(),
        )
    }

    /// Records a turn as running.
    pub fn turn_started(&self, turn: RunningTurn) {
        self.note_activity();
        crate::observe::metrics::turn_started(&turn.sdk);
        self.running.send_modify(|turns| {
            turns.insert(turn.thread_id.clone(), turn);
        });
    }

    /// Records the end of `thread_id`'s turn.
    pub fn turn_finished(&self, thread_id: &str, outcome: &TurnOutcome) {
        let mut ended = None;
        self.running
            .send_modify(|turns| ended = turns.remove(thread_id));
        if let Some(turn) = ended {
            crate::observe::metrics::turn_ended(&turn.sdk, outcome, turn.started.elapsed());
        }
        self.note_activity();
    }

    /// Every running turn, oldest first.
    pub fn running_turn_list(&self) -> Vec<RunningTurn> {
        let mut turns: Vec<RunningTurn> = self.running.borrow().values().cloned().collect();
        turns.sort_by_key(|t| t.started);
        turns
    }

    /// How many turns run now.
    pub fn running_turns(&self) -> usize {
        self.running.borrow().len()
    }

    /// Records `turn` as waiting for a turn slot, or its new message count.
    pub fn turn_waiting(&self, turn: WaitingTurn) {
        let sdk = turn.sdk.clone();
        let mut new = false;
        self.waiting.send_modify(|waiting| {
            new = waiting.insert(turn.thread_id.clone(), turn).is_none();
        });
        if new {
            crate::observe::metrics::turn_waiting(&sdk);
        }
    }

    /// `thread_id`'s turn waits no more: it started, or its messages were
    /// answered.
    pub fn turn_wait_over(&self, thread_id: &str) {
        let mut over = None;
        self.waiting
            .send_modify(|waiting| over = waiting.remove(thread_id));
        if let Some(turn) = over {
            crate::observe::metrics::turn_wait_ended(&turn.sdk);
        }
    }

    /// Every thread whose turn waits for a slot, longest waiting first.
    pub fn waiting_turn_list(&self) -> Vec<WaitingTurn> {
        let mut turns: Vec<WaitingTurn> = self.waiting.borrow().values().cloned().collect();
        turns.sort_by_key(|t| t.since);
        turns
    }

    /// How many threads' turns wait for a slot now.
    pub fn waiting_turns(&self) -> usize {
        self.waiting.borrow().len()
    }

    /// Stop taking new turns; answer the messages waiting for a turn slot
    /// (their threads do, as they see the drain begin: "runner is
    /// draining"); let running turns go on for `timeout`, then interrupt
    /// them and wait (up to [`INTERRUPT_GRACE`]) for them to end.
    pub async fn drain(&self, timeout: Duration) {
        self.draining.send_replace(true);
        let mut running = self.running.subscribe();
        let mut waiting = self.waiting.subscribe();
        let idle = |turns: &HashMap<String, RunningTurn>| turns.is_empty();
        let settled = tokio::time::timeout(timeout, async {
            let _ = waiting
                .wait_for(|waiting: &HashMap<String, WaitingTurn>| waiting.is_empty())
                .await;
            let _ = running.wait_for(idle).await;
        });
        if settled.await.is_ok() {
            return;
        }
        tracing::info!(
            running = self.running_turns(),
            "drain timeout reached; interrupting running turns"
        );
        for tx in self.mailboxes.all_threads() {
            let _ = tx.send(Queued::internal(ThreadCmd::Drain));
        }
        let _ = tokio::time::timeout(INTERRUPT_GRACE, running.wait_for(idle)).await;
    }
}
