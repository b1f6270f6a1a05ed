//! The adapter's own engine (the default: `CodeAgentAdapter::new` starts it
//! in-process), sessions across a restart, per-turn model overrides, and an
//! unreachable remote engine.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_engine::{Engine, EngineConfig};
use sdk_adapter::testing::{input, outcome, rest, texts};
use sdk_adapter::{ItemKind, SdkAdapter, SdkError, SdkStatus, TurnInput, TurnOutcome};
use sdk_code_agent::{CodeAgentAdapter, CodeAgentConfig, in_memory_client};

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_engine_keeps_sessions_across_a_restart() {
    let mock = MockLlm::start(vec![
        MockReply::text("Noted."),
        MockReply::text("It was pineapple."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("code-agent");
    {
        // Configure the provider once; it persists in the state dir.
        let engine = Engine::start(EngineConfig {
            state_dir: Some(state_dir.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
        let mut admin = in_memory_client(engine.grpc_service());
        configure(&mut admin.client, &mock).await;
    }
    let config = CodeAgentConfig {
        state_dir: Some(state_dir.clone()),
        ..Default::default()
    };
    let spec = spec_in(dir.path(), "thr-restart");
    let sdk_thread_id = {
        let adapter = CodeAgentAdapter::new(config.clone());
        let d = adapter.describe().await;
        assert_eq!(d.status, SdkStatus::Ready, "{d:?}");
        let handle = adapter.create_thread(&spec).await.unwrap();
        let mut turn = adapter
            .start_turn(&spec, input(&spec, "remember the word pineapple"))
            .await
            .unwrap();
        let events = rest(&mut turn).await;
        assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
        handle.sdk_thread_id
    };
    // A new adapter (a restarted runner) re-opens the thread.
    let adapter = CodeAgentAdapter::new(config);
    let mut reopened = spec.clone();
    reopened.sdk_thread_id = Some(sdk_thread_id.clone());
    let handle = adapter.create_thread(&reopened).await.unwrap();
    assert_eq!(handle.sdk_thread_id, sdk_thread_id);
    let mut turn = adapter
        .start_turn(&reopened, input(&reopened, "which word?"))
        .await
        .unwrap();
    let events = rest(&mut turn).await;
    assert_eq!(
        texts(&events, ItemKind::AgentMessage),
        ["It was pineapple."]
    );
    let second = mock.requests()[1]["messages"].to_string();
    assert!(second.contains("remember the word pineapple"), "{second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_override_lasts_one_turn() {
    let h = harness(
        Mode::InProcess,
        vec![
            MockReply::text("one"),
            MockReply::text("two"),
            MockReply::text("three"),
        ],
    )
    .await;
    let spec = h.thread(h.spec("thr-model")).await;
    for (model, level) in [
        (None, None),
        (Some(REASONING_MODEL), Some("low")),
        (None, None),
    ] {
        let mut turn = h
            .adapter
            .start_turn(
                &spec,
                TurnInput {
                    text: "hi".into(),
                    model: model.unwrap_or(&spec.model).to_owned(),
                    reasoning_level: level.map(str::to_owned),
                },
            )
            .await
            .unwrap();
        let events = rest(&mut turn).await;
        assert_eq!(outcome(&events), TurnOutcome::Completed, "{events:#?}");
    }
    let requests = h.mock.requests();
    let models: Vec<&str> = requests
        .iter()
        .map(|r| r["model"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(models, [MODEL, REASONING_MODEL, MODEL]);
    assert_eq!(requests[1]["reasoning_effort"], "low");
    assert!(
        requests[2]
            .get("reasoning_effort")
            .is_none_or(|e| e.is_null())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_remote_engine_is_unconfigured_and_refuses_threads() {
    // A port that was free a moment ago: nothing listens there.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let adapter = CodeAgentAdapter::new(CodeAgentConfig {
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        ..Default::default()
    });
    let d = adapter.describe().await;
    assert_eq!(d.status, SdkStatus::Unconfigured, "{d:?}");
    assert!(d.error_message.is_some_and(|m| !m.is_empty()));
    let dir = tempfile::tempdir().unwrap();
    let err = adapter
        .create_thread(&spec_in(dir.path(), "thr-x"))
        .await
        .unwrap_err();
    assert!(matches!(err, SdkError::Unavailable(_)), "{err:?}");
}
