//! The `cron` tool: the model schedules a shell command in the session's
//! workspace (`create`), lists jobs (`list`), runs one now (`run`), or
//! deletes one (`delete`) — its own session's jobs only ([`SessionCron`]:
//! the engine puts the session's scope in the tool context, the model
//! cannot name another). Execute lane: a job runs commands like `bash`
//! does, so permissions and confirmation treat it like `bash`.

use std::sync::Arc;

use async_trait::async_trait;
use code_agent_proto::{CronExecutionStatus, CronJob};
use serde_json::{Value, json};

use super::{CronJobs, NewJob, Owner};
use crate::tools::args::{object, object_schema, optional_str, optional_u64, required_str};
use crate::tools::{Lane, Tool, ToolContext, ToolInfo, ToolOutput, ToolRegistry};

/// `cron`: scheduled commands.
pub struct CronTool;

/// The cron jobs as one session's tool calls reach them.
#[derive(Debug)]
pub struct SessionCron {
    /// The engine's jobs.
    pub jobs: Arc<CronJobs>,
    /// The session the calls are made for.
    pub owner: Owner,
}

impl SessionCron {
    fn scope(&self) -> Option<&str> {
        Some(self.owner.session.as_str())
    }
}

static INFO: ToolInfo = ToolInfo {
    name: "cron",
    description: "Scheduled shell commands in the workspace. action=create (name, schedule as a \
                  five-field cron expression or a phrase like `every 5 minutes`, `every day at \
                  9am`, `every monday at 10:30`; command; optional timeout_ms, default 60000), \
                  action=list, action=run (name: run it now and get its output), action=delete (name).",
    lane: Lane::Execute,
    parameters,
};

fn parameters() -> Value {
    object_schema(
        json!({
            "action": {"type": "string", "enum": ["create", "list", "run", "delete"]},
            "name": {"type": "string"},
            "schedule": {"type": "string"},
            "command": {"type": "string"},
            "timeout_ms": {"type": "integer", "minimum": 1}
        }),
        &["action"],
    )
}

fn describe(job: &CronJob) -> String {
    format!(
        "{} [{}] `{}`: {} (runs {}, failures {})",
        job.name, job.schedule, job.command, job.id, job.run_count, job.fail_count
    )
}

#[async_trait]
impl Tool for CronTool {
    fn info(&self) -> &'static ToolInfo {
        &INFO
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let Some(cron) = ctx.extensions.get::<SessionCron>() else {
            return ToolOutput::err("cron is not available in this engine");
        };
        match act(&cron, &args, ctx).await {
            Ok(output) => output,
            Err(e) => ToolOutput::err(e),
        }
    }
}

fn by_name(cron: &SessionCron, args: &Value) -> Result<CronJob, String> {
    let name = required_str(args, "name")?;
    cron.jobs
        .get(cron.scope(), None, Some(name))
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no cron job named {name:?}"))
}

async fn act(cron: &SessionCron, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, String> {
    object(args)?;
    match required_str(args, "action")? {
        "create" => {
            let job = cron
                .jobs
                .create(NewJob {
                    name: required_str(args, "name")?.to_string(),
                    schedule: required_str(args, "schedule")?.to_string(),
                    command: required_str(args, "command")?.to_string(),
                    timeout_ms: optional_u64(args, "timeout_ms")?,
                    workspace: ctx.workspace.clone(),
                    owner: Some(cron.owner.clone()),
                })
                .await
                .map_err(|e| e.to_string())?;
            Ok(ToolOutput::ok(format!("created {}", describe(&job))).with("job_id", job.id))
        }
        "list" => {
            let jobs = cron.jobs.list(cron.scope());
            let text = if jobs.is_empty() {
                "no cron jobs".to_string()
            } else {
                jobs.iter().map(describe).collect::<Vec<_>>().join("\n")
            };
            Ok(ToolOutput::ok(text).with("count", jobs.len().to_string()))
        }
        "run" => {
            let job = by_name(cron, args)?;
            let exec = cron
                .jobs
                .run_now(cron.scope(), &job.id)
                .await
                .map_err(|e| e.to_string())?;
            let status = super::run::status_name(&exec);
            let text = format!(
                "{status}{}\nstdout:\n{}\nstderr:\n{}",
                exec.error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default(),
                exec.stdout,
                exec.stderr
            );
            let output = if exec.status == CronExecutionStatus::Success as i32 {
                ToolOutput::ok(text)
            } else {
                ToolOutput {
                    success: false,
                    error: Some(text.clone()),
                    output: text,
                    metadata: Default::default(),
                }
            };
            Ok(output.with("job_id", job.id).with("status", status))
        }
        "delete" => {
            let job = by_name(cron, args)?;
            cron.jobs
                .delete(cron.scope(), &job.id)
                .await
                .map_err(|e| e.to_string())?;
            Ok(ToolOutput::ok(format!("deleted {}", job.name)))
        }
        other => {
            let _ = optional_str(args, "name")?;
            Err(format!(
                "action: one of create, list, run, delete; got {other:?}"
            ))
        }
    }
}

/// `registry` with the cron tool added.
pub fn with_cron_tools(mut registry: ToolRegistry) -> ToolRegistry {
    registry.push(Arc::new(CronTool));
    registry
}
