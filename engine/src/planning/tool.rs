//! The `plan` tool: the model records its execution plan for the task (the
//! same document `CreatePlan` asks the model for); it becomes the session's
//! latest plan (`GetPlan`) and, in the runner, a `PLAN` item. Query lane:
//! it touches neither the workspace nor any process.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{SessionPlans, plan};
use crate::tools::{Lane, Tool, ToolContext, ToolInfo, ToolOutput, ToolRegistry};

/// `plan`: records an execution plan.
pub struct PlanTool;

static INFO: ToolInfo = ToolInfo {
    name: "plan",
    description: "Record your execution plan for the current task: the goal, the steps (ids, \
                  descriptions, dependencies, tools, success criteria) and its complexity. Call \
                  it again with the whole plan when the plan changes.",
    lane: Lane::Query,
    parameters: plan::schema,
};

#[async_trait]
impl Tool for PlanTool {
    fn info(&self) -> &'static ToolInfo {
        &INFO
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let Some(plans) = ctx.extensions.get::<SessionPlans>() else {
            return ToolOutput::err("plans are not available in this session");
        };
        match plan::from_json(&args) {
            Ok(execution) => {
                let text = plan::render(&execution);
                let steps = execution.steps.len();
                let id = plans.add(execution, args.clone());
                ToolOutput::ok(format!("recorded {id}\n{text}"))
                    .with("plan_id", id)
                    .with("steps", steps.to_string())
            }
            Err(e) => ToolOutput::err(format!("invalid plan: {e}")),
        }
    }
}

/// `registry` with the planning tool added.
pub fn with_planning_tools(mut registry: ToolRegistry) -> ToolRegistry {
    registry.push(Arc::new(PlanTool));
    registry
}
