//! Cron: schedules, jobs persisted across a restart, manual runs through
//! the launcher, a timeout that kills the process tree, one job run by the
//! clock, and the `cron` tool called by the model in a turn.

use std::time::{Duration, Instant};

use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_proto::*;
use serde_json::json;

use crate::common::*;

async fn create(
    h: &mut Harness,
    name: &str,
    schedule: &str,
    command: &str,
    timeout_ms: Option<u64>,
) -> CronJob {
    h.client
        .create_cron_job(CreateCronJobRequest {
            name: name.into(),
            schedule: schedule.into(),
            command: command.into(),
            timeout_ms,
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap()
}

async fn run(h: &mut Harness, id: &str) -> RunCronJobResponse {
    h.client
        .run_cron_job(RunCronJobRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
}

async fn history(h: &mut Harness, id: &str) -> Vec<CronExecution> {
    h.client
        .get_cron_history(GetCronHistoryRequest {
            id: id.into(),
            limit: None,
        })
        .await
        .unwrap()
        .into_inner()
        .executions
}

#[tokio::test]
async fn schedules_parse_from_cron_and_english() {
    let mut h = Harness::start(vec![]).await;
    let parse = |input: &str| ParseCronScheduleRequest {
        input: input.into(),
    };
    let ok = h
        .client
        .parse_cron_schedule(parse("every monday at 10:30"))
        .await
        .unwrap()
        .into_inner();
    assert!(ok.success);
    assert_eq!(ok.cron_expression, "30 10 * * 1");
    assert!(!ok.description.is_empty());
    let ok = h
        .client
        .parse_cron_schedule(parse("*/15 * * * *"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.cron_expression, "*/15 * * * *");
    let bad = h
        .client
        .parse_cron_schedule(parse("now and then"))
        .await
        .unwrap()
        .into_inner();
    assert!(!bad.success);
    assert!(bad.error.contains("every 5 minutes"), "{}", bad.error);
    // Wherever a schedule is accepted.
    let err = h
        .client
        .create_cron_job(CreateCronJobRequest {
            name: "x".into(),
            schedule: "61 * * * *".into(),
            command: "true".into(),
            timeout_ms: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().starts_with("schedule:"), "{}", err.message());
}

#[tokio::test]
async fn jobs_are_managed_run_by_hand_and_survive_a_restart() {
    let mut h = Harness::start(vec![]).await;
    let job = creates_a_job_once(&mut h).await;
    runs_it_by_hand(&mut h, &job.id).await;
    runs_it_updated_and_keeps_its_history(&mut h, &job.id).await;
    pauses_it(&mut h, &job.id).await;
    let (mock, workspace, state) = h.stop().await;

    let mut h = Harness::start_on(mock, workspace, state).await;
    finds_it_after_the_restart(&mut h, &job.id).await;
    resumes_and_deletes_it(&mut h, job.id).await;
}

/// `report`, created in a workspace initialized with an env var; a second
/// job of the same name is refused.
async fn creates_a_job_once(h: &mut Harness) -> CronJob {
    h.client
        .initialize(InitializeRequest {
            workspace: h.ws().display().to_string(),
            env: std::collections::HashMap::from([(
                "GIT_CONFIG_COUNT".to_string(),
                "7".to_string(),
            )]),
        })
        .await
        .unwrap();
    let job = create(
        h,
        "report",
        "every day at 9am",
        "pwd; echo out cfg=$GIT_CONFIG_COUNT; echo err >&2",
        None,
    )
    .await;
    assert_eq!(job.schedule, "0 9 * * *");
    assert_eq!(job.status, CronJobStatus::Active as i32);
    assert_eq!(job.timeout_ms, 60_000);
    assert_eq!(job.next_run.unwrap() % 3_600_000, 0, "on the hour");
    let dup = h
        .client
        .create_cron_job(CreateCronJobRequest {
            name: "report".into(),
            schedule: "hourly".into(),
            command: "true".into(),
            timeout_ms: None,
        })
        .await
        .unwrap_err();
    assert_eq!(dup.code(), tonic::Code::FailedPrecondition);
    job
}

/// A run by hand: the job's output (in the workspace, with its env) and an
/// INFO event.
async fn runs_it_by_hand(h: &mut Harness, id: &str) {
    let mut events = h
        .client
        .subscribe_events(SubscribeEventsRequest {
            session_id: None,
            event_types: vec!["INFO".into()],
        })
        .await
        .unwrap()
        .into_inner();
    let first = run(h, id).await;
    let event = next_event(&mut events, agent_event::EventType::Info).await;
    assert_eq!(event.data["kind"], "cron_run");
    assert_eq!(event.data["job"], "report");
    assert_eq!(event.data["status"], "success");
    drop(events); // an open subscription would hold the server's graceful stop
    assert!(first.success, "{first:?}");
    let exec = first.execution.unwrap();
    assert_eq!(exec.status, CronExecutionStatus::Success as i32);
    let ws = h.ws().canonicalize().unwrap();
    assert_eq!(exec.stdout, format!("{}\nout cfg=7\n", ws.display()));
    assert_eq!(exec.stderr, "err\n");
    assert_eq!(exec.exit_code, Some(0));
}

/// An updated job runs its new command; the failed run is in the history,
/// most recent first.
async fn runs_it_updated_and_keeps_its_history(h: &mut Harness, id: &str) {
    let updated = h
        .client
        .update_cron_job(UpdateCronJobRequest {
            id: id.to_string(),
            schedule: Some("every 5 minutes".into()),
            command: Some("echo second; exit 3".into()),
            timeout_ms: Some(5_000),
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!(updated.schedule, "*/5 * * * *");
    let second = run(h, id).await;
    assert!(!second.success);
    let exec = second.execution.unwrap();
    assert_eq!(exec.status, CronExecutionStatus::Failed as i32);
    assert_eq!(exec.exit_code, Some(3));
    assert!(second.error.contains("code 3"), "{}", second.error);

    let runs = history(h, id).await;
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].stdout, "second\n", "most recent first");
}

/// A paused job has no next run; its counts and file stay.
async fn pauses_it(h: &mut Harness, id: &str) {
    let paused = h
        .client
        .pause_cron_job(PauseCronJobRequest { id: id.to_string() })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!(paused.status, CronJobStatus::Paused as i32);
    assert_eq!(paused.next_run, None);
    let by_name = h
        .client
        .get_cron_job(GetCronJobRequest {
            id: None,
            name: Some("report".into()),
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!((by_name.run_count, by_name.fail_count), (1, 1));
    assert!(h.state.path().join("cron/jobs.json").exists());
}

/// The job and its history were read back from the state dir.
async fn finds_it_after_the_restart(h: &mut Harness, id: &str) {
    let jobs = h
        .client
        .list_cron_jobs(ListCronJobsRequest {})
        .await
        .unwrap()
        .into_inner()
        .jobs;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].id, id);
    assert_eq!(jobs[0].status, CronJobStatus::Paused as i32);
    assert_eq!(jobs[0].command, "echo second; exit 3");
    assert_eq!(history(h, id).await.len(), 2);
}

/// Resumed, it is scheduled again; deleted, it is gone.
async fn resumes_and_deletes_it(h: &mut Harness, id: String) {
    let resumed = h
        .client
        .resume_cron_job(ResumeCronJobRequest { id: id.clone() })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!(resumed.status, CronJobStatus::Active as i32);
    assert!(resumed.next_run.unwrap() > resumed.updated_at);
    h.client
        .delete_cron_job(DeleteCronJobRequest { id: id.clone() })
        .await
        .unwrap();
    let gone = h
        .client
        .get_cron_job(GetCronJobRequest {
            id: Some(id.clone()),
            name: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(gone.job.is_none());
    let err = h
        .client
        .run_cron_job(RunCronJobRequest { id })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

/// Whether process `pid` is gone (or a zombie awaiting its reaper).
pub(crate) fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_tree() {
    let mut h = Harness::start(vec![]).await;
    let job = create(
        &mut h,
        "stuck",
        "hourly",
        "sleep 300 & echo $! > bg.pid; sleep 300",
        Some(500),
    )
    .await;
    let response = run(&mut h, &job.id).await;
    let exec = response.execution.unwrap();
    assert_eq!(exec.status, CronExecutionStatus::Timeout as i32, "{exec:?}");
    assert!(exec.error.unwrap().contains("timed out"));
    let pid: i32 = std::fs::read_to_string(h.ws().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "background process {pid} survived the timeout"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_job_every_minute_runs_on_the_clock() {
    let mut h = Harness::start(vec![]).await;
    let job = create(
        &mut h,
        "tick",
        "every minute",
        "echo tick >> ticks.txt",
        None,
    )
    .await;
    assert_eq!(job.next_run.unwrap() % 60_000, 0, "on a minute boundary");
    // The next minute boundary is at most 60 s away.
    let deadline = Instant::now() + Duration::from_secs(90);
    let exec = loop {
        if let Some(exec) = history(&mut h, &job.id).await.into_iter().next() {
            break exec;
        }
        assert!(
            Instant::now() < deadline,
            "the job did not run within its minute"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(exec.status, CronExecutionStatus::Success as i32, "{exec:?}");
    assert!(exec.started_at >= job.next_run.unwrap());
    eprintln!(
        "cron run started {} ms after its scheduled minute, took {} ms",
        exec.started_at - job.next_run.unwrap(),
        exec.duration_ms.unwrap_or_default()
    );
    assert!(
        std::fs::read_to_string(h.ws().join("ticks.txt"))
            .unwrap()
            .starts_with("tick\n")
    );
    let after = h
        .client
        .get_cron_job(GetCronJobRequest {
            id: Some(job.id.clone()),
            name: None,
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert!(after.next_run.unwrap() > job.next_run.unwrap());
    assert_eq!(after.last_run, Some(exec.started_at));
}

#[tokio::test]
async fn the_model_schedules_and_runs_a_job_with_the_cron_tool() {
    let mock = MockLlm::start(vec![
        MockReply::tool_call(
            "c1",
            "cron",
            json!({"action": "create", "name": "nightly", "schedule": "every day at 2am", "command": "echo built > built.txt; cat built.txt"}),
        ),
        MockReply::tool_call("c2", "cron", json!({"action": "run", "name": "nightly"})),
        MockReply::tool_call("c3", "cron", json!({"action": "create", "name": "bad", "schedule": "whenever", "command": "true"})),
        MockReply::text("scheduled"),
    ])
    .await;
    let (workspace, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut h = Harness::start_on(mock, workspace, state).await;
    let s = h.session().await;
    let chunks = h.turn(&s, "build every night").await;
    let results = results(&chunks);
    assert!(results[0].success, "{:?}", results[0]);
    assert!(
        results[0].output.contains("[0 2 * * *]"),
        "{}",
        results[0].output
    );
    assert!(results[1].success, "{:?}", results[1]);
    assert!(results[1].output.contains("built"), "{}", results[1].output);
    assert!(!results[2].success);
    assert!(
        results[2].error.contains("schedule:"),
        "{}",
        results[2].error
    );
    // The session's job: the RPC reaches it with the session's metadata.
    let get = scoped(
        GetCronJobRequest {
            id: None,
            name: Some("nightly".into()),
        },
        Some(&s),
    );
    let job = h
        .client
        .get_cron_job(get)
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!(job.run_count, 1);
    assert_eq!(
        job.working_dir.unwrap(),
        h.ws().canonicalize().unwrap().display().to_string()
    );
}
