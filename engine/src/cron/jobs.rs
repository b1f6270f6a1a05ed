//! The cron jobs and their scheduler. Every job belongs to one [`Scope`]:
//! the session that made it (the `cron` tool, or a Cron RPC carrying the
//! session metadata), or the operator (a Cron RPC without it). A scope
//! lists, reads, runs, changes and deletes only its own jobs, and names are
//! unique within a scope, so nothing of another scope's jobs shows, not
//! even through a refused name. A session's jobs go with the session
//! ([`CronJobs::forget_session`]; a running one is cancelled), and jobs of
//! sessions that no longer exist are dropped at start, so a later session
//! of the same id starts with none. Each job runs in the workspace it was
//! created for. The scheduler wakes at the earliest next run (at most every 30 s,
//! so a clock change is noticed), starts every due job, and stops with the
//! engine's cancellation token. At most [`MAX_CONCURRENT_RUNS`] runs at a
//! time (more wait for a slot); a job whose previous run is still going
//! skips that tick. Runs missed while the engine was stopped are not made
//! up: after a restart each job's next run is the first one after the start.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, FixedOffset, TimeZone, Utc};
use code_agent_proto::{CronExecution, CronExecutionStatus, CronJob, CronJobStatus};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::run::{self, RunSpec};
use super::schedule::{self, Schedule};
use super::store::{ExecutionRecord, JobFile, JobRecord};
use crate::events::EventBus;
use crate::sandboxes::Sandboxes;
use crate::session::message::now_ms;

/// Jobs the engine holds at most.
pub const MAX_JOBS: usize = 256;
/// Jobs one session holds at most (so one cannot take every slot).
pub const MAX_JOBS_PER_SESSION: usize = 32;
/// Runs kept per job (most recent first).
pub const MAX_HISTORY: usize = 20;
/// Runs at the same time at most.
pub const MAX_CONCURRENT_RUNS: usize = 4;
/// Timeout of a job that names none.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// Longest timeout accepted.
pub const MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;
const MAX_SLEEP: Duration = Duration::from_secs(30);

/// Why a cron request was refused.
#[derive(Debug, thiserror::Error)]
pub enum CronError {
    /// Malformed input (the text names the field).
    #[error("{0}")]
    Invalid(String),
    /// No such job.
    #[error("{0}")]
    NotFound(String),
    /// A name taken, the job list full, or a run already going.
    #[error("{0}")]
    Conflict(String),
}

/// Whose jobs a request reaches: one session's (`Some(id)`), or the
/// operator's (`None`).
pub type Scope<'a> = Option<&'a str>;

/// The session a new job belongs to.
#[derive(Debug, Clone)]
pub struct Owner {
    /// The session's id.
    pub session: String,
    /// Set once the session is destroyed: a job created meanwhile is
    /// refused rather than left behind.
    pub destroyed: Arc<AtomicBool>,
}

struct Job {
    record: JobRecord,
    schedule: Schedule,
    running: bool,
    next_run: Option<DateTime<Utc>>,
    /// Cancels its run (the job was deleted, or the engine stops).
    cancel: CancellationToken,
}

impl Job {
    fn owned_by(&self, scope: Scope<'_>) -> bool {
        self.record.session.as_deref() == scope
    }

    fn to_proto(&self) -> CronJob {
        let r = &self.record;
        let status = if self.running {
            CronJobStatus::Running
        } else if r.paused {
            CronJobStatus::Paused
        } else {
            CronJobStatus::Active
        };
        CronJob {
            id: r.id.clone(),
            name: r.name.clone(),
            schedule: r.schedule.clone(),
            command: r.command.clone(),
            status: status as i32,
            timeout_ms: r.timeout_ms,
            created_at: r.created_at,
            updated_at: r.updated_at,
            last_run: r.last_run,
            next_run: if r.paused {
                None
            } else {
                self.next_run.map(|t| t.timestamp_millis())
            },
            run_count: r.run_count,
            fail_count: r.fail_count,
            working_dir: Some(r.workspace.display().to_string()),
        }
    }

    fn reschedule(&mut self, now: DateTime<Utc>, zone: &FixedOffset) {
        self.next_run = self.schedule.next_after(now, zone);
    }
}

