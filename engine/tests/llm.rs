//! The OpenAI-compatible client against the mock server on loopback: real
//! HTTP and SSE, tool calls split across chunks, usage, errors and retries,
//! timeouts and cancellation.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use code_agent_engine::llm::{
    ChatMessage, ChatModel, ChatRequest, ClientOptions, EventStream, LlmError, OpenAiClient,
    StreamEvent, ToolSpec, Usage,
};
use code_agent_engine::testing::{MockChunk, MockLlm, MockReply};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Fast retries; generous timeouts (only the timeout tests shorten them).
fn options() -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        max_retries: 3,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        ..ClientOptions::default()
    }
}

fn client(mock: &MockLlm, options: ClientOptions) -> OpenAiClient {
    OpenAiClient::new(&mock.base_url(), Some("sk-test-key".into()), options).expect("client")
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "mock-model".into(),
        messages: vec![ChatMessage::system("be brief"), ChatMessage::user("hi")],
        ..ChatRequest::default()
    }
}

async fn collect(stream: EventStream) -> Vec<Result<StreamEvent, LlmError>> {
    stream.collect().await
}

async fn run(client: &OpenAiClient, request: ChatRequest) -> Result<Vec<StreamEvent>, LlmError> {
    let stream = client.stream(request, CancellationToken::new()).await?;
    collect(stream).await.into_iter().collect()
}

/// The default request to `mock` through a client with `options`.
async fn run_on(mock: &MockLlm, options: ClientOptions) -> Result<Vec<StreamEvent>, LlmError> {
    run(&client(mock, options), request()).await
}

/// Every item of the default request's stream from `mock`, errors
/// included; the request itself must be answered.
async fn stream_items(
    mock: &MockLlm,
    options: ClientOptions,
) -> Vec<Result<StreamEvent, LlmError>> {
    let stream = client(mock, options)
        .stream(request(), CancellationToken::new())
        .await
        .expect("headers");
    collect(stream).await
}

/// A mock scripted with `replies` answering the default request: the
/// answer's text and how many requests the mock saw.
async fn answer_after(replies: Vec<MockReply>) -> (String, usize) {
    let mock = MockLlm::start(replies).await;
    let events = run_on(&mock, options()).await.expect("answered");
    (finished(&events).0.content.clone(), mock.request_count())
}

fn finished(events: &[StreamEvent]) -> (&ChatMessage, &str, Option<Usage>) {
    match events.last() {
        Some(StreamEvent::Finished {
            message,
            finish_reason,
            usage,
        }) => (message, finish_reason, *usage),
        other => panic!("last event is not Finished: {other:?}"),
    }
}

