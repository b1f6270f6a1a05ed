//! One task per agent: creates and deletes it, creates its threads, installs
//! its skills, one request at a time in arrival order.
//!
//! The task is started on the agent's first request and retires when its
//! mailbox is empty and the agent does not exist (never created, or deleted),
//! so ids that lead nowhere cost nothing.

use std::sync::Arc;

use agent_runner_proto::runner::{AgentStatus, ThreadStatus};
use sdk_adapter::{AgentSpec, ThreadSpec};
use tokio::sync::{mpsc, oneshot};

use crate::delivery::messages::{self, RequestId};
use crate::host::skills;
use crate::host::store::{AgentRow, ThreadRow};
use crate::tasks::context::Runtime;
use crate::tasks::mail::{AgentCmd, NewThread, ThreadCmd};
use crate::tasks::mailboxes::{AgentTx, Queued};

/// Queues `cmd` for `agent_id`'s task, starting the task on the agent's
/// first request. Never waits; a full mailbox hands `cmd` back.
pub fn route(rt: &Arc<Runtime>, agent_id: &str, cmd: AgentCmd) -> Result<(), AgentCmd> {
    rt.mailboxes
        .send_agent(agent_id, cmd, || spawn(rt.clone(), agent_id.to_owned()))
}

fn spawn(rt: Arc<Runtime>, agent_id: String) -> AgentTx {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let me = tx.clone();
    let tracker = rt.tasks.clone();
    tracker.spawn(async move {
        let mut task = AgentTask {
            rt,
            agent_id,
            row: None,
        };
        loop {
            let Some(cmd) = rx.recv().await.map(Queued::take) else {
                break;
            };
            let result = task.handle(cmd).await;
            if let Err((rid, text)) = result {
                tracing::warn!(request_id = ?rid, agent_id = %task.agent_id, reason = %text, "request refused");
                task.rt
                    .outbox
                    .push(messages::request_error(rid, text))
                    .await;
            }
            let exists = matches!(task.row, Some(Some(_)));
            if !exists
                && task
                    .rt
                    .mailboxes
                    .retire_agent(&task.agent_id, &me, || rx.is_empty())
            {
                break;
            }
        }
    });
    tx
}

struct AgentTask {
    rt: Arc<Runtime>,
    agent_id: String,
    /// The agent's row: `None` until first read from the store, then kept
    /// current here (this task is the row's only writer).
    row: Option<Option<AgentRow>>,
}

type Reply = Result<(), (RequestId, String)>;

impl AgentTask {
    /// The agent as stored; read once, then from memory.
    fn agent(&mut self, rid: &RequestId) -> Result<Option<AgentRow>, (RequestId, String)> {
        if self.row.is_none() {
            let row = self
                .rt
                .store
                .agent(&self.agent_id)
                .map_err(|e| (rid.clone(), e.to_string()))?;
            self.row = Some(row);
        }
        Ok(self.row.clone().flatten())
    }

    async fn handle(&mut self, cmd: AgentCmd) -> Reply {
        match cmd {
            AgentCmd::Create { sdk, rid } => self.create(sdk, rid).await,
            AgentCmd::Delete { rid } => self.delete(rid).await,
            AgentCmd::CreateThread { thread, rid } => self.create_thread(*thread, rid).await,
            AgentCmd::InstallSkill { package, rid } => self.install_skill(package, rid).await,
        }
    }

    async fn create(&mut self, sdk: String, rid: RequestId) -> Reply {
        if let Some(row) = self.agent(&rid)? {
            if row.sdk != sdk {
                return Err((
                    rid,
                    format!(
                        "agent {} already exists with SDK {:?}; delete it before re-creating it with {sdk:?}",
                        self.agent_id, row.sdk
                    ),
                ));
            }
            self.rt
                .outbox
                .push(messages::agent(rid, &self.agent_id, AgentStatus::Ready))
                .await;
            return Ok(());
        }
        let rt = self.rt.clone();
        let Some(adapter) = rt.sdks.get(&sdk) else {
            return Err((
                rid,
                format!(
                    "create_agent_request.agent_sdk: unknown SDK {sdk:?} (this runner offers: {})",
                    rt.sdks.names().join(", ")
                ),
            ));
        };
        let home = rt.workspaces.agent_home(&self.agent_id);
        rt.workspaces
            .create(&home)
            .map_err(|e| (rid.clone(), format!("creating the agent's home: {e}")))?;
        let spec = AgentSpec {
            agent_id: self.agent_id.clone(),
            home,
        };
        adapter.create_agent(&spec).await.map_err(|e| {
            crate::observe::metrics::adapter_error(&sdk, "create_agent");
            (rid.clone(), e.to_string())
        })?;
        let row = AgentRow {
            agent_id: self.agent_id.clone(),
            sdk,
        };
        rt.store
            .put_agent(&row)
            .map_err(|e| (rid.clone(), e.to_string()))?;
        self.row = Some(Some(row));
        rt.outbox
            .push(messages::agent(rid, &self.agent_id, AgentStatus::Ready))
            .await;
        Ok(())
    }

