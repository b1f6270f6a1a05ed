//! The engine: its configuration, the live sessions, and the shared parts
//! every request uses (provider store, tool registry, event bus, env
//! registry, model clients, session store). [`Engine::start`] reloads the
//! `STORAGE_TYPE_FILE` sessions of the state dir.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::session::persisted::Write;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use code_agent_proto::agent_event::EventType;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::cron::CronJobs;
use crate::env_registry::EnvRegistry;
use crate::events::EventBus;
use crate::llm::ClientOptions;
use crate::lsp::{LspManager, LspTable};
use crate::memory::{MemoryRegistry, SessionMemory};
use crate::model::ModelClients;
use crate::planning::PlanRegistry;
use crate::providers::ProviderStore;
use crate::sandboxes::{EngineLauncher, Sandboxes};
use crate::session::Session;
use crate::store::{FileStore, validate_session_id};
use crate::tools::{DEFAULT_BASH_TIMEOUT, DEFAULT_OUTPUT_CAP, Tool, ToolContext, ToolRegistry};

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where FILE sessions and providers.json live; `None` keeps nothing.
    pub state_dir: Option<PathBuf>,
    /// The workspace of sessions that name none.
    pub default_workspace: Option<PathBuf>,
    /// Every workspace (Initialize's, a session's, the default) must be at
    /// or under this directory (compared after resolving symlinks);
    /// `None`: any directory. `code-agent serve --workspace-root`.
    pub workspace_root: Option<PathBuf>,
    /// Model calls per generation before it stops (`finish_reason` "length").
    pub max_steps: u32,
    /// Default timeout of one `bash` call.
    pub bash_timeout: Duration,
    /// Bytes kept of one tool's output.
    pub output_cap: usize,
    /// Events buffered per `SubscribeEvents` subscriber.
    pub event_buffer: usize,
    /// Chunks buffered per `StreamGenerate` client.
    pub chunk_buffer: usize,
    /// Live sessions at most.
    pub max_sessions: usize,
    /// Timeouts and retries of model calls.
    pub client_options: ClientOptions,
    /// Where the sandboxes of tool processes (`bash`) come from.
    pub launcher: EngineLauncher,
    /// Cron schedules are read at this offset east of UTC, in seconds
    /// (0, the default: UTC).
    pub cron_utc_offset_seconds: i32,
    /// Language servers by language (defaults: [`LspTable::defaults`]);
    /// `CODE_AGENT_LSP_SERVERS` adds to it at start.
    pub lsp_servers: LspTable,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            state_dir: None,
            default_workspace: None,
            workspace_root: None,
            max_steps: 50,
            bash_timeout: DEFAULT_BASH_TIMEOUT,
            output_cap: DEFAULT_OUTPUT_CAP,
            event_buffer: 1024,
            chunk_buffer: 64,
            max_sessions: 1024,
            client_options: ClientOptions::default(),
            launcher: EngineLauncher::default(),
            cron_utc_offset_seconds: 0,
            lsp_servers: LspTable::defaults(),
        }
    }
}

/// The engine (a cheap handle).
#[derive(Clone, Debug)]
pub struct Engine {
    pub(crate) inner: Arc<EngineInner>,
}

pub(crate) struct EngineInner {
    pub config: EngineConfig,
    pub sessions: RwLock<HashMap<String, Arc<Session>>>,
    pub store: Option<FileStore>,
    pub providers: ProviderStore,
    pub tools: ToolRegistry,
    pub events: EventBus,
    pub env: EnvRegistry,
    pub default_workspace: RwLock<Option<PathBuf>>,
    /// [`EngineConfig::workspace_root`], canonicalized.
    pub workspace_root: Option<PathBuf>,
    pub models: ModelClients,
    /// The sandboxes tool processes are launched in.
    pub sandboxes: Sandboxes,
    /// Cancelled by `Shutdown`: every generation is a child of it.
    pub shutdown: CancellationToken,
    /// MCP servers, global and per session (module `mcp`).
    pub mcp: crate::mcp::McpManager,
    /// Every session's memory store.
    pub memory: Arc<MemoryRegistry>,
    /// Every session's plans.
    pub plans: PlanRegistry,
    /// The cron jobs (each a session's or the operator's) and scheduler.
    pub cron: Arc<CronJobs>,
    /// The language servers (their tools join the built-ins while one runs).
    pub lsp: LspManager,
}

