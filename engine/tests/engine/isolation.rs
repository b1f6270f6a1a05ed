//! Engine state belongs to its session: one session's cron jobs, memories,
//! plans and MCP servers are out of reach of another session, through the
//! RPCs (scoped by request metadata or by `session_id`) and through the
//! model's tools; they go with the session, so a later session of the same
//! id (a re-created thread) starts with none; and a session cannot change
//! the operator's (global) MCP servers.

use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_proto::*;
use serde_json::json;
use tonic::Code;

use crate::common::*;

/// A session with the given id (the runner's thread id).
async fn session_named(h: &mut Harness, id: &str, storage: StorageType) -> String {
    h.client
        .create_session(CreateSessionRequest {
            session_id: Some(id.into()),
            config: Some(h.config(storage)),
            initial_context: vec![],
        })
        .await
        .unwrap()
        .into_inner()
        .session_id
}

async fn cron_list(h: &mut Harness, session: Option<&str>) -> Vec<CronJob> {
    h.client
        .list_cron_jobs(scoped(ListCronJobsRequest {}, session))
        .await
        .unwrap()
        .into_inner()
        .jobs
}

fn cron(action: &str, name: &str, command: &str) -> serde_json::Value {
    json!({"action": action, "name": name, "schedule": "every day at 3am", "command": command})
}

