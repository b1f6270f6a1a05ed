//! Codex `ThreadItem`s (v2, camelCase, `type`-tagged) in the runner's terms.
//!
//! | codex `type` | kind | text |
//! |---|---|---|
//! | `userMessage` | UserMessage | its text inputs, one per line (`[image]`, `@name` for others) |
//! | `agentMessage` | AgentMessage | `text` |
//! | `reasoning` | Reasoning | `summary` parts (blank line between), else `content` parts |
//! | `plan` | Plan | `text` |
//! | `commandExecution` | CommandExecution | none; `command`, `cwd`, `processId`, `aggregatedOutput` (capped), `exitCode` |
//! | `fileChange` | FileChange | one `kind path` line per change, each followed by its diff |
//! | `mcpToolCall` | McpToolCall | `server/tool arguments`, then the result's text or the error |
//! | `dynamicToolCall` | McpToolCall | `namespace/tool arguments` |
//! | `collabAgentToolCall` | CollabAgentToolCall | `tool: prompt` |
//! | `subAgentActivity` | CollabAgentToolCall | `kind agentPath` |
//! | `webSearch` | WebSearch | `query` |
//! | `imageView` | ImageView | `path` |
//! | `imageGeneration` | ImageView | `savedPath`, else `revisedPrompt` (never the image data) |
//! | `enteredReviewMode` / `exitedReviewMode` | Entered/ExitedReviewMode | `review` |
//! | `contextCompaction` | ContextCompaction | none |
//!
//! Anything else (`hookPrompt`, `functionCallOutput`, `sleep`, types added
//! later) is skipped: the caller logs it at debug.

use sdk_adapter::{CommandInfo, ItemKind};
use sdk_process::{OUTPUT_CAP_BYTES, cap_text};
use serde_json::Value;

/// One item as a notification carried it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parsed {
    /// Codex's id (unique within its thread, not across turns).
    pub id: String,
    pub kind: ItemKind,
    pub text: Option<String>,
    pub command: Option<CommandInfo>,
}

/// Whether the kind's content is its text (and so grows by deltas).
pub(crate) fn is_text_kind(kind: ItemKind) -> bool {
    matches!(
        kind,
        ItemKind::UserMessage | ItemKind::AgentMessage | ItemKind::Reasoning | ItemKind::Plan
    )
}

fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn compact(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// The item, or `Err(type)` for an item type the runner does not show (so
/// the caller can log it).
pub(crate) fn parse(item: &Value) -> Result<Parsed, String> {
    let kind_name = str_of(item, "type").unwrap_or("<no type>");
    let Some(id) = str_of(item, "id") else {
        return Err(kind_name.to_owned());
    };
    let text_item = |kind, text: Option<String>| {
        Ok(Parsed {
            id: id.to_owned(),
            kind,
            text,
            command: None,
        })
    };
    match kind_name {
        "userMessage" => text_item(ItemKind::UserMessage, Some(user_text(item))),
        "agentMessage" => text_item(
            ItemKind::AgentMessage,
            Some(str_of(item, "text").unwrap_or("").to_owned()),
        ),
        "plan" => text_item(
            ItemKind::Plan,
            Some(str_of(item, "text").unwrap_or("").to_owned()),
        ),
        "reasoning" => {
            let summary = strings(item, "summary");
            let parts = if summary.iter().any(|s| !s.is_empty()) {
                summary
            } else {
                strings(item, "content")
            };
            text_item(ItemKind::Reasoning, Some(parts.join("\n\n")))
        }
        "commandExecution" => Ok(Parsed {
            id: id.to_owned(),
            kind: ItemKind::CommandExecution,
            text: None,
            command: Some(CommandInfo {
                command: str_of(item, "command").unwrap_or("").to_owned(),
                cwd: str_of(item, "cwd").unwrap_or("").to_owned(),
                process_id: compact(item.get("processId")),
                output: str_of(item, "aggregatedOutput").map(|o| cap_text(o, OUTPUT_CAP_BYTES)),
                exit_code: item
                    .get("exitCode")
                    .and_then(Value::as_i64)
                    .and_then(|c| i32::try_from(c).ok()),
                ..Default::default()
            }),
        }),
        "fileChange" => text_item(ItemKind::FileChange, Some(file_changes(item))),
        "mcpToolCall" => {
            let mut text = format!(
                "{}/{} {}",
                str_of(item, "server").unwrap_or(""),
                str_of(item, "tool").unwrap_or(""),
                compact(item.get("arguments"))
            );
            if let Some(error) = item.get("error").and_then(|e| str_of(e, "message")) {
                text.push_str(&format!("\nerror: {error}"));
            } else if let Some(content) = item
                .get("result")
                .and_then(|r| r.get("content"))
                .and_then(Value::as_array)
            {
                for part in content {
                    if let Some(part_text) = str_of(part, "text") {
                        text.push('\n');
                        text.push_str(part_text);
                    }
                }
            }
            text_item(
                ItemKind::McpToolCall,
                Some(cap_text(&text, OUTPUT_CAP_BYTES)),
            )
        }
        "dynamicToolCall" => {
            let namespace = str_of(item, "namespace")
                .map(|n| format!("{n}/"))
                .unwrap_or_default();
            let text = format!(
                "{namespace}{} {}",
                str_of(item, "tool").unwrap_or(""),
                compact(item.get("arguments"))
            );
            text_item(ItemKind::McpToolCall, Some(text))
        }
        "collabAgentToolCall" => {
            let tool = str_of(item, "tool").unwrap_or("");
            let text = match str_of(item, "prompt") {
                Some(prompt) => format!("{tool}: {prompt}"),
                None => tool.to_owned(),
            };
            text_item(ItemKind::CollabAgentToolCall, Some(text))
        }
        "subAgentActivity" => text_item(
            ItemKind::CollabAgentToolCall,
            Some(format!(
                "{} {}",
                str_of(item, "kind").unwrap_or(""),
                str_of(item, "agentPath").unwrap_or("")
            )),
        ),
        "webSearch" => text_item(
            ItemKind::WebSearch,
            Some(str_of(item, "query").unwrap_or("").to_owned()),
        ),
        "imageView" => text_item(
            ItemKind::ImageView,
            Some(str_of(item, "path").unwrap_or("").to_owned()),
        ),
        "imageGeneration" => text_item(
            ItemKind::ImageView,
            str_of(item, "savedPath")
                .or_else(|| str_of(item, "revisedPrompt"))
                .map(str::to_owned),
        ),
        "enteredReviewMode" => text_item(
            ItemKind::EnteredReviewMode,
            str_of(item, "review").map(str::to_owned),
        ),
        "exitedReviewMode" => text_item(
            ItemKind::ExitedReviewMode,
            str_of(item, "review").map(str::to_owned),
        ),
        "contextCompaction" => text_item(ItemKind::ContextCompaction, None),
        other => Err(other.to_owned()),
    }
}

fn user_text(item: &Value) -> String {
    let Some(content) = item.get("content").and_then(Value::as_array) else {
        return String::new();
    };
    content
        .iter()
        .map(|part| match str_of(part, "type") {
            Some("text") => str_of(part, "text").unwrap_or("").to_owned(),
            Some("image" | "localImage") => "[image]".to_owned(),
            Some("audio" | "localAudio") => "[audio]".to_owned(),
            _ => format!("@{}", str_of(part, "name").unwrap_or("?")),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn file_changes(item: &Value) -> String {
    let Some(changes) = item.get("changes").and_then(Value::as_array) else {
        return String::new();
    };
    let mut text = String::new();
    for change in changes {
        let kind = change.get("kind");
        let verb = kind.and_then(|k| str_of(k, "type")).unwrap_or("update");
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(verb);
        text.push(' ');
        text.push_str(str_of(change, "path").unwrap_or(""));
        if let Some(to) = kind.and_then(|k| str_of(k, "move_path")) {
            text.push_str(" -> ");
            text.push_str(to);
        }
        if let Some(diff) = str_of(change, "diff").filter(|d| !d.is_empty()) {
            text.push('\n');
            text.push_str(diff.trim_end_matches('\n'));
        }
    }
    cap_text(&text, OUTPUT_CAP_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn command_items_carry_their_details() {
        let item = json!({
            "type": "commandExecution", "id": "call_1", "command": "/bin/bash -lc 'echo hi'",
            "cwd": "/w", "processId": "38057", "status": "completed",
            "aggregatedOutput": "hi\n", "exitCode": 0, "durationMs": 1, "newField": true
        });
        let parsed = parse(&item).unwrap();
        assert_eq!(parsed.kind, ItemKind::CommandExecution);
        assert_eq!(parsed.text, None);
        assert_eq!(
            parsed.command,
            Some(CommandInfo {
                command: "/bin/bash -lc 'echo hi'".into(),
                cwd: "/w".into(),
                process_id: "38057".into(),
                output: Some("hi\n".into()),
                exit_code: Some(0),
                ..Default::default()
            })
        );
    }

    #[test]
    fn text_kinds_and_unknown_types() {
        let user = json!({"type": "userMessage", "id": "u", "clientId": null,
            "content": [{"type": "text", "text": "run it", "text_elements": []}, {"type": "localImage", "path": "/x.png"}]});
        assert_eq!(
            parse(&user).unwrap().text.as_deref(),
            Some("run it\n[image]")
        );
        let reasoning =
            json!({"type": "reasoning", "id": "r", "summary": [], "content": ["a", "b"]});
        assert_eq!(parse(&reasoning).unwrap().text.as_deref(), Some("a\n\nb"));
        let change = json!({"type": "fileChange", "id": "f", "status": "completed", "changes": [
            {"path": "a.txt", "kind": {"type": "add"}, "diff": "+hi\n"},
            {"path": "b.txt", "kind": {"type": "update", "move_path": "c.txt"}, "diff": ""}]});
        assert_eq!(
            parse(&change).unwrap().text.as_deref(),
            Some("add a.txt\n+hi\nupdate b.txt -> c.txt")
        );
        assert_eq!(
            parse(&json!({"type": "hookPrompt", "id": "h"})),
            Err("hookPrompt".into())
        );
        assert_eq!(
            parse(&json!({"type": "somethingNew", "id": "n"})),
            Err("somethingNew".into())
        );
        assert!(parse(&json!({"type": "agentMessage"})).is_err());
    }
}
