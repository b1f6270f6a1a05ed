//! Cron RPCs (see `crate::cron`). Malformed requests are
//! `INVALID_ARGUMENT` naming the field, unknown jobs `NOT_FOUND`, a taken
//! name or a job already running `FAILED_PRECONDITION`; `ParseCronSchedule`
//! answers a schedule it cannot read with `success = false` and the error.
//!
//! The messages name no session: a request carrying the metadata
//! [`crate::mcp::SESSION_METADATA`] works on that session's jobs (created
//! in its workspace, the same jobs its `cron` tool sees), one without it on
//! the operator's (created in the engine's default workspace). Neither
//! reaches the other's jobs, by id or by name.

use std::sync::Arc;

use code_agent_proto::*;
use tonic::{Request, Status};

use super::Service;
use crate::cron::{CronError, NewJob, Owner, schedule};
use crate::session::Session;

fn status(error: CronError) -> Status {
    match error {
        CronError::Invalid(m) => Status::invalid_argument(m),
        CronError::NotFound(m) => Status::not_found(m),
        CronError::Conflict(m) => Status::failed_precondition(m),
    }
}

fn id(id: &str) -> Result<&str, Status> {
    if id.trim().is_empty() {
        return Err(Status::invalid_argument("id: required"));
    }
    Ok(id)
}

/// The request's scope and message.
struct Scoped<T> {
    session: Option<Arc<Session>>,
    message: T,
}

impl<T> Scoped<T> {
    fn scope(&self) -> Option<&str> {
        self.session.as_deref().map(|s| s.id.as_str())
    }
}

impl Service {
    fn cron_request<T>(&self, request: Request<T>) -> Result<Scoped<T>, Status> {
        let session = self.scoped_session(&request)?;
        Ok(Scoped {
            session,
            message: request.into_inner(),
        })
    }

    pub(super) async fn list_cron_jobs(
        &self,
        request: Request<ListCronJobsRequest>,
    ) -> Result<ListCronJobsResponse, Status> {
        let request = self.cron_request(request)?;
        Ok(ListCronJobsResponse {
            jobs: self.engine.cron.list(request.scope()),
        })
    }

    pub(super) async fn create_cron_job(
        &self,
        request: Request<CreateCronJobRequest>,
    ) -> Result<CreateCronJobResponse, Status> {
        let Scoped { session, message } = self.cron_request(request)?;
        let workspace = match &session {
            Some(session) => self.engine.workspace_of(session)?,
            None => self.engine.default_workspace().ok_or_else(|| {
                Status::failed_precondition(
                    "the operator's cron jobs run in the engine's default workspace and there is none: start the engine with --workspace or call Initialize",
                )
            })?,
        };
        self.engine.confine("workspace", &workspace)?;
        let job = self
            .engine
            .cron
            .create(NewJob {
                name: message.name,
                schedule: message.schedule,
                command: message.command,
                timeout_ms: message.timeout_ms,
                workspace,
                owner: session.map(|s| Owner {
                    session: s.id.clone(),
                    destroyed: s.destroyed_flag(),
                }),
            })
            .await
            .map_err(status)?;
        Ok(CreateCronJobResponse {
            success: true,
            job: Some(job),
            error: String::new(),
        })
    }

    pub(super) async fn get_cron_job(
        &self,
        request: Request<GetCronJobRequest>,
    ) -> Result<GetCronJobResponse, Status> {
        let request = self.cron_request(request)?;
        let job = self
            .engine
            .cron
            .get(
                request.scope(),
                request.message.id.as_deref(),
                request.message.name.as_deref(),
            )
            .map_err(status)?;
        Ok(GetCronJobResponse { job })
    }

    pub(super) async fn update_cron_job(
        &self,
        request: Request<UpdateCronJobRequest>,
    ) -> Result<UpdateCronJobResponse, Status> {
        let request = self.cron_request(request)?;
        let job = self
            .engine
            .cron
            .update(
                request.scope(),
                id(&request.message.id)?,
                request.message.schedule.as_deref(),
                request.message.command.as_deref(),
                request.message.timeout_ms,
            )
            .await
            .map_err(status)?;
        Ok(UpdateCronJobResponse {
            success: true,
            job: Some(job),
            error: String::new(),
        })
    }

    pub(super) async fn pause_cron_job(
        &self,
        request: Request<PauseCronJobRequest>,
    ) -> Result<PauseCronJobResponse, Status> {
        let request = self.cron_request(request)?;
        let job = self
            .engine
            .cron
            .set_paused(request.scope(), id(&request.message.id)?, true)
            .await
            .map_err(status)?;
        Ok(PauseCronJobResponse {
            success: true,
            job: Some(job),
            error: String::new(),
        })
    }

    pub(super) async fn resume_cron_job(
        &self,
        request: Request<ResumeCronJobRequest>,
    ) -> Result<ResumeCronJobResponse, Status> {
        let request = self.cron_request(request)?;
        let job = self
            .engine
            .cron
            .set_paused(request.scope(), id(&request.message.id)?, false)
            .await
            .map_err(status)?;
        Ok(ResumeCronJobResponse {
            success: true,
            job: Some(job),
            error: String::new(),
        })
    }

    pub(super) async fn delete_cron_job(
        &self,
        request: Request<DeleteCronJobRequest>,
    ) -> Result<DeleteCronJobResponse, Status> {
        let request = self.cron_request(request)?;
        self.engine
            .cron
            .delete(request.scope(), id(&request.message.id)?)
            .await
            .map_err(status)?;
        Ok(DeleteCronJobResponse {
            success: true,
            error: String::new(),
        })
    }

    pub(super) async fn get_cron_history(
        &self,
        request: Request<GetCronHistoryRequest>,
    ) -> Result<GetCronHistoryResponse, Status> {
        let request = self.cron_request(request)?;
        let executions = self
            .engine
            .cron
            .history(
                request.scope(),
                id(&request.message.id)?,
                request.message.limit,
            )
            .map_err(status)?;
        Ok(GetCronHistoryResponse { executions })
    }

    pub(super) async fn run_cron_job(
        &self,
        request: Request<RunCronJobRequest>,
    ) -> Result<RunCronJobResponse, Status> {
        let request = self.cron_request(request)?;
        let execution = self
            .engine
            .cron
            .run_now(request.scope(), id(&request.message.id)?)
            .await
            .map_err(status)?;
        Ok(RunCronJobResponse {
            success: execution.status == CronExecutionStatus::Success as i32,
            error: execution.error.clone().unwrap_or_default(),
            execution: Some(execution),
        })
    }

    pub(super) async fn parse_cron_schedule(
        &self,
        request: ParseCronScheduleRequest,
    ) -> Result<ParseCronScheduleResponse, Status> {
        Ok(match schedule::parse(&request.input) {
            Ok(s) => ParseCronScheduleResponse {
                success: true,
                cron_expression: s.expression,
                description: s.description,
                error: String::new(),
            },
            Err(error) => ParseCronScheduleResponse {
                success: false,
                error,
                ..Default::default()
            },
        })
    }
}
