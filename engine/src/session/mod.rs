//! A session: its configuration, history, todos, permissions, confirmation
//! policy, lane handlers, loaded skills and token usage, plus the live
//! parts that are never persisted (the running generation, pause switch,
//! calls waiting for confirmation, pending external tasks).

pub mod generation;
pub mod message;
pub mod persisted;
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
use persisted::{Persisted, Write, Written};
use record::{
    ConfigRecord, ConfirmationRecord, Delta, LaneRecord, PolicyRecord, RECORD_VERSION,
    SessionRecord, SkillRecord, TodoRecord, UsageRecord,
};

/// A session's persisted state, behind one lock.
pub struct SessionData {
    pub config: SessionConfig,
    /// The canonical workspace (config, else the engine's default).
    pub workspace: Option<PathBuf>,
    /// The history. Appending is the only change a save can write as a
    /// step; whatever else changes it (compaction, clear) bumps
    /// `history_epoch`, so the next save writes a whole snapshot.
    pub messages: Vec<StoredMessage>,
    pub history_epoch: u64,
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
    /// What the last save left on disk (`None`: nothing yet).
    persisted: Mutex<Option<Persisted>>,
    /// Set once destroyed: a generation still winding down must not write
    /// the file back, and a tool call still running must not leave state
    /// (a cron job) behind for a later session of the same id.
    destroyed: Arc<AtomicBool>,
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
                history_epoch: 0,
                usage: UsageRecord::default(),
                permissions,
                confirmation: hitl::default_policy(),
                lanes: BTreeMap::new(),
                skills: BTreeMap::new(),
                updated_at: now,
                failed: false,
            },
            Vec::new(),
            None,
        ))
    }

    /// A session reloaded from its file.
    pub fn from_record(
        record: SessionRecord,
        default_workspace: Option<&Path>,
    ) -> Result<Self, String> {
        let persisted = Persisted::loaded(&record);
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
            history_epoch: 0,
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
            Some(persisted),
        ))
    }

    fn assemble(
        id: String,
        created_at: i64,
        data: SessionData,
        todos: Vec<Todo>,
        persisted: Option<Persisted>,
    ) -> Self {
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
            persisted: Mutex::new(persisted),
            destroyed: Arc::new(AtomicBool::new(false)),
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

    /// The flag [`mark_destroyed`](Self::mark_destroyed) sets, for state
    /// kept outside the session that must not outlive it.
    pub fn destroyed_flag(&self) -> Arc<AtomicBool> {
        self.destroyed.clone()
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

    /// The record with the messages from `from(len, epoch)` on (all when
    /// `None`), decided under the same lock the record is read under, and
    /// the history's length and epoch, and `from`'s answer.
    fn record_from(
        &self,
        from: impl FnOnce(usize, u64) -> Option<usize>,
    ) -> (SessionRecord, usize, u64, Option<usize>) {
        let todos = self.todo_list().iter().map(TodoRecord::from).collect();
        let log_generation = self.persisted().map_or(0, |p| p.generation);
        self.read(|d| {
            let start = from(d.messages.len(), d.history_epoch);
            let record = SessionRecord {
                version: RECORD_VERSION,
                session_id: self.id.clone(),
                created_at: self.created_at,
                updated_at: d.updated_at,
                config: ConfigRecord::from(&d.config),
                messages: d
                    .messages
                    .get(start.unwrap_or(0)..)
                    .unwrap_or_default()
                    .to_vec(),
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
                log_generation,
            };
            (record, d.messages.len(), d.history_epoch, start)
        })
    }

    fn persisted(&self) -> Option<Persisted> {
        *self.persisted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next save (take it under `persist_lock`): a step for the log
    /// when only messages were added since the last save, else a snapshot.
    /// Returns what to record with [`Self::wrote`] once it is written
    /// (`bytes` filled in then).
    pub fn next_write(&self) -> (Write, Written) {
        let persisted = self.persisted();
        let (mut record, len, epoch, start) = self.record_from(|len, epoch| {
            persisted
                .filter(|p| p.can_append(len, epoch))
                .map(|p| p.len)
        });
        match (persisted, start) {
            (Some(p), Some(base)) => {
                let messages = std::mem::take(&mut record.messages);
                let written = Written {
                    snapshot: false,
                    generation: p.generation,
                    len,
                    epoch,
                    bytes: 0,
                };
                let delta = Delta {
                    base,
                    messages,
                    rest: record,
                };
                (
                    Write::Append {
                        generation: p.generation,
                        delta,
                    },
                    written,
                )
            }
            _ => {
                let generation = persisted.map_or(1, |p| p.generation + 1);
                record.log_generation = generation;
                let written = Written {
                    snapshot: true,
                    generation,
                    len,
                    epoch,
                    bytes: 0,
                };
                (
                    Write::Snapshot {
                        record,
                        previous: persisted.map(|p| p.generation),
                    },
                    written,
                )
            }
        }
    }

    /// Records a save's outcome: `Some(written)` once it is on disk, `None`
    /// when it failed (the next save then writes a whole snapshot).
    pub fn wrote(&self, written: Option<Written>) {
        let mut persisted = self.persisted.lock().unwrap_or_else(|e| e.into_inner());
        *persisted = match written {
            Some(written) => Some(Persisted::after(*persisted, written)),
            None => persisted.map(|p| Persisted {
                log_bytes: u64::MAX,
                ..p
            }),
        };
    }

    /// The log generation on disk, if the session was ever saved.
    pub fn log_generation(&self) -> Option<u64> {
        self.persisted().map(|p| p.generation)
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

#[cfg(test)]
mod tests {
    use super::message::MessageRole;
    use super::persisted::{Write, Written};
    use super::*;

    fn session() -> Session {
        Session::new("s".into(), SessionConfig::default(), None, Vec::new()).unwrap()
    }

    fn say(session: &Session, text: &str) {
        session.append([StoredMessage::text(MessageRole::User, text)]);
    }

    /// Takes the next write and records it as written.
    fn save(session: &Session) -> (Write, Written) {
        let (write, mut written) = session.next_write();
        written.bytes = 100;
        session.wrote(Some(written));
        (write, written)
    }

    #[test]
    fn saves_append_what_was_added_and_snapshot_after_a_rewrite_or_failure() {
        let s = session();
        say(&s, "a");
        // Nothing on disk yet: a snapshot, generation 1.
        let (write, _) = save(&s);
        assert!(
            matches!(write, Write::Snapshot { ref record, previous: None } if record.log_generation == 1 && record.messages.len() == 1)
        );
        say(&s, "b");
        say(&s, "c");
        let (write, _) = save(&s);
        match write {
            Write::Append { generation, delta } => {
                assert_eq!((generation, delta.base, delta.messages.len()), (1, 1, 2));
                assert!(delta.rest.messages.is_empty());
            }
            other => panic!("expected a step, got {other:?}"),
        }
        // A rewrite of the history (compaction, clear) writes a snapshot.
        crate::context::clear(&s);
        say(&s, "d");
        let (write, _) = save(&s);
        assert!(
            matches!(write, Write::Snapshot { ref record, previous: Some(1) } if record.log_generation == 2 && record.messages.len() == 1)
        );
        // A failed write: the next one is a whole snapshot again.
        say(&s, "e");
        let (_, _) = s.next_write();
        s.wrote(None);
        let (write, _) = save(&s);
        assert!(
            matches!(write, Write::Snapshot { ref record, previous: Some(2) } if record.log_generation == 3 && record.messages.len() == 2)
        );
    }

    #[test]
    fn a_log_that_outgrew_its_snapshot_is_folded_into_a_new_one() {
        let s = session();
        save(&s);
        let mut appended = 0;
        loop {
            say(&s, "x");
            let (write, mut written) = s.next_write();
            if matches!(write, Write::Snapshot { .. }) {
                break;
            }
            written.bytes = 10 * 1024;
            s.wrote(Some(written));
            appended += 1;
            assert!(appended < 100, "never snapshotted");
        }
        // The snapshot was 100 bytes: the log may reach 64 KiB first.
        assert_eq!(appended, 7);
    }
}
