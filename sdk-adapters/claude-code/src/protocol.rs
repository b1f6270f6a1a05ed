//! Claude Code's stream-json lines, as `claude` 2.1 and the Agent SDK
//! (`@anthropic-ai/claude-agent-sdk`, `sdk.d.ts`) define them:
//! - in: `{"type":"user","session_id":"","uuid":…,"message":{"role":"user",
//!   "content":[{"type":"text","text":…}]},"parent_tool_use_id":null}`;
//! - control requests both ways: `{"type":"control_request","request_id":…,
//!   "request":{"subtype":…}}`, answered by `{"type":"control_response",
//!   "response":{"subtype":"success"|"error","request_id":…,
//!   "response"|"error":…}}`;
//! - a permission prompt is the `can_use_tool` subtype; its answer is a
//!   `PermissionResult` (`{"behavior":"allow","updatedInput":…}` or
//!   `{"behavior":"deny","message":…}`).

use std::sync::Arc;

use sdk_process::ResponseKey;
use serde_json::{Value, json};

/// Lines that answer our control requests, keyed by `request_id`.
pub(crate) fn response_key() -> ResponseKey {
    Arc::new(|value: &Value| {
        if value.get("type").and_then(Value::as_str) != Some("control_response") {
            return None;
        }
        value
            .get("response")
            .and_then(|r| r.get("request_id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    })
}

/// A user message line.
pub(crate) fn user_line(text: &str, uuid: &str) -> Value {
    json!({
        "type": "user",
        "session_id": "",
        "uuid": uuid,
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        "parent_tool_use_id": null,
    })
}

pub(crate) fn control_request(request_id: &str, request: Value) -> Value {
    json!({"type": "control_request", "request_id": request_id, "request": request})
}

pub(crate) fn control_success(request_id: &Value, response: Value) -> Value {
    json!({"type": "control_response", "response": {
        "subtype": "success", "request_id": request_id, "response": response,
    }})
}

pub(crate) fn control_error(request_id: &Value, error: &str) -> Value {
    json!({"type": "control_response", "response": {
        "subtype": "error", "request_id": request_id, "error": error,
    }})
}

/// Why tool use is denied (the agent sees it as the tool's result).
pub(crate) const DENY_REASON: &str = "agent-runner denies tools that need permission: nobody is there to approve them (run the runner with --claude-permission-mode bypassPermissions to allow them)";

/// The answer to a `can_use_tool` request.
pub(crate) fn permission(request: &Value, allow: bool) -> Value {
    if allow {
        json!({
            "behavior": "allow",
            "updatedInput": request.get("input").cloned().unwrap_or_else(|| json!({})),
        })
    } else {
        json!({"behavior": "deny", "message": DENY_REASON})
    }
}

/// The text of a `tool_result`'s `content` (a string or text blocks).
pub(crate) fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_responses_are_keyed() {
        let key = response_key();
        let line = json!({"type": "control_response", "response": {"subtype": "success", "request_id": "r1"}});
        assert_eq!(key(&line), Some("r1".into()));
        assert_eq!(
            key(&json!({"type": "control_request", "request_id": "r1"})),
            None
        );
        assert_eq!(key(&json!({"type": "result"})), None);
    }

    #[test]
    fn permission_answers() {
        let request =
            json!({"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}});
        assert_eq!(
            permission(&request, true),
            json!({"behavior": "allow", "updatedInput": {"command": "ls"}})
        );
        assert_eq!(permission(&request, false)["behavior"], "deny");
        assert_eq!(
            result_text(Some(
                &json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
            )),
            "a\nb"
        );
        assert_eq!(result_text(Some(&json!("x"))), "x");
    }
}
