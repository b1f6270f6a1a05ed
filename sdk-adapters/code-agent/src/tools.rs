//! The engine's tool calls in the runner's terms: the thread item kinds of
//! the control-plane protocol.
//!
//! | tool | kind | while running | when done |
//! |---|---|---|---|
//! | `bash` | CommandExecution | `command`, the workspace as `cwd`, no `process_id` until the pid is known (the runner shows the item id meanwhile) | `cwd` and `pid` from the result's metadata, the output (plus the error), `exit_code` |
//! | `write`, `edit` | FileChange | `write PATH` / `edit PATH` | `add PATH` / `update PATH` (the result's `kind`) followed by the unified diff; on failure the error |
//! | `todo` | Plan | one `[status] content` line per todo | the same (plus the error, if any) |
//! | `plan` | Plan | `Goal: …` then one `N. [id] description` line per step | the same (plus the error, if any) |
//! | `read`, `grep`, `glob`, `ls` | McpToolCall | `read PATH`, `grep PATTERN PATH`, … | the same, then the result (capped) |
//! | `mcp__SERVER__TOOL` (an MCP server's tool) | McpToolCall | `SERVER/TOOL arguments` | the same, then the result |
//! | anything else | McpToolCall | `name arguments` | the same, then the result |
//!
//! Results are capped like every adapter's (`sdk_process::cap_text`).

use code_agent_proto::ToolResult;
use sdk_adapter::{CommandInfo, ItemContent, ItemKind};
use sdk_process::{OUTPUT_CAP_BYTES, cap_text};
use serde_json::Value;

/// A tool call as an item.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolItem {
    pub content: ItemContent,
    tool: String,
    path: String,
}

fn field<'a>(args: &'a Value, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or("")
}

fn joined(parts: &[&str]) -> String {
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

fn todo_lines(args: &Value) -> String {
    args.get("todos")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| format!("[{}] {}", field(t, "status"), field(t, "content")))
        .collect::<Vec<_>>()
        .join("\n")
}

fn plan_lines(args: &Value) -> String {
    let steps = args
        .get("steps")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{}. [{}] {}",
                i + 1,
                field(s, "id"),
                field(s, "description")
            )
        });
    std::iter::once(format!("Goal: {}", field(args, "goal")))
        .chain(steps)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The item for a `tool_call` chunk. `arguments` is the call's JSON text.
pub(crate) fn started(tool: &str, arguments: &str, cwd: &str) -> ToolItem {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let path = [field(&args, "path"), field(&args, "file_path")]
        .into_iter()
        .find(|p| !p.is_empty())
        .unwrap_or("")
        .to_owned();
    let item = |kind, text: String| ToolItem {
        content: ItemContent {
            kind,
            text: Some(cap_text(&text, OUTPUT_CAP_BYTES)),
            command: None,
        },
        tool: tool.to_owned(),
        path: path.clone(),
    };
    match tool {
        "bash" => {
            let command = match field(&args, "command") {
                "" => arguments.to_owned(),
                command => command.to_owned(),
            };
            ToolItem {
                content: ItemContent {
                    kind: ItemKind::CommandExecution,
                    text: None,
                    command: Some(CommandInfo {
                        // The control plane requires a non-empty command.
                        command: if command.is_empty() {
                            "(no command)".to_owned()
                        } else {
                            command
                        },
                        cwd: cwd.to_owned(),
                        // Unknown until the result: the runner stands the
                        // item id in for an empty one, as for every adapter.
                        process_id: String::new(),
                        output: None,
                        exit_code: None,
                        ..Default::default()
                    }),
                },
                tool: tool.to_owned(),
                path: String::new(),
            }
        }
        "write" | "edit" => item(ItemKind::FileChange, joined(&[tool, &path])),
        "todo" => item(ItemKind::Plan, todo_lines(&args)),
        "plan" => item(ItemKind::Plan, plan_lines(&args)),
        "read" | "ls" => item(ItemKind::McpToolCall, joined(&[tool, &path])),
        "grep" | "glob" => item(
            ItemKind::McpToolCall,
            joined(&[tool, field(&args, "pattern"), &path]),
        ),
        other => match other
            .strip_prefix("mcp__")
            .and_then(|rest| rest.split_once("__"))
        {
            // An MCP server's tool: `server/tool arguments`, as codex and
            // Claude Code items say it.
            Some((server, tool)) => item(
                ItemKind::McpToolCall,
                joined(&[&format!("{server}/{tool}"), arguments]),
            ),
            None => item(ItemKind::McpToolCall, joined(&[other, arguments])),
        },
    }
}

