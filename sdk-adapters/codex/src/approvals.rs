//! Answers to the app-server's server-to-client requests.
//!
//! Command, file-change and permission approvals (v2 and the legacy
//! `execCommandApproval`/`applyPatchApproval`), questions for the user
//! (`item/tool/requestUserInput`) and MCP elicitations
//! (`mcpServer/elicitation/request`) that arrive while a turn runs, under an
//! approval policy other than `never`, are asked through the turn
//! ([`ask_for`], [`decided`]): the runner decides (a person at the control
//! plane, or its policy). A question's answer text answers every question
//! of the request, unless it is a JSON object of answers by question id; an
//! accepted elicitation's content is the answer when that is a JSON
//! object, else empty. Everything else is answered at once, and never
//! left hanging (codex would wait for it forever):
//! - command / file-change / permission approvals: accepted when the thread
//!   runs with approval policy `never` (the operator chose full autonomy;
//!   codex should not even ask), declined otherwise;
//! - questions for the user: no answers; MCP elicitations: declined (both
//!   outside a turn, or under `never`);
//! - dynamic tool calls: failed (the runner registers none);
//! - anything else: a JSON-RPC "method not found" error.
//!
//! The v2 decisions carry no reason text; the reason is logged, and the
//! legacy `execCommandApproval`/`applyPatchApproval` get it as their
//! `rejection`.

use sdk_adapter::{ApprovalAnswer, ApprovalAsk, ApprovalKind, Verdict};
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

/// Whether `method` is an approval the runner asks about.
pub(crate) fn asks(method: &str) -> bool {
    matches!(
        method,
        "item/commandExecution/requestApproval"
            | "item/fileChange/requestApproval"
            | "item/permissions/requestApproval"
            | "execCommandApproval"
            | "applyPatchApproval"
            | "item/tool/requestUserInput"
            | "mcpServer/elicitation/request"
    )
}

/// What a person needs to decide `method` (one [`asks`] names).
pub(crate) fn ask_for(method: &str, params: &Value) -> ApprovalAsk {
    let text = |key: &str| params.get(key).and_then(Value::as_str).map(str::to_owned);
    let command = match params.get("command") {
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        Some(Value::String(command)) => Some(command.clone()),
        _ => None,
    };
    let mut ask = match method {
        "item/commandExecution/requestApproval" | "execCommandApproval" => {
            let shown = command.clone().unwrap_or_default();
            let mut ask =
                ApprovalAsk::new(ApprovalKind::CommandExecution, format!("run `{shown}`"));
            ask.command = command;
            ask.cwd = text("cwd");
            ask
        }
        "item/tool/requestUserInput" => return question(params),
        "mcpServer/elicitation/request" => {
            let server = text("serverName").unwrap_or_default();
            let message = text("message").unwrap_or_default();
            let mut ask = ApprovalAsk::new(
                ApprovalKind::McpElicitation,
                format!("{server} asks: {message}"),
            );
            ask.reason = Some(message);
            ask.command = Some(format!(
                "{server}: {}",
                params
                    .get("requestedSchema")
                    .map(Value::to_string)
                    .unwrap_or_default()
            ));
            ask.options = schema_choices(params.get("requestedSchema"));
            if let Some(url) = text("url") {
                ask.paths = vec![url];
            }
            return ask;
        }
        "item/permissions/requestApproval" => {
            let wanted = params
                .get("permissions")
                .map(Value::to_string)
                .unwrap_or_default();
            ApprovalAsk::new(
                ApprovalKind::Permission,
                format!("grant permissions {wanted}"),
            )
        }
        _ => {
            let mut ask = ApprovalAsk::new(ApprovalKind::FileChange, "apply a file change");
            ask.paths = text("grantRoot").into_iter().collect();
            if let Some(Value::Object(changes)) =
                params.get("fileChanges").or(params.get("changes"))
            {
                ask.paths.extend(changes.keys().cloned());
            }
            ask
        }
    };
    ask.reason = text("reason");
    ask.item_id = text("itemId").or_else(|| text("callId"));
    ask
}