impl std::fmt::Debug for EngineInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("sessions", &self.session_list().len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Opens the state dir (if any), the provider store, and reloads the
    /// FILE sessions found there.
    pub async fn start(config: EngineConfig) -> anyhow::Result<Engine> {
        let default_workspace = match &config.default_workspace {
            Some(path) => Some(
                std::fs::canonicalize(path)
                    .with_context(|| format!("default workspace {}", path.display()))?,
            ),
            None => None,
        };
        let workspace_root = match &config.workspace_root {
            Some(path) => {
                let root = std::fs::canonicalize(path)
                    .with_context(|| format!("workspace root {}", path.display()))?;
                anyhow::ensure!(
                    root.is_dir(),
                    "workspace root {} is not a directory",
                    path.display()
                );
                Some(root)
            }
            None => None,
        };
        if let (Some(root), Some(default)) = (&workspace_root, &default_workspace) {
            anyhow::ensure!(
                default.starts_with(root),
                "default workspace {} is outside the workspace root {}",
                default.display(),
                root.display()
            );
        }
        let store = match &config.state_dir {
            Some(dir) => Some(FileStore::open(dir)?),
            None => None,
        };
        let providers = ProviderStore::open(config.state_dir.as_deref())
            .context("opening the provider store")?;
        let mut sessions = HashMap::new();
        if let Some(store) = &store {
            let (records, skipped) = store.load_all()?;
            for error in skipped {
                tracing::warn!(%error, "skipping an unreadable session file");
            }
            for record in records {
                let id = record.session_id.clone();
                match Session::from_record(record, default_workspace.as_deref()) {
                    Ok(session) => {
                        sessions.insert(id, Arc::new(session));
                    }
                    Err(error) => tracing::warn!(session_id = %id, %error, "skipping a session"),
                }
            }
            tracing::info!(count = sessions.len(), "reloaded file-backed sessions");
        }
        let mut lsp_servers = config.lsp_servers.clone();
        if let Ok(json) = std::env::var("CODE_AGENT_LSP_SERVERS") {
            lsp_servers
                .extend_from_json(&json)
                .map_err(anyhow::Error::msg)?;
        }
        let sandboxes = Sandboxes::new(
            &config.launcher,
            config.state_dir.as_deref(),
            &lsp_servers.read_only_paths(),
        )
        .context("preparing the tool sandbox")?;
        let lsp = LspManager::new(lsp_servers, sandboxes.clone());
        let config_state_dir = config.state_dir.clone();
        let shutdown = CancellationToken::new();
        let cron = Arc::new(
            CronJobs::open(
                config.state_dir.as_deref(),
                sandboxes.clone(),
                shutdown.clone(),
                config.cron_utc_offset_seconds,
                &|id| sessions.contains_key(id),
            )
            .context("loading the cron jobs")?,
        );
        let inner = EngineInner {
            lsp,
            sandboxes,
            events: EventBus::new(config.event_buffer),
            models: ModelClients::new(config.client_options.clone()),
            config,
            sessions: RwLock::new(sessions),
            store,
            providers,
            tools: crate::cron::tool::with_cron_tools(crate::planning::tool::with_planning_tools(
                crate::memory::tool::with_memory_tools(ToolRegistry::builtin()),
            )),
            env: EnvRegistry::default(),
            default_workspace: RwLock::new(default_workspace),
            workspace_root,
            shutdown,
            mcp: crate::mcp::McpManager::default(),
            memory: Arc::new(MemoryRegistry::new(config_state_dir.as_deref())),
            plans: PlanRegistry::new(config_state_dir.as_deref()),
            cron: cron.clone(),
        };
        tokio::spawn(cron.clone().schedule_loop());
        let inner = Arc::new(inner);
        // Cron runs get `Initialize`'s env like `bash` does (looked up at
        // each run, never written to the jobs file).
        cron.set_events(inner.events.clone());
        let weak = Arc::downgrade(&inner);
        cron.set_env_source(Box::new(move |workspace| {
            weak.upgrade()
                .map(|engine| engine.env.env_for(workspace))
                .unwrap_or_default()
        }));
        Ok(Engine { inner })
    }

    /// Cancelled once `Shutdown` was called (or [`Engine::shutdown`]).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// The sandboxes tool processes run in: an embedder registers its
    /// threads' sandboxes here.
    pub fn sandboxes(&self) -> Sandboxes {
        self.inner.sandboxes.clone()
    }

    /// Cancels every generation and writes every FILE session.
    pub async fn shutdown(&self) {
        self.inner.shutdown_all().await;
    }
}

