//! The mock's side of `approvals/1`: whether its registrations accept the
//! extension (off unless asked: a mock that accepts it and answers nothing
//! leaves every agent's request waiting for its timeout), and an
//! auto-answer rule, so a backend team can drive its approval flow against
//! the real runner: every `ApprovalRequest` that arrives is shown to the
//! rule, and what the rule decides goes back as an `ApprovalDecision`.
//!
//! Over stdio, decisions go in as any other `ServerMessage` line
//! (`{"requestId":"d1","approvalDecision":{"approvalId":"…","outcome":"APPROVAL_OUTCOME_APPROVE"}}`),
//! and requests come out as any other `ClientMessage`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_runner_proto::APPROVALS;
use agent_runner_proto::runner::{
    ApprovalDecision, ApprovalOutcome, ApprovalRequest, ServerMessage, client_message::Payload,
    server_message::Request,
};
use anyhow::{Result, bail};

use crate::MockControlPlane;
use crate::state::{Pushed, State};
use crate::versions::{Outgoing, Protocol};

/// Adds `approvals/1` to `features` when the mock accepts it and the
/// runner offered it.
pub(crate) fn accepted(accept: bool, offered: &[String], features: &mut Vec<String>) {
    if accept && offered.iter().any(|f| f == APPROVALS) {
        features.push(APPROVALS.to_owned());
    }
}

/// A decision for [`MockControlPlane::answer_approvals`]'s rule to return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The decision.
    pub outcome: ApprovalOutcome,
    /// A question's answer.
    pub answer: Option<String>,
    /// What the agent is told.
    pub message: Option<String>,
}

impl Answer {
    /// Approve.
    pub fn approve() -> Self {
        Self::of(ApprovalOutcome::Approve)
    }

    /// Deny, telling the agent `message`.
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            message: Some(message.into()),
            ..Self::of(ApprovalOutcome::Deny)
        }
    }

    /// Answer a question with `text` (the outcome: approve).
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            answer: Some(text.into()),
            ..Self::approve()
        }
    }

    /// `outcome`, nothing else.
    pub fn of(outcome: ApprovalOutcome) -> Self {
        Self {
            outcome,
            answer: None,
            message: None,
        }
    }

    /// The `ServerMessage` deciding `approval_id` with this answer.
    pub fn message_for(&self, request_id: String, approval_id: &str) -> ServerMessage {
        ServerMessage {
            request_id,
            request: Some(Request::ApprovalDecision(ApprovalDecision {
                approval_id: approval_id.to_owned(),
                outcome: self.outcome.into(),
                answer: self.answer.clone(),
                message: self.message.clone(),
            })),
            acked_sequence: 0,
        }
    }
}

/// Stops answering when dropped.
pub struct Answering(tokio::task::JoinHandle<()>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl MockControlPlane {
    /// Whether registrations from now on accept `approvals/1` (off by
    /// default; a runner learns it at its next registration).
    pub fn accept_approvals(&self, accept: bool) {
        self.state.lock().approvals = accept;
    }

    /// Answers every `ApprovalRequest` received from now on with what `rule`
    /// returns for it (`None`: leave it waiting), as `ServerMessage`s with
    /// request ids `approval-answer-N`; until the returned handle drops.
    pub fn answer_approvals<F>(&self, rule: F) -> Answering
    where
        F: Fn(&ApprovalRequest) -> Option<Answer> + Send + Sync + 'static,
    {
        let state = self.state.clone();
        let protocol = self.protocol();
        let from = self.received_count();
        let numbers = Arc::new(AtomicU64::new(1));
        Answering(tokio::spawn(async move {
            let mut next = from;
            loop {
                let found = state
                    .wait_until(None, |inner| {
                        let found: Vec<ApprovalRequest> = inner
                            .received
                            .iter()
                            .skip(next)
                            .filter_map(|r| match &r.message.payload {
                                Some(Payload::ApprovalRequest(a)) => Some(a.clone()),
                                _ => None,
                            })
                            .collect();
                        next = next.max(inner.received.len());
                        (!found.is_empty()).then_some(found)
                    })
                    .await;
                let Some(found) = found else { return };
                for request in found {
                    let Some(answer) = rule(&request) else {
                        continue;
                    };
                    let n = numbers.fetch_add(1, Ordering::Relaxed);
                    let msg =
                        answer.message_for(format!("approval-answer-{n}"), &request.approval_id);
                    if let Err(e) = push(&state, protocol, msg).await {
                        tracing::warn!(error = %e, approval_id = %request.approval_id, "answering an approval failed");
                    }
                }
            }
        }))
    }
}

/// Sends `message` on the only live stream, in the mock's version.
async fn push(state: &State, protocol: Protocol, message: ServerMessage) -> Result<()> {
    let message = Outgoing::from(message)
        .into_protocol(protocol)
        .map_err(anyhow::Error::msg)?;
    match state.push(None, message) {
        Pushed::Done => Ok(()),
        Pushed::NotConnected => bail!("no runner is connected"),
        Pushed::Ambiguous(_) => bail!("several runners are connected"),
        Pushed::Closed => bail!("the stream closed"),
        Pushed::Full(r, tx, message) => {
            let message = *message;
            if tx.send(message.clone()).await.is_err() {
                bail!("the stream closed");
            }
            state.record_sent(r, &message);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_only_when_offered_and_on() {
        let offered = vec!["acked-delivery/1".to_owned(), APPROVALS.to_owned()];
        let mut features = Vec::new();
        accepted(false, &offered, &mut features);
        assert!(features.is_empty());
        accepted(true, &offered[..1], &mut features);
        assert!(features.is_empty());
        accepted(true, &offered, &mut features);
        assert_eq!(features, [APPROVALS]);
    }

    /// Over stdio: a decision goes in as a JSON line like any request, a
    /// request comes out like any update.
    #[test]
    fn decisions_and_requests_cross_stdio_as_canonical_json() {
        let line = r#"{"requestId":"d1","approvalDecision":{"approvalId":"apr-1","outcome":"APPROVAL_OUTCOME_DENY","message":"no"}}"#;
        let msg = crate::json::server_message_from_str(line).unwrap();
        assert_eq!(msg, Answer::deny("no").message_for("d1".into(), "apr-1"));
        let request = agent_runner_proto::runner::ClientMessage {
            request_id: Some("m1".into()),
            payload: Some(Payload::ApprovalRequest(ApprovalRequest {
                approval_id: "apr-1".into(),
                title: "run `ls`".into(),
                command: Some("ls".into()),
                ..Default::default()
            })),
            sequence: 0,
        };
        let json = crate::json::client_message_to_json(&request);
        assert_eq!(json["approvalRequest"]["approvalId"], "apr-1");
        assert_eq!(json["approvalRequest"]["command"], "ls");
    }

    #[test]
    fn an_answer_becomes_a_decision() {
        let msg = Answer::deny("no").message_for("d1".into(), "apr-1");
        let Some(Request::ApprovalDecision(d)) = msg.request else {
            panic!("a decision");
        };
        assert_eq!(d.approval_id, "apr-1");
        assert_eq!(d.outcome, ApprovalOutcome::Deny as i32);
        assert_eq!(d.message.as_deref(), Some("no"));
        assert_eq!(msg.request_id, "d1");
    }
}
