//! The scenario step that answers an agent's approval request
//! (`approvals/1`): `decide` waits for the next `ApprovalRequest` this
//! scenario has not decided yet (or the next one containing `match`),
//! then sends its `ApprovalDecision` — approve, approve for the thread,
//! deny (with the message the agent is told), cancel the turn, or a
//! question's answer.
//!
//! ```yaml
//! accept_approvals: true     # the mock accepts approvals/1 (else no request comes)
//! steps:
//!   - decide: {outcome: approve}
//!   - decide:
//!       match: {approvalRequest: {command: "touch denied.txt"}}
//!       outcome: deny
//!       message: not today
//!       capture: {denied: approvalRequest.approvalId}
//!   - decide: {answer: blue}   # a question's answer (outcome: approve)
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use agent_runner_proto::runner::ApprovalOutcome;
use anyhow::{Result, anyhow, bail};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Run, Since, matches, ms};
use crate::json::{client_message_to_json, outgoing_from_json};
use crate::matcher::{as_text, lookup, substitute};

/// A `decide` step.
#[derive(Clone, Debug)]
pub struct Decide {
    /// What the `ApprovalRequest` must contain besides being one.
    pub pattern: Value,
    /// The decision.
    pub outcome: ApprovalOutcome,
    /// What the agent is told (a denial's reason).
    pub message: Option<String>,
    /// A question's answer.
    pub answer: Option<String>,
    /// The decision's request id (`None`: `decide-N`).
    pub request_id: Option<String>,
    /// Variable name → dotted path into the request's JSON.
    pub capture: BTreeMap<String, String>,
    /// How long to wait for the request (`None`: the scenario's default).
    pub timeout: Option<Duration>,
    /// Where in the log to start looking.
    pub since: Since,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDecide {
    #[serde(rename = "match", default)]
    pattern: Option<Value>,
    outcome: Option<String>,
    message: Option<String>,
    answer: Option<String>,
    #[serde(rename = "requestId")]
    request_id: Option<String>,
    #[serde(default)]
    capture: BTreeMap<String, String>,
    timeout_ms: Option<u64>,
    #[serde(default)]
    since: Since,
}

/// An outcome by its short name (`approve`, `approve_for_thread`, `deny`,
/// `cancel_turn`) or its protobuf name (`APPROVAL_OUTCOME_DENY`).
fn outcome(name: &str) -> Result<ApprovalOutcome> {
    let full = if name.starts_with("APPROVAL_OUTCOME_") {
        name.to_owned()
    } else {
        format!("APPROVAL_OUTCOME_{}", name.to_ascii_uppercase())
    };
    match ApprovalOutcome::from_str_name(&full) {
        Some(ApprovalOutcome::Unspecified) | None => bail!(
            "unknown outcome {name:?} (expected approve, approve_for_thread, deny or cancel_turn)"
        ),
        Some(o) => Ok(o),
    }
}

impl RawDecide {
    pub(super) fn parse(self) -> Result<Decide> {
        let pattern = match self.pattern {
            None => json!({"approvalRequest": {}}),
            Some(Value::Object(mut map)) => {
                map.entry("approvalRequest").or_insert_with(|| json!({}));
                Value::Object(map)
            }
            Some(_) => {
                bail!("decide's `match` is an object, e.g. {{approvalRequest: {{kind: …}}}}")
            }
        };
        Ok(Decide {
            pattern,
            outcome: outcome(self.outcome.as_deref().unwrap_or("approve"))?,
            message: self.message,
            answer: self.answer,
            request_id: self.request_id,
            capture: self.capture,
            timeout: ms(self.timeout_ms),
            since: self.since,
        })
    }
}

impl Run<'_> {
    /// Waits for the request `decide` is about, then decides it.
    pub(super) async fn decide(&mut self, decide: &Decide) -> Result<()> {
        let pattern = substitute(&decide.pattern, &self.vars)?;
        let from = self.since(decide.since);
        let timeout = self.timeout(decide.timeout);
        let decided = &self.decided;
        let found = self
            .plane
            .wait_for_after(
                from,
                |m| {
                    matches(&pattern, m)
                        && !decided.contains(&approval_id(&client_message_to_json(m)))
                },
                timeout,
            )
            .await;
        let (index, message) = match found {
            Ok(found) => found,
            Err(_) => bail!("{}", self.no_match_report(&pattern, from, timeout)),
        };
        let json = client_message_to_json(&message);
        let id = approval_id(&json);
        let _ = writeln!(self.out, "  matched #{index} {json}");
        self.last_match = index + 1;
        for (name, path) in &decide.capture {
            let value = lookup(&json, path).ok_or_else(|| {
                anyhow!("capture {name}: no {path:?} in the matched message #{index} {json}")
            })?;
            let text = as_text(value);
            let _ = writeln!(self.out, "  captured {name} = {text}");
            self.vars.insert(name.clone(), text);
        }
        self.decided.insert(id.clone());
        let request_id = match &decide.request_id {
            Some(rid) => substitute(&json!(rid), &self.vars)?,
            None => json!(format!("decide-{}", self.decided.len())),
        };
        let mut decision = json!({"approvalId": id, "outcome": decide.outcome.as_str_name()});
        if let Some(text) = &decide.message {
            decision["message"] = substitute(&json!(text), &self.vars)?;
        }
        if let Some(text) = &decide.answer {
            decision["answer"] = substitute(&json!(text), &self.vars)?;
        }
        let value = json!({"requestId": request_id, "approvalDecision": decision});
        let outgoing = outgoing_from_json(self.plane.protocol(), value.clone())?;
        self.plane.wait_connected(self.default_timeout).await?;
        self.last_send = self.plane.received_count();
        self.plane.send(outgoing).await?;
        let _ = writeln!(self.out, "  sent {value}");
        Ok(())
    }
}

/// The `approvalId` of a received message's JSON (empty when none).
fn approval_id(json: &Value) -> String {
    json["approvalRequest"]["approvalId"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_parse_by_short_or_protobuf_name() {
        assert_eq!(outcome("deny").unwrap(), ApprovalOutcome::Deny);
        assert_eq!(
            outcome("approve_for_thread").unwrap(),
            ApprovalOutcome::ApproveForThread
        );
        assert_eq!(
            outcome("APPROVAL_OUTCOME_CANCEL_TURN").unwrap(),
            ApprovalOutcome::CancelTurn
        );
        assert!(outcome("unspecified").is_err() && outcome("maybe").is_err());
    }

    #[test]
    fn a_decide_step_matches_approval_requests_only() {
        let raw: RawDecide =
            serde_yaml::from_str("{match: {requestId: m1}, outcome: deny, message: no}").unwrap();
        let d = raw.parse().unwrap();
        assert_eq!(d.pattern, json!({"requestId": "m1", "approvalRequest": {}}));
        assert_eq!(d.outcome, ApprovalOutcome::Deny);
        let d = RawDecide::default().parse().unwrap();
        assert_eq!(
            (d.pattern, d.outcome),
            (json!({"approvalRequest": {}}), ApprovalOutcome::Approve)
        );
        assert!(serde_yaml::from_str::<RawDecide>("{outcom: deny}").is_err());
    }
}
