//! The `claude-code` SDK: drives Anthropic's Claude Code CLI in print mode
//! with stream-json on both sides (shapes as of `@anthropic-ai/claude-code`
//! 2.1.197 and its Agent SDK's `sdk.d.ts`; the tests drive that version of the
//! real CLI offline, `tests/real_claude.rs`).
//!
//! How a runner thread maps onto Claude Code:
//! - The runner's `sdk_thread_id` is the Claude Code session id: a fresh
//!   UUID chosen by `create_thread` (Claude Code accepts `--session-id`), so
//!   it is known before the first turn and stored by the runner.
//! - One long-lived `claude -p` process per thread (module `session`),
//!   started by the first turn in the thread's workspace: `--session-id` for
//!   a session without a transcript holding a message, `--resume` for one
//!   that has one (after a crash, a kill, or a runner restart; module
//!   `transcript`), and started again when a turn
//!   asks for another model or effort (`--model`, `--effort`).
//! - A turn writes the message as a `user` line; steering writes another
//!   into the running session; interrupt is the `interrupt` control request
//!   (module `control`). Output becomes events in module `turn`.
//! - Each thread's claude has a config dir (`CLAUDE_CONFIG_DIR`) of its
//!   own in the thread's HOME, seeded with the operator's login and
//!   nothing else (module `config_dir`): settings and hooks one thread
//!   writes there never reach another; its transcripts live there too.
//! - Permission prompts (`--permission-prompt-tool stdio`) are answered at
//!   once by policy ([`ClaudeConfig::permission_mode`]), or, under
//!   `default`, `acceptEdits` and `plan`, asked through the turn (module
//!   `permission`): a control plane that accepted `approvals/1` decides.
//! - Registration advertises [`ClaudeConfig::models`]: Claude Code has no
//!   model listing. Without the binary the SDK is UNCONFIGURED.
//! - `delete_thread`, `delete_agent` and dropping the adapter kill the
//!   process trees.

mod config;
mod config_dir;
mod control;
mod mcp;
mod permission;
mod protocol;
mod question;
mod session;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
mod tools;
mod transcript;
mod turn;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sdk_adapter::{
    AgentSpec, SdkAdapter, SdkDescription, SdkError, SdkStatus, TURN_EVENT_BUFFER, ThreadHandle,
    ThreadSpec, TokenUsageBreakdown, Turn, TurnInput,
};
use sdk_process::{ChildError, ThreadTable, TurnInbox, find_program};
use tokio::sync::mpsc;

pub use config::{
    BASE_URL_ENV, ClaudeConfig, DEFAULT_MODELS, PERMISSION_MODES, check_base_url,
    check_permission_mode, parse_models,
};
pub use config_dir::{CREDENTIALS, operator_config_dir};

use crate::control::ClaudeControl;
use crate::session::{Flavor, Session};
use crate::turn::TurnTask;

/// The SDK's name on the wire.
pub const SDK_NAME: &str = "claude-code";

/// The `claude-code` adapter.
pub struct ClaudeAdapter {
    config: ClaudeConfig,
    threads: ThreadTable<Slot>,
}

/// What a thread's turns share across processes.
#[derive(Debug, Default)]
pub(crate) struct ThreadShared {
    /// The thread's token usage so far (this runner's lifetime).
    pub usage: Mutex<TokenUsageBreakdown>,
    /// The session's title last reported as the thread's name.
    pub title: Mutex<Option<String>>,
    /// How far the session's transcript was read for its title.
    pub title_scan: Mutex<crate::transcript::TitleScan>,
}

struct Slot {
    session_id: String,
    shared: Arc<ThreadShared>,
    session: tokio::sync::Mutex<Option<Session>>,
}

