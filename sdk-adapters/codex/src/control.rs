//! A codex turn's [`TurnControl`].
//!
//! Steering is `turn/steer` with `expectedTurnId`, so codex itself refuses a
//! steer once its turn is over ("no active turn to steer") — reported as
//! [`SteerError::TurnEnded`], and the runner starts a new turn with the text.
//! One race is left: codex accepts a steer and completes the turn before the
//! response reaches us. So the turn task does not finish while a steer is
//! in flight; it waits for it to settle (one request timeout at most), and a
//! steer once the task decided to finish is refused. Both decide under one
//! lock ([`SteerGate`], shared with the code-agent adapter).
//!
//! [`TurnEvent::Steered`](sdk_adapter::TurnEvent::Steered) goes out where the
//! text joins: just before the `userMessage` item codex starts for it, or,
//! if the response comes first, when it does.
//!
//! Interrupt sends `turn/interrupt` and tells the turn task, which kills the
//! app-server if the turn has not ended within the grace period.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use sdk_adapter::{SteerError, SteerGate, TurnControl};
use serde_json::json;
use tokio::sync::mpsc;

use crate::rpc::{Rpc, RpcError};
use crate::server::TurnMsg;

#[derive(Debug)]
pub(crate) struct CodexControl {
    rpc: Arc<Rpc>,
    thread_id: String,
    turn_id: String,
    msgs: mpsc::UnboundedSender<TurnMsg>,
    gate: SteerGate,
    /// The texts and tags of steers in flight, until the turn task saw the
    /// text join.
    unannounced: Mutex<Vec<(u64, String)>>,
}

/// The `input` of `turn/start` and `turn/steer` for a text message.
pub(crate) fn text_input(text: &str) -> serde_json::Value {
    json!([{"type": "text", "text": text, "text_elements": []}])
}

impl CodexControl {
    pub(crate) fn new(
        rpc: Arc<Rpc>,
        thread_id: String,
        turn_id: String,
        msgs: mpsc::UnboundedSender<TurnMsg>,
    ) -> Self {
        Self {
            rpc,
            thread_id,
            turn_id,
            msgs,
            gate: SteerGate::new(),
            unannounced: Mutex::new(Vec::new()),
        }
    }

    /// Steering against the end of the turn (the turn task asks it).
    pub(crate) fn gate(&self) -> &SteerGate {
        &self.gate
    }

    fn unannounced(&self) -> MutexGuard<'_, Vec<(u64, String)>> {
        self.unannounced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A user message with `text` joined the turn: the tag of the steer in
    /// flight that sent it, if one did (each is claimed once).
    pub(crate) fn claim_steer(&self, text: &str) -> Option<u64> {
        let mut unannounced = self.unannounced();
        let at = unannounced.iter().position(|(_, t)| t == text)?;
        Some(unannounced.remove(at).0)
    }
}

#[async_trait]
impl TurnControl for CodexControl {
    async fn steer(&self, text: String, tag: u64) -> Result<(), SteerError> {
        self.gate.begin_steer()?;
        // Before the request goes out, so the turn task can match the text.
        self.unannounced().push((tag, text.clone()));
        let params = json!({
            "threadId": self.thread_id,
            "input": text_input(&text),
            "expectedTurnId": self.turn_id,
        });
        let result = self.rpc.call("turn/steer", params).await;
        let outcome = match result {
            Ok(_) => {
                // The task is still running: it waits for SteerSettled.
                let _ = self.msgs.send(TurnMsg::Steered(tag));
                Ok(())
            }
            Err(RpcError::Server { message, .. })
                if message.contains("no active turn") || message.contains("expected") =>
            {
                Err(SteerError::TurnEnded)
            }
            Err(RpcError::Server { message, .. }) => Err(SteerError::Rejected(message)),
            Err(e @ RpcError::Child { .. }) if self.rpc.handle().is_gone() => {
                tracing::debug!(error = %e, "steer: the app-server went away");
                Err(SteerError::TurnEnded)
            }
            Err(e) => Err(SteerError::Rejected(e.to_string())),
        };
        self.unannounced().retain(|(t, _)| *t != tag);
        self.gate.settle();
        let _ = self.msgs.send(TurnMsg::SteerSettled);
        outcome
    }

    fn interrupt(&self) {
        if !self.gate.interrupt() {
            return;
        }
        let _ = self.msgs.send(TurnMsg::Interrupting);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("interrupt outside a tokio runtime; relying on the grace kill");
            return;
        };
        let rpc = self.rpc.clone();
        let params = json!({"threadId": self.thread_id, "turnId": self.turn_id});
        runtime.spawn(async move {
            if let Err(e) = rpc.call("turn/interrupt", params).await {
                tracing::debug!(error = %e, "turn/interrupt failed");
            }
        });
    }
}
