//! Claude Code's permission prompts (`can_use_tool`) asked through the
//! runner ([`sdk_adapter::ask_approval`]'s seam), as the pinned CLI
//! (2.1.197) sends and takes them:
//! - the request: `{"subtype":"can_use_tool","tool_name":…,"display_name":…,
//!   "input":{…},"tool_use_id":…,"description"?:…,"permission_suggestions"?:[…],
//!   "blocked_path"?:…,"decision_reason"?:…}` — for `Bash`, `description`
//!   is the agent's own description of the command;
//! - the answer: `{"behavior":"allow","updatedInput":{…}}` (required; an
//!   empty object means the original input) or `{"behavior":"deny",
//!   "message":…,"interrupt"?:true}` (`interrupt` aborts claude's turn).
//!
//! What a person sees ([`ask_for`]): `Bash` is a command execution (the
//! command, the thread's workspace as cwd, the agent's description as the
//! reason); `Edit`, `MultiEdit`, `Write` and `NotebookEdit` are file
//! changes (the file); `AskUserQuestion` is a question, answered with
//! text ([`crate::question`]); every other tool is a permission (its path
//! or URL when it has one). The tool's name is part of what "the same request"
//! means for "approve for this thread", which the runner remembers:
//! Claude's own `updatedPermissions` are not used, because the rules it
//! suggests are broader than the request (command prefixes, whole
//! directories, a switch to `acceptEdits`). Without a control plane the
//! answer is the adapter's policy, as before ([`crate::protocol::permission`]).

use sdk_adapter::{AdapterSide, ApprovalAnswer, ApprovalAsk, ApprovalKind, Verdict};
use serde_json::{Value, json};

use crate::protocol::DENY_REASON;

/// Longest title, in characters (one line).
const TITLE_CHARS: usize = 300;

/// Tools whose prompt is a file change, and the input naming the file.
const FILE_TOOLS: &[(&str, &str)] = &[
    ("Edit", "file_path"),
    ("MultiEdit", "file_path"),
    ("Write", "file_path"),
    ("NotebookEdit", "notebook_path"),
];

/// Inputs that name what a permission is about.
const PATH_INPUTS: &[&str] = &["file_path", "notebook_path", "path", "url"];

/// What a person needs to decide the `can_use_tool` `request`, for a
/// thread whose workspace is `cwd`.
pub(crate) fn ask_for(request: &Value, cwd: &str) -> ApprovalAsk {
    let text = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
            .map(str::to_owned)
    };
    let tool = text(request, "tool_name").unwrap_or_default();
    let shown = text(request, "display_name").unwrap_or_else(|| tool.clone());
    let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
    let decision_reason = text(request, "decision_reason");
    let mut ask = if tool == crate::question::TOOL {
        let mut ask = crate::question::ask(&input);
        ask.title = one_line(&ask.title);
        ask
    } else if tool == "Bash" {
        let command = text(&input, "command").unwrap_or_default();
        let mut ask = ApprovalAsk::new(
            ApprovalKind::CommandExecution,
            one_line(&format!("run `{command}`")),
        );
        ask.command = Some(command);
        ask.cwd = Some(cwd.to_owned());
        ask.reason = text(&input, "description").or(decision_reason);
        ask
    } else if let Some((_, key)) = FILE_TOOLS.iter().find(|(name, _)| *name == tool) {
        let path = text(&input, key).unwrap_or_default();
        let verb = if tool == "Write" { "write" } else { "edit" };
        let mut ask = ApprovalAsk::new(
            ApprovalKind::FileChange,
            one_line(&format!("{verb} {path}")),
        );
        ask.paths = vec![path];
        ask.reason = decision_reason;
        ask
    } else {
        let what = text(request, "description").unwrap_or_else(|| compact(&input));
        let mut ask = ApprovalAsk::new(
            ApprovalKind::Permission,
            one_line(&format!("use {shown}: {what}")),
        );
        ask.paths = PATH_INPUTS
            .iter()
            .filter_map(|key| text(&input, key))
            .chain(text(request, "blocked_path"))
            .collect();
        ask.paths.dedup();
        ask.reason = if tool == "ExitPlanMode" {
            text(&input, "plan").or(decision_reason)
        } else {
            decision_reason
        };
        ask
    };
    // Nobody decides: the adapter's policy, as before the extension (a
    // question is not a tool to refuse: claude is told to go on).
    let fallback = if ask.kind == ApprovalKind::Question {
        crate::question::NOBODY_ANSWERS
    } else {
        DENY_REASON
    };
    ask.adapter = Some(Box::new(AdapterSide {
        tool: Some(tool),
        fallback: Some(ApprovalAnswer::deny(fallback)),
    }));
    ask
}

