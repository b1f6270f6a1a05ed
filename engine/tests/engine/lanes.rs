//! Lane handlers: EXTERNAL calls wait for CompleteExternalTask or time out.

use std::collections::HashMap;

use code_agent_engine::testing::MockReply;
use code_agent_proto::agent_event::EventType;
use code_agent_proto::*;
use serde_json::json;

use crate::common::*;

async fn external_execute_lane(h: &mut Harness, s: &str, timeout_ms: u64) {
    let r = h
        .client
        .set_lane_handler(SetLaneHandlerRequest {
            session_id: s.into(),
            lane: SessionLane::Execute as i32,
            config: Some(LaneHandlerConfig {
                mode: TaskHandlerMode::External as i32,
                timeout_ms,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.success);
}

#[tokio::test]
async fn external_lane_calls_wait_for_the_outside_result() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("b1", "bash", json!({"command": "touch made-inside"})),
        MockReply::text("thanks"),
    ])
    .await;
    let s = h.session().await;
    external_execute_lane(&mut h, &s, 60_000).await;
    let mut events = h.events(&s, &["EXTERNAL_TASK_PENDING"]).await;
    let stream = h.open_stream(&s, "touch", HashMap::new()).await;
    let pending = next_event(&mut events, EventType::ExternalTaskPending).await;
    let tasks = h
        .client
        .list_pending_external_tasks(ListPendingExternalTasksRequest {
            session_id: s.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].task_id, pending.data["task_id"]);
    assert_eq!(tasks[0].command_type, "bash");
    assert_eq!(tasks[0].lane, SessionLane::Execute as i32);
    let payload: serde_json::Value = serde_json::from_str(&tasks[0].payload).unwrap();
    assert_eq!(payload["arguments"]["command"], "touch made-inside");
    let done_task = h
        .client
        .complete_external_task(CompleteExternalTaskRequest {
            session_id: s.clone(),
            task_id: tasks[0].task_id.clone(),
            success: true,
            result: "ran outside".into(),
            error: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(done_task.success);
    let chunks = drain(stream).await;
    let r = &results(&chunks)[0];
    assert!(r.success);
    assert_eq!(r.output, "ran outside");
    assert_eq!(r.metadata["handled_by"], "external");
    assert!(!h.ws().join("made-inside").exists(), "ran inside too");
    assert!(request_mentions(&h.mock, 1, "ran outside"));
    // Query tools stay internal.
    let query = h
        .client
        .get_lane_handler(GetLaneHandlerRequest {
            session_id: s.clone(),
            lane: SessionLane::Query as i32,
        })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert_eq!(query.mode, TaskHandlerMode::Internal as i32);
}

#[tokio::test]
async fn external_tasks_time_out() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("b1", "bash", json!({"command": "true"})),
        MockReply::text("gave up"),
    ])
    .await;
    let s = h.session().await;
    external_execute_lane(&mut h, &s, 50).await;
    let chunks = h.turn(&s, "go").await;
    let r = &results(&chunks)[0];
    assert!(!r.success);
    assert!(r.error.contains("timed out"), "{r:?}");
    assert_eq!(done(&chunks).finish_reason, "stop");
    let unknown = h
        .client
        .complete_external_task(CompleteExternalTaskRequest {
            session_id: s.clone(),
            task_id: "nope".into(),
            success: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!unknown.success);
    assert!(unknown.error.contains("task_id"));
    let bad_lane = h
        .client
        .set_lane_handler(SetLaneHandlerRequest {
            session_id: s.clone(),
            lane: SessionLane::Control as i32,
            config: Some(LaneHandlerConfig::default()),
        })
        .await
        .unwrap_err();
    assert_eq!(bad_lane.code(), tonic::Code::InvalidArgument);
    assert!(bad_lane.message().starts_with("lane"));
}

#[tokio::test]
async fn hybrid_lanes_run_inside_and_tell_the_client() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("b1", "bash", json!({"command": "touch made-inside"})),
        MockReply::text("done"),
    ])
    .await;
    let s = h.session().await;
    h.client
        .set_lane_handler(SetLaneHandlerRequest {
            session_id: s.clone(),
            lane: SessionLane::Execute as i32,
            config: Some(LaneHandlerConfig {
                mode: TaskHandlerMode::Hybrid as i32,
                timeout_ms: 0,
            }),
        })
        .await
        .unwrap();
    let mut events = h
        .events(&s, &["EXTERNAL_TASK_PENDING", "EXTERNAL_TASK_COMPLETED"])
        .await;
    let chunks = h.turn(&s, "touch").await;
    assert!(results(&chunks)[0].success);
    assert!(h.ws().join("made-inside").exists());
    let pending = next_event(&mut events, EventType::ExternalTaskPending).await;
    assert_eq!(pending.data["mode"], "hybrid");
    let completed = next_event(&mut events, EventType::ExternalTaskCompleted).await;
    assert_eq!(completed.data["success"], "true");
}