impl ClaudeAdapter {
    /// The claude-code SDK with `config`.
    pub fn new(config: ClaudeConfig) -> Self {
        Self {
            config,
            threads: ThreadTable::new(),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &ClaudeConfig {
        &self.config
    }

    /// READY with the configured models when the binary is found, else
    /// UNCONFIGURED saying where it was looked for.
    fn description(&self) -> SdkDescription {
        match self.check_binary() {
            Ok(()) => SdkDescription {
                name: SDK_NAME.to_owned(),
                status: SdkStatus::Ready,
                error_message: None,
                models: self.config.models.clone(),
            },
            Err(_) => SdkDescription {
                name: SDK_NAME.to_owned(),
                status: SdkStatus::Unconfigured,
                error_message: Some(missing(&self.config)),
                models: self.config.models.clone(),
            },
        }
    }

    fn check_binary(&self) -> Result<(), SdkError> {
        if find_program(&self.config.bin).is_some() {
            return Ok(());
        }
        Err(SdkError::Unavailable(missing(&self.config)))
    }

    /// The thread's slot; a thread not seen yet (re-opened by a turn
    /// without `create_thread`) is registered from the spec.
    fn slot(&self, spec: &ThreadSpec) -> Result<Arc<Slot>, SdkError> {
        self.threads
            .get_or_try_insert(&spec.thread_id, &spec.agent_id, || {
                let session_id = spec.sdk_thread_id.as_deref().ok_or_else(|| {
                    SdkError::Failed("the thread has no Claude Code session id".into())
                })?;
                Ok(Slot {
                    session_id: session_id.to_owned(),
                    shared: Arc::default(),
                    session: tokio::sync::Mutex::new(None),
                })
            })
    }

    fn start_session(
        &self,
        spec: &ThreadSpec,
        slot: &Slot,
        flavor: Flavor,
    ) -> Result<Session, SdkError> {
        let sandbox = spec.sandbox.get()?;
        let home = &sandbox.spec().home_dir;
        // See `transcript::prepare_resume` for when a session resumes.
        let resume = crate::transcript::prepare_resume(home, &slot.session_id)
            || config_dir::adopt_transcript(&self.config, home, &slot.session_id)
                .unwrap_or_else(|e| {
                    tracing::warn!(thread_id = %spec.thread_id, error = %e, "could not adopt the session's transcript from the operator's config dir");
                    false
                });
        Session::start(
            &self.config,
            spec,
            sandbox,
            &slot.session_id,
            resume,
            flavor,
        )
        .map_err(|e| match e {
            ChildError::NotFound { .. } => SdkError::Unavailable(e.to_string()),
            other => SdkError::Failed(other.to_string()),
        })
    }
}

impl Drop for ClaudeAdapter {
    fn drop(&mut self) {
        for slot in self.threads.all() {
            if let Ok(mut session) = slot.session.try_lock() {
                *session = None;
            }
        }
    }
}

#[async_trait]
impl SdkAdapter for ClaudeAdapter {
    fn name(&self) -> &str {
        SDK_NAME
    }

    async fn describe(&self) -> SdkDescription {
        self.description()
    }

    /// Finding the binary on PATH is all a description takes.
    fn known(&self) -> Option<SdkDescription> {
        Some(self.description())
    }

    async fn create_agent(&self, _agent: &AgentSpec) -> Result<(), SdkError> {
        Ok(())
    }

    async fn delete_agent(&self, agent_id: &str) -> Result<(), SdkError> {
        let slots = self.threads.remove_agent(agent_id);
        for slot in slots {
            *slot.session.lock().await = None;
        }
        Ok(())
    }

    /// Picks the session id (a new UUID, or the stored one when re-opening)
    /// and creates the workspace; the process starts with the first turn.
    async fn create_thread(&self, spec: &ThreadSpec) -> Result<ThreadHandle, SdkError> {
        self.check_binary()?;
        spec.create_workspace().await?;
        let mut spec = spec.clone();
        if spec.sdk_thread_id.as_deref().is_none() {
            spec.sdk_thread_id = Some(uuid::Uuid::new_v4().to_string());
        }
        let slot = self.slot(&spec)?;
        Ok(ThreadHandle {
            sdk_thread_id: slot.session_id.clone(),
        })
    }

    async fn delete_thread(&self, spec: &ThreadSpec) -> Result<(), SdkError> {
        let slot = self.threads.remove(&spec.thread_id);
        if let Some(slot) = slot {
            *slot.session.lock().await = None;
        }
        Ok(())
    }

    async fn start_turn(&self, spec: &ThreadSpec, input: TurnInput) -> Result<Turn, SdkError> {
        self.check_binary()?;
        let slot = self.slot(spec)?;
        let flavor = Flavor {
            model: input.model.clone(),
            effort: input.reasoning_level.clone(),
        };
        let mut session = slot.session.lock().await;
        let mut retried = false;
        let uuid = uuid::Uuid::new_v4().to_string();
        let line = protocol::user_line(&input.text, &uuid);
        let (handle, sink, sink_id, sink_tx, msgs) = loop {
            let reusable = session
                .as_ref()
                .is_some_and(|s| s.is_alive() && s.flavor == flavor);
            if !reusable {
                // Drop (kill) the old process before its successor resumes
                // the same session.
                *session = None;
                *session = Some(self.start_session(spec, &slot, flavor.clone())?);
            }
            let Some(current) = session.as_ref() else {
                return Err(SdkError::Failed("claude session vanished".into()));
            };
            let sink = current.sink.clone();
            let (sink_id, sink_tx, msgs) = sink.install();
            let handle = current.child.handle();
            match handle.send(&line).await {
                Ok(()) => break (handle, sink, sink_id, sink_tx, msgs),
                Err(e) => {
                    sink.clear(sink_id);
                    *session = None;
                    if retried || !handle.is_gone() {
                        return Err(SdkError::Failed(format!("claude: {e}")));
                    }
                    retried = true;
                    tracing::info!(thread_id = %spec.thread_id, error = %e, "claude went away before the turn started; starting it again");
                }
            }
        };
        drop(session);
        let turn_id = format!("turn-{uuid}");
        let (events, receiver) = mpsc::channel(TURN_EVENT_BUFFER);
        let control = Arc::new(ClaudeControl::new(
            handle.clone(),
            sink_tx,
            uuid,
            self.config.request_timeout,
        ));
        let task = TurnTask {
            turn_id: turn_id.clone(),
            session_id: slot.session_id.clone(),
            text: input.text,
            cwd: spec.workspace.to_string_lossy().into_owned(),
            events,
            inbox: TurnInbox::new(
                turn_id.clone(),
                "claude",
                handle,
                (sink, sink_id, msgs),
                self.config.interrupt_grace,
            ),
            control: control.clone(),
            shared: slot.shared.clone(),
            home: spec.sandbox.get()?.spec().home_dir.clone(),
        };
        tokio::spawn(task.run());
        Ok(Turn {
            sdk_turn_id: turn_id,
            events: receiver,
            control,
        })
    }
}

fn missing(config: &ClaudeConfig) -> String {
    format!(
        "the claude binary `{}` was not found (install it with `npm install -g @anthropic-ai/claude-code`, or set --claude-bin)",
        config.bin.display()
    )
}