/// Claude Code's `PermissionResult` for `answer` to `request`.
pub(crate) fn decided(request: &Value, answer: &ApprovalAnswer) -> Value {
    if request.get("tool_name").and_then(Value::as_str) == Some(crate::question::TOOL) {
        let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
        return crate::question::answered(&input, answer);
    }
    let message = || {
        answer
            .message
            .clone()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| "denied at the control plane".to_owned())
    };
    match answer.verdict {
        Verdict::Approve | Verdict::ApproveForThread => json!({
            "behavior": "allow",
            "updatedInput": request.get("input").cloned().unwrap_or_else(|| json!({})),
        }),
        Verdict::Deny => json!({"behavior": "deny", "message": message()}),
        Verdict::CancelTurn => json!({"behavior": "deny", "message": message(), "interrupt": true}),
    }
}

/// `text` on one line, at most [`TITLE_CHARS`] characters.
fn one_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.chars().count() <= TITLE_CHARS {
        return flat.to_owned();
    }
    let mut cut: String = flat.chars().take(TITLE_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// A tool input, compactly.
fn compact(input: &Value) -> String {
    match input {
        Value::Object(map) if map.is_empty() => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tool: &str, input: Value) -> Value {
        json!({"subtype": "can_use_tool", "tool_name": tool, "display_name": tool,
               "input": input, "tool_use_id": "toolu_1"})
    }

    #[test]
    fn bash_edits_and_other_tools_say_what_they_do() {
        let bash = request(
            "Bash",
            json!({"command": "touch a\nrm b", "description": "tidy up"}),
        );
        let ask = ask_for(&bash, "/w");
        assert_eq!(ask.kind, ApprovalKind::CommandExecution);
        assert_eq!(ask.title, "run `touch a rm b`");
        assert_eq!(ask.command.as_deref(), Some("touch a\nrm b"));
        assert_eq!(ask.cwd.as_deref(), Some("/w"));
        assert_eq!(ask.reason.as_deref(), Some("tidy up"));
        let side = ask.adapter.as_deref().expect("the adapter's side");
        assert_eq!(side.tool.as_deref(), Some("Bash"));
        assert_eq!(side.fallback, Some(ApprovalAnswer::deny(DENY_REASON)));

        let write = ask_for(&request("Write", json!({"file_path": "/w/x"})), "/w");
        assert_eq!(
            (write.kind, write.title.as_str(), write.paths.as_slice()),
            (
                ApprovalKind::FileChange,
                "write /w/x",
                &["/w/x".to_owned()][..]
            )
        );
        let fetch = ask_for(
            &request("WebFetch", json!({"url": "https://example.test/"})),
            "/w",
        );
        assert_eq!(fetch.kind, ApprovalKind::Permission);
        assert_eq!(fetch.paths, ["https://example.test/"]);
        assert!(fetch.title.starts_with("use WebFetch: "), "{}", fetch.title);

        // The tool is part of "the same request".
        let mcp_a = ask_for(&request("mcp__a__go", json!({})), "/w");
        let mcp_b = ask_for(&request("mcp__b__go", json!({})), "/w");
        assert_ne!(mcp_a.same_as_key(), mcp_b.same_as_key());
        let long = ask_for(&request("Bash", json!({"command": "x".repeat(5000)})), "/w");
        assert_eq!(long.title.chars().count(), TITLE_CHARS);

        // A clarifying question is a question, on one line, answered with
        // the text (not the original input).
        let asked = json!({"questions": [{"question": "Which one?\n".repeat(100),
            "header": "Pick", "options": [{"label": "A"}, {"label": "B"}]}]});
        let question = ask_for(&request("AskUserQuestion", asked.clone()), "/w");
        assert_eq!(question.kind, ApprovalKind::Question);
        assert_eq!(question.title.chars().count(), TITLE_CHARS);
        assert!(!question.title.contains('\n'));
        assert_eq!(question.options, ["A", "B"]);
        let answer = ApprovalAnswer {
            answer: Some("B".into()),
            ..ApprovalAnswer::approve()
        };
        let result = decided(&request("AskUserQuestion", asked), &answer);
        let key = "Which one?\n".repeat(100);
        assert_eq!(result["updatedInput"]["answers"][key.as_str()], "B");
    }

    #[test]
    fn decisions_map_to_permission_results() {
        let bash = request("Bash", json!({"command": "ls"}));
        let approve = ApprovalAnswer::approve();
        assert_eq!(
            decided(&bash, &approve),
            json!({"behavior": "allow", "updatedInput": {"command": "ls"}})
        );
        let for_thread = ApprovalAnswer {
            verdict: Verdict::ApproveForThread,
            ..approve
        };
        assert_eq!(decided(&bash, &for_thread)["behavior"], "allow");
        assert_eq!(
            decided(&bash, &ApprovalAnswer::deny("not that")),
            json!({"behavior": "deny", "message": "not that"})
        );
        let cancel = ApprovalAnswer {
            verdict: Verdict::CancelTurn,
            answer: None,
            message: None,
        };
        assert_eq!(
            decided(&bash, &cancel),
            json!({"behavior": "deny", "message": "denied at the control plane", "interrupt": true})
        );
    }
}
