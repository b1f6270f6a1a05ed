//! Context: compaction through the model, auto-compaction, clearing.

use code_agent_engine::testing::MockReply;
use code_agent_proto::*;

use crate::common::*;

const SUMMARY_MARK: &str = "You compact the history";

#[tokio::test]
async fn compaction_summarises_older_turns_through_the_model() {
    let mut h = Harness::start(vec![
        MockReply::text("answer one"),
        MockReply::text("answer two"),
        MockReply::text("answer three").with_usage(500, 20),
        MockReply::text("SUMMARY: the user asked three things").with_usage(100, 10),
    ])
    .await;
    let s = h.session().await;
    // A long first turn, so that its summary is smaller than it was.
    let long_question = format!("question one {}", "details ".repeat(500));
    for q in [long_question.as_str(), "question two", "question three"] {
        h.turn(&s, q).await;
    }
    let r = h
        .client
        .compact_context(CompactContextRequest {
            session_id: s.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.success);
    let (before, after) = (r.before.unwrap(), r.after.unwrap());
    assert_eq!(before.message_count, 6);
    assert_eq!(after.message_count, 5, "summary + the last two turns");
    assert_eq!(before.total_tokens, 520);
    assert!(after.total_tokens < before.total_tokens);

    let summary_request = request_messages(&h.mock, 3);
    assert!(
        summary_request[0]["content"]
            .as_str()
            .unwrap()
            .contains(SUMMARY_MARK)
    );
    assert!(request_mentions(&h.mock, 3, "question one"));
    assert!(request_mentions(&h.mock, 3, "answer one"));
    assert!(!request_mentions(&h.mock, 3, "question three"));
    assert!(
        h.mock.requests()[3]
            .get("tools")
            .is_none_or(|t| t.as_array().is_none_or(|a| a.is_empty()))
    );

    let history = h.messages(&s).await;
    let first = match &history[0].content[0].block {
        Some(content_block::Block::Text(t)) => t.text.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        first.contains("SUMMARY: the user asked three things"),
        "{first}"
    );
    assert_eq!(history[1].role, "user");

    h.client
        .clear_context(ClearContextRequest {
            session_id: s.clone(),
        })
        .await
        .unwrap();
    let usage = h.context_usage(&s).await;
    assert_eq!((usage.message_count, usage.total_tokens), (0, 0));
}

#[tokio::test]
async fn auto_compact_runs_when_the_context_nears_its_limit() {
    let mut h = Harness::start(vec![
        MockReply::text("a1").with_usage(20, 1),
        MockReply::text("a2").with_usage(95, 1),
        MockReply::text("the summary").with_usage(30, 5),
        MockReply::text("a3").with_usage(40, 1),
    ])
    .await;
    let mut config = h.config(StorageType::Memory);
    config.max_context_length = 100;
    config.auto_compact = true;
    let s = h.session_with(config).await;
    h.turn(&s, "q1").await;
    h.turn(&s, "q2").await;
    assert_eq!(
        h.mock.request_count(),
        2,
        "20 tokens of 100: no compaction yet"
    );
    h.turn(&s, "q3").await;
    assert_eq!(h.mock.request_count(), 4);
    assert!(
        request_messages(&h.mock, 2)[0]["content"]
            .as_str()
            .unwrap()
            .contains(SUMMARY_MARK)
    );
    assert!(request_mentions(&h.mock, 2, "q1"));
    assert!(request_mentions(&h.mock, 3, "the summary"));
    assert!(!request_mentions(&h.mock, 3, "a1"));
    assert!(request_mentions(&h.mock, 3, "q3"));
}
