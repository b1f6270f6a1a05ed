//! Sessions: paging, persistence across restarts, validation, and the
//! RPCs that are not built yet.

use code_agent_engine::testing::MockReply;
use code_agent_proto::*;
use tonic::Code;

use crate::common::*;

#[tokio::test]
async fn get_messages_pages_with_limit_and_offset() {
    let mut h = Harness::start(vec![MockReply::text("a1"), MockReply::text("a2")]).await;
    let s = h.session().await;
    h.turn(&s, "q1").await;
    h.turn(&s, "q2").await;
    let page = |limit, offset| GetMessagesRequest {
        session_id: s.clone(),
        limit,
        offset,
    };
    let r = h
        .client
        .get_messages(page(Some(3), None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.messages.len(), r.total_count, r.has_more), (3, 4, true));
    assert_eq!(r.messages[0].role, "user");
    let r = h
        .client
        .get_messages(page(Some(3), Some(3)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.messages.len(), r.has_more), (1, false));
    assert_eq!(r.messages[0].role, "assistant");
    let r = h
        .client
        .get_messages(page(None, Some(10)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.messages.len(), r.has_more), (0, false));
}

#[tokio::test]
async fn file_sessions_survive_a_restart_and_memory_ones_do_not() {
    let mut h = Harness::start(vec![MockReply::text("remembered"), MockReply::text("gone")]).await;
    let file_config = h.config(StorageType::File);
    let kept = h
        .client
        .create_session(CreateSessionRequest {
            session_id: Some("kept-1".into()),
            config: Some(file_config),
            initial_context: vec![],
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let lost = h.session().await;
    h.turn(&kept, "remember this").await;
    h.turn(&lost, "forget this").await;
    h.client
        .set_todos(SetTodosRequest {
            session_id: kept.clone(),
            todos: vec![Todo {
                id: "1".into(),
                content: "persist me".into(),
                status: "pending".into(),
                priority: "medium".into(),
            }],
        })
        .await
        .unwrap();
    let file = h.state.path().join("sessions/kept-1.json");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("sk-test"), "the API key was written to disk");

    let (mock, workspace, state) = h.stop().await;
    let mut h = Harness::start_on(mock, workspace, state).await;
    let sessions = h
        .client
        .list_sessions(ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner()
        .sessions;
    let ids: Vec<_> = sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, vec!["kept-1"]);
    let history = h.messages(&kept).await;
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].role, "assistant");
    let todos = h.todos(&kept).await;
    assert_eq!(todos[0].content, "persist me");
    let err = h
        .client
        .get_session(GetSessionRequest { session_id: lost })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    h.destroy(&kept).await;
    assert!(!h.state.path().join("sessions/kept-1.json").exists());
}

#[tokio::test]
async fn a_finished_generation_is_on_disk_with_its_tool_results() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("c1", "bash", serde_json::json!({"command": "echo one"})),
        MockReply::text("done"),
    ])
    .await;
    let s = h.session_with(h.config(StorageType::File)).await;
    assert_eq!(done(&h.turn(&s, "run it").await).finish_reason, "stop");
    // Read while the engine still runs (its shutdown writes every session).
    let record = code_agent_engine::testing::session_on_disk(h.state.path(), &s).unwrap();
    let messages = record["messages"].as_array().unwrap();
    let roles: Vec<_> = messages.iter().map(|m| m["role"].as_str()).collect();
    let expected = ["user", "assistant", "tool", "assistant"].map(Some);
    assert_eq!(roles, expected);
    let result = messages[2]["content"].as_str().unwrap_or_default();
    assert!(result.contains("one"), "{result}");
}