/// Every RPC that names a job by id, made by `session` for job `id`:
/// each must answer NOT_FOUND.
async fn cron_rpcs_refuse(h: &mut Harness, session: Option<&str>, id: &str) {
    let id = id.to_string();
    let c = &mut h.client;
    let codes = [
        c.update_cron_job(scoped(
            UpdateCronJobRequest {
                id: id.clone(),
                command: Some("echo hijacked > hijacked.txt".into()),
                ..Default::default()
            },
            session,
        ))
        .await
        .map(|_| ()),
        c.pause_cron_job(scoped(PauseCronJobRequest { id: id.clone() }, session))
            .await
            .map(|_| ()),
        c.resume_cron_job(scoped(ResumeCronJobRequest { id: id.clone() }, session))
            .await
            .map(|_| ()),
        c.get_cron_history(scoped(
            GetCronHistoryRequest {
                id: id.clone(),
                limit: None,
            },
            session,
        ))
        .await
        .map(|_| ()),
        c.run_cron_job(scoped(RunCronJobRequest { id: id.clone() }, session))
            .await
            .map(|_| ()),
        c.delete_cron_job(scoped(DeleteCronJobRequest { id: id.clone() }, session))
            .await
            .map(|_| ()),
    ];
    for (i, code) in codes.into_iter().enumerate() {
        assert_eq!(
            code.map_err(|s| s.code()),
            Err(Code::NotFound),
            "rpc #{i} on job {id} by {session:?}"
        );
    }
    let by_id = c
        .get_cron_job(scoped(
            GetCronJobRequest {
                id: Some(id.clone()),
                name: None,
            },
            session,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(by_id.job.is_none(), "{by_id:?}");
}

#[tokio::test]
async fn cron_jobs_belong_to_the_session_that_made_them() {
    let mut h = Harness::start(vec![
        // Session A's model schedules a job.
        MockReply::tool_call("a1", "cron", cron("create", "nightly", "echo a > a.txt")),
        MockReply::text("scheduled"),
        // Session B's model goes after it by name.
        MockReply::tool_call("b1", "cron", json!({"action": "list"})),
        MockReply::tool_call("b2", "cron", json!({"action": "run", "name": "nightly"})),
        MockReply::tool_call("b3", "cron", json!({"action": "delete", "name": "nightly"})),
        MockReply::tool_call("b4", "cron", cron("create", "nightly", "echo b > b.txt")),
        MockReply::text("tried"),
    ])
    .await;
    let a = session_named(&mut h, "thread-a", StorageType::File).await;
    let b = h.session().await;
    let chunks = h.turn(&a, "schedule it").await;
    assert!(results(&chunks)[0].success, "{:?}", results(&chunks));
    let mine = cron_list(&mut h, Some(&a)).await;
    assert_eq!(mine.len(), 1, "{mine:?}");
    let a_job = mine[0].id.clone();

    // B's tools: nothing listed, nothing run or deleted; its own job of the
    // same name is a separate one (a taken name says nothing of A's).
    let chunks = h.turn(&b, "look around").await;
    let tried = results(&chunks);
    assert!(
        tried[0].success && tried[0].output == "no cron jobs",
        "{tried:?}"
    );
    assert!(
        !tried[1].success && tried[1].error.contains("no cron job named"),
        "{tried:?}"
    );
    assert!(
        !tried[2].success && tried[2].error.contains("no cron job named"),
        "{tried:?}"
    );
    assert!(tried[3].success, "{tried:?}");
    assert!(!h.ws().join("a.txt").exists(), "B ran A's job");

    // B's RPCs and the operator's (no session metadata) reach none of it.
    let b_jobs = cron_list(&mut h, Some(&b)).await;
    assert_eq!(b_jobs.len(), 1);
    assert_ne!(b_jobs[0].id, a_job);
    assert!(cron_list(&mut h, None).await.is_empty());
    cron_rpcs_refuse(&mut h, Some(&b), &a_job).await;
    cron_rpcs_refuse(&mut h, None, &a_job).await;
    let by_name = h
        .client
        .get_cron_job(scoped(
            GetCronJobRequest {
                id: None,
                name: Some("nightly".into()),
            },
            Some(&b),
        ))
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!(by_name.id, b_jobs[0].id);
    // A's job is intact, and A reaches it.
    let still = cron_list(&mut h, Some(&a)).await;
    assert_eq!(still.len(), 1);
    assert_eq!(still[0].command, "echo a > a.txt");
    assert_eq!(still[0].status, CronJobStatus::Active as i32);

    // The thread goes: its jobs go; the same id again starts with none.
    h.destroy(&a).await;
    let again = session_named(&mut h, &a, StorageType::File).await;
    assert!(cron_list(&mut h, Some(&again)).await.is_empty());
    cron_rpcs_refuse(&mut h, Some(&again), &a_job).await;
    assert_eq!(cron_list(&mut h, Some(&b)).await.len(), 1, "B's job stays");
}

#[tokio::test]
async fn a_gone_sessions_cron_jobs_do_not_outlive_a_restart() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("m1", "cron", cron("create", "fleeting", "true")),
        MockReply::text("ok"),
        MockReply::tool_call("f1", "cron", cron("create", "lasting", "true")),
        MockReply::text("ok"),
    ])
    .await;
    // A MEMORY session ends with the engine; a FILE session does not.
    let fleeting = session_named(&mut h, "thread-m", StorageType::Memory).await;
    let lasting = session_named(&mut h, "thread-f", StorageType::File).await;
    h.turn(&fleeting, "schedule").await;
    h.turn(&lasting, "schedule").await;
    assert_eq!(cron_list(&mut h, Some(&fleeting)).await.len(), 1);
    let (mock, workspace, state) = h.stop().await;

    let mut h = Harness::start_on(mock, workspace, state).await;
    let again = session_named(&mut h, &fleeting, StorageType::Memory).await;
    assert!(cron_list(&mut h, Some(&again)).await.is_empty());
    let kept = cron_list(&mut h, Some(&lasting)).await;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].name, "lasting");
    let file = std::fs::read_to_string(h.state.path().join("cron/jobs.json")).unwrap();
    assert!(!file.contains("fleeting"), "{file}");
}

