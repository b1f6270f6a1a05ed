//! The agent loop with real tools: a multi-step edit, path escapes, the
//! todo tool, cancelling a running `bash`, and steering.

use std::collections::HashMap;

use code_agent_engine::testing::MockReply;
use code_agent_proto::agent_event::EventType;
use code_agent_proto::*;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn multi_step_tool_loop_edits_a_file() {
    let mut h = Harness::start(vec![
        MockReply::tool_call(
            "c1",
            "write",
            json!({"path": "src/hello.txt", "content": "hello world\n"}),
        ),
        MockReply::tool_call("c2", "read", json!({"path": "src/hello.txt"})),
        MockReply::tool_call(
            "c3",
            "edit",
            json!({"path": "src/hello.txt", "old_string": "world", "new_string": "engine"}),
        ),
        MockReply::text("All done.").with_usage(40, 3),
    ])
    .await;
    let s = h.session().await;
    let chunks = h.turn(&s, "create and fix hello.txt").await;

    assert_eq!(
        std::fs::read_to_string(h.ws().join("src/hello.txt")).unwrap(),
        "hello engine\n"
    );
    assert_eq!(
        kinds(&chunks),
        vec![
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "content",
            "done"
        ]
    );
    let results = results(&chunks);
    assert!(results.iter().all(|r| r.success), "{results:?}");
    assert!(
        results[1].output.contains("hello world"),
        "{:?}",
        results[1]
    );
    assert_eq!(results[2].metadata["tool_call_id"], "c3");
    assert_eq!(results[2].metadata["tool"], "edit");
    let calls: Vec<_> = chunks.iter().filter_map(|c| c.tool_call.clone()).collect();
    assert_eq!(calls[0].name, "write");
    assert_eq!(
        chunks
            .iter()
            .find(|c| c.r#type == "tool_call")
            .unwrap()
            .metadata["lane"],
        "execute"
    );
    // One usage chunk per model call, and the done chunk sums them.
    let usage: Vec<_> = chunks
        .iter()
        .filter(|c| c.metadata.get("kind").is_some_and(|k| k == "usage"))
        .collect();
    assert_eq!(usage.len(), 4);
    let last = done(&chunks);
    assert_eq!(last.finish_reason, "stop");
    assert_eq!(last.metadata["prompt_tokens"], "70");
    assert_eq!(last.metadata["completion_tokens"], "18");

    // The model saw each result before its next step.
    assert_eq!(h.mock.request_count(), 4);
    let second = request_messages(&h.mock, 1);
    let tool_msg = second.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_msg["tool_call_id"], "c1");
    assert!(request_mentions(&h.mock, 2, "hello world"));

    // History: user, 3 × (assistant + tool), final assistant.
    let history = h.messages(&s).await;
    assert_eq!(history.len(), 8);
    assert_eq!(history[0].role, "user");
    assert_eq!(history[2].role, "tool");
    let usage = h.context_usage(&s).await;
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.message_count
        ),
        (40, 3, 8)
    );
}

#[tokio::test]
async fn generate_collects_the_same_loop() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("c1", "bash", json!({"command": "echo from-bash"})),
        MockReply::text("finished"),
    ])
    .await;
    let s = h.session().await;
    let metadata = HashMap::from([("reasoning_effort".into(), "high".into())]);
    let response = h
        .client
        .generate(user_request(&s, "run it", metadata))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.finish_reason, "stop");
    assert_eq!(response.message.unwrap().content, "finished");
    assert_eq!(response.tool_calls.len(), 1);
    let result = response.tool_calls[0].result.clone().unwrap();
    assert!(result.output.contains("from-bash"), "{result:?}");
    assert_eq!(result.metadata["exit_code"], "0");
    assert_eq!(response.usage.unwrap().prompt_tokens, 20);
    assert_eq!(h.mock.requests()[0]["reasoning_effort"], "high");
}

