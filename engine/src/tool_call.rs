//! One tool call, start to end: find the tool, parse its arguments, check
//! the session's permission rules (deny ⇒ a tool error for the model),
//! wait for a person's confirmation when the policy or an `ASK` rule wants
//! one, then run it the way its lane's handler says (INTERNAL, EXTERNAL as
//! an `ExternalTask` the client completes, HYBRID = internal + events).
//! Every outcome is a [`ToolOutput`] the model reads; nothing here fails
//! the generation.

use std::path::Path;

use code_agent_proto::agent_event::EventType;
use code_agent_proto::{
    ExternalTask, LaneHandlerConfig, PermissionDecision, SessionLane, TaskHandlerMode,
};
use tokio_util::sync::CancellationToken;

use crate::engine::EngineInner;
use crate::hitl::{self, Outcome};
use crate::lanes::{self, TaskOutcome};
use crate::llm::ToolCallRequest;
use crate::session::Session;
use crate::tools::{Tool, ToolOutput};

/// What a call runs against.
pub struct CallEnv<'a> {
    pub engine: &'a EngineInner,
    pub session: &'a Session,
    pub workspace: &'a Path,
    pub cancel: &'a CancellationToken,
}

impl CallEnv<'_> {
    fn emit<const N: usize>(&self, kind: EventType, message: &str, data: [(&str, String); N]) {
        self.engine
            .events
            .emit(kind, Some(&self.session.id), message, data);
    }
}

/// The lane of the tool called `name` (`unknown` for unknown tools; MCP
/// tools run on the execute lane: their effects are unknown).
pub fn lane_of(env: &CallEnv<'_>, name: &str) -> SessionLane {
    if crate::mcp::is_mcp_tool(name) {
        return SessionLane::Execute;
    }
    env.engine
        .tool(name)
        .map_or(SessionLane::Unknown, |t| SessionLane::from(t.lane()))
}

/// What a call runs: a built-in tool, or a tool of an MCP server.
enum Target {
    Builtin(std::sync::Arc<dyn Tool>),
    Mcp,
}

/// Runs one call through permissions, confirmation and its lane handler.
pub async fn execute(env: &CallEnv<'_>, call: &ToolCallRequest) -> ToolOutput {
    let target = match env.engine.tool(&call.name) {
        Some(tool) => Target::Builtin(tool),
        None if crate::mcp::is_mcp_tool(&call.name) => Target::Mcp,
        None => {
            let known: Vec<_> = env.engine.all_tools().iter().map(|t| t.name()).collect();
            return ToolOutput::err(format!(
                "unknown tool {:?}; the tools are: {}",
                call.name,
                known.join(", ")
            ));
        }
    };
    let args: serde_json::Value = if call.arguments.trim().is_empty() {
        serde_json::json!({})
    } else {
        match serde_json::from_str(&call.arguments) {
            Ok(args) => args,
            Err(e) => {
                return ToolOutput::err(format!(
                    "the arguments of {} are not valid JSON: {e}",
                    call.name
                ));
            }
        }
    };
    let lane = match &target {
        Target::Builtin(tool) => SessionLane::from(tool.lane()),
        Target::Mcp => SessionLane::Execute,
    };
    let permissions = env.session.read(|d| d.permissions.clone());
    let (decision, rules) = permissions
        .check_in_off_worker(env.workspace, &call.name, &args)
        .await;
    if decision == PermissionDecision::Deny {
        env.emit(
            EventType::PermissionDenied,
            &format!("permission denied: {}", call.name),
            [
                ("tool_id", call.id.clone()),
                ("tool", call.name.clone()),
                ("rules", rules.join(", ")),
            ],
        );
        return ToolOutput::err(format!(
            "permission denied: {} is not allowed here (rule: {})",
            call.name,
            rules.join(", ")
        ));
    }
    let policy = env.session.read(|d| d.confirmation.clone());
    if hitl::needs_confirmation(&policy, &call.name, lane, decision)
        && let Some(refusal) = confirm(env, call, lane, &policy).await
    {
        return refusal;
    }
    let handler = env.session.read(|d| d.lane_handler(lane as i32));
    env.emit(
        EventType::ToolCalled,
        &format!("tool called: {}", call.name),
        [
            ("tool_id", call.id.clone()),
            ("tool", call.name.clone()),
            ("lane", lanes::lane_name(lane).to_string()),
            ("arguments", call.arguments.clone()),
        ],
    );
    let output = match TaskHandlerMode::try_from(handler.mode).unwrap_or(TaskHandlerMode::Internal)
    {
        TaskHandlerMode::External => external(env, call, lane, &handler, &args).await,
        TaskHandlerMode::Hybrid => hybrid(env, call, lane, &target, args).await,
        _ => run_internal(env, call, &target, args).await,
    };
    env.emit(
        EventType::ToolCompleted,
        &format!("tool completed: {}", call.name),
        [
            ("tool_id", call.id.clone()),
            ("tool", call.name.clone()),
            ("success", output.success.to_string()),
        ],
    );
    output
}

