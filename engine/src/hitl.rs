//! Human in the loop: which tool calls need a person's confirmation (the
//! session's `ConfirmationPolicy` and permission `ASK` rules), and the
//! waiting room where a call sits until `ConfirmToolExecution` answers, the
//! policy's timeout fires, or the generation is cancelled.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use code_agent_proto::{ConfirmationPolicy, PermissionDecision, SessionLane, TimeoutAction};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// 30 s, the default the proto documents for `default_timeout_ms`.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// HITL off, 30 s timeout, reject on timeout.
pub fn default_policy() -> ConfirmationPolicy {
    ConfirmationPolicy {
        enabled: false,
        auto_approve_tools: Vec::new(),
        require_confirm_tools: Vec::new(),
        default_timeout_ms: DEFAULT_TIMEOUT_MS,
        timeout_action: TimeoutAction::Reject as i32,
        yolo_lanes: Vec::new(),
    }
}

/// Fills in what a client left at zero.
pub fn normalize(mut policy: ConfirmationPolicy) -> ConfirmationPolicy {
    if policy.default_timeout_ms == 0 {
        policy.default_timeout_ms = DEFAULT_TIMEOUT_MS;
    }
    if policy.timeout_action == TimeoutAction::Unknown as i32 {
        policy.timeout_action = TimeoutAction::Reject as i32;
    }
    policy
}

fn listed(list: &[String], tool: &str) -> bool {
    list.iter().any(|t| t.eq_ignore_ascii_case(tool))
}

/// Whether a call must wait for a person. Yolo lanes and auto-approved
/// tools never wait; a permission `ASK` always does otherwise; with the
/// policy enabled, the listed tools (every tool when the list is empty) do.
pub fn needs_confirmation(
    policy: &ConfirmationPolicy,
    tool: &str,
    lane: SessionLane,
    permission: PermissionDecision,
) -> bool {
    if policy.yolo_lanes.contains(&(lane as i32)) || listed(&policy.auto_approve_tools, tool) {
        return false;
    }
    if permission == PermissionDecision::Ask {
        return true;
    }
    policy.enabled
        && (policy.require_confirm_tools.is_empty() || listed(&policy.require_confirm_tools, tool))
}

/// A person's answer.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub approved: bool,
    pub reason: Option<String>,
}

/// How a wait ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    Answered(Verdict),
    /// No answer in time; `approved` is the policy's timeout action.
    TimedOut {
        approved: bool,
    },
    Cancelled,
}

/// Calls waiting for confirmation, by tool call id.
#[derive(Debug, Default)]
pub struct PendingConfirmations {
    waiting: Mutex<HashMap<String, oneshot::Sender<Verdict>>>,
}

impl PendingConfirmations {
    /// Delivers an answer; false when no call with that id waits.
    pub fn answer(&self, tool_id: &str, verdict: Verdict) -> bool {
        let sender = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tool_id);
        sender.is_some_and(|tx| tx.send(verdict).is_ok())
    }

    /// Ids of the calls waiting now.
    #[cfg(test)]
    pub fn ids(&self) -> Vec<String> {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Waits for the answer to `tool_id`.
    pub async fn wait(
        &self,
        tool_id: &str,
        policy: &ConfirmationPolicy,
        cancel: &CancellationToken,
    ) -> Outcome {
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tool_id.to_string(), tx);
        let timeout = Duration::from_millis(normalize(policy.clone()).default_timeout_ms);
        let outcome = tokio::select! {
            verdict = rx => match verdict {
                Ok(v) => Outcome::Answered(v),
                Err(_) => Outcome::Cancelled,
            },
            () = tokio::time::sleep(timeout) => Outcome::TimedOut {
                approved: policy.timeout_action == TimeoutAction::AutoApprove as i32,
            },
            () = cancel.cancelled() => Outcome::Cancelled,
        };
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tool_id);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_needs_confirmation() {
        let mut p = default_policy();
        let allow = PermissionDecision::Allow;
        assert!(!needs_confirmation(&p, "bash", SessionLane::Execute, allow));
        assert!(needs_confirmation(
            &p,
            "bash",
            SessionLane::Execute,
            PermissionDecision::Ask
        ));
        p.enabled = true;
        assert!(needs_confirmation(&p, "read", SessionLane::Query, allow));
        p.require_confirm_tools = vec!["Bash".into()];
        assert!(!needs_confirmation(&p, "read", SessionLane::Query, allow));
        assert!(needs_confirmation(&p, "bash", SessionLane::Execute, allow));
        p.yolo_lanes = vec![SessionLane::Execute as i32];
        assert!(!needs_confirmation(
            &p,
            "bash",
            SessionLane::Execute,
            PermissionDecision::Ask
        ));
        p.yolo_lanes.clear();
        p.auto_approve_tools = vec!["bash".into()];
        assert!(!needs_confirmation(&p, "bash", SessionLane::Execute, allow));
    }

    #[tokio::test]
    async fn answers_reach_the_waiting_call() {
        let pending = std::sync::Arc::new(PendingConfirmations::default());
        let policy = default_policy();
        let cancel = CancellationToken::new();
        let waiter = {
            let pending = pending.clone();
            tokio::spawn(async move { pending.wait("t1", &policy, &cancel).await })
        };
        while pending.ids().is_empty() {
            tokio::task::yield_now().await;
        }
        assert!(!pending.answer(
            "other",
            Verdict {
                approved: true,
                reason: None
            }
        ));
        assert!(pending.answer(
            "t1",
            Verdict {
                approved: false,
                reason: Some("no".into())
            }
        ));
        match waiter.await.unwrap() {
            Outcome::Answered(v) => assert!(!v.approved),
            other => panic!("{other:?}"),
        }
    }
}