#[tokio::test]
async fn path_escapes_are_tool_errors_and_the_loop_goes_on() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    let mut h = Harness::start(vec![
        MockReply::tool_call("c1", "read", json!({"path": "../secret.txt"})),
        MockReply::tool_call(
            "c2",
            "read",
            json!({"path": outside.path().join("secret.txt").display().to_string()}),
        ),
        MockReply::tool_call(
            "c3",
            "write",
            json!({"path": "link/evil.txt", "content": "x"}),
        ),
        MockReply::text("I could not."),
    ])
    .await;
    std::os::unix::fs::symlink(outside.path(), h.ws().join("link")).unwrap();
    let s = h.session().await;
    let chunks = h.turn(&s, "read the secret").await;
    let results = results(&chunks);
    assert_eq!(results.len(), 3);
    for r in &results {
        assert!(!r.success, "{r:?}");
        assert!(!r.output.contains("top secret"), "{r:?}");
        assert!(!r.error.is_empty());
    }
    assert!(!outside.path().join("evil.txt").exists());
    assert_eq!(done(&chunks).finish_reason, "stop");
    assert_eq!(h.mock.request_count(), 4);
}

#[tokio::test]
async fn the_todo_tool_and_set_todos_share_one_list() {
    let mut h = Harness::start(vec![
        MockReply::tool_call(
            "c1",
            "todo",
            json!({"todos": [{"id": "1", "content": "write tests", "status": "in_progress", "priority": "high"}]}),
        ),
        MockReply::text("noted"),
    ])
    .await;
    let s = h.session().await;
    h.turn(&s, "plan").await;
    let todos = h.todos(&s).await;
    assert_eq!(todos.len(), 1);
    assert_eq!(todos[0].content, "write tests");
    let set = h
        .client
        .set_todos(SetTodosRequest {
            session_id: s.clone(),
            todos: vec![Todo {
                id: "9".into(),
                content: "ship".into(),
                status: "pending".into(),
                priority: "low".into(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(set.todos[0].id, "9");
    let bad = h
        .client
        .set_todos(SetTodosRequest {
            session_id: s.clone(),
            todos: vec![Todo::default()],
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}

fn group_alive(pgid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks whether the group exists.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

#[tokio::test]
async fn cancel_kills_a_running_bash_and_its_process_group() {
    let mut h = Harness::start(vec![MockReply::tool_call(
        "c1",
        "bash",
        json!({"command": "echo $$ > pid.txt; sleep 30 & sleep 30; wait"}),
    )])
    .await;
    let s = h.session().await;
    let mut events = h.events(&s, &["TOOL_CALLED"]).await;
    let stream = h.open_stream(&s, "sleep", HashMap::new()).await;
    next_event(&mut events, EventType::ToolCalled).await;
    let pid_file = h.ws().join("pid.txt");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let pgid: i32 = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file)
            && let Ok(pid) = text.trim().parse()
        {
            break pid;
        }
        assert!(tokio::time::Instant::now() < deadline, "bash never started");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(group_alive(pgid));
    h.client
        .cancel(CancelRequest {
            session_id: s.clone(),
            operation_id: None,
        })
        .await
        .unwrap();
    let chunks = drain(stream).await;
    assert_eq!(done(&chunks).finish_reason, "cancelled");
    let results = results(&chunks);
    assert_eq!(results.len(), 1);
    assert!(!results[0].success);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while group_alive(pgid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "process group {pgid} survived"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The session is free again, and history pairs every call with a result.
    let history = h.messages(&s).await;
    assert_eq!(history.last().unwrap().role, "tool");
    h.mock.push(MockReply::text("ok"));
    assert_eq!(done(&h.turn(&s, "again").await).finish_reason, "stop");
}

#[tokio::test]
async fn steering_joins_the_running_loop_at_the_next_step() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("c1", "bash", json!({"command": "echo one"})),
        MockReply::text("did both"),
    ])
    .await;
    let s = h.session().await;
    // Nothing runs yet: steering has nothing to join and starts nothing.
    let steer = || HashMap::from([("steer".into(), "true".into())]);
    let idle = h
        .client
        .stream_generate(user_request(&s, "too early", steer()))
        .await
        .unwrap_err();
    assert_eq!(idle.code(), tonic::Code::FailedPrecondition, "{idle:?}");
    assert_eq!(h.mock.request_count(), 0);
    // The confirmation holds the loop inside its first step, deterministically.
    let policy = ConfirmationPolicy {
        require_confirm_tools: vec!["bash".into()],
        ..ask_all()
    };
    h.set_confirmation_policy(&s, policy).await;
    let mut events = h.events(&s, &["CONFIRMATION_REQUIRED"]).await;
    let first = h.open_stream(&s, "do one thing", HashMap::new()).await;
    let asked = next_event(&mut events, EventType::ConfirmationRequired).await;

    // Without steer: busy.
    let busy = h
        .client
        .stream_generate(user_request(&s, "other", HashMap::new()))
        .await
        .unwrap_err();
    assert_eq!(busy.code(), tonic::Code::FailedPrecondition);

    let steering = h.open_stream(&s, "also print two", steer()).await;
    let steered = drain(steering).await;
    assert_eq!(steered.len(), 1);
    assert_eq!(steered[0].r#type, "done");
    assert_eq!(steered[0].metadata["steered"], "true");

    h.confirm(&s, &asked.data["tool_id"], true, None).await;
    let chunks = drain(first).await;
    assert_eq!(done(&chunks).finish_reason, "stop");
    assert_eq!(h.mock.request_count(), 2, "one generation, two model calls");
    let second = request_messages(&h.mock, 1);
    let last = second.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"], "also print two");
    assert_eq!(second[second.len() - 2]["role"], "tool");
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_the_generation() {
    let mut h = Harness::start(vec![MockReply::tool_call(
        "c1",
        "bash",
        json!({"command": "echo never"}),
    )])
    .await;
    let s = h.session().await;
    h.set_confirmation_policy(&s, ask_all()).await;
    let mut events = h
        .events(&s, &["CONFIRMATION_REQUIRED", "GENERATION_COMPLETED"])
        .await;
    let stream = h.open_stream(&s, "wait for me", HashMap::new()).await;
    next_event(&mut events, EventType::ConfirmationRequired).await;
    drop(stream);
    let completed = next_event(&mut events, EventType::GenerationCompleted).await;
    assert_eq!(completed.data["finish_reason"], "cancelled");
}

#[tokio::test]
async fn the_step_limit_ends_a_generation() {
    let mut h = Harness::start_with_steps(
        vec![
            MockReply::tool_call("c1", "ls", json!({})),
            MockReply::tool_call("c2", "ls", json!({})),
            MockReply::text("never asked"),
        ],
        2,
    )
    .await;
    let s = h.session().await;
    let chunks = h.turn(&s, "loop forever").await;
    assert_eq!(done(&chunks).finish_reason, "length");
    assert_eq!(h.mock.request_count(), 2);
    assert_eq!(results(&chunks).len(), 2);
}

#[tokio::test]
async fn reasoning_streams_as_metadata_chunks() {
    use code_agent_engine::testing::MockChunk;
    let mut h = Harness::start(vec![
        MockReply::Stream(vec![
            MockChunk::Reasoning("thinking ".into()),
            MockChunk::Reasoning("hard".into()),
            MockChunk::Text("answer".into()),
            MockChunk::Finish("stop".into()),
        ]),
        MockReply::Stream(vec![
            MockChunk::Reasoning("again".into()),
            MockChunk::Text("second".into()),
            MockChunk::Finish("stop".into()),
        ]),
    ])
    .await;
    let s = h.session().await;
    let chunks = h.turn(&s, "think").await;
    let reasoning: String = chunks
        .iter()
        .filter(|c| {
            c.r#type == "metadata" && c.metadata.get("kind").is_some_and(|k| k == "reasoning")
        })
        .map(|c| c.content.as_str())
        .collect();
    assert_eq!(reasoning, "thinking hard");
    let history = h.messages(&s).await;
    assert_eq!(history[1].metadata["reasoning"], "thinking hard");
    // Reasoning is kept in the history but not resent to the model.
    let response = h
        .client
        .generate(user_request(&s, "more", HashMap::new()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.metadata["reasoning"], "again");
    assert!(!request_mentions(&h.mock, 1, "thinking hard"));
}
