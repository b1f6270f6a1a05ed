//! Claude Code tool calls in the runner's terms.
//!
//! | tool | kind | text |
//! |---|---|---|
//! | `Bash` | CommandExecution | none; `command`, the thread's workspace as `cwd`, output from its `tool_result` |
//! | `Edit`, `MultiEdit`, `Write`, `NotebookEdit` | FileChange | `edit PATH` / `write PATH`, then `-old`/`+new` lines (or the written content) |
//! | `WebSearch` | WebSearch | the query |
//! | `WebFetch` | WebSearch | the URL |
//! | `Task`, `Agent` | CollabAgentToolCall | `type: description` |
//! | `TodoWrite` | Plan | one `[status] task` line per todo |
//! | `ExitPlanMode` | Plan | the plan |
//! | `mcp__server__tool` | McpToolCall | `server/tool arguments` |
//! | anything else (`Read`, `Grep`, `Glob`…) | McpToolCall | `Name arguments` — a tool call that is not a shell command |
//!
//! When the `tool_result` arrives the item completes: a command gets it as
//! its output, a file change keeps its text (plus the error, if the edit
//! failed), plans keep theirs, and every other tool appends the result.

use sdk_adapter::{CommandInfo, ItemContent, ItemKind};
use sdk_process::{OUTPUT_CAP_BYTES, cap_text};
use serde_json::Value;

/// A tool call as an item.
pub(crate) type ToolItem = ItemContent;

fn field<'a>(input: &'a Value, key: &str) -> &'a str {
    input.get(key).and_then(Value::as_str).unwrap_or("")
}

fn diff(old: &str, new: &str) -> String {
    let mut text = String::new();
    for line in old.lines() {
        text.push_str("\n-");
        text.push_str(line);
    }
    for line in new.lines() {
        text.push_str("\n+");
        text.push_str(line);
    }
    text
}

fn text_item(kind: ItemKind, text: String) -> ToolItem {
    ToolItem {
        kind,
        text: Some(cap_text(&text, OUTPUT_CAP_BYTES)),
        command: None,
    }
}

/// The item for a `tool_use` block.
pub(crate) fn classify(name: &str, input: &Value, cwd: &str) -> ToolItem {
    match name {
        "Bash" => ToolItem {
            kind: ItemKind::CommandExecution,
            text: None,
            command: Some(CommandInfo {
                command: field(input, "command").to_owned(),
                cwd: cwd.to_owned(),
                process_id: String::new(),
                output: None,
                exit_code: None,
                ..Default::default()
            }),
        },
        "Edit" => text_item(
            ItemKind::FileChange,
            format!(
                "edit {}{}",
                field(input, "file_path"),
                diff(field(input, "old_string"), field(input, "new_string"))
            ),
        ),
        "MultiEdit" => {
            let mut text = format!("edit {}", field(input, "file_path"));
            for edit in input
                .get("edits")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                text.push_str(&diff(field(edit, "old_string"), field(edit, "new_string")));
            }
            text_item(ItemKind::FileChange, text)
        }
        "Write" => text_item(
            ItemKind::FileChange,
            format!(
                "write {}{}",
                field(input, "file_path"),
                diff("", field(input, "content"))
            ),
        ),
        "NotebookEdit" => text_item(
            ItemKind::FileChange,
            format!(
                "edit {}{}",
                field(input, "notebook_path"),
                diff("", field(input, "new_source"))
            ),
        ),
        "WebSearch" => text_item(ItemKind::WebSearch, field(input, "query").to_owned()),
        "WebFetch" => text_item(ItemKind::WebSearch, field(input, "url").to_owned()),
        "Task" | "Agent" => text_item(
            ItemKind::CollabAgentToolCall,
            format!(
                "{}: {}",
                field(input, "subagent_type"),
                field(input, "description")
            ),
        ),
        "TodoWrite" => {
            let lines: Vec<String> = input
                .get("todos")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|t| format!("[{}] {}", field(t, "status"), field(t, "content")))
                .collect();
            text_item(ItemKind::Plan, lines.join("\n"))
        }
        "ExitPlanMode" => text_item(ItemKind::Plan, field(input, "plan").to_owned()),
        other => {
            let label = match other.strip_prefix("mcp__").and_then(|r| r.split_once("__")) {
                Some((server, tool)) => format!("{server}/{tool}"),
                None => other.to_owned(),
            };
            text_item(ItemKind::McpToolCall, format!("{label} {input}"))
        }
    }
}

/// Complete `item` with its `tool_result`.
pub(crate) fn complete(item: &mut ToolItem, result: &str, is_error: bool) {
    let result = cap_text(result, OUTPUT_CAP_BYTES);
    match item.kind {
        ItemKind::CommandExecution => {
            if let Some(command) = item.command.as_mut() {
                command.output = Some(result);
            }
        }
        ItemKind::FileChange if !is_error => {}
        ItemKind::Plan => {}
        _ => {
            let text = item.text.get_or_insert_with(String::new);
            if !result.is_empty() {
                if !text.is_empty() {
                    text.push('\n');
                }
                if is_error {
                    text.push_str("error: ");
                }
                text.push_str(&result);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tools_map_to_the_closest_kind() {
        let bash = classify(
            "Bash",
            &json!({"command": "ls", "description": "list"}),
            "/w",
        );
        assert_eq!(bash.kind, ItemKind::CommandExecution);
        assert_eq!(bash.command.as_ref().unwrap().command, "ls");
        assert_eq!(bash.command.as_ref().unwrap().cwd, "/w");
        let edit = classify(
            "Edit",
            &json!({"file_path": "a.rs", "old_string": "x", "new_string": "y"}),
            "/w",
        );
        assert_eq!(edit.kind, ItemKind::FileChange);
        assert_eq!(edit.text.as_deref(), Some("edit a.rs\n-x\n+y"));
        assert_eq!(
            classify("Write", &json!({}), "/w").kind,
            ItemKind::FileChange
        );
        assert_eq!(
            classify("MultiEdit", &json!({}), "/w").kind,
            ItemKind::FileChange
        );
        assert_eq!(
            classify("WebSearch", &json!({"query": "q"}), "/w").kind,
            ItemKind::WebSearch
        );
        assert_eq!(
            classify("Task", &json!({}), "/w").kind,
            ItemKind::CollabAgentToolCall
        );
        assert_eq!(classify("TodoWrite", &json!({}), "/w").kind, ItemKind::Plan);
        let mcp = classify("mcp__docs__search", &json!({"q": 1}), "/w");
        assert_eq!(mcp.kind, ItemKind::McpToolCall);
        assert_eq!(mcp.text.as_deref(), Some("docs/search {\"q\":1}"));
        let mut read = classify("Read", &json!({"file_path": "a"}), "/w");
        complete(&mut read, "contents", false);
        assert_eq!(
            read.text.as_deref(),
            Some("Read {\"file_path\":\"a\"}\ncontents")
        );
    }
}
