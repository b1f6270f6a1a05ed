//! Answers to the app-server's server-to-client requests.
//!
//! The runner has nobody to ask, so it answers at once, by policy, and never
//! leaves a request hanging (codex would wait for it forever):
//! - command / file-change / permission approvals: accepted when the thread
//!   runs with approval policy `never` (the operator chose full autonomy;
//!   codex should not even ask), declined otherwise;
//! - questions for the user (`item/tool/requestUserInput`): no answers;
//! - MCP elicitations: declined; dynamic tool calls: failed (the runner
//!   registers none);
//! - anything else: a JSON-RPC "method not found" error.
//!
//! The v2 decisions carry no reason text; the reason is logged, and the
//! legacy `execCommandApproval`/`applyPatchApproval` get it as their
//! `rejection`.

use serde_json::{Value, json};

use crate::rpc::METHOD_NOT_FOUND;

/// Why approvals are declined (logged, and sent where the protocol has room).
pub(crate) const DECLINE_REASON: &str = "agent-runner declines approval requests: nobody is there to approve them (run codex with approval policy `never` to let it act without asking)";

/// How to answer one request.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    Result(Value),
    Error { code: i64, message: String },
}

/// The answer to `method` under the runner's policy (`accept`: approve).
pub(crate) fn answer(method: &str, params: &Value, accept: bool) -> Answer {
    let decision = |yes: &str, no: &str| json!({ "decision": if accept { yes } else { no } });
    match method {
        "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => {
            Answer::Result(decision("accept", "decline"))
        }
        "item/permissions/requestApproval" => {
            let granted = if accept {
                params
                    .get("permissions")
                    .cloned()
                    .unwrap_or_else(|| json!({}))
            } else {
                json!({})
            };
            Answer::Result(json!({ "permissions": granted, "scope": "turn" }))
        }
        "execCommandApproval" | "applyPatchApproval" => Answer::Result(if accept {
            json!({ "decision": "approved" })
        } else {
            json!({ "decision": { "denied": { "rejection": DECLINE_REASON } } })
        }),
        "item/tool/requestUserInput" => Answer::Result(json!({ "answers": {} })),
        "mcpServer/elicitation/request" => {
            Answer::Result(json!({ "action": "decline", "content": null, "_meta": null }))
        }
        "item/tool/call" => Answer::Result(json!({
            "contentItems": [{
                "type": "inputText",
                "text": "agent-runner registers no dynamic tools; this call was not run",
            }],
            "success": false,
        })),
        other => Answer::Error {
            code: METHOD_NOT_FOUND,
            message: format!("agent-runner does not handle {other}"),
        },
    }
}

/// What a request is about, for the log line.
pub(crate) fn subject(params: &Value) -> String {
    for key in ["command", "reason", "message", "tool"] {
        if let Some(text) = params.get(key).and_then(Value::as_str) {
            return text.to_owned();
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approvals_follow_the_policy() {
        let p = json!({"command": "rm -rf /"});
        assert_eq!(
            answer("item/commandExecution/requestApproval", &p, false),
            Answer::Result(json!({"decision": "decline"}))
        );
        assert_eq!(
            answer("item/fileChange/requestApproval", &p, true),
            Answer::Result(json!({"decision": "accept"}))
        );
        let Answer::Result(legacy) = answer("execCommandApproval", &p, false) else {
            panic!("legacy approvals get a result");
        };
        assert!(legacy["decision"]["denied"]["rejection"].is_string());
        assert!(matches!(
            answer("account/chatgptAuthTokens/refresh", &p, true),
            Answer::Error {
                code: METHOD_NOT_FOUND,
                ..
            }
        ));
        assert_eq!(subject(&p), "rm -rf /");
    }
}