    async fn delete(&mut self, rid: RequestId) -> Reply {
        let row = self.agent(&rid)?;
        let rt = self.rt.clone();
        for tx in rt.mailboxes.agent_threads(&self.agent_id) {
            let (done, wait) = oneshot::channel();
            let cmd = ThreadCmd::Delete {
                rid: rid.clone(),
                done: Some(done),
            };
            if tx.send(Queued::internal(cmd)).is_ok() {
                let _ = wait.await;
            }
        }
        if let Some(row) = row
            && let Some(adapter) = rt.sdks.get(&row.sdk)
            && let Err(e) = adapter.delete_agent(&self.agent_id).await
        {
            crate::observe::metrics::adapter_error(&row.sdk, "delete_agent");
            tracing::warn!(agent_id = %self.agent_id, error = %e, "SDK failed to delete agent");
        }
        if let Err(e) = rt
            .workspaces
            .remove(&rt.workspaces.agent_home(&self.agent_id))
        {
            tracing::warn!(agent_id = %self.agent_id, error = %e, "removing agent home failed");
        }
        rt.store
            .delete_agent(&self.agent_id)
            .map_err(|e| (rid.clone(), e.to_string()))?;
        self.row = Some(None);
        rt.outbox
            .push(messages::agent(rid, &self.agent_id, AgentStatus::Deleted))
            .await;
        Ok(())
    }

    async fn install_skill(&mut self, package: String, rid: RequestId) -> Reply {
        if self.agent(&rid)?.is_none() {
            return Err((
                rid,
                format!(
                    "install_skills_mp_request.agent_id: unknown agent {}",
                    self.agent_id
                ),
            ));
        }
        let rt = &self.rt;
        let home = rt.workspaces.agent_home(&self.agent_id);
        let settings = rt.skills.clone();
        let pkg = package.clone();
        let git_env = self.skill_git_env(&package).await;
        let result = tokio::task::spawn_blocking(move || {
            skills::install_package(&home, &pkg, &settings, &git_env)
        })
        .await;
        match result {
            Ok(Ok(installed)) => {
                tracing::info!(agent_id = %self.agent_id, package = %package, ?installed, "skill package installed");
                self.link_into_thread_skills().await;
                rt.outbox
                    .push(messages::skill_installed(rid, &self.agent_id, &package))
                    .await;
                Ok(())
            }
            // git's message could quote a URL: the link masks tokens in every
            // message it sends.
            Ok(Err(e)) => Err((rid, e.to_string())),
            Err(join) => Err((rid, format!("skill installation crashed: {join}"))),
        }
    }

    /// Git environment carrying an installation token when the package is a
    /// repository on the GitHub host that an installation covers; empty
    /// otherwise (public repositories and other hosts need none, and a
    /// broker failure is logged and the fetch tried without a token).
    async fn skill_git_env(&self, package: &str) -> Vec<(String, String)> {
        let Ok(source) = skills::coordinate::parse(package) else {
            return Vec::new();
        };
        self.git_env_for(&source).await
    }

    /// [`AgentTask::skill_git_env`] for a parsed source.
    async fn git_env_for(&self, source: &skills::coordinate::Source) -> Vec<(String, String)> {
        let Some(broker) = self.rt.github() else {
            return Vec::new();
        };
        let Some((target, url)) = skills::auth::github_repo(source, broker.git_host()) else {
            return Vec::new();
        };
        match broker.token_for_repo(&target.owner, &target.repo).await {
            Ok(token) => skills::auth::git_env(&url, token.token.expose()),
            Err(e) => {
                tracing::info!(
                    agent_id = %self.agent_id,
                    repo = %format!("{}/{}", target.owner, target.repo),
                    error = %e,
                    "fetching the skill package without an installation token"
                );
                Vec::new()
            }
        }
    }

