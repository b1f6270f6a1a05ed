//! A session: its configuration, history, todos, permissions, confirmation
//! policy, lane handlers, loaded skills and token usage, plus the live
//! parts that are never persisted (the running generation, pause switch,
//! calls waiting for confirmation, pending external tasks).

pub mod generation;
pub mod message;
pub mod record;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use code_agent_proto::{
    ConfirmationPolicy, ContextUsage, LaneHandlerConfig, PermissionPolicy, Session as ProtoSession,
    SessionConfig, SessionState, StorageType, Todo,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::hitl::{self, PendingConfirmations};
use crate::lanes::{self, PendingTasks};
use crate::permissions::Permissions;
use generation::GenerationSlot;
use message::{StoredMessage, now_ms};
use record::{
    ConfigRecord, ConfirmationRecord, LaneRecord, PolicyRecord, RECORD_VERSION, SessionRecord,
    SkillRecord, TodoRecord, UsageRecord,
};

/// A session's persisted state, behind one lock.
pub struct SessionData {
    pub config: SessionConfig,
    /// The canonical workspace (config, else the engine's default).
    pub workspace: Option<PathBuf>,
    pub messages: Vec<StoredMessage>,
    pub usage: UsageRecord,
    pub permissions: Permissions,
    pub confirmation: ConfirmationPolicy,
    pub lanes: BTreeMap<i32, LaneHandlerConfig>,
    pub skills: BTreeMap<String, SkillRecord>,
    pub updated_at: i64,
    /// The last generation failed (state ERROR until the next one).
    pub failed: bool,
}

impl SessionData {
    /// Usage as the wire reports it: the last call's prompt tokens plus
    /// its completion tokens, and the number of messages.
    pub fn context_usage(&self) -> ContextUsage {
        ContextUsage {
            total_tokens: self
                .usage
                .prompt_tokens
                .saturating_add(self.usage.completion_tokens),
            prompt_tokens: self.usage.prompt_tokens,
            completion_tokens: self.usage.completion_tokens,
            message_count: u32::try_from(self.messages.len()).unwrap_or(u32::MAX),
        }
    }

    /// The lane handler for `lane` (INTERNAL unless set).
    pub fn lane_handler(&self, lane: i32) -> LaneHandlerConfig {
        self.lanes
            .get(&lane)
            .cloned()
            .unwrap_or_else(lanes::default_handler)
    }
}

/// Canonicalizes `path`, which must be an existing directory; errors name
/// `field`. Blocking filesystem calls: async handlers use
/// [`canonical_dir_off_worker`].
pub fn canonical_dir(field: &str, path: &str) -> Result<PathBuf, String> {
    let canonical = std::fs::canonicalize(path).map_err(|e| format!("{field}: {path:?}: {e}"))?;
    if !canonical.is_dir() {
        return Err(format!("{field}: {path:?} is not a directory"));
    }
    Ok(canonical)
}

/// [`canonical_dir`] on the blocking pool, off the async workers.
pub async fn canonical_dir_off_worker(
    field: &'static str,
    path: String,
) -> Result<PathBuf, String> {
    tokio::task::spawn_blocking(move || canonical_dir(field, &path))
        .await
        .map_err(|e| format!("{field}: resolving the directory: {e}"))?
}

/// Resolves `config.workspace` (must be an existing directory), else the
/// engine's default. Blocking: only for the engine's start.
pub fn resolve_workspace(
    configured: &str,
    default: Option<&Path>,
) -> Result<Option<PathBuf>, String> {
    if configured.is_empty() {
        return Ok(default.map(Path::to_path_buf));
    }
    canonical_dir("config.workspace", configured).map(Some)
}

/// One session.
pub struct Session {
    pub id: String,
    pub created_at: i64,
    data: Mutex<SessionData>,
    /// Shared with the `todo` tool through its `ToolContext`.
    pub todos: Arc<Mutex<Vec<Todo>>>,
    pub generation: GenerationSlot,
    pause: watch::Sender<bool>,
    pub confirmations: PendingConfirmations,
    pub external: PendingTasks,
    /// Serialises writes of this session's file (newest snapshot wins).
    pub persist_lock: tokio::sync::Mutex<()>,
    /// A background save is queued and has not taken its snapshot yet: a
    /// later change is written by it, so no second one is queued.
    pub save_queued: AtomicBool,
    /// Set once destroyed: a generation still winding down must not write
    /// the file back.
    destroyed: AtomicBool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).finish()
    }
}

impl Session {
    /// A new session.
    pub fn new(
        id: String,
        config: SessionConfig,
        workspace: Option<PathBuf>,
        messages: Vec<StoredMessage>,
    ) -> Result<Self, String> {
        let now = now_ms();
        let permissions = Permissions::from_policy(&PermissionPolicy::default())?;
        Ok(Self::assemble(
            id,
            now,
            SessionData {
                config,
                workspace,
                messages,
                usage: UsageRecord::default(),
                permissions,
                confirmation: hitl::default_policy(),
                lanes: BTreeMap::new(),
                skills: BTreeMap::new(),
                updated_at: now,
                failed: false,
            },
            Vec::new(),
        ))
    }