/// What a new job is.
pub struct NewJob {
    /// Unique name.
    pub name: String,
    /// Expression or phrase.
    pub schedule: String,
    /// Shell command.
    pub command: String,
    /// Timeout (None = [`DEFAULT_TIMEOUT_MS`]).
    pub timeout_ms: Option<u64>,
    /// Canonical workspace.
    pub workspace: PathBuf,
    /// Its session (`None`: the operator's).
    pub owner: Option<Owner>,
}

/// The engine's cron jobs.
pub struct CronJobs {
    jobs: Mutex<Vec<Job>>,
    file: Option<JobFile>,
    save_lock: tokio::sync::Mutex<()>,
    wake: Notify,
    slots: Semaphore,
    sandboxes: Sandboxes,
    cancel: CancellationToken,
    zone: FixedOffset,
    env_source: OnceLock<EnvSource>,
    events: OnceLock<EventBus>,
}

/// The extra environment of a workspace's processes (`Initialize`'s env).
pub type EnvSource = Box<dyn Fn(&std::path::Path) -> Vec<(String, String)> + Send + Sync>;

impl std::fmt::Debug for CronJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronJobs").finish_non_exhaustive()
    }
}

fn now() -> DateTime<Utc> {
    Utc.timestamp_millis_opt(now_ms())
        .single()
        .unwrap_or_else(Utc::now)
}

fn timeout(ms: Option<u64>) -> Result<u64, CronError> {
    match ms {
        None => Ok(DEFAULT_TIMEOUT_MS),
        Some(0) => Err(CronError::Invalid("timeout_ms: must be at least 1".into())),
        Some(ms) if ms > MAX_TIMEOUT_MS => Err(CronError::Invalid(format!(
            "timeout_ms: at most {MAX_TIMEOUT_MS} (24 h), got {ms}"
        ))),
        Some(ms) => Ok(ms),
    }
}

fn command(text: &str) -> Result<String, CronError> {
    if text.trim().is_empty() {
        return Err(CronError::Invalid("command: required".into()));
    }
    if text.len() > 64 * 1024 {
        return Err(CronError::Invalid("command: at most 64 KiB".into()));
    }
    Ok(text.to_string())
}

fn parse_schedule(text: &str) -> Result<Schedule, CronError> {
    schedule::parse(text).map_err(CronError::Invalid)
}

impl CronJobs {
    /// Loads the jobs of `state_dir` (if any), dropping those of sessions
    /// for which `session_exists` is false; the scheduler is not started.
    /// Schedules are read at `utc_offset_seconds` east of UTC (0: UTC).
    pub fn open(
        state_dir: Option<&std::path::Path>,
        sandboxes: Sandboxes,
        cancel: CancellationToken,
        utc_offset_seconds: i32,
        session_exists: &dyn Fn(&str) -> bool,
    ) -> anyhow::Result<Self> {
        let zone = FixedOffset::east_opt(utc_offset_seconds).ok_or_else(|| {
            anyhow::anyhow!("cron UTC offset: {utc_offset_seconds} s is not within ±24 h")
        })?;
        let file = state_dir.map(JobFile::open).transpose()?;
        let mut jobs = Vec::new();
        if let Some(file) = &file {
            let start = now();
            let mut orphans = 0;
            for record in file.load().map_err(anyhow::Error::msg)? {
                if record
                    .session
                    .as_deref()
                    .is_some_and(|s| !session_exists(s))
                {
                    orphans += 1;
                    continue;
                }
                match schedule::parse(&record.schedule) {
                    Ok(schedule) => {
                        let mut job = Job {
                            record,
                            schedule,
                            running: false,
                            next_run: None,
                            cancel: cancel.child_token(),
                        };
                        job.reschedule(start, &zone);
                        jobs.push(job);
                    }
                    Err(e) => tracing::warn!(job = %record.name, error = %e, "skipping a cron job"),
                }
            }
            if orphans > 0 {
                tracing::info!(
                    count = orphans,
                    "dropped the cron jobs of sessions that no longer exist"
                );
                let records = jobs.iter().map(|j: &Job| j.record.clone()).collect();
                file.save(records).map_err(anyhow::Error::msg)?;
            }
            tracing::info!(count = jobs.len(), "reloaded cron jobs");
        }
        Ok(Self {
            jobs: Mutex::new(jobs),
            file,
            save_lock: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            slots: Semaphore::new(MAX_CONCURRENT_RUNS),
            sandboxes,
            cancel,
            zone,
            env_source: OnceLock::new(),
            events: OnceLock::new(),
        })
    }

