//! A Claude Code turn's [`TurnControl`].
//!
//! A runner turn is the user's message plus any steering messages, each
//! written into the running session as its own `user` line with a fresh
//! `uuid`. Claude Code answers with one or more `result`s, each naming the
//! uuids it consumed (`user_message_uuid(s)`; a result without them counts
//! for everything sent so far). The turn ends when no uuid is left pending.
//! Steering and that decision happen under one lock: a steer is accepted
//! only while the turn has not ended, so an accepted text is always answered
//! inside this turn.
//!
//! Interrupt sends the `interrupt` control request (`cancel_queued`, so
//! steering not yet started is dropped with the turn); the turn task kills
//! the process if the turn has not ended within the grace period.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use sdk_adapter::{SteerError, TurnControl};
use sdk_process::ChildHandle;
use serde_json::json;
use tokio::sync::mpsc;

use crate::protocol;
use crate::session::TurnMsg;

#[derive(Debug, Default)]
struct State {
    ended: bool,
    interrupted: bool,
    /// Uuids of user lines written and not yet answered by a `result`.
    pending: Vec<String>,
}

/// What a `result` means for the turn.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AfterResult {
    /// Messages are still pending: another result will come.
    Continue,
    /// The turn is over (steering closed).
    Ended,
}

#[derive(Debug)]
pub(crate) struct ClaudeControl {
    handle: ChildHandle,
    msgs: mpsc::UnboundedSender<TurnMsg>,
    state: Mutex<State>,
    request_timeout: Duration,
    next_request: AtomicU64,
}

impl ClaudeControl {
    pub(crate) fn new(
        handle: ChildHandle,
        msgs: mpsc::UnboundedSender<TurnMsg>,
        first_uuid: String,
        request_timeout: Duration,
    ) -> Self {
        Self {
            handle,
            msgs,
            state: Mutex::new(State {
                pending: vec![first_uuid],
                ..State::default()
            }),
            request_timeout,
            next_request: AtomicU64::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A `result` answered `uuids` (empty: it named none, so it answers
    /// everything sent so far).
    pub(crate) fn answered(&self, uuids: &[String]) -> AfterResult {
        let mut state = self.lock();
        if uuids.is_empty() {
            state.pending.clear();
        } else {
            state.pending.retain(|p| !uuids.contains(p));
        }
        if state.pending.is_empty() {
            state.ended = true;
            AfterResult::Ended
        } else {
            AfterResult::Continue
        }
    }

    /// The turn is over, whatever is pending.
    pub(crate) fn end(&self) {
        self.lock().ended = true;
    }

    pub(crate) fn interrupted(&self) -> bool {
        self.lock().interrupted
    }
}

#[async_trait]
impl TurnControl for ClaudeControl {
    async fn steer(&self, text: String, tag: u64) -> Result<(), SteerError> {
        let uuid = uuid::Uuid::new_v4().to_string();
        {
            let mut state = self.lock();
            if state.ended || state.interrupted {
                return Err(SteerError::TurnEnded);
            }
            state.pending.push(uuid.clone());
        }
        if let Err(e) = self.handle.send(&protocol::user_line(&text, &uuid)).await {
            self.lock().pending.retain(|p| *p != uuid);
            if self.handle.is_gone() {
                // The turn ends with the process.
                return Err(SteerError::TurnEnded);
            }
            return Err(SteerError::Rejected(e.to_string()));
        }
        let _ = self.msgs.send(TurnMsg::Steered { tag, text });
        Ok(())
    }

    fn interrupt(&self) {
        {
            let mut state = self.lock();
            if state.interrupted {
                return;
            }
            state.interrupted = true;
        }
        let _ = self.msgs.send(TurnMsg::Interrupting);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("interrupt outside a tokio runtime; relying on the grace kill");
            return;
        };
        let id = format!(
            "agent-runner-{}",
            self.next_request.fetch_add(1, Ordering::Relaxed)
        );
        let request =
            protocol::control_request(&id, json!({"subtype": "interrupt", "cancel_queued": true}));
        let handle = self.handle.clone();
        let timeout = self.request_timeout;
        runtime.spawn(async move {
            match handle.request(id, &request, timeout).await {
                Ok(response) => {
                    if response["response"]["subtype"] == "error" {
                        tracing::debug!(error = %response["response"]["error"], "interrupt refused");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "interrupt request failed"),
            }
        });
    }
}
