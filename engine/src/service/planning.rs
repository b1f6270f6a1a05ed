//! Planning RPCs: `CreatePlan`, `ExtractGoal` and `CheckGoalAchievement`
//! ask the session's model through structured output (the session's
//! generation slot is held meanwhile; the exchange joins its history like
//! any `GenerateStructured`), `GetPlan` returns a stored plan (see
//! `crate::planning` for plan ids).

use code_agent_proto::agent_event::EventType;
use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::planning::{goal, plan};
use crate::session::message::{MessageRole, StoredMessage, now_ms};
use crate::structured::{self, Schema};

/// Longest prompt / context / state accepted (bytes).
const MAX_TEXT: usize = 256 * 1024;

fn checked<'a>(field: &str, text: &'a str, required: bool) -> Result<&'a str, Status> {
    if required && text.trim().is_empty() {
        return Err(Status::invalid_argument(format!("{field}: required")));
    }
    if text.len() > MAX_TEXT {
        return Err(Status::invalid_argument(format!(
            "{field}: at most {MAX_TEXT} bytes, got {}",
            text.len()
        )));
    }
    Ok(text)
}

impl Service {
    /// Asks the session's model `question`, answered as JSON valid against
    /// `schema` (one retry with the validation errors, as GenerateStructured).
    async fn ask_structured(
        &self,
        session_id: &str,
        kind: &'static str,
        question: String,
        schema: &serde_json::Value,
    ) -> Result<serde_json::Value, Status> {
        let session = self.session(session_id)?;
        let schema = Schema::parse(&schema.to_string())?;
        if self.engine.shutdown.is_cancelled() {
            return Err(Status::unavailable("the engine is shutting down"));
        }
        let lease = session
            .generation
            .begin(kind, false, &self.engine.shutdown)
            .map_err(|running| {
                Status::failed_precondition(format!(
                    "session {} is busy: a {running} is running; try again when it ends",
                    session.id
                ))
            })?;
        let guard = lease.cancel.clone().drop_guard();
        let input = vec![StoredMessage::text(MessageRole::User, question)];
        let result =
            structured::run(self.engine.clone(), session, lease, input, schema, None).await;
        guard.disarm();
        let data = result?.data;
        serde_json::from_str(&data)
            .map_err(|e| Status::internal(format!("the model's {kind} is not JSON: {e}")))
    }

    pub(super) async fn create_plan(
        &self,
        request: CreatePlanRequest,
    ) -> Result<CreatePlanResponse, Status> {
        let prompt = checked("prompt", &request.prompt, true)?;
        let context = checked("context", request.context.as_deref().unwrap_or(""), false)?;
        let mut question = format!(
            "Make an execution plan for this task. Do not carry it out. Give the goal, the \
             steps in order (short unique ids, descriptions, the ids of the steps each depends \
             on, the main tool of each among the tools you have, success criteria), the \
             complexity, the tools required and an estimate of the number of steps.\n\nTask:\n{prompt}\n"
        );
        if !context.trim().is_empty() {
            question.push_str(&format!("\nContext:\n{context}\n"));
        }
        let doc = self
            .ask_structured(&request.session_id, "plan", question, &plan::schema())
            .await?;
        let execution = plan::from_json(&doc)
            .map_err(|e| Status::internal(format!("the model's plan is unusable: {e}")))?;
        let session = self.session(&request.session_id)?;
        let plan_id = self
            .engine
            .plans
            .for_session(&session.id, session.is_file_backed())
            .add(execution.clone(), doc);
        self.engine.events.emit(
            EventType::Info,
            Some(&request.session_id),
            "plan created",
            [
                ("kind", "plan_created".to_string()),
                ("plan_id", plan_id),
                ("steps", execution.steps.len().to_string()),
            ],
        );
        Ok(CreatePlanResponse {
            plan: Some(execution),
        })
    }

    pub(super) async fn get_plan(
        &self,
        request: GetPlanRequest,
    ) -> Result<GetPlanResponse, Status> {
        let session = self.session(&request.session_id)?;
        let (_, plan) = self
            .engine
            .plans
            .for_session(&session.id, session.is_file_backed())
            .get(&request.plan_id)
            .ok_or_else(|| {
                Status::not_found(if request.plan_id.trim().is_empty() {
                    "plan_id: this session has no plan yet".to_string()
                } else {
                    format!(
                        "plan_id: no plan {:?} in this session (ids are plan-1, plan-2, …)",
                        request.plan_id
                    )
                })
            })?;
        Ok(GetPlanResponse { plan: Some(plan) })
    }

    pub(super) async fn extract_goal(
        &self,
        request: ExtractGoalRequest,
    ) -> Result<ExtractGoalResponse, Status> {
        let prompt = checked("prompt", &request.prompt, true)?;
        let question = format!(
            "State the goal of this request in one sentence and list checkable success \
             criteria that together mean it is achieved. Do not carry it out.\n\nRequest:\n{prompt}\n"
        );
        let doc = self
            .ask_structured(
                &request.session_id,
                "goal extraction",
                question,
                &goal::extract_schema(),
            )
            .await?;
        let goal = goal::from_extraction(&doc, now_ms())
            .map_err(|e| Status::internal(format!("the model's goal is unusable: {e}")))?;
        Ok(ExtractGoalResponse { goal: Some(goal) })
    }

    pub(super) async fn check_goal_achievement(
        &self,
        request: CheckGoalAchievementRequest,
    ) -> Result<CheckGoalAchievementResponse, Status> {
        let goal = request
            .goal
            .ok_or_else(|| Status::invalid_argument("goal: required"))?;
        checked("goal.description", &goal.description, true)?;
        if goal.success_criteria.len() > goal::MAX_CRITERIA {
            return Err(Status::invalid_argument(format!(
                "goal.success_criteria: at most {}",
                goal::MAX_CRITERIA
            )));
        }
        let state = checked("current_state", &request.current_state, true)?;
        let doc = self
            .ask_structured(
                &request.session_id,
                "goal check",
                goal::check_prompt(&goal, state),
                &goal::check_schema(&goal),
            )
            .await?;
        let (achieved, progress, remaining_criteria) = goal::judge(&goal, &doc)
            .map_err(|e| Status::internal(format!("the model's judgement is unusable: {e}")))?;
        Ok(CheckGoalAchievementResponse {
            achieved,
            progress,
            remaining_criteria,
        })
    }
}