#[tokio::test]
async fn streams_text_reasoning_and_usage() {
    let mock = MockLlm::start(vec![MockReply::Stream(vec![
        MockChunk::Reasoning("think ".into()),
        MockChunk::Reasoning("more".into()),
        MockChunk::Text("Hel".into()),
        MockChunk::Text("lo".into()),
        MockChunk::Finish("stop".into()),
        MockChunk::Usage {
            prompt: 12,
            completion: 3,
        },
    ])])
    .await;
    let mut req = request();
    req.tools.push(ToolSpec {
        name: "read".into(),
        description: "read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    });
    req.reasoning_effort = Some("low".into());
    let events = run(&client(&mock, options()), req).await.expect("stream");

    assert_eq!(
        events[..4],
        [
            StreamEvent::ReasoningDelta("think ".into()),
            StreamEvent::ReasoningDelta("more".into()),
            StreamEvent::ContentDelta("Hel".into()),
            StreamEvent::ContentDelta("lo".into()),
        ]
    );
    let (message, reason, usage) = finished(&events);
    assert_eq!(message.content, "Hello");
    assert_eq!(message.reasoning.as_deref(), Some("think more"));
    assert!(message.tool_calls.is_empty());
    assert_eq!(reason, "stop");
    assert_eq!(
        usage,
        Some(Usage {
            prompt_tokens: 12,
            completion_tokens: 3,
            total_tokens: 15,
            ..Usage::default()
        })
    );

    let sent = mock.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["model"], "mock-model");
    assert_eq!(sent[0]["stream"], true);
    assert_eq!(sent[0]["stream_options"]["include_usage"], true);
    assert_eq!(sent[0]["reasoning_effort"], "low");
    assert_eq!(
        sent[0]["messages"][1],
        json!({"role": "user", "content": "hi"})
    );
    assert_eq!(sent[0]["tools"][0]["function"]["name"], "read");
}

#[tokio::test]
async fn reasoning_field_variant_is_understood() {
    let delta = |d: Value| json!({"choices": [{"index": 0, "delta": d, "finish_reason": null}]});
    let mock = MockLlm::start(vec![MockReply::Stream(vec![
        MockChunk::Raw(delta(json!({"reasoning": "via openrouter"}))),
        MockChunk::Text("ok".into()),
        MockChunk::Finish("stop".into()),
    ])])
    .await;
    let events = run_on(&mock, options()).await.expect("stream");
    assert_eq!(
        events[0],
        StreamEvent::ReasoningDelta("via openrouter".into())
    );
    let (message, _, usage) = finished(&events);
    assert_eq!(message.reasoning.as_deref(), Some("via openrouter"));
    assert_eq!(usage, None, "no usage chunk was sent");
}

#[tokio::test]
async fn tool_call_split_across_chunks_is_assembled() {
    let args = json!({"path": "src/main.rs", "content": "fn main() { println!(\"hé\"); }"});
    let mock = MockLlm::start(vec![MockReply::tool_call("call_1", "write", args.clone())]).await;
    let events = run_on(&mock, options()).await.expect("stream");
    assert_eq!(
        events[0],
        StreamEvent::ToolCallStarted {
            index: 0,
            id: "call_1".into(),
            name: "write".into()
        }
    );
    let (message, reason, usage) = finished(&events);
    assert_eq!(reason, "tool_calls");
    assert_eq!(message.tool_calls.len(), 1);
    let call = &message.tool_calls[0];
    assert_eq!((call.id.as_str(), call.name.as_str()), ("call_1", "write"));
    let parsed: Value = serde_json::from_str(&call.arguments).expect("arguments are JSON");
    assert_eq!(parsed, args);
    assert!(usage.is_some());
}

#[tokio::test]
async fn parallel_tool_calls_interleaved_are_assembled_by_index() {
    let chunk = |calls: Value| {
        MockChunk::Raw(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": null}]}),
        )
    };
    let mock = MockLlm::start(vec![MockReply::Stream(vec![
        chunk(json!([{"index": 1, "id": "call_b", "type": "function", "function": {"name": "ls", "arguments": ""}}])),
        chunk(json!([{"index": 0, "id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{\"pa"}}])),
        chunk(json!([{"index": 1, "function": {"arguments": "{\"path\":"}}])),
        chunk(json!([{"index": 0, "function": {"arguments": "th\":\"a.txt\"}"}}])),
        chunk(json!([{"index": 1, "function": {"arguments": "\".\"}"}}])),
        MockChunk::Finish("tool_calls".into()),
        MockChunk::Usage {
            prompt: 1,
            completion: 1,
        },
    ])])
    .await;
    let events = run_on(&mock, options()).await.expect("stream");
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallStarted { index, id, name } => {
                Some((*index, id.as_str(), name.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(started, [(1, "call_b", "ls"), (0, "call_a", "read")]);
    let (message, _, _) = finished(&events);
    let calls: Vec<_> = message
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_a", "read", r#"{"path":"a.txt"}"#),
            ("call_b", "ls", r#"{"path":"."}"#)
        ]
    );
}

#[tokio::test]
async fn wrong_key_is_unauthorized_without_retry_and_right_key_works() {
    let mock = MockLlm::start_with_api_key(vec![MockReply::text("welcome")], "sk-right").await;
    let wrong =
        OpenAiClient::new(&mock.base_url(), Some("sk-wrong".into()), options()).expect("client");
    let err = run(&wrong, request()).await.expect_err("401");
    assert!(matches!(err, LlmError::Unauthorized(_)), "{err:?}");
    assert!(!err.to_string().contains("sk-wrong"), "{err}");
    assert_eq!(mock.request_count(), 1, "401 is not retried");
    assert_eq!(
        tonic::Status::from(err).code(),
        tonic::Code::Unauthenticated
    );

    let none = OpenAiClient::new(&mock.base_url(), None, options()).expect("client");
    assert!(matches!(
        run(&none, request()).await,
        Err(LlmError::Unauthorized(_))
    ));

    let right =
        OpenAiClient::new(&mock.base_url(), Some("sk-right".into()), options()).expect("client");
    let events = run(&right, request()).await.expect("authorized");
    assert_eq!(finished(&events).0.content, "welcome");
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_retried_then_succeeds() {
    let (answer, requests) = answer_after(vec![
        MockReply::rate_limited(1),
        MockReply::text("after wait"),
    ])
    .await;
    assert_eq!(answer, "after wait");
    assert_eq!(requests, 2);
}

#[tokio::test]
async fn retry_after_longer_than_allowed_is_returned_at_once() {
    let mock = MockLlm::start(vec![
        MockReply::rate_limited(3600),
        MockReply::text("never"),
    ])
    .await;
    let err = run_on(&mock, options()).await.expect_err("429");
    match &err {
        LlmError::RateLimited {
            retry_after,
            message,
        } => {
            assert_eq!(*retry_after, Some(Duration::from_secs(3600)));
            assert!(message.contains("rate limited"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(mock.request_count(), 1);
    assert_eq!(
        tonic::Status::from(err).code(),
        tonic::Code::ResourceExhausted
    );
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff() {
    let (answer, requests) = answer_after(vec![
        MockReply::error(500, "boom"),
        MockReply::error(503, "busy"),
        MockReply::text("third time"),
    ])
    .await;
    assert_eq!(answer, "third time");
    assert_eq!(requests, 3);
}

#[tokio::test]
async fn exhausted_retries_return_the_last_error() {
    let mock = MockLlm::start(vec![
        MockReply::error(500, "one"),
        MockReply::error(502, "two"),
        MockReply::error(503, "three"),
        MockReply::text("not reached"),
    ])
    .await;
    let opts = ClientOptions {
        max_retries: 2,
        ..options()
    };
    let err = run_on(&mock, opts).await.expect_err("exhausted");
    assert_eq!(
        err,
        LlmError::Server {
            status: 503,
            message: "three".into()
        }
    );
    assert_eq!(mock.request_count(), 3, "one attempt and two retries");
    assert_eq!(mock.remaining(), 1);
    assert_eq!(tonic::Status::from(err).code(), tonic::Code::Unavailable);
}

#[tokio::test]
async fn unscripted_request_gets_the_mock_500() {
    let mock = MockLlm::start(vec![]).await;
    let opts = ClientOptions {
        max_retries: 0,
        ..options()
    };
    let err = run_on(&mock, opts).await.expect_err("500");
    match err {
        LlmError::Server { status, message } => {
            assert_eq!(status, 500);
            assert!(message.contains("mock: no scripted reply"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn bad_request_is_not_retried() {
    let mock = MockLlm::start(vec![
        MockReply::error(400, "unknown model"),
        MockReply::text("x"),
    ])
    .await;
    let err = run_on(&mock, options()).await.expect_err("400");
    assert_eq!(
        err,
        LlmError::BadRequest {
            status: 400,
            message: "unknown model".into()
        }
    );
    assert_eq!(mock.request_count(), 1);
    assert_eq!(
        tonic::Status::from(err).code(),
        tonic::Code::InvalidArgument
    );
}

#[tokio::test]
async fn connect_errors_are_retried_then_reported() {
    // A port nothing listens on: bind, note the port, close.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let opts = ClientOptions {
        max_retries: 2,
        ..options()
    };
    let client =
        OpenAiClient::new(&format!("http://127.0.0.1:{port}/v1"), None, opts).expect("client");
    let err = run(&client, request()).await.expect_err("refused");
    assert!(matches!(err, LlmError::Transport(_)), "{err:?}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let mock = MockLlm::start(vec![MockReply::Hang, MockReply::text("not reached")]).await;
    let opts = ClientOptions {
        request_timeout: Duration::from_millis(300),
        ..options()
    };
    let err = run_on(&mock, opts).await.expect_err("timeout");
    assert_eq!(err, LlmError::Timeout);
    assert_eq!(mock.request_count(), 1, "timeouts are not retried");
    assert_eq!(
        tonic::Status::from(err).code(),
        tonic::Code::DeadlineExceeded
    );
}

#[tokio::test]
async fn a_stalled_stream_hits_the_idle_timeout() {
    let mock = MockLlm::start(vec![MockReply::Stream(vec![
        MockChunk::Text("partial".into()),
        MockChunk::Delay(Duration::from_secs(60)),
        MockChunk::Text("never".into()),
    ])])
    .await;
    let opts = ClientOptions {
        idle_timeout: Duration::from_millis(300),
        ..options()
    };
    let items = stream_items(&mock, opts).await;
    assert_eq!(
        items,
        vec![
            Ok(StreamEvent::ContentDelta("partial".into())),
            Err(LlmError::Timeout)
        ]
    );
}

#[tokio::test]
async fn cancel_before_the_answer() {
    let mock = MockLlm::start(vec![MockReply::Hang]).await;
    let client = client(&mock, options());
    let cancel = CancellationToken::new();
    let call = {
        let cancel = cancel.clone();
        tokio::spawn(async move { client.stream(request(), cancel).await.map(|_| ()) })
    };
    while mock.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cancel.cancel();
    let result = call.await.expect("join");
    assert_eq!(result, Err(LlmError::Cancelled));
}

#[tokio::test]
async fn cancel_mid_stream_ends_it_and_drops_the_connection() {
    let mock = MockLlm::start(vec![MockReply::Stream(vec![
        MockChunk::Text("first".into()),
        MockChunk::Delay(Duration::from_millis(500)),
        MockChunk::Text("second".into()),
        MockChunk::Delay(Duration::from_millis(500)),
        MockChunk::Text("third".into()),
        MockChunk::Finish("stop".into()),
    ])])
    .await;
    let cancel = CancellationToken::new();
    let mut stream = client(&mock, options())
        .stream(request(), cancel.clone())
        .await
        .expect("stream");
    assert_eq!(
        stream.next().await,
        Some(Ok(StreamEvent::ContentDelta("first".into())))
    );
    cancel.cancel();
    assert_eq!(stream.next().await, Some(Err(LlmError::Cancelled)));
    assert_eq!(stream.next().await, None);
    // The server sees its response abandoned (at its next write at the latest).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while mock.dropped_streams() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the mock never saw the stream dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_connection_broken_mid_stream_is_an_error_item() {
    let mock = MockLlm::start(vec![
        MockReply::Stream(vec![MockChunk::Text("half".into()), MockChunk::Abort]),
        MockReply::text("not reached"),
    ])
    .await;
    let items = stream_items(&mock, options()).await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0], Ok(StreamEvent::ContentDelta("half".into())));
    assert!(matches!(items[1], Err(LlmError::Transport(_))), "{items:?}");
    assert_eq!(mock.request_count(), 1, "no retry once events flowed");
}

#[tokio::test]
async fn an_error_inside_the_stream_is_an_error_item() {
    let mock = MockLlm::start(vec![MockReply::Stream(vec![
        MockChunk::Text("so far".into()),
        MockChunk::Raw(json!({"error": {"message": "upstream overloaded", "code": 503}})),
    ])])
    .await;
    let items = stream_items(&mock, options()).await;
    assert_eq!(
        items.last(),
        Some(&Err(LlmError::Server {
            status: 503,
            message: "upstream overloaded".into()
        }))
    );
}

#[tokio::test]
async fn a_non_streaming_json_answer_is_replayed_as_events() {
    let mock = MockLlm::start(vec![MockReply::Json(json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "let me look",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}
            ]
        }}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    }))])
    .await;
    let events = run_on(&mock, options()).await.expect("json");
    assert_eq!(events[0], StreamEvent::ContentDelta("let me look".into()));
    let (message, reason, usage) = finished(&events);
    assert_eq!(reason, "tool_calls");
    let names: Vec<_> = message.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["ls", "read"]);
    assert_eq!(usage.map(|u| u.total_tokens), Some(10));
}

#[tokio::test]
async fn garbage_in_the_stream_is_a_protocol_error() {
    let mock = MockLlm::start(vec![MockReply::Stream(vec![MockChunk::Raw(json!(
        "not a chunk"
    ))])])
    .await;
    let items = stream_items(&mock, options()).await;
    assert!(
        matches!(items.last(), Some(Err(LlmError::Protocol(_)))),
        "{items:?}"
    );
}

#[test]
fn the_api_key_never_shows_in_debug_output() {
    let client = OpenAiClient::new(
        "http://127.0.0.1:9/v1",
        Some("sk-super-secret-123".into()),
        ClientOptions::default(),
    )
    .expect("client");
    let debug = format!("{client:?} {client:#?}");
    assert!(!debug.contains("sk-super-secret-123"), "{debug}");
    assert!(debug.contains("redacted"), "{debug}");
    assert!(debug.contains("127.0.0.1:9"), "{debug}");
}
