//! A code-agent turn's [`TurnControl`].
//!
//! Steering is a second `StreamGenerate` on the session with metadata
//! `steer = "true"` on its message: the engine appends the text to the
//! running generation at its next step boundary and answers with a single
//! `done` chunk whose metadata has `steered = "true"`. Only then does the
//! turn task emit [`TurnEvent::Steered`](sdk_adapter::TurnEvent::Steered)
//! and the steering text's `UserMessage` item. An engine that says the
//! session has no generation running (`FAILED_PRECONDITION`, `NOT_FOUND`)
//! means the turn already ended ([`SteerError::TurnEnded`]: the runner
//! starts a new turn with the text).
//!
//! The turn task does not finish while a steer is in flight: it waits for
//! the steer to settle, and refuses steers once it decided to finish; both
//! decide under one lock ([`SteerGate`], shared with the codex adapter).
//!
//! Interrupt is `Cancel{session_id}`; the turn task then ends the turn as
//! interrupted when the stream ends, or after the grace period.

use std::time::Duration;

use async_trait::async_trait;
use code_agent_proto::{CancelRequest, GenerateChunk, GenerateRequest, Message};
use sdk_adapter::{SteerError, SteerGate, TurnControl};
use tokio::sync::mpsc;
use tonic::Code;

use crate::connect::Client;
use crate::status_text;

/// What the control tells its turn task.
#[derive(Debug)]
pub(crate) enum TurnMsg {
    /// The engine took the steering text into the running generation.
    Steered { tag: u64, text: String },
    /// A steer finished one way or the other.
    SteerSettled,
}

/// Room for steer notifications; a full queue makes `steer` wait.
pub(crate) const TURN_MSG_BUFFER: usize = 16;

pub(crate) struct CodeAgentControl {
    client: Client,
    session_id: String,
    request_timeout: Duration,
    steer_timeout: Duration,
    msgs: mpsc::Sender<TurnMsg>,
    gate: SteerGate,
}

/// A user message for `GenerateRequest.messages`.
pub(crate) fn user_message(text: String, metadata: &[(&str, &str)]) -> Message {
    Message {
        role: "user".to_owned(),
        content: text,
        metadata: metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

impl CodeAgentControl {
    pub(crate) fn new(
        client: Client,
        session_id: String,
        request_timeout: Duration,
        steer_timeout: Duration,
        msgs: mpsc::Sender<TurnMsg>,
    ) -> Self {
        Self {
            client,
            session_id,
            request_timeout,
            steer_timeout,
            msgs,
            gate: SteerGate::new(),
        }
    }

    /// Steering against the end of the turn (the turn task asks it); its
    /// token is cancelled once [`TurnControl::interrupt`] was called.
    pub(crate) fn gate(&self) -> &SteerGate {
        &self.gate
    }

    /// Send `Cancel` for the session (in the background; logged on failure).
    pub(crate) fn cancel_generation(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(session_id = %self.session_id, "cancel outside a tokio runtime");
            return;
        };
        let mut client = self.client.clone();
        let request = CancelRequest {
            session_id: self.session_id.clone(),
            operation_id: None,
        };
        let timeout = self.request_timeout;
        let session_id = self.session_id.clone();
        runtime.spawn(async move {
            match tokio::time::timeout(timeout, client.cancel(request)).await {
                Ok(Ok(_)) => {}
                Ok(Err(status)) => {
                    tracing::warn!(%session_id, error = %status_text(&status), "code-agent Cancel failed")
                }
                Err(_) => tracing::warn!(%session_id, "code-agent Cancel timed out"),
            }
        });
    }

    /// One steer round trip: Ok when the engine says `steered`.
    async fn send_steer(&self, text: &str) -> Result<(), SteerError> {
        let request = GenerateRequest {
            session_id: self.session_id.clone(),
            messages: vec![user_message(text.to_owned(), &[("steer", "true")])],
        };
        let mut client = self.client.clone();
        let mut stream = match client.stream_generate(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => return Err(steer_status(&status)),
        };
        // Only the first chunk matters: `done` with `steered` when the text
        // joined. Anything else means the engine started a generation of its
        // own for the text (it had none running, or cannot steer): dropping
        // the stream cancels that generation at once.
        match stream.message().await {
            Ok(Some(chunk)) if is_steered(&chunk) => Ok(()),
            Ok(_) => Err(SteerError::Rejected(
                "the code-agent engine did not join the text to the running generation".to_owned(),
            )),
            Err(status) => Err(steer_status(&status)),
        }
    }
}

fn is_steered(chunk: &GenerateChunk) -> bool {
    chunk.r#type == "done" && chunk.metadata.get("steered").map(String::as_str) == Some("true")
}

fn steer_status(status: &tonic::Status) -> SteerError {
    match status.code() {
        Code::FailedPrecondition | Code::NotFound => SteerError::TurnEnded,
        _ => SteerError::Rejected(status_text(status)),
    }
}

#[async_trait]
impl TurnControl for CodeAgentControl {
    async fn steer(&self, text: String, tag: u64) -> Result<(), SteerError> {
        self.gate.begin_steer()?;
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(self.steer_timeout, self.send_steer(&text)) => {
                outcome.unwrap_or_else(|_| Err(SteerError::Rejected(format!(
                    "the code-agent engine did not take the text within {:?}", self.steer_timeout
                ))))
            }
            () = self.gate.interrupted().cancelled() => Err(SteerError::TurnEnded),
        };
        if outcome.is_ok() {
            // The task waits for SteerSettled before finishing, so it is
            // still there to receive this.
            let _ = self.msgs.send(TurnMsg::Steered { tag, text }).await;
        }
        self.gate.settle();
        let _ = self.msgs.send(TurnMsg::SteerSettled).await;
        outcome
    }

    fn interrupt(&self) {
        if self.gate.interrupt() {
            self.cancel_generation();
        }
    }
}