    /// Where runs get their workspace's extra environment (set once, by
    /// the engine; without it runs get only the launcher's allowlist).
    pub fn set_env_source(&self, source: EnvSource) {
        let _ = self.env_source.set(source);
    }

    /// Where each run is announced (an `INFO` event, `kind = "cron_run"`).
    pub fn set_events(&self, events: EventBus) {
        let _ = self.events.set(events);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Job>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on job `id` of `scope` (another scope's is not found).
    fn with_job<R>(
        &self,
        scope: Scope<'_>,
        id: &str,
        f: impl FnOnce(&mut Job) -> R,
    ) -> Result<R, CronError> {
        let mut jobs = self.lock();
        let job = jobs
            .iter_mut()
            .find(|j| j.record.id == id && j.owned_by(scope))
            .ok_or_else(|| CronError::NotFound(format!("id: no cron job {id:?}")))?;
        Ok(f(job))
    }

    /// Runs `f` on job `id` whoever owns it (the scheduler's own runs).
    fn with_any_job<R>(&self, id: &str, f: impl FnOnce(&mut Job) -> R) -> Result<R, CronError> {
        let mut jobs = self.lock();
        let job = jobs
            .iter_mut()
            .find(|j| j.record.id == id)
            .ok_or_else(|| CronError::NotFound(format!("id: no cron job {id:?}")))?;
        Ok(f(job))
    }

    /// Writes the jobs file (nothing without a state dir).
    async fn save(&self) {
        let Some(file) = self.file.clone() else {
            return;
        };
        let _guard = self.save_lock.lock().await;
        let records: Vec<JobRecord> = self.lock().iter().map(|j| j.record.clone()).collect();
        let result = tokio::task::spawn_blocking(move || file.save(records)).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cron jobs not saved"),
            Err(e) => tracing::warn!(error = %e, "cron jobs not saved"),
        }
    }

    /// Creates a job.
    pub async fn create(&self, new: NewJob) -> Result<CronJob, CronError> {
        let name = new.name.trim().to_string();
        if name.is_empty() || name.len() > 128 {
            return Err(CronError::Invalid(
                "name: required, at most 128 characters".into(),
            ));
        }
        let schedule = parse_schedule(&new.schedule)?;
        let command = command(&new.command)?;
        let timeout_ms = timeout(new.timeout_ms)?;
        let scope = new.owner.as_ref().map(|o| o.session.as_str());
        let job = {
            let mut jobs = self.lock();
            // Checked under the lock `forget_session` takes after the flag
            // is set: a job is either refused here or forgotten there.
            if new
                .owner
                .as_ref()
                .is_some_and(|o| o.destroyed.load(Ordering::SeqCst))
            {
                return Err(CronError::NotFound(
                    "session: it was destroyed; its cron jobs went with it".into(),
                ));
            }
            if jobs
                .iter()
                .any(|j| j.owned_by(scope) && j.record.name == name)
            {
                return Err(CronError::Conflict(format!(
                    "name: a cron job named {name:?} exists"
                )));
            }
            if jobs.len() >= MAX_JOBS {
                return Err(CronError::Conflict(format!(
                    "at most {MAX_JOBS} cron jobs; delete one first"
                )));
            }
            if scope.is_some()
                && jobs.iter().filter(|j| j.owned_by(scope)).count() >= MAX_JOBS_PER_SESSION
            {
                return Err(CronError::Conflict(format!(
                    "at most {MAX_JOBS_PER_SESSION} cron jobs per session; delete one first"
                )));
            }
            let at = now_ms();
            let mut job = Job {
                record: JobRecord {
                    id: uuid::Uuid::new_v4().to_string(),
                    name,
                    schedule: schedule.expression.clone(),
                    command,
                    paused: false,
                    timeout_ms,
                    created_at: at,
                    updated_at: at,
                    last_run: None,
                    run_count: 0,
                    fail_count: 0,
                    workspace: new.workspace,
                    history: VecDeque::new(),
                    session: scope.map(str::to_owned),
                },
                schedule,
                running: false,
                next_run: None,
                cancel: self.cancel.child_token(),
            };
            job.reschedule(now(), &self.zone);
            let proto = job.to_proto();
            jobs.push(job);
            proto
        };
        self.save().await;
        self.wake.notify_one();
        Ok(job)
    }

    /// The jobs of `scope`, in creation order.
    pub fn list(&self, scope: Scope<'_>) -> Vec<CronJob> {
        self.lock()
            .iter()
            .filter(|j| j.owned_by(scope))
            .map(Job::to_proto)
            .collect()
    }

    /// The job of `scope` with this id, else this name.
    pub fn get(
        &self,
        scope: Scope<'_>,
        id: Option<&str>,
        name: Option<&str>,
    ) -> Result<Option<CronJob>, CronError> {
        let (id, name) = (id.filter(|s| !s.is_empty()), name.filter(|s| !s.is_empty()));
        if id.is_none() && name.is_none() {
            return Err(CronError::Invalid("id, name: give one".into()));
        }
        Ok(self
            .lock()
            .iter()
            .filter(|j| j.owned_by(scope))
            .find(|j| Some(j.record.id.as_str()) == id || Some(j.record.name.as_str()) == name)
            .map(Job::to_proto))
    }

    /// Changes a job's schedule, command or timeout.
    pub async fn update(
        &self,
        scope: Scope<'_>,
        id: &str,
        schedule: Option<&str>,
        command_text: Option<&str>,
        timeout_ms: Option<u64>,
    ) -> Result<CronJob, CronError> {
        let schedule = schedule.map(parse_schedule).transpose()?;
        let command = command_text.map(command).transpose()?;
        let timeout_ms = timeout_ms.map(|t| timeout(Some(t))).transpose()?;
        let job = self.with_job(scope, id, |job| {
            if let Some(schedule) = schedule {
                job.record.schedule = schedule.expression.clone();
                job.schedule = schedule;
                job.reschedule(now(), &self.zone);
            }
            if let Some(command) = command {
                job.record.command = command;
            }
            if let Some(t) = timeout_ms {
                job.record.timeout_ms = t;
            }
            job.record.updated_at = now_ms();
            job.to_proto()
        })?;
        self.save().await;
        self.wake.notify_one();
        Ok(job)
    }

    /// Pauses (`true`) or resumes a job.
    pub async fn set_paused(
        &self,
        scope: Scope<'_>,
        id: &str,
        paused: bool,
    ) -> Result<CronJob, CronError> {
        let job = self.with_job(scope, id, |job| {
            job.record.paused = paused;
            job.record.updated_at = now_ms();
            job.reschedule(now(), &self.zone);
            job.to_proto()
        })?;
        self.save().await;
        self.wake.notify_one();
        Ok(job)
    }

    /// Deletes a job of `scope` (a run in progress is cancelled, its
    /// process group killed).
    pub async fn delete(&self, scope: Scope<'_>, id: &str) -> Result<(), CronError> {
        if self.remove_where(|j| j.record.id == id && j.owned_by(scope)) == 0 {
            return Err(CronError::NotFound(format!("id: no cron job {id:?}")));
        }
        self.save().await;
        Ok(())
    }

    /// Deletes every job of session `id` (it was destroyed, or a new
    /// session takes its id), cancelling their runs.
    pub async fn forget_session(&self, id: &str) {
        if self.forget_session_now(id) {
            self.save().await;
        }
    }

    /// [`forget_session`](Self::forget_session) without writing the jobs
    /// file (the caller saves); whether any job went.
    pub fn forget_session_now(&self, id: &str) -> bool {
        self.remove_where(|j| j.record.session.as_deref() == Some(id)) > 0
    }

    /// Writes the jobs file now (after [`forget_session_now`](Self::forget_session_now)).
    pub async fn persist(&self) {
        self.save().await;
    }

    fn remove_where(&self, gone: impl Fn(&Job) -> bool) -> usize {
        let mut jobs = self.lock();
        let before = jobs.len();
        jobs.retain(|j| {
            let keep = !gone(j);
            if !keep {
                j.cancel.cancel();
            }
            keep
        });
        before - jobs.len()
    }

    /// The job's last `limit` runs (default 10), most recent first.
    pub fn history(
        &self,
        scope: Scope<'_>,
        id: &str,
        limit: Option<u32>,
    ) -> Result<Vec<CronExecution>, CronError> {
        let limit = limit.filter(|l| *l > 0).unwrap_or(10) as usize;
        self.with_job(scope, id, |job| {
            job.record
                .history
                .iter()
                .take(limit)
                .map(|e| e.to_proto(&job.record.id))
                .collect()
        })
    }

    /// Runs the job of `scope` now and waits for the run.
    pub async fn run_now(&self, scope: Scope<'_>, id: &str) -> Result<CronExecution, CronError> {
        self.with_job(scope, id, |_| ())?;
        self.execute(id).await
    }

    async fn execute(&self, id: &str) -> Result<CronExecution, CronError> {
        let (command, workspace, timeout_ms, cancel) = self.with_any_job(id, |job| {
            if job.running {
                return Err(CronError::Conflict(format!(
                    "id: cron job {:?} is running already",
                    job.record.name
                )));
            }
            job.running = true;
            Ok((
                job.record.command.clone(),
                job.record.workspace.clone(),
                job.record.timeout_ms,
                job.cancel.clone(),
            ))
        })??;
        let env = self
            .env_source
            .get()
            .map(|source| source(&workspace))
            .unwrap_or_default();
        let exec = match self.slots.acquire().await {
            Ok(_permit) => {
                run::run(
                    id,
                    RunSpec {
                        command: &command,
                        workspace: &workspace,
                        env: &env,
                        timeout: Duration::from_millis(timeout_ms),
                        sandbox: self.sandboxes.for_workspace(&workspace),
                        cancel: &cancel,
                    },
                )
                .await
            }
            Err(_) => CronExecution {
                id: uuid::Uuid::new_v4().to_string(),
                job_id: id.to_string(),
                status: CronExecutionStatus::Cancelled as i32,
                started_at: now_ms(),
                error: Some("the scheduler is closed".into()),
                ..Default::default()
            },
        };
        let name = self.with_any_job(id, |job| {
            job.running = false;
            job.record.last_run = Some(exec.started_at);
            if exec.status == CronExecutionStatus::Success as i32 {
                job.record.run_count += 1;
            } else {
                job.record.fail_count += 1;
            }
            job.record
                .history
                .push_front(ExecutionRecord::from_proto(&exec));
            job.record.history.truncate(MAX_HISTORY);
            job.record.name.clone()
        });
        if let (Some(events), Ok(name)) = (self.events.get(), name) {
            let status = super::run::status_name(&exec);
            events.emit(
                code_agent_proto::agent_event::EventType::Info,
                None,
                &format!("cron job {name}: {status}"),
                [
                    ("kind", "cron_run".to_string()),
                    ("job_id", id.to_string()),
                    ("job", name.clone()),
                    ("status", status),
                    ("execution_id", exec.id.clone()),
                    (
                        "exit_code",
                        exec.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                    ),
                ],
            );
        }
        self.save().await;
        self.wake.notify_one();
        Ok(exec)
    }

    /// Runs jobs on time until the engine stops.
    pub async fn schedule_loop(self: Arc<Self>) {
        loop {
            let at = now();
            let due: Vec<String> = {
                let mut jobs = self.lock();
                let mut due = Vec::new();
                for job in jobs.iter_mut().filter(|j| !j.record.paused) {
                    if job.next_run.is_some_and(|t| t <= at) {
                        job.reschedule(at, &self.zone);
                        if job.running {
                            tracing::info!(job = %job.record.name, "cron tick skipped: the previous run is still going");
                        } else {
                            due.push(job.record.id.clone());
                        }
                    }
                }
                due
            };
            for id in due {
                let me = self.clone();
                tokio::spawn(async move {
                    if let Err(e) = me.execute(&id).await {
                        tracing::info!(job_id = %id, error = %e, "cron run not started");
                    }
                });
            }
            let next = self
                .lock()
                .iter()
                .filter(|j| !j.record.paused)
                .filter_map(|j| j.next_run)
                .min();
            let wait = next
                .and_then(|t| (t - now()).to_std().ok())
                .unwrap_or(Duration::ZERO)
                .min(MAX_SLEEP);
            let wait = if next.is_none() { MAX_SLEEP } else { wait };
            tokio::select! {
                () = self.cancel.cancelled() => break,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
        self.slots.close();
    }
}
