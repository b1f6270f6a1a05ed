//! Control and lifecycle: pause/resume at a step boundary, filtered event
//! subscriptions, Initialize's env for tool processes, Shutdown.

use std::collections::HashMap;

use code_agent_engine::testing::MockReply;
use code_agent_proto::agent_event::EventType;
use code_agent_proto::*;
use futures::StreamExt;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn pause_holds_the_loop_at_a_step_boundary_until_resume() {
    let mut h = Harness::start(vec![MockReply::text("after the pause")]).await;
    let s = h.session().await;
    h.client
        .pause(PauseRequest {
            session_id: s.clone(),
        })
        .await
        .unwrap();
    let mut events = h.events(&s, &["INFO"]).await;
    let stream = h.open_stream(&s, "go", HashMap::new()).await;
    let paused = next_event(&mut events, EventType::Info).await;
    assert_eq!(paused.data["kind"], "paused");
    assert_eq!(
        h.mock.request_count(),
        0,
        "the model was called while paused"
    );
    let state = h.session_info(&s).await.state;
    assert_eq!(state, SessionState::Paused as i32);
    h.client
        .resume(ResumeRequest {
            session_id: s.clone(),
        })
        .await
        .unwrap();
    let chunks = drain(stream).await;
    assert_eq!(done(&chunks).finish_reason, "stop");
    assert_eq!(h.mock.request_count(), 1);
}

#[tokio::test]
async fn subscriptions_filter_by_session_and_type() {
    let mut h = Harness::start(vec![]).await;
    let watched = h.session().await;
    let mut events = h.events(&watched, &["session_destroyed"]).await;
    let other = h.session().await;
    h.destroy(&other).await;
    h.destroy(&watched).await;
    let first = events.next().await.unwrap().unwrap();
    assert_eq!(first.r#type, EventType::SessionDestroyed as i32);
    assert_eq!(first.session_id.as_deref(), Some(watched.as_str()));

    let err = h
        .client
        .subscribe_events(SubscribeEventsRequest {
            session_id: None,
            event_types: vec!["TOOL_CALLED".into(), "bogus".into()],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().starts_with("event_types[1]"));
}

#[tokio::test]
async fn initialize_env_reaches_tool_processes() {
    let mut h = Harness::start(vec![
        MockReply::tool_call(
            "b1",
            "bash",
            json!({"command": "echo \"cfg=$GIT_CONFIG_COUNT\""}),
        ),
        MockReply::text("ok"),
    ])
    .await;
    let r = h
        .client
        .initialize(InitializeRequest {
            workspace: h.ws().display().to_string(),
            env: HashMap::from([("GIT_CONFIG_COUNT".to_string(), "7".to_string())]),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.success);
    let s = h.session().await;
    let chunks = h.turn(&s, "show").await;
    assert!(
        results(&chunks)[0].output.contains("cfg=7"),
        "{:?}",
        results(&chunks)
    );
}

#[tokio::test]
async fn shutdown_stops_the_server() {
    let mut h = Harness::start(vec![]).await;
    h.client.shutdown(ShutdownRequest {}).await.unwrap();
    let (_mock, _ws, _state) = h.stop().await;
}
