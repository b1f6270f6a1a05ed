//! Human-in-the-loop and lane RPCs: confirmations, the confirmation
//! policy, lane handlers and external tasks.

use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::hitl::{self as policy, Verdict};
use crate::lanes::{self, TaskResult};

/// A lane a handler can be set for (query, execute, generate).
fn tool_lane(lane: i32, field: &str) -> Result<SessionLane, Status> {
    match SessionLane::try_from(lane) {
        Ok(l @ (SessionLane::Query | SessionLane::Execute | SessionLane::Generate)) => Ok(l),
        _ => Err(Status::invalid_argument(format!(
            "{field}: must be SESSION_LANE_QUERY, SESSION_LANE_EXECUTE or SESSION_LANE_GENERATE, got {lane}"
        ))),
    }
}

impl Service {
    pub(super) async fn confirm_tool_execution(
        &self,
        request: ConfirmToolExecutionRequest,
    ) -> Result<ConfirmToolExecutionResponse, Status> {
        let session = self.session(&request.session_id)?;
        if request.tool_id.is_empty() {
            return Err(Status::invalid_argument("tool_id: required"));
        }
        let delivered = session.confirmations.answer(
            &request.tool_id,
            Verdict {
                approved: request.approved,
                reason: request.reason,
            },
        );
        Ok(ConfirmToolExecutionResponse {
            success: delivered,
            error: if delivered {
                String::new()
            } else {
                format!(
                    "tool_id: no call {:?} is waiting for confirmation",
                    request.tool_id
                )
            },
        })
    }

    pub(super) async fn set_confirmation_policy(
        &self,
        request: SetConfirmationPolicyRequest,
    ) -> Result<SetConfirmationPolicyResponse, Status> {
        let session = self.session(&request.session_id)?;
        let new = request
            .policy
            .ok_or_else(|| Status::invalid_argument("policy: required"))?;
        if TimeoutAction::try_from(new.timeout_action).is_err() {
            return Err(Status::invalid_argument(format!(
                "policy.timeout_action: unknown value {}",
                new.timeout_action
            )));
        }
        for (i, lane) in new.yolo_lanes.iter().enumerate() {
            tool_lane(*lane, &format!("policy.yolo_lanes[{i}]"))?;
        }
        let new = policy::normalize(new);
        session.update(|d| d.confirmation = new.clone());
        self.engine.persist(&session).await?;
        Ok(SetConfirmationPolicyResponse {
            success: true,
            policy: Some(new),
        })
    }

    pub(super) async fn get_confirmation_policy(
        &self,
        request: GetConfirmationPolicyRequest,
    ) -> Result<GetConfirmationPolicyResponse, Status> {
        let session = self.session(&request.session_id)?;
        Ok(GetConfirmationPolicyResponse {
            policy: Some(session.read(|d| d.confirmation.clone())),
        })
    }

    pub(super) async fn set_lane_handler(
        &self,
        request: SetLaneHandlerRequest,
    ) -> Result<SetLaneHandlerResponse, Status> {
        let session = self.session(&request.session_id)?;
        let lane = tool_lane(request.lane, "lane")?;
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("config: required"))?;
        if TaskHandlerMode::try_from(config.mode).is_err() {
            return Err(Status::invalid_argument(format!(
                "config.mode: unknown value {}",
                config.mode
            )));
        }
        let config = lanes::normalize(config);
        session.update(|d| d.lanes.insert(lane as i32, config));
        self.engine.persist(&session).await?;
        Ok(SetLaneHandlerResponse {
            success: true,
            config: Some(config),
        })
    }

    pub(super) async fn get_lane_handler(
        &self,
        request: GetLaneHandlerRequest,
    ) -> Result<GetLaneHandlerResponse, Status> {
        let session = self.session(&request.session_id)?;
        let lane = tool_lane(request.lane, "lane")?;
        Ok(GetLaneHandlerResponse {
            config: Some(session.read(|d| d.lane_handler(lane as i32))),
        })
    }

    pub(super) async fn complete_external_task(
        &self,
        request: CompleteExternalTaskRequest,
    ) -> Result<CompleteExternalTaskResponse, Status> {
        let session = self.session(&request.session_id)?;
        if request.task_id.is_empty() {
            return Err(Status::invalid_argument("task_id: required"));
        }
        let delivered = session.external.complete(
            &request.task_id,
            TaskResult {
                success: request.success,
                result: request.result,
                error: request.error,
            },
        );
        Ok(CompleteExternalTaskResponse {
            success: delivered,
            error: if delivered {
                String::new()
            } else {
                format!("task_id: no pending task {:?}", request.task_id)
            },
        })
    }

    pub(super) async fn list_pending_external_tasks(
        &self,
        request: ListPendingExternalTasksRequest,
    ) -> Result<ListPendingExternalTasksResponse, Status> {
        let session = self.session(&request.session_id)?;
        Ok(ListPendingExternalTasksResponse {
            tasks: session.external.list(),
        })
    }
}