/// Waits for a person; `Some(error)` when the call must not run.
async fn confirm(
    env: &CallEnv<'_>,
    call: &ToolCallRequest,
    lane: SessionLane,
    policy: &code_agent_proto::ConfirmationPolicy,
) -> Option<ToolOutput> {
    let timeout_ms = hitl::normalize(policy.clone()).default_timeout_ms;
    env.emit(
        EventType::ConfirmationRequired,
        &format!("confirmation required: {}", call.name),
        [
            ("tool_id", call.id.clone()),
            ("tool", call.name.clone()),
            ("arguments", call.arguments.clone()),
            ("lane", lanes::lane_name(lane).to_string()),
            ("timeout_ms", timeout_ms.to_string()),
        ],
    );
    match env
        .session
        .confirmations
        .wait(&call.id, policy, env.cancel)
        .await
    {
        Outcome::Answered(verdict) => {
            env.emit(
                EventType::ConfirmationReceived,
                &format!("confirmation received: {}", call.name),
                [
                    ("tool_id", call.id.clone()),
                    ("approved", verdict.approved.to_string()),
                    ("reason", verdict.reason.clone().unwrap_or_default()),
                ],
            );
            (!verdict.approved).then(|| {
                let reason = verdict
                    .reason
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                ToolOutput::err(format!("the user rejected this {} call{reason}", call.name))
            })
        }
        Outcome::TimedOut { approved } => {
            let action = if approved { "auto_approve" } else { "reject" };
            env.emit(
                EventType::ConfirmationTimeout,
                &format!("confirmation timed out: {}", call.name),
                [
                    ("tool_id", call.id.clone()),
                    ("action", action.to_string()),
                    ("timeout_ms", timeout_ms.to_string()),
                ],
            );
            (!approved).then(|| {
                ToolOutput::err(format!(
                    "no confirmation for this {} call within {timeout_ms} ms; it was rejected",
                    call.name
                ))
            })
        }
        Outcome::Cancelled => Some(ToolOutput::err("cancelled before it was confirmed")),
    }
}

async fn run_internal(
    env: &CallEnv<'_>,
    call: &ToolCallRequest,
    target: &Target,
    args: serde_json::Value,
) -> ToolOutput {
    match target {
        Target::Builtin(tool) => {
            let ctx = env
                .engine
                .tool_context(env.session, env.workspace, env.cancel.child_token());
            let output = tool.run(args, &ctx).await;
            // After write/edit, the file's fresh diagnostics when a server
            // handles it.
            crate::lsp::with_diagnostics(&env.engine.lsp, tool.name(), env.workspace, output).await
        }
        Target::Mcp => {
            let scope = Some(env.session.id.clone());
            let called = tokio::select! {
                r = env.engine.mcp.call(&scope, &call.name, args) => r,
                () = env.cancel.cancelled() => Err("cancelled".to_owned()),
            };
            mcp_output(called, env.engine.config.output_cap)
        }
    }
}

