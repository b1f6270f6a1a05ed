//! Permission and todo RPCs.

use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::permissions::Permissions;
use crate::tools::validate_todos;

impl Service {
    pub(super) async fn set_permission_policy(
        &self,
        request: SetPermissionPolicyRequest,
    ) -> Result<SetPermissionPolicyResponse, Status> {
        let session = self.session(&request.session_id)?;
        let policy = request
            .policy
            .ok_or_else(|| Status::invalid_argument("policy: required"))?;
        let permissions = Permissions::from_policy(&policy)
            .map_err(|e| Status::invalid_argument(format!("policy: {e}")))?;
        let policy = permissions.to_policy();
        session.update(|d| d.permissions = permissions);
        self.engine.persist(&session).await?;
        Ok(SetPermissionPolicyResponse {
            success: true,
            policy: Some(policy),
        })
    }

    pub(super) async fn get_permission_policy(
        &self,
        request: GetPermissionPolicyRequest,
    ) -> Result<GetPermissionPolicyResponse, Status> {
        let session = self.session(&request.session_id)?;
        Ok(GetPermissionPolicyResponse {
            policy: Some(session.read(|d| d.permissions.to_policy())),
        })
    }

    pub(super) async fn check_permission(
        &self,
        request: CheckPermissionRequest,
    ) -> Result<CheckPermissionResponse, Status> {
        let session = self.session(&request.session_id)?;
        if request.tool_name.trim().is_empty() {
            return Err(Status::invalid_argument("tool_name: required"));
        }
        let args: serde_json::Value = if request.arguments.trim().is_empty() {
            serde_json::json!({})
        } else {
            serde_json::from_str(&request.arguments)
                .map_err(|e| Status::invalid_argument(format!("arguments: not JSON: {e}")))?
        };
        let workspace = self.engine.workspace_of(&session).ok();
        let permissions = session.read(|d| d.permissions.clone());
        let (decision, rules) = match &workspace {
            Some(ws) => {
                permissions
                    .check_in_off_worker(ws, &request.tool_name, &args)
                    .await
            }
            None => permissions.check(&request.tool_name, &args),
        };
        Ok(CheckPermissionResponse {
            decision: decision as i32,
            matching_rules: rules,
        })
    }

    pub(super) async fn add_permission_rule(
        &self,
        request: AddPermissionRuleRequest,
    ) -> Result<AddPermissionRuleResponse, Status> {
        let session = self.session(&request.session_id)?;
        session
            .update(|d| d.permissions.add_rule(&request.rule_type, &request.rule))
            .map_err(|e| {
                if e.starts_with("rule_type") {
                    Status::invalid_argument(e)
                } else {
                    Status::invalid_argument(format!("rule: {e}"))
                }
            })?;
        self.engine.persist(&session).await?;
        Ok(AddPermissionRuleResponse {
            success: true,
            error: String::new(),
        })
    }

    pub(super) async fn get_todos(
        &self,
        request: GetTodosRequest,
    ) -> Result<GetTodosResponse, Status> {
        let session = self.session(&request.session_id)?;
        Ok(GetTodosResponse {
            todos: session.todo_list(),
        })
    }

    pub(super) async fn set_todos(
        &self,
        request: SetTodosRequest,
    ) -> Result<SetTodosResponse, Status> {
        let session = self.session(&request.session_id)?;
        validate_todos(&request.todos).map_err(Status::invalid_argument)?;
        session.set_todos(request.todos);
        self.engine.persist(&session).await?;
        Ok(SetTodosResponse {
            success: true,
            todos: session.todo_list(),
        })
    }
}