/// A `requestUserInput`'s questions as one ask ([`ApprovalAsk::questions`]).
fn question(params: &Value) -> ApprovalAsk {
    let questions = params
        .get("questions")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut ask = ApprovalAsk::questions(questions);
    ask.item_id = params
        .get("itemId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    ask
}

/// The values an elicitation's schema allows for its single enum field.
fn schema_choices(schema: Option<&Value>) -> Vec<String> {
    let Some(Value::Object(properties)) = schema.and_then(|s| s.get("properties")) else {
        return Vec::new();
    };
    properties
        .values()
        .find_map(|p| p.get("enum").and_then(Value::as_array))
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// The answers to a `requestUserInput`: by question id, from a JSON object
/// answer, or the answer text for every question; none without an answer
/// (a question's outcome does not matter, its answer does).
fn answers(params: &Value, answer: &ApprovalAnswer) -> Value {
    let Some(text) = answer.answer.as_deref() else {
        return json!({ "answers": {} });
    };
    let by_id: Option<serde_json::Map<String, Value>> = serde_json::from_str(text).ok();
    let mut out = serde_json::Map::new();
    let questions = params.get("questions").and_then(Value::as_array);
    for id in questions
        .into_iter()
        .flatten()
        .filter_map(|q| q.get("id").and_then(Value::as_str))
    {
        let given = match &by_id {
            Some(map) => match map.get(id) {
                Some(Value::String(one)) => vec![one.clone()],
                Some(Value::Array(many)) => many
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
                _ => continue,
            },
            None => vec![text.to_owned()],
        };
        out.insert(id.to_owned(), json!({ "answers": given }));
    }
    json!({ "answers": out })
}

/// codex's answer to `method` for `answer`. codex's decisions carry no
/// text: a denial's message is logged by the runner, not given to codex
/// (except as a legacy request's `rejection`).
pub(crate) fn decided(method: &str, params: &Value, answer: &ApprovalAnswer) -> Value {
    let verdict = answer.verdict;
    match method {
        "item/tool/requestUserInput" => answers(params, answer),
        "mcpServer/elicitation/request" => match verdict {
            Verdict::Approve | Verdict::ApproveForThread => {
                let content = answer
                    .answer
                    .as_deref()
                    .and_then(|a| serde_json::from_str::<Value>(a).ok())
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                json!({ "action": "accept", "content": content, "_meta": null })
            }
            Verdict::Deny => json!({ "action": "decline", "content": null, "_meta": null }),
            Verdict::CancelTurn => json!({ "action": "cancel", "content": null, "_meta": null }),
        },
        "item/permissions/requestApproval" => {
            let granted = match verdict {
                Verdict::Approve | Verdict::ApproveForThread => params
                    .get("permissions")
                    .cloned()
                    .unwrap_or_else(|| json!({})),
                Verdict::Deny | Verdict::CancelTurn => json!({}),
            };
            let scope = if verdict == Verdict::ApproveForThread {
                "session"
            } else {
                "turn"
            };
            json!({ "permissions": granted, "scope": scope })
        }
        "execCommandApproval" | "applyPatchApproval" => match verdict {
            Verdict::Approve => json!({ "decision": "approved" }),
            Verdict::ApproveForThread => json!({ "decision": "approved_for_session" }),
            Verdict::CancelTurn => json!({ "decision": "abort" }),
            Verdict::Deny => {
                let why = answer
                    .message
                    .clone()
                    .unwrap_or_else(|| "denied".to_owned());
                json!({ "decision": { "denied": { "rejection": why } } })
            }
        },
        _ => json!({ "decision": match verdict {
            Verdict::Approve => "accept",
            Verdict::ApproveForThread => "acceptForSession",
            Verdict::Deny => "decline",
            Verdict::CancelTurn => "cancel",
        }}),
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

    #[test]
    fn asked_approvals_say_what_and_map_back() {
        let p = json!({"command": "touch x", "cwd": "/w", "reason": "wants to", "itemId": "i1"});
        let ask = ask_for("item/commandExecution/requestApproval", &p);
        assert_eq!(ask.kind, ApprovalKind::CommandExecution);
        assert_eq!(ask.command.as_deref(), Some("touch x"));
        assert_eq!(ask.cwd.as_deref(), Some("/w"));
        assert_eq!(ask.reason.as_deref(), Some("wants to"));
        assert_eq!(ask.item_id.as_deref(), Some("i1"));
        let yes = ApprovalAnswer::approve();
        let session = sdk_adapter::ApprovalAnswer {
            verdict: Verdict::ApproveForThread,
            ..yes.clone()
        };
        let method = "item/fileChange/requestApproval";
        assert_eq!(decided(method, &p, &yes), json!({"decision": "accept"}));
        assert_eq!(
            decided(method, &p, &session),
            json!({"decision": "acceptForSession"})
        );
        let no = ApprovalAnswer::deny("not now");
        let legacy = decided("execCommandApproval", &p, &no);
        assert_eq!(legacy["decision"]["denied"]["rejection"], "not now");
        let perms = json!({"permissions": {"network": true}});
        let granted = decided("item/permissions/requestApproval", &perms, &session);
        assert_eq!(
            granted,
            json!({"permissions": {"network": true}, "scope": "session"})
        );
        assert!(asks("execCommandApproval") && !asks("item/tool/call"));
    }

    #[test]
    fn questions_and_elicitations_are_asked_and_answered() {
        let p = json!({"itemId": "ask_1", "questions": [
            {"id": "q1", "header": "Pick", "question": "Which?", "options": [{"label": "red"}, {"label": "blue"}]},
        ]});
        let method = "item/tool/requestUserInput";
        let ask = ask_for(method, &p);
        assert_eq!(ask.kind, ApprovalKind::Question);
        assert_eq!(ask.title, "Which?");
        assert_eq!(ask.options, ["red", "blue"]);
        assert_eq!(ask.item_id.as_deref(), Some("ask_1"));
        let answered = ApprovalAnswer {
            answer: Some("blue".into()),
            ..ApprovalAnswer::approve()
        };
        assert_eq!(
            decided(method, &p, &answered),
            json!({"answers": {"q1": {"answers": ["blue"]}}})
        );
        let by_id = ApprovalAnswer {
            answer: Some(r#"{"q1": ["red", "blue"], "q9": "x"}"#.into()),
            ..ApprovalAnswer::approve()
        };
        assert_eq!(
            decided(method, &p, &by_id),
            json!({"answers": {"q1": {"answers": ["red", "blue"]}}})
        );
        let none = decided(method, &p, &ApprovalAnswer::deny("no"));
        assert_eq!(none, json!({"answers": {}}));

        let e = json!({"serverName": "docs", "message": "Which env?", "mode": "form",
            "requestedSchema": {"type": "object", "properties": {"env": {"type": "string", "enum": ["dev", "prod"]}}}});
        let method = "mcpServer/elicitation/request";
        let ask = ask_for(method, &e);
        assert_eq!(ask.kind, ApprovalKind::McpElicitation);
        assert!(ask.title.contains("docs") && ask.title.contains("Which env?"));
        assert_eq!(ask.options, ["dev", "prod"]);
        let accepted = ApprovalAnswer {
            answer: Some(r#"{"env": "dev"}"#.into()),
            ..ApprovalAnswer::approve()
        };
        assert_eq!(decided(method, &e, &accepted)["action"], "accept");
        assert_eq!(
            decided(method, &e, &accepted)["content"],
            json!({"env": "dev"})
        );
        assert_eq!(
            decided(method, &e, &ApprovalAnswer::deny("no"))["action"],
            "decline"
        );
    }
}