/// An MCP tool's result as the model reads it: its text (or, without
/// text, its structured content), capped; a tool error or a failed call is
/// a failed output.
fn mcp_output(called: Result<mcp_client::ToolResult, String>, cap: usize) -> ToolOutput {
    match called {
        Err(error) => ToolOutput::err(error),
        Ok(result) => {
            let text = match (&result.structured, result.text.is_empty()) {
                (Some(structured), true) => structured.to_string(),
                _ => result.text,
            };
            let text = crate::tools::cap_head_tail(&text, cap);
            if result.is_error {
                ToolOutput::err(text).with("handled_by", "mcp")
            } else {
                ToolOutput::ok(text).with("handled_by", "mcp")
            }
        }
    }
}

async fn hybrid(
    env: &CallEnv<'_>,
    call: &ToolCallRequest,
    lane: SessionLane,
    target: &Target,
    args: serde_json::Value,
) -> ToolOutput {
    let notice = [
        ("task_id", call.id.clone()),
        ("tool_id", call.id.clone()),
        ("tool", call.name.clone()),
        ("lane", lanes::lane_name(lane).to_string()),
        ("mode", "hybrid".to_string()),
        ("arguments", call.arguments.clone()),
    ];
    env.emit(
        EventType::ExternalTaskPending,
        &format!("running {} (hybrid lane)", call.name),
        notice,
    );
    let output = run_internal(env, call, target, args).await;
    env.emit(
        EventType::ExternalTaskCompleted,
        &format!("{} finished (hybrid lane)", call.name),
        [
            ("task_id", call.id.clone()),
            ("tool_id", call.id.clone()),
            ("mode", "hybrid".to_string()),
            ("success", output.success.to_string()),
            ("output", output.output.clone()),
        ],
    );
    output.with("handled_by", "hybrid")
}

async fn external(
    env: &CallEnv<'_>,
    call: &ToolCallRequest,
    lane: SessionLane,
    handler: &LaneHandlerConfig,
    args: &serde_json::Value,
) -> ToolOutput {
    let handler = lanes::normalize(*handler);
    let task_id = uuid::Uuid::new_v4().to_string();
    let task = ExternalTask {
        task_id: task_id.clone(),
        session_id: env.session.id.clone(),
        lane: lane as i32,
        command_type: call.name.clone(),
        payload: serde_json::json!({
            "tool_call_id": call.id,
            "tool": call.name,
            "arguments": args,
        })
        .to_string(),
        timeout_ms: handler.timeout_ms,
        remaining_ms: handler.timeout_ms,
    };
    env.emit(
        EventType::ExternalTaskPending,
        &format!("external task pending: {}", call.name),
        [
            ("task_id", task_id.clone()),
            ("tool_id", call.id.clone()),
            ("tool", call.name.clone()),
            ("lane", lanes::lane_name(lane).to_string()),
            ("timeout_ms", handler.timeout_ms.to_string()),
        ],
    );
    let outcome = env.session.external.wait(task, env.cancel).await;
    let (success, output) = match outcome {
        TaskOutcome::Completed(result) => {
            let output = if result.success {
                ToolOutput::ok(result.result)
            } else {
                let error = if result.error.is_empty() {
                    "the external handler reported a failure".to_string()
                } else {
                    result.error
                };
                ToolOutput::err(error)
            };
            (output.success, output)
        }
        TaskOutcome::TimedOut => (
            false,
            ToolOutput::err(format!(
                "external task for {} timed out after {} ms",
                call.name, handler.timeout_ms
            ))
            .with("timed_out", "true"),
        ),
        TaskOutcome::Cancelled => (
            false,
            ToolOutput::err("cancelled while waiting for the external task"),
        ),
    };
    env.emit(
        EventType::ExternalTaskCompleted,
        &format!("external task finished: {}", call.name),
        [
            ("task_id", task_id.clone()),
            ("tool_id", call.id.clone()),
            ("success", success.to_string()),
            (
                "timed_out",
                output.metadata.contains_key("timed_out").to_string(),
            ),
        ],
    );
    output
        .with("handled_by", "external")
        .with("task_id", task_id)
}