/// A job running when its session is destroyed is cancelled, its process
/// group (a background child too) killed.
#[tokio::test]
async fn destroying_a_session_cancels_its_running_job() {
    let mut h = Harness::start(vec![]).await;
    let a = session_named(&mut h, "thread-running", StorageType::Memory).await;
    let job = h
        .client
        .create_cron_job(scoped(
            CreateCronJobRequest {
                name: "long".into(),
                schedule: "hourly".into(),
                command: "sleep 300 & echo $! > bg.pid; sleep 300".into(),
                timeout_ms: Some(20_000),
            },
            Some(&a),
        ))
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!(
        job.working_dir.as_deref(),
        Some(h.ws().canonicalize().unwrap().to_str().unwrap())
    );
    let mut client = h.client.clone();
    let (id, session) = (job.id.clone(), a.clone());
    let run = tokio::spawn(async move {
        client
            .run_cron_job(scoped(RunCronJobRequest { id }, Some(&session)))
            .await
            .map(|r| r.into_inner())
    });
    let pid_file = h.ws().join("bg.pid");
    let deadline = std::time::Instant::now() + PATIENCE;
    let pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let started = std::time::Instant::now();
    h.destroy(&a).await;
    let exec = run.await.unwrap().unwrap().execution.unwrap();
    assert_eq!(
        exec.status,
        CronExecutionStatus::Cancelled as i32,
        "{exec:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    let deadline = std::time::Instant::now() + PATIENCE;
    while !crate::cron::gone(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "background process {pid} outlived its session"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn memory(content: &str) -> MemoryItem {
    MemoryItem {
        content: content.into(),
        memory_type: MemoryType::Semantic as i32,
        importance: 0.9,
        tags: vec!["secret".into()],
        ..Default::default()
    }
}

async fn memories(h: &mut Harness, s: &str) -> SearchMemoriesResponse {
    h.client
        .search_memories(SearchMemoriesRequest {
            session_id: s.into(),
            query: Some("launch".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

async fn latest_plan(h: &mut Harness, s: &str) -> Result<GetPlanResponse, tonic::Status> {
    h.client
        .get_plan(GetPlanRequest {
            session_id: s.into(),
            plan_id: String::new(),
        })
        .await
        .map(|r| r.into_inner())
}

fn a_plan() -> serde_json::Value {
    json!({
        "goal": "launch the rocket",
        "steps": [{"id": "s1", "description": "count down", "dependencies": [], "success_criteria": ["zero"]}],
        "complexity": "simple",
        "required_tools": [],
        "estimated_steps": 1
    })
}

/// A's memories and plans, by RPC and by tool, are not B's; destroyed,
/// they are gone for a new session of A's id.
#[tokio::test]
async fn memories_and_plans_stay_with_their_session() {
    let mut h = Harness::start(vec![
        MockReply::tool_call(
            "a1",
            "memory_store",
            json!({"content": "the launch code is 0000"}),
        ),
        MockReply::tool_call("a2", "plan", a_plan()),
        MockReply::text("noted"),
        MockReply::tool_call("b1", "memory_search", json!({"query": "launch"})),
        MockReply::text("found nothing"),
    ])
    .await;
    let a = session_named(&mut h, "thread-a", StorageType::File).await;
    let b = h.session().await;
    let stored = h
        .client
        .store_memory(StoreMemoryRequest {
            session_id: a.clone(),
            memory: Some(memory("launch window at noon")),
        })
        .await
        .unwrap()
        .into_inner()
        .memory_id;
    let chunks = h.turn(&a, "remember and plan").await;
    assert!(
        results(&chunks).iter().all(|r| r.success),
        "{:?}",
        results(&chunks)
    );
    assert_eq!(memories(&mut h, &a).await.total_count, 2);
    assert!(latest_plan(&mut h, &a).await.is_ok());

    let chunks = h.turn(&b, "what do you know").await;
    let found = &results(&chunks)[0];
    assert!(
        found.success && found.output == "no memory matches",
        "{found:?}"
    );
    assert_eq!(memories(&mut h, &b).await.total_count, 0);
    let retrieved = h
        .client
        .retrieve_memory(RetrieveMemoryRequest {
            session_id: b.clone(),
            memory_id: stored.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(retrieved.memory.is_none());
    assert!(latest_plan(&mut h, &b).await.is_err());

    h.destroy(&a).await;
    assert!(!h.state.path().join(format!("memory/{a}.sqlite3")).exists());
    assert!(!h.state.path().join(format!("plans/{a}.json")).exists());
    let again = session_named(&mut h, &a, StorageType::File).await;
    assert_eq!(memories(&mut h, &again).await.total_count, 0);
    assert!(latest_plan(&mut h, &again).await.is_err());
}

/// A FILE session the engine cannot reload (its file is damaged) leaves
/// memories and plans on disk; a new session of that id (the adapter
/// re-creates a thread's session it cannot find) does not inherit them.
#[tokio::test]
async fn a_new_session_does_not_inherit_a_lost_sessions_memories_or_plans() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("a1", "plan", a_plan()),
        MockReply::text("planned"),
    ])
    .await;
    let a = session_named(&mut h, "thread-lost", StorageType::File).await;
    h.client
        .store_memory(StoreMemoryRequest {
            session_id: a.clone(),
            memory: Some(memory("launch window at noon")),
        })
        .await
        .unwrap();
    h.turn(&a, "plan").await;
    assert!(latest_plan(&mut h, &a).await.is_ok());
    let (mock, workspace, state) = h.stop().await;
    let sessions = state.path().join("sessions");
    for entry in std::fs::read_dir(&sessions).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with(&format!("{a}.")) {
            std::fs::write(&path, b"damaged").unwrap();
        }
    }
    assert!(state.path().join(format!("plans/{a}.json")).exists());

    let mut h = Harness::start_on(mock, workspace, state).await;
    let gone = h
        .client
        .get_session(GetSessionRequest {
            session_id: a.clone(),
        })
        .await;
    assert_eq!(gone.unwrap_err().code(), Code::NotFound);
    let again = session_named(&mut h, &a, StorageType::File).await;
    assert_eq!(memories(&mut h, &again).await.total_count, 0);
    assert!(latest_plan(&mut h, &again).await.is_err());
}

fn stdio(name: &str) -> McpServerConfigProto {
    McpServerConfigProto {
        name: name.into(),
        enabled: true,
        env: Default::default(),
        transport: Some(McpTransport {
            transport: Some(mcp_transport::Transport::Stdio(McpStdioTransport {
                command: "/nonexistent/mcp-server".into(),
                args: vec![],
            })),
        }),
    }
}

async fn mcp_names(h: &mut Harness, session: Option<&str>) -> Vec<(String, Option<String>)> {
    h.client
        .list_mcp_servers(scoped(ListMcpServersRequest {}, session))
        .await
        .unwrap()
        .into_inner()
        .servers
        .into_iter()
        .map(|s| (s.name, s.error))
        .collect()
}

#[tokio::test]
async fn mcp_servers_stay_with_their_session_and_the_operators_stay_the_operators() {
    let mock = MockLlm::start(vec![]).await;
    let (workspace, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut h = Harness::start_on(mock, workspace, state).await;
    let a = session_named(&mut h, "thread-a", StorageType::File).await;
    let b = h.session().await;
    for (config, session) in [(stdio("global"), None), (stdio("own"), Some(a.as_str()))] {
        h.client
            .register_mcp_server(scoped(
                RegisterMcpServerRequest {
                    config: Some(config),
                },
                session,
            ))
            .await
            .unwrap();
    }
    // A's server is A's alone.
    assert_eq!(mcp_names(&mut h, Some(&b)).await, [("global".into(), None)]);
    assert_eq!(mcp_names(&mut h, None).await, [("global".into(), None)]);
    let connect = h
        .client
        .connect_mcp_server(scoped(
            ConnectMcpServerRequest { name: "own".into() },
            Some(&b),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(
        !connect.success && connect.message.contains("no MCP server"),
        "{connect:?}"
    );
    let off = h
        .client
        .disconnect_mcp_server(scoped(
            DisconnectMcpServerRequest { name: "own".into() },
            Some(&b),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!off.success);

    // The operator's server: a session neither connects nor disconnects it.
    let connect = h
        .client
        .connect_mcp_server(scoped(
            ConnectMcpServerRequest {
                name: "global".into(),
            },
            Some(&b),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(
        !connect.success && connect.message.contains("operator"),
        "{connect:?}"
    );
    assert_eq!(
        mcp_names(&mut h, None).await,
        [("global".into(), None)],
        "untouched"
    );
    let off = h
        .client
        .disconnect_mcp_server(scoped(
            DisconnectMcpServerRequest {
                name: "global".into(),
            },
            Some(&b),
        ))
        .await
        .unwrap_err();
    assert_eq!(off.code(), Code::PermissionDenied, "{off:?}");

    // A goes, and its server with it; the same id again sees only the global.
    h.destroy(&a).await;
    let again = session_named(&mut h, &a, StorageType::File).await;
    assert_eq!(
        mcp_names(&mut h, Some(&again)).await,
        [("global".into(), None)]
    );
}
