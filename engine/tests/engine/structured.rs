//! Structured output: validated against the schema, retried once.

use code_agent_engine::testing::MockReply;
use code_agent_proto::*;
use futures::StreamExt;

use crate::common::*;

const SCHEMA: &str = r#"{"type":"object","properties":{"name":{"type":"string"},"count":{"type":"integer"}},"required":["name","count"],"additionalProperties":false}"#;

fn request(session: &str) -> GenerateStructuredRequest {
    GenerateStructuredRequest {
        session_id: session.into(),
        messages: vec![user_message("describe the repo", Default::default())],
        schema: SCHEMA.into(),
    }
}

/// A harness whose model answers `replies`, a session, and that session's
/// structured generation.
async fn generated(replies: Vec<MockReply>) -> (Harness, GenerateStructuredResponse) {
    let mut h = Harness::start(replies).await;
    let s = h.session().await;
    let response = h
        .client
        .generate_structured(request(&s))
        .await
        .unwrap()
        .into_inner();
    (h, response)
}

#[tokio::test]
async fn valid_output_is_returned_and_the_schema_is_sent() {
    let (h, r) = generated(vec![MockReply::text(r#"{"name": "engine", "count": 3}"#)]).await;
    let data: serde_json::Value = serde_json::from_str(&r.data).unwrap();
    assert_eq!(data["count"], 3);
    assert_eq!(r.metadata["attempts"], "1");
    assert!(r.usage.unwrap().prompt_tokens > 0);
    let sent = &h.mock.requests()[0];
    assert_eq!(sent["response_format"]["type"], "json_schema");
    assert!(request_mentions(
        &h.mock,
        0,
        "\"additionalProperties\":false"
    ));
}

#[tokio::test]
async fn invalid_output_is_retried_once_with_the_errors() {
    let (h, r) = generated(vec![
        MockReply::text(r#"{"name": "engine", "count": "three"}"#),
        MockReply::text(r#"{"name": "engine", "count": 3}"#),
    ])
    .await;
    assert_eq!(r.metadata["attempts"], "2");
    assert_eq!(h.mock.request_count(), 2);
    assert!(request_mentions(&h.mock, 1, "does not validate"));
    assert!(request_mentions(&h.mock, 1, "/count"));
}

#[tokio::test]
async fn invalid_twice_is_an_error() {
    let mut h = Harness::start(vec![
        MockReply::text("not json"),
        MockReply::text(r#"{"name": 1}"#),
    ])
    .await;
    let s = h.session().await;
    let err = h.client.generate_structured(request(&s)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Internal);
    assert!(
        err.message().contains("did not validate"),
        "{}",
        err.message()
    );
    // A bad schema is the caller's error, before any model call.
    let mut bad = request(&s);
    bad.schema = "{".into();
    let err = h.client.generate_structured(bad).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().starts_with("schema"));
    assert_eq!(h.mock.request_count(), 2);
}

#[tokio::test]
async fn streamed_structured_output_ends_with_the_document() {
    let mut h = Harness::start(vec![MockReply::text(r#"{"name": "engine", "count": 7}"#)]).await;
    let s = h.session().await;
    let mut stream = h
        .client
        .stream_generate_structured(request(&s))
        .await
        .unwrap()
        .into_inner();
    let mut chunks = Vec::new();
    while let Some(c) = stream.next().await {
        chunks.push(c.unwrap());
    }
    let last = chunks.pop().unwrap();
    assert!(last.done);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&last.data).unwrap()["count"],
        7
    );
    assert!(!chunks.is_empty() && chunks.iter().all(|c| !c.done));
    let partial: String = chunks.iter().map(|c| c.data.as_str()).collect();
    assert_eq!(partial, r#"{"name": "engine", "count": 7}"#);
}
