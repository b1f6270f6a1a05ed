//! The native Anthropic provider through full turns against the mock
//! Messages API (real HTTP + SSE on loopback): a 429 then a 529 retried,
//! a `tool_use` run and its `tool_result` sent back, thinking streamed as
//! reasoning, cache reads/writes in the usage, prompt caching of the system
//! prompt and tools, and the key sent only as `x-api-key`.

use std::collections::HashMap;
use std::time::Duration;

use code_agent_engine::EngineConfig;
use code_agent_engine::llm::ClientOptions;
use code_agent_engine::testing::{AnthropicReply, MockAnthropic, MockLlm};
use code_agent_proto::*;
use serde_json::json;
use tonic::Code;

use crate::common::*;

const KEY: &str = "sk-ant-test-secret";

async fn harness() -> Harness {
    let config = EngineConfig {
        client_options: ClientOptions {
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            ..ClientOptions::default()
        },
        ..EngineConfig::default()
    };
    let unused = MockLlm::start(vec![]).await;
    let (workspace, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    Harness::start_configured(unused, workspace, state, config).await
}

async fn add_anthropic(h: &mut Harness, mock: &MockAnthropic, key: &str) {
    h.client
        .add_provider(AddProviderRequest {
            provider: Some(ProviderInfo {
                name: "anthropic".into(),
                api_key: Some(key.into()),
                base_url: Some(mock.base_url()),
                models: vec![ModelInfo {
                    id: "claude-test".into(),
                    name: "claude-test".into(),
                    tool_call: true,
                    reasoning: true,
                    ..Default::default()
                }],
            }),
        })
        .await
        .unwrap();
}

fn config(h: &Harness) -> SessionConfig {
    SessionConfig {
        name: "claude".into(),
        workspace: h.ws().display().to_string(),
        llm: Some(LlmConfig {
            provider: "anthropic".into(),
            model: "claude-test".into(),
            ..Default::default()
        }),
        system_prompt: "You are terse.".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_full_turn_with_a_tool_call_thinking_and_retries() {
    let mock = MockAnthropic::start(
        vec![
            AnthropicReply::rate_limited(0),
            AnthropicReply::overloaded(),
            AnthropicReply::tool_use("toolu_1", "read", json!({"path": "notes.txt"})),
            AnthropicReply::thinking_then_text("The file greets.", "The notes say hello."),
        ],
        Some(KEY),
    )
    .await;
    let mut h = harness().await;
    std::fs::write(h.ws().join("notes.txt"), "hello from the notes\n").unwrap();
    add_anthropic(&mut h, &mock, KEY).await;
    let s = h.session_with(config(&h)).await;
    let metadata = HashMap::from([("reasoning_effort".to_string(), "high".to_string())]);
    let stream = h.open_stream(&s, "what do the notes say?", metadata).await;
    let chunks = drain(stream).await;

    // Tool call and its result.
    let results = results(&chunks);
    assert_eq!(results.len(), 1, "{chunks:?}");
    assert!(results[0].success);
    assert!(results[0].output.contains("hello from the notes"));
    // Thinking streamed as reasoning, then the answer.
    let reasoning: String = chunks
        .iter()
        .filter(|c| c.metadata.get("kind").map(String::as_str) == Some("reasoning"))
        .map(|c| c.content.clone())
        .collect();
    assert_eq!(reasoning, "The file greets.");
    let text: String = chunks
        .iter()
        .filter(|c| c.r#type == "content")
        .map(|c| c.content.clone())
        .collect();
    assert!(text.ends_with("The notes say hello."), "{text}");
    // Usage with the cache counts (20 fresh + 100 read + 10 written).
    let usage = chunks
        .iter()
        .find(|c| c.metadata.get("kind").map(String::as_str) == Some("usage"))
        .unwrap();
    assert_eq!(usage.metadata["prompt_tokens"], "130");
    assert_eq!(usage.metadata["completion_tokens"], "7");
    assert_eq!(usage.metadata["cache_read_tokens"], "100");
    assert_eq!(usage.metadata["cache_write_tokens"], "10");
    let done = done(&chunks);
    assert_eq!(done.finish_reason, "stop");
    assert_eq!(done.metadata["cache_read_tokens"], "200");

    // 429 and 529 were retried: four requests for two model calls.
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(mock.remaining(), 0);
    let first = &requests[2];
    assert_eq!(first["model"], "claude-test");
    assert_eq!(first["stream"], true);
    assert!(
        first["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("You are terse.")
    );
    assert_eq!(first["system"][0]["cache_control"]["type"], "ephemeral");
    let tools = first["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "read"));
    assert_eq!(tools.last().unwrap()["cache_control"]["type"], "ephemeral");
    assert_eq!(first["thinking"]["type"], "enabled");
    assert_eq!(first["thinking"]["budget_tokens"], 16384);
    // The second call carries the tool_use and its tool_result.
    let second = &requests[3];
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:?}");
    let tool_use = messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap();
    assert_eq!(tool_use["id"], "toolu_1");
    assert_eq!(tool_use["input"]["path"], "notes.txt");
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "toolu_1");
    assert!(
        messages[2]["content"][0]["content"]
            .as_str()
            .unwrap()
            .contains("hello from the notes")
    );
    // The key travels only as the x-api-key header.
    for request in &requests {
        assert!(!request.to_string().contains(KEY));
    }
    // The history keeps the reasoning of the answer.
    let provider = h
        .client
        .get_provider(GetProviderRequest {
            name: "anthropic".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(provider.provider.unwrap().api_key.as_deref(), Some("***"));
    h.stop().await;
}

#[tokio::test]
async fn a_wrong_key_is_unauthenticated() {
    let mock = MockAnthropic::start(vec![AnthropicReply::text("never")], Some(KEY)).await;
    let mut h = harness().await;
    add_anthropic(&mut h, &mock, "sk-ant-wrong").await;
    let s = h.session_with(config(&h)).await;
    let mut stream = h.open_stream(&s, "hi", HashMap::new()).await;
    let err = loop {
        match stream.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without the error"),
            Err(status) => break status,
        }
    };
    assert_eq!(err.code(), Code::Unauthenticated, "{}", err.message());
    assert!(err.message().contains("invalid x-api-key"));
    assert!(!err.message().contains("sk-ant-wrong"));
    assert_eq!(mock.remaining(), 1);
    h.stop().await;
}

/// `code-agent serve` with only ANTHROPIC_* in its environment: the built-in
/// `anthropic` provider is the default, a turn reaches the mock Messages
/// API, and the key appears nowhere in its logs or answers.
#[tokio::test]
async fn the_builtin_provider_comes_from_the_environment_of_code_agent_serve() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let mock =
        MockAnthropic::start(vec![AnthropicReply::text("Hello from Claude.")], Some(KEY)).await;
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_code-agent"))
        .args(["serve", "--listen", "127.0.0.1:0", "--log-level", "debug"])
        .arg("--state-dir")
        .arg(state.path())
        .arg("--workspace")
        .arg(workspace.path())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("ANTHROPIC_MODELS", "claude-env-1,claude-env-2")
        .env("AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN", "anthropic-test-token")
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("serving")
                && let Some(rest) = line.split("addr=").nth(1)
            {
                return rest.split_whitespace().next().unwrap().to_string();
            }
        }
        panic!("the server never said where it listens");
    })
    .await
    .unwrap();
    // Keep reading the log (everything it says is checked for the key).
    let log = tokio::spawn(async move {
        let mut all = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let bearer: tonic::metadata::MetadataValue<_> = "Bearer anthropic-test-token".parse().unwrap();
    let mut client =
        code_agent_proto::code_agent_service_client::CodeAgentServiceClient::with_interceptor(
            channel,
            move |mut req: tonic::Request<()>| {
                req.metadata_mut().insert("authorization", bearer.clone());
                Ok(req)
            },
        );
    let default = client
        .get_default_model(GetDefaultModelRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(default.provider.as_deref(), Some("anthropic"));
    assert_eq!(default.model.as_deref(), Some("claude-env-1"));
    let providers = client
        .list_providers(ListProvidersRequest {})
        .await
        .unwrap()
        .into_inner();
    let anthropic = providers
        .providers
        .iter()
        .find(|p| p.name == "anthropic")
        .unwrap();
    assert_eq!(anthropic.api_key.as_deref(), Some("***"));
    assert_eq!(anthropic.models.len(), 2);
    let session = client
        .create_session(CreateSessionRequest {
            session_id: None,
            config: Some(SessionConfig::default()),
            initial_context: vec![],
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let answer = client
        .generate(user_request(&session, "hi", HashMap::new()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.message.unwrap().content, "Hello from Claude.");
    assert_eq!(mock.requests()[0]["model"], "claude-env-1");

    let pid = i32::try_from(child.id().unwrap()).unwrap();
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let log = log.await.unwrap();
    assert!(log.contains("anthropic messages request"), "{log}");
    assert!(!log.contains(KEY), "the key reached the log");
}