    async fn create_thread(&mut self, request: NewThread, rid: RequestId) -> Reply {
        let NewThread {
            thread_id: chosen,
            instructions,
            skill_packages,
            model,
            reasoning_level,
            mcp_servers,
            agent_api_token,
        } = request;
        let reasoning_level = reasoning_level.filter(|l| !l.is_empty());
        let Some(agent) = self.agent(&rid)? else {
            return Err((
                rid,
                format!(
                    "create_thread_request.agent_id: unknown agent {}",
                    self.agent_id
                ),
            ));
        };
        let rt = &self.rt;
        if let Some(id) = &chosen
            && self.thread_exists(id, &rid)?
        {
            // Idempotent: the thread is there already.
            tracing::info!(agent_id = %self.agent_id, thread_id = %id, "thread exists already; answering READY again");
            rt.outbox
                .push(messages::thread(rid, id, ThreadStatus::Ready))
                .await;
            return Ok(());
        }
        let Some(adapter) = rt.sdks.get(&agent.sdk) else {
            return Err((
                rid,
                format!(
                    "agent {}'s SDK {:?} is not enabled on this runner",
                    self.agent_id, agent.sdk
                ),
            ));
        };
        rt.sdks
            .check_model(&agent.sdk, &model, reasoning_level.as_deref())
            .map_err(|e| (rid.clone(), format!("create_thread_request: {e}")))?;
        let thread_id = chosen.unwrap_or_else(|| format!("thr-{}", uuid::Uuid::new_v4().simple()));
        let Some(_claim) = rt.mailboxes.claim_thread(&thread_id) else {
            return Err((
                rid,
                format!(
                    "create_thread_request.thread_id: thread {thread_id} is being created or deleted by another request; retry later"
                ),
            ));
        };
        // Directories, cgroups and SQLite are blocking work: off the async
        // workers, so a burst of creations cannot hold up the ControlChannel
        // (heartbeats included).
        let tid = thread_id.clone();
        let workspace = self
            .blocking(move |rt, agent_id| rt.workspaces.create_thread(agent_id, &tid))
            .await
            .map_err(|e| (rid.clone(), format!("creating the thread's workspace: {e}")))?;
        if !skill_packages.is_empty()
            && let Err(text) = self.thread_skills(&skill_packages, &workspace).await
        {
            let _ = rt.workspaces.remove(&workspace);
            return Err((rid, text));
        }
        // The environment too: issuing the thread's git capability writes
        // a file and adds a secret to the redactor, whose rebuild took
        // milliseconds with a thousand threads; on an async worker, every
        // task queued behind it (the read loop's heartbeats too) waited.
        let tid = thread_id.clone();
        let (sandbox, mut env) = self
            .blocking(move |rt, agent_id| {
                Ok((
                    rt.thread_sandbox(agent_id, &tid),
                    rt.thread_env(agent_id, &tid),
                ))
            })
            .await
            .map_err(|e| (rid.clone(), format!("preparing the thread's sandbox: {e}")))?;
        let token = agent_api_token.as_ref().map(|t| t.expose().to_owned());
        let spec_instructions = rt.with_agent_api(token.as_deref(), &mut env, instructions.clone());
        let mut spec = ThreadSpec {
            agent_id: self.agent_id.clone(),
            thread_id: thread_id.clone(),
            workspace: workspace.clone(),
            model: model.clone(),
            reasoning_level: reasoning_level.clone(),
            sdk_thread_id: None,
            env,
            sandbox,
            instructions: spec_instructions,
            mcp_servers: crate::tasks::mcp_spec::shared(mcp_servers),
        };
        let handle = match adapter.create_thread(&spec).await {
            Ok(h) => h,
            Err(e) => {
                crate::observe::metrics::adapter_error(&agent.sdk, "create_thread");
                rt.discard_thread(&self.agent_id, &thread_id).await;
                return Err((rid, e.to_string()));
            }
        };
        spec.sdk_thread_id = Some(handle.sdk_thread_id.clone());
        let row = ThreadRow {
            thread_id: thread_id.clone(),
            agent_id: self.agent_id.clone(),
            sdk_thread_id: handle.sdk_thread_id,
            model,
            reasoning_level,
            last_turn_id: None,
            instructions,
            agent_api_token: token,
        };
        let inserted = self
            .blocking(move |rt, _| {
                rt.store
                    .insert_thread(&row)
                    .map_err(|e| std::io::Error::other(e.to_string()))
            })
            .await;
        if let Err(e) = inserted {
            // The claim keeps other creations out, so this is the store
            // failing: undo.
            let _ = adapter.delete_thread(&spec).await;
            rt.discard_thread(&self.agent_id, &thread_id).await;
            return Err((rid, format!("create_thread_request.thread_id: {e}")));
        }
        rt.set_thread_mcp_servers(&thread_id, spec.mcp_servers.clone());
        crate::tasks::thread::start(rt, agent.sdk, spec, None);
        rt.outbox
            .push(messages::thread(rid, &thread_id, ThreadStatus::Ready))
            .await;
        Ok(())
    }
}