impl EngineInner {
    /// The tool called `name`: a built-in, or an LSP tool while a language
    /// server runs.
    pub fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools
            .get(name)
            .or_else(|| self.lsp_tools().into_iter().find(|t| t.name() == name))
    }

    /// Every tool the model has now: the built-ins, then the LSP tools while
    /// a language server runs.
    pub fn all_tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut all = self.tools.all();
        all.extend(self.lsp_tools());
        all
    }

    /// The specs of [`all_tools`](Self::all_tools), sent to the model.
    pub fn tool_specs(&self) -> Vec<crate::llm::ToolSpec> {
        let mut specs = self.tools.specs();
        specs.extend(self.lsp_tools().iter().map(|tool| crate::llm::ToolSpec {
            name: tool.name().to_string(),
            description: tool.description().to_string(),
            parameters: tool.parameters(),
        }));
        specs
    }

    fn lsp_tools(&self) -> Vec<Arc<dyn Tool>> {
        if self.lsp.any_running() {
            crate::lsp::lsp_tools(&self.lsp)
        } else {
            Vec::new()
        }
    }

    /// Every live session.
    pub fn session_list(&self) -> Vec<Arc<Session>> {
        let mut list: Vec<_> = self
            .sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        list.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        list
    }

    /// The session `id`: InvalidArgument when malformed, NotFound when unknown.
    pub fn session(&self, id: &str) -> Result<Arc<Session>, Status> {
        validate_session_id(id).map_err(Status::invalid_argument)?;
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("session_id: no session {id:?}")))
    }

    /// Adds a new session (AlreadyExists / ResourceExhausted when refused).
    pub fn insert(&self, session: Arc<Session>) -> Result<(), Status> {
        let mut sessions = self.sessions.write().unwrap_or_else(|e| e.into_inner());
        if sessions.contains_key(&session.id) {
            return Err(Status::already_exists(format!(
                "session_id: session {:?} already exists",
                session.id
            )));
        }
        if sessions.len() >= self.config.max_sessions {
            return Err(Status::resource_exhausted(format!(
                "at most {} sessions; destroy one first",
                self.config.max_sessions
            )));
        }
        // Whatever an earlier session of this id left behind (one whose
        // file could not be reloaded, a tool call that ended after the
        // destroy) is not this session's.
        self.forget_state(&session.id);
        sessions.insert(session.id.clone(), session);
        Ok(())
    }

    /// Drops the state kept for session `id` outside the session itself:
    /// memories, plans, MCP servers (their processes end), cron jobs (a
    /// running one is cancelled). The jobs file is written in the
    /// background.
    fn forget_state(&self, id: &str) {
        self.memory.remove(id);
        self.plans.remove(id);
        self.mcp.forget_session(id);
        if self.cron.forget_session_now(id) {
            let cron = self.cron.clone();
            tokio::spawn(async move { cron.persist().await });
        }
    }

    /// Removes a session: its file, and everything kept for it outside
    /// (memories, plans, MCP servers, cron jobs).
    pub async fn remove(&self, id: &str) -> Result<Arc<Session>, Status> {
        let session = self
            .sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
            .ok_or_else(|| Status::not_found(format!("session_id: no session {id:?}")))?;
        session.mark_destroyed();
        session.generation.cancel();
        // Its state goes before its file, so a failure to delete the file
        // leaves nothing for a later session of this id either.
        self.memory.remove(id);
        self.plans.remove(id);
        self.mcp.forget_session(id);
        self.cron.forget_session(id).await;
        self.delete_file(&session).await?;
        Ok(session)
    }

    /// Deletes a session's file (a missing one is fine).
    pub async fn delete_file(&self, session: &Session) -> Result<(), Status> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let _guard = session.persist_lock.lock().await;
        let (store, id) = (store.clone(), session.id.clone());
        let generation = session.log_generation();
        tokio::task::spawn_blocking(move || store.delete(&id, generation))
            .await
            .map_err(|e| Status::internal(format!("deleting the session file: {e}")))?
            .map_err(|e| Status::internal(e.to_string()))
    }

    /// Writes a FILE session to the state dir (nothing for MEMORY ones).
    pub async fn persist(&self, session: &Session) -> Result<(), Status> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let _guard = session.persist_lock.lock().await;
        // This snapshot covers whatever a queued background save would
        // have written.
        session.save_queued.store(false, Ordering::Release);
        if !session.is_file_backed() || session.is_destroyed() {
            return Ok(());
        }
        let (write, mut written) = session.next_write();
        let store = store.clone();
        let result = tokio::task::spawn_blocking(move || match write {
            Write::Snapshot { record, previous } => store.save(&record, previous),
            Write::Append { generation, delta } => store.append(generation, &delta),
        })
        .await
        .map_err(|e| Status::internal(format!("writing the session file: {e}")))
        .and_then(|r| r.map_err(|e| Status::internal(e.to_string())));
        match result {
            Ok(bytes) => {
                written.bytes = bytes;
                session.wrote(Some(written));
                Ok(())
            }
            Err(status) => {
                session.wrote(None);
                Err(status)
            }
        }
    }

    /// Saves `session` in the background, for a step in the middle of a
    /// turn: the turn goes on to the model while the file is written, and
    /// its last step's [`persist`](Self::persist) (awaited) waits for this
    /// one and writes the newest state. At most one background save is
    /// queued per session; a change made before it takes its snapshot is
    /// written by it. A failure is reported as by
    /// [`persist_or_report`](Self::persist_or_report).
    pub fn persist_soon(self: &Arc<Self>, session: &Arc<Session>) {
        if self.store.is_none() || !session.is_file_backed() {
            return;
        }
        if session.save_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let (engine, session) = (self.clone(), session.clone());
        tokio::spawn(async move { engine.persist_or_report(&session).await });
    }

    /// Like [`persist`](Self::persist), for places that can only report.
    pub async fn persist_or_report(&self, session: &Session) {
        if let Err(status) = self.persist(session).await {
            tracing::warn!(session_id = %session.id, error = %status.message(), "session not saved");
            self.events.emit(
                EventType::Error,
                Some(&session.id),
                &format!("session not saved: {}", status.message()),
                [("kind", "persist")],
            );
        }
    }

    /// The engine-wide default workspace.
    pub fn default_workspace(&self) -> Option<PathBuf> {
        self.default_workspace
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The workspace tools of `session` run in (refused when outside the
    /// workspace root, e.g. a FILE session saved before the root was set).
    pub fn workspace_of(&self, session: &Session) -> Result<PathBuf, Status> {
        let workspace = session
            .read(|d| d.workspace.clone())
            .or_else(|| self.default_workspace())
            .ok_or_else(|| {
                Status::failed_precondition(
                    "session has no workspace: set config.workspace, call Initialize with a workspace, or start the engine with --workspace",
                )
            })?;
        self.confine("config.workspace", &workspace)?;
        Ok(workspace)
    }

    /// `Ok` when `canonical` (already resolved, symlinks included) is at or
    /// under the workspace root (or there is none); else PERMISSION_DENIED
    /// naming `field`.
    pub fn confine(&self, field: &str, canonical: &Path) -> Result<(), Status> {
        match &self.workspace_root {
            Some(root) if !canonical.starts_with(root) => Err(Status::permission_denied(format!(
                "{field}: {} is outside this engine's workspace root {} (code-agent serve --workspace-root)",
                canonical.display(),
                root.display()
            ))),
            _ => Ok(()),
        }
    }

    /// What one tool call of `session` runs with.
    pub fn tool_context(
        &self,
        session: &Session,
        workspace: &Path,
        cancel: CancellationToken,
    ) -> ToolContext {
        let mut extensions = crate::tools::Extensions::default();
        extensions.insert(Arc::new(SessionMemory {
            registry: self.memory.clone(),
            session_id: session.id.clone(),
            file_backed: session.is_file_backed(),
        }));
        extensions.insert(
            self.plans
                .for_session(&session.id, session.is_file_backed()),
        );
        extensions.insert(Arc::new(crate::cron::tool::SessionCron {
            jobs: self.cron.clone(),
            owner: crate::cron::Owner {
                session: session.id.clone(),
                destroyed: session.destroyed_flag(),
            },
        }));
        ToolContext {
            extensions,
            workspace: workspace.to_path_buf(),
            cancel,
            env: self.env.env_for(workspace),
            bash_timeout: self.config.bash_timeout,
            output_cap: self.config.output_cap,
            todos: session.todos.clone(),
            sandbox: self.sandboxes.for_workspace(workspace),
        }
    }

    /// Cancels everything and flushes every FILE session.
    pub async fn shutdown_all(&self) {
        self.shutdown.cancel();
        for session in self.session_list() {
            session.generation.cancel();
            self.persist_or_report(&session).await;
        }
        self.lsp.stop_all().await;
        self.sandboxes.close_own();
    }
}