/// Complete `item` with its `tool_result`.
pub(crate) fn complete(item: &mut ToolItem, result: &ToolResult) {
    let meta = |key: &str| {
        result
            .metadata
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    let error = (!result.success).then(|| {
        if result.error.is_empty() {
            "the tool failed".to_owned()
        } else {
            result.error.clone()
        }
    });
    match item.content.kind {
        ItemKind::CommandExecution => {
            if let Some(command) = item.content.command.as_mut() {
                let mut output = result.output.clone();
                if let Some(error) = error.as_deref()
                    && !output.contains(error)
                {
                    if !output.is_empty() && !output.ends_with('\n') {
                        output.push('\n');
                    }
                    output.push_str(error);
                }
                command.output = Some(cap_text(&output, OUTPUT_CAP_BYTES));
                if let Some(pid) = meta("pid") {
                    command.process_id = pid.to_owned();
                }
                if let Some(cwd) = meta("cwd") {
                    command.cwd = cwd.to_owned();
                }
                command.exit_code = meta("exit_code").and_then(|c| c.parse().ok());
            }
        }
        ItemKind::FileChange => {
            let path = meta("path").unwrap_or(&item.path).to_owned();
            let text = match error {
                Some(error) => format!("{}\nerror: {error}", joined(&[&item.tool, &path])),
                None => {
                    let kind = meta("kind").unwrap_or(if item.tool == "write" {
                        "add"
                    } else {
                        "update"
                    });
                    let mut text = joined(&[kind, &path]);
                    if let Some(diff) = meta("diff") {
                        text.push('\n');
                        text.push_str(diff.trim_end_matches('\n'));
                    }
                    text
                }
            };
            item.content.text = Some(cap_text(&text, OUTPUT_CAP_BYTES));
        }
        kind => {
            let text = item.content.text.get_or_insert_with(String::new);
            let appended = match error {
                Some(error) => format!("error: {error}"),
                None if kind == ItemKind::Plan => String::new(),
                None => result.output.clone(),
            };
            if !appended.is_empty() {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&appended);
            }
            *text = cap_text(text, OUTPUT_CAP_BYTES);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(success: bool, output: &str, error: &str, meta: &[(&str, &str)]) -> ToolResult {
        ToolResult {
            success,
            output: output.into(),
            error: error.into(),
            metadata: meta
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn bash_is_a_command_with_its_pid_and_output() {
        let mut item = started("bash", r#"{"command":"echo hi"}"#, "/w");
        assert_eq!(item.content.kind, ItemKind::CommandExecution);
        let running = item.content.command.clone().unwrap();
        assert_eq!(
            (running.command.as_str(), running.cwd.as_str()),
            ("echo hi", "/w")
        );
        assert_eq!(running.process_id, "");
        complete(
            &mut item,
            &result(
                false,
                "hi\n",
                "exit status 3",
                &[("pid", "4242"), ("exit_code", "3"), ("cwd", "/w/sub")],
            ),
        );
        let done = item.content.command.unwrap();
        assert_eq!(done.process_id, "4242");
        assert_eq!(done.cwd, "/w/sub");
        assert_eq!(done.exit_code, Some(3));
        assert_eq!(done.output.as_deref(), Some("hi\nexit status 3"));
    }

    #[test]
    fn edits_are_file_changes_with_their_diff() {
        let mut item = started("edit", r#"{"path":"src/a.rs","old":"x","new":"y"}"#, "/w");
        assert_eq!(item.content.kind, ItemKind::FileChange);
        assert_eq!(item.content.text.as_deref(), Some("edit src/a.rs"));
        complete(
            &mut item,
            &result(
                true,
                "ok",
                "",
                &[
                    ("kind", "update"),
                    ("path", "src/a.rs"),
                    ("diff", "-x\n+y\n"),
                ],
            ),
        );
        assert_eq!(
            item.content.text.as_deref(),
            Some("update src/a.rs\n-x\n+y")
        );

        let mut failed = started("write", r#"{"path":"../x"}"#, "/w");
        complete(
            &mut failed,
            &result(false, "", "path escapes the workspace", &[]),
        );
        assert_eq!(
            failed.content.text.as_deref(),
            Some("write ../x\nerror: path escapes the workspace")
        );
    }

    #[test]
    fn other_tools_take_the_closest_kind() {
        let todo = started(
            "todo",
            r#"{"todos":[{"content":"a","status":"pending"},{"content":"b","status":"completed"}]}"#,
            "/w",
        );
        assert_eq!(todo.content.kind, ItemKind::Plan);
        assert_eq!(
            todo.content.text.as_deref(),
            Some("[pending] a\n[completed] b")
        );

        let mut plan = started(
            "plan",
            r#"{"goal":"add a flag","steps":[{"id":"s1","description":"find it"},{"id":"s2","description":"edit it"}]}"#,
            "/w",
        );
        assert_eq!(plan.content.kind, ItemKind::Plan);
        complete(&mut plan, &result(true, "recorded plan-1", "", &[]));
        assert_eq!(
            plan.content.text.as_deref(),
            Some("Goal: add a flag\n1. [s1] find it\n2. [s2] edit it")
        );

        let mut grep = started("grep", r#"{"pattern":"fn main","path":"src"}"#, "/w");
        assert_eq!(grep.content.kind, ItemKind::McpToolCall);
        complete(&mut grep, &result(true, "src/main.rs:1:fn main", "", &[]));
        assert_eq!(
            grep.content.text.as_deref(),
            Some("grep fn main src\nsrc/main.rs:1:fn main")
        );

        let other = started("mcp_thing", r#"{"a":1}"#, "/w");
        assert_eq!(other.content.kind, ItemKind::McpToolCall);
        assert_eq!(other.content.text.as_deref(), Some(r#"mcp_thing {"a":1}"#));
    }
}