/// Blocking steps of agents (thread creation) running at once. A burst of
/// thousands of creations would otherwise grow tokio's blocking pool to
/// hundreds of threads (each with its stack and malloc arena: tens of MiB
/// at 10,000 threads); more than a few gain nothing on file system and
/// SQLite work. Callers wait their turn (fairly, in arrival order).
static BLOCKING_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

impl AgentTask {
    /// Runs blocking `work` (file system, cgroups, SQLite) on the blocking
    /// pool with the runtime and this agent's id; a panic is an error.
    async fn blocking<R, F>(&self, work: F) -> std::io::Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Runtime, &str) -> std::io::Result<R> + Send + 'static,
    {
        let (rt, agent_id) = (self.rt.clone(), self.agent_id.clone());
        // Closed never: the semaphore is a static.
        let _slot = BLOCKING_SLOTS
            .acquire()
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let done = work(&rt, &agent_id);
            // The pool's thread may now sit idle for seconds, keeping what
            // the work freed (a redactor automaton of megabytes): tokio's
            // park hook, which purges it on the workers, is not run here.
            crate::util::allocator::before_wait();
            done
        })
        .await
        .map_err(|e| std::io::Error::other(format!("crashed: {e}")))?
    }

    /// Whether thread `thread_id` exists already for this agent; a thread of
    /// another agent with that id is an error naming the field.
    fn thread_exists(&self, thread_id: &str, rid: &RequestId) -> Result<bool, (RequestId, String)> {
        let row = self
            .rt
            .store
            .thread(thread_id)
            .map_err(|e| (rid.clone(), e.to_string()))?;
        match row {
            None => Ok(false),
            Some(row) if row.agent_id == self.agent_id => Ok(true),
            Some(row) => Err((
                rid.clone(),
                format!(
                    "create_thread_request.thread_id: thread {thread_id} belongs to agent {}, not {}",
                    row.agent_id, self.agent_id
                ),
            )),
        }
    }

    /// Fetches, checks and links `packages` into the new thread's
    /// `workspace` (module [`skills::thread`]); the error names the package.
    async fn thread_skills(
        &self,
        packages: &[skills::thread::ThreadPackage],
        workspace: &std::path::Path,
    ) -> Result<(), String> {
        let mut envs = Vec::with_capacity(packages.len());
        for package in packages {
            let env = match skills::coordinate::parse(&package.repository_url) {
                Ok(source) => self.git_env_for(&source).await,
                Err(_) => Vec::new(),
            };
            envs.push(env);
        }
        let rt = &self.rt;
        let home = rt.workspaces.agent_home(&self.agent_id);
        // Agent homes sit directly under the workspace root.
        let root = home.parent().map(std::path::Path::to_owned).unwrap_or(home);
        let agent_skills = rt.workspaces.agent_skills(&self.agent_id);
        let (workspace, packages) = (workspace.to_owned(), packages.to_vec());
        let settings = rt.skills.clone();
        let linked = tokio::task::spawn_blocking(move || {
            skills::thread::install(
                &root,
                &agent_skills,
                &workspace,
                &packages,
                &envs,
                &settings,
            )
        })
        .await
        .map_err(|join| format!("fetching the thread's skill packages crashed: {join}"))??;
        let names: Vec<&str> = linked.iter().map(|s| s.name.as_str()).collect();
        tracing::info!(agent_id = %self.agent_id, skills = ?names, "thread skill packages linked");
        Ok(())
    }

    /// After an agent skill install: threads with skills of their own get
    /// links to the agent's new skills too.
    async fn link_into_thread_skills(&self) {
        let threads = self
            .rt
            .workspaces
            .agent_home(&self.agent_id)
            .join("threads");
        let agent_skills = self.rt.workspaces.agent_skills(&self.agent_id);
        let agent_id = self.agent_id.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let Ok(entries) = std::fs::read_dir(&threads) else {
                return;
            };
            for entry in entries.flatten() {
                if let Err(e) = skills::thread::link_agent_skills(&agent_skills, &entry.path()) {
                    tracing::warn!(%agent_id, thread = ?entry.file_name(), error = %e, "linking the agent's skills into a thread failed");
                }
            }
        })
        .await;
    }
}
