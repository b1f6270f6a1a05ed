//! Cron RPCs (see `crate::cron`). Malformed requests are
//! `INVALID_ARGUMENT` naming the field, unknown jobs `NOT_FOUND`, a taken
//! name or a job already running `FAILED_PRECONDITION`; `ParseCronSchedule`
//! answers a schedule it cannot read with `success = false` and the error.
//! Jobs created here run in the engine's default workspace.

use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::cron::{CronError, NewJob, schedule};

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

impl Service {
    pub(super) async fn list_cron_jobs(
        &self,
        _request: ListCronJobsRequest,
    ) -> Result<ListCronJobsResponse, Status> {
        Ok(ListCronJobsResponse {
            jobs: self.engine.cron.list(),
        })
    }

    pub(super) async fn create_cron_job(
        &self,
        request: CreateCronJobRequest,
    ) -> Result<CreateCronJobResponse, Status> {
        let workspace = self.engine.default_workspace().ok_or_else(|| {
            Status::failed_precondition(
                "cron jobs run in the engine's default workspace and there is none: start the engine with --workspace or call Initialize",
            )
        })?;
        self.engine.confine("workspace", &workspace)?;
        let job = self
            .engine
            .cron
            .create(NewJob {
                name: request.name,
                schedule: request.schedule,
                command: request.command,
                timeout_ms: request.timeout_ms,
                workspace,
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
        request: GetCronJobRequest,
    ) -> Result<GetCronJobResponse, Status> {
        let job = self
            .engine
            .cron
            .get(request.id.as_deref(), request.name.as_deref())
            .map_err(status)?;
        Ok(GetCronJobResponse { job })
    }

    pub(super) async fn update_cron_job(
        &self,
        request: UpdateCronJobRequest,
    ) -> Result<UpdateCronJobResponse, Status> {
        let job = self
            .engine
            .cron
            .update(
                id(&request.id)?,
                request.schedule.as_deref(),
                request.command.as_deref(),
                request.timeout_ms,
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
        request: PauseCronJobRequest,
    ) -> Result<PauseCronJobResponse, Status> {
        let job = self
            .engine
            .cron
            .set_paused(id(&request.id)?, true)
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
        request: ResumeCronJobRequest,
    ) -> Result<ResumeCronJobResponse, Status> {
        let job = self
            .engine
            .cron
            .set_paused(id(&request.id)?, false)
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
        request: DeleteCronJobRequest,
    ) -> Result<DeleteCronJobResponse, Status> {
        self.engine
            .cron
            .delete(id(&request.id)?)
            .await
            .map_err(status)?;
        Ok(DeleteCronJobResponse {
            success: true,
            error: String::new(),
        })
    }

    pub(super) async fn get_cron_history(
        &self,
        request: GetCronHistoryRequest,
    ) -> Result<GetCronHistoryResponse, Status> {
        let executions = self
            .engine
            .cron
            .history(id(&request.id)?, request.limit)
            .map_err(status)?;
        Ok(GetCronHistoryResponse { executions })
    }

    pub(super) async fn run_cron_job(
        &self,
        request: RunCronJobRequest,
    ) -> Result<RunCronJobResponse, Status> {
        let execution = self
            .engine
            .cron
            .run_now(id(&request.id)?)
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