    /// A session reloaded from its file.
    pub fn from_record(
        record: SessionRecord,
        default_workspace: Option<&Path>,
    ) -> Result<Self, String> {
        let config = record.config.to_proto();
        // A configured workspace that is gone stays configured (its tool
        // calls then fail) rather than silently becoming the default one.
        let workspace = resolve_workspace(&config.workspace, default_workspace)
            .unwrap_or_else(|_| Some(PathBuf::from(&config.workspace)));
        let permissions = match &record.permissions {
            Some(p) => Permissions::from_policy(&p.to_proto())?,
            None => Permissions::from_policy(&PermissionPolicy::default())?,
        };
        let data = SessionData {
            config,
            workspace,
            messages: record.messages,
            usage: record.usage,
            permissions,
            confirmation: record
                .confirmation
                .map(|c| hitl::normalize(c.to_proto()))
                .unwrap_or_else(hitl::default_policy),
            lanes: record
                .lanes
                .iter()
                .map(|l| (l.lane, l.to_proto()))
                .collect(),
            skills: record
                .skills
                .into_iter()
                .map(|s| (s.name.clone(), s))
                .collect(),
            updated_at: record.updated_at,
            failed: false,
        };
        let todos = record.todos.iter().map(TodoRecord::to_proto).collect();
        Ok(Self::assemble(
            record.session_id,
            record.created_at,
            data,
            todos,
        ))
    }

    fn assemble(id: String, created_at: i64, data: SessionData, todos: Vec<Todo>) -> Self {
        Self {
            id,
            created_at,
            data: Mutex::new(data),
            todos: Arc::new(Mutex::new(todos)),
            generation: GenerationSlot::default(),
            pause: watch::channel(false).0,
            confirmations: PendingConfirmations::default(),
            external: PendingTasks::default(),
            persist_lock: tokio::sync::Mutex::new(()),
            save_queued: AtomicBool::new(false),
            destroyed: AtomicBool::new(false),
        }
    }

    /// Marks the session destroyed (its file is never written again).
    pub fn mark_destroyed(&self) {
        self.destroyed.store(true, Ordering::SeqCst);
    }

    /// Whether the session was destroyed.
    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::SeqCst)
    }

    /// Reads the state.
    pub fn read<R>(&self, f: impl FnOnce(&SessionData) -> R) -> R {
        f(&self.data.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Changes the state (and its `updated_at`).
    pub fn update<R>(&self, f: impl FnOnce(&mut SessionData) -> R) -> R {
        let mut data = self.data.lock().unwrap_or_else(|e| e.into_inner());
        data.updated_at = now_ms();
        f(&mut data)
    }

    /// Appends messages to the history.
    pub fn append(&self, messages: impl IntoIterator<Item = StoredMessage>) {
        self.update(|d| d.messages.extend(messages));
    }

    /// Whether the session is written to the state dir.
    pub fn is_file_backed(&self) -> bool {
        self.read(|d| d.config.storage_type == StorageType::File as i32)
    }

    /// A copy of the todo list.
    pub fn todo_list(&self) -> Vec<Todo> {
        self.todos.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the todo list.
    pub fn set_todos(&self, todos: Vec<Todo>) {
        *self.todos.lock().unwrap_or_else(|e| e.into_inner()) = todos;
        self.update(|_| ());
    }

    /// Whether the session is paused.
    pub fn paused(&self) -> bool {
        *self.pause.borrow()
    }

    /// Pauses or resumes (generations stop at their next step boundary).
    pub fn set_paused(&self, paused: bool) {
        self.pause.send_replace(paused);
    }

    /// Waits while paused; false when `cancel` fired first.
    pub async fn wait_unpaused(&self, cancel: &CancellationToken) -> bool {
        let mut rx = self.pause.subscribe();
        loop {
            if !*rx.borrow_and_update() {
                return true;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return true },
                () = cancel.cancelled() => return false,
            }
        }
    }

    /// The persisted form.
    pub fn record(&self) -> SessionRecord {
        let todos = self.todo_list().iter().map(TodoRecord::from).collect();
        self.read(|d| SessionRecord {
            version: RECORD_VERSION,
            session_id: self.id.clone(),
            created_at: self.created_at,
            updated_at: d.updated_at,
            config: ConfigRecord::from(&d.config),
            messages: d.messages.clone(),
            todos,
            usage: d.usage,
            skills: d.skills.values().cloned().collect(),
            permissions: Some(PolicyRecord::from(&d.permissions.to_policy())),
            confirmation: Some(ConfirmationRecord::from(&d.confirmation)),
            lanes: d
                .lanes
                .iter()
                .map(|(l, c)| LaneRecord::new(*l, c))
                .collect(),
        })
    }

    /// The wire's view. The config's `api_key` is never sent back.
    pub fn to_proto(&self) -> ProtoSession {
        let paused = self.paused();
        self.read(|d| {
            let mut config = d.config.clone();
            if let Some(llm) = &mut config.llm
                && !llm.api_key.is_empty()
            {
                llm.api_key = "***".into();
            }
            let state = if paused {
                SessionState::Paused
            } else if d.failed {
                SessionState::Error
            } else {
                SessionState::Active
            };
            ProtoSession {
                session_id: self.id.clone(),
                config: Some(config),
                state: state as i32,
                context_usage: Some(d.context_usage()),
                created_at: self.created_at,
                updated_at: d.updated_at,
            }
        })
    }
}