#[tokio::test]
async fn invalid_requests_name_the_field() {
    let mut h = Harness::start(vec![]).await;
    let err = h
        .client
        .create_session(CreateSessionRequest {
            session_id: Some("../escape".into()),
            config: None,
            initial_context: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("session_id"), "{}", err.message());

    let err = h
        .client
        .create_session(CreateSessionRequest {
            session_id: None,
            config: Some(SessionConfig {
                workspace: "/does/not/exist".into(),
                ..Default::default()
            }),
            initial_context: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().starts_with("config.workspace"),
        "{}",
        err.message()
    );

    let s = h.session().await;
    let dup = h
        .client
        .create_session(CreateSessionRequest {
            session_id: Some(s.clone()),
            config: None,
            initial_context: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists);

    let err = h
        .client
        .generate(GenerateRequest {
            session_id: s.clone(),
            messages: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("messages"));

    let metadata = [("reasoning_effort".to_string(), "extreme".to_string())].into();
    let err = h
        .client
        .generate(user_request(&s, "x", metadata))
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("messages[0].metadata.reasoning_effort")
    );

    let err = h
        .client
        .get_messages(GetMessagesRequest {
            session_id: "nobody".into(),
            limit: None,
            offset: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn model_errors_end_the_turn_with_a_clear_status() {
    let mut h = Harness::start(vec![MockReply::error(401, "bad key")]).await;
    let s = h.session().await;
    let mut stream = h.open_stream(&s, "hi", Default::default()).await;
    let err = loop {
        match futures::StreamExt::next(&mut stream).await {
            Some(Ok(_)) => continue,
            Some(Err(status)) => break status,
            None => panic!("stream ended without an error"),
        }
    };
    assert_eq!(err.code(), Code::Unauthenticated);
    let session = h.session_info(&s).await;
    assert_eq!(session.state, SessionState::Error as i32);
    assert_eq!(session.config.unwrap().llm.unwrap().api_key, "***");
}

#[tokio::test]
async fn capabilities_and_health_tell_the_truth() {
    let mut h = Harness::start(vec![]).await;
    let caps = h
        .client
        .get_capabilities(GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    let tools: Vec<_> = caps.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        tools,
        vec![
            "bash",
            "read",
            "write",
            "edit",
            "grep",
            "glob",
            "ls",
            "todo",
            "memory_store",
            "memory_search",
            "plan",
            "cron",
            "lsp_hover",
            "lsp_definition",
            "lsp_references",
            "lsp_symbols",
            "lsp_diagnostics"
        ]
    );
    assert!(caps.tools[0].parameters.contains(&"command".to_string()));
    assert_eq!(caps.limits.unwrap().max_tools_per_request, 17);
    assert_eq!(caps.info.unwrap().name, "code-agent");
    let health = h
        .client
        .health_check(HealthCheckRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_ne!(health.status, health_check_response::Status::Unknown as i32);
    assert_eq!(health.details["sessions"], "0");
}

#[tokio::test]
async fn destroying_a_busy_file_session_leaves_no_file_behind() {
    let mut h = Harness::start(vec![MockReply::tool_call(
        "c1",
        "bash",
        serde_json::json!({"command": "true"}),
    )])
    .await;
    let s = h.session_with(h.config(StorageType::File)).await;
    h.set_confirmation_policy(&s, ask_all()).await;
    let file = h.state.path().join(format!("sessions/{s}.json"));
    assert!(file.exists());
    let mut events = h
        .events(&s, &["CONFIRMATION_REQUIRED", "GENERATION_COMPLETED"])
        .await;
    let stream = h.open_stream(&s, "wait", Default::default()).await;
    next_event(&mut events, agent_event::EventType::ConfirmationRequired).await;
    h.destroy(&s).await;
    let chunks = drain(stream).await;
    assert_eq!(done(&chunks).finish_reason, "cancelled");
    next_event(&mut events, agent_event::EventType::GenerationCompleted).await;
    assert!(!file.exists(), "the destroyed session was written back");
    let left: Vec<_> = std::fs::read_dir(h.state.path().join("sessions"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&format!("{s}.")))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test]
async fn configure_session_moves_between_memory_and_file() {
    let mut h = Harness::start(vec![]).await;
    let s = h.session().await;
    let file = h.state.path().join(format!("sessions/{s}.json"));
    assert!(!file.exists());
    // The key comes back redacted; sending that back keeps the real one.
    let shown = h.session_info(&s).await.config.unwrap();
    let mut config = shown.clone();
    config.storage_type = StorageType::File as i32;
    config.system_prompt = "Be brief.".into();
    let updated = h
        .client
        .configure_session(ConfigureSessionRequest {
            session_id: s.clone(),
            config: Some(config.clone()),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(updated.config.unwrap().system_prompt, "Be brief.");
    assert!(file.exists());
    config.storage_type = StorageType::Memory as i32;
    h.client
        .configure_session(ConfigureSessionRequest {
            session_id: s.clone(),
            config: Some(config),
        })
        .await
        .unwrap();
    assert!(!file.exists());
    // The model still gets the real key, not "***".
    h.mock.expect_api_key(Some("sk-test"));
    h.mock.push(MockReply::text("fine"));
    assert_eq!(done(&h.turn(&s, "hi").await).finish_reason, "stop");
}
