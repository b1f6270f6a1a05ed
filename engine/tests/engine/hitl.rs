//! Permissions and human-in-the-loop confirmations.

use std::collections::HashMap;

use code_agent_engine::testing::MockReply;
use code_agent_proto::agent_event::EventType;
use code_agent_proto::*;
use futures::StreamExt;
use serde_json::json;

use crate::common::*;

fn write_call() -> MockReply {
    MockReply::tool_call(
        "w1",
        "write",
        json!({"path": "out.txt", "content": "written"}),
    )
}

#[tokio::test]
async fn a_denied_call_is_a_tool_error_and_the_loop_continues() {
    let mut h = Harness::start(vec![
        MockReply::tool_call("b1", "bash", json!({"command": "rm -f keep.txt"})),
        MockReply::text("ok, I will not"),
    ])
    .await;
    std::fs::write(h.ws().join("keep.txt"), "keep").unwrap();
    let s = h.session().await;
    let policy = PermissionPolicy {
        deny: vec![PermissionRule {
            rule: "Bash(rm:*)".into(),
        }],
        enabled: true,
        ..Default::default()
    };
    h.set_permission_policy(&s, policy).await;
    let check = h
        .client
        .check_permission(CheckPermissionRequest {
            session_id: s.clone(),
            tool_name: "bash".into(),
            arguments: json!({"command": "rm -rf /"}).to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(check.decision, PermissionDecision::Deny as i32);
    assert_eq!(check.matching_rules, vec!["Bash(rm:*)".to_string()]);

    let mut events = h.events(&s, &["PERMISSION_DENIED"]).await;
    let chunks = h.turn(&s, "clean up").await;
    let r = &results(&chunks)[0];
    assert!(!r.success);
    assert!(r.error.contains("permission denied"), "{r:?}");
    assert!(h.ws().join("keep.txt").exists());
    assert_eq!(done(&chunks).finish_reason, "stop");
    assert!(request_mentions(&h.mock, 1, "permission denied"));
    let denied = next_event(&mut events, EventType::PermissionDenied).await;
    assert_eq!(denied.data["tool"], "bash");

    let bad = h
        .client
        .add_permission_rule(AddPermissionRuleRequest {
            session_id: s.clone(),
            rule_type: "maybe".into(),
            rule: "Bash".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("rule_type"));
}

/// Runs one `write` call that needs confirmation; `answer` acts on the
/// CONFIRMATION_REQUIRED event. Returns the tool result.
async fn confirmed_write(
    policy: ConfirmationPolicy,
    answer: Option<bool>,
) -> (Harness, ToolResult, Vec<AgentEvent>) {
    let mut h = Harness::start(vec![write_call(), MockReply::text("done")]).await;
    let s = h.session().await;
    h.set_confirmation_policy(&s, policy).await;
    let mut events = h.events(&s, &[]).await;
    let stream = h.open_stream(&s, "write it", HashMap::new()).await;
    let asked = next_event(&mut events, EventType::ConfirmationRequired).await;
    assert_eq!(asked.data["tool"], "write");
    assert_eq!(asked.data["tool_id"], "w1");
    assert!(asked.data["arguments"].contains("out.txt"));
    if let Some(approved) = answer {
        let r = h.confirm(&s, "w1", approved, Some("because")).await;
        assert!(r.success, "{r:?}");
    }
    let chunks = drain(stream).await;
    let mut seen = Vec::new();
    loop {
        let e = events.next().await.unwrap().unwrap();
        let end = e.r#type == EventType::GenerationCompleted as i32;
        seen.push(e);
        if end {
            break;
        }
    }
    (h, results(&chunks)[0].clone(), seen)
}

#[tokio::test]
async fn ask_approved_runs_the_call() {
    let (h, result, events) = confirmed_write(ask_all(), Some(true)).await;
    assert!(result.success, "{result:?}");
    assert_eq!(
        std::fs::read_to_string(h.ws().join("out.txt")).unwrap(),
        "written"
    );
    assert!(
        events
            .iter()
            .any(|e| e.r#type == EventType::ConfirmationReceived as i32)
    );
}

#[tokio::test]
async fn ask_rejected_is_a_tool_error() {
    let (h, result, _) = confirmed_write(ask_all(), Some(false)).await;
    assert!(!result.success);
    assert!(
        result.error.contains("rejected") && result.error.contains("because"),
        "{result:?}"
    );
    assert!(!h.ws().join("out.txt").exists());
    assert!(request_mentions(&h.mock, 1, "rejected"));
}

#[tokio::test]
async fn ask_timed_out_rejects_by_default() {
    let policy = ConfirmationPolicy {
        default_timeout_ms: 50,
        ..ask_all()
    };
    let (h, result, events) = confirmed_write(policy, None).await;
    assert!(!result.success);
    assert!(result.error.contains("no confirmation"), "{result:?}");
    assert!(!h.ws().join("out.txt").exists());
    let timeout = events
        .iter()
        .find(|e| e.r#type == EventType::ConfirmationTimeout as i32)
        .unwrap();
    assert_eq!(timeout.data["action"], "reject");
}

#[tokio::test]
async fn ask_timed_out_with_auto_approve_runs_the_call() {
    let policy = ConfirmationPolicy {
        default_timeout_ms: 50,
        timeout_action: TimeoutAction::AutoApprove as i32,
        ..ask_all()
    };
    let (h, result, _) = confirmed_write(policy, None).await;
    assert!(result.success, "{result:?}");
    assert!(h.ws().join("out.txt").exists());
}

#[tokio::test]
async fn permission_ask_rules_also_wait_for_confirmation() {
    let mut h = Harness::start(vec![write_call(), MockReply::text("done")]).await;
    let s = h.session().await;
    let policy = PermissionPolicy {
        ask: vec![PermissionRule {
            rule: "Write(*.txt)".into(),
        }],
        enabled: true,
        ..Default::default()
    };
    h.set_permission_policy(&s, policy).await;
    let mut events = h.events(&s, &["CONFIRMATION_REQUIRED"]).await;
    let stream = h.open_stream(&s, "write", HashMap::new()).await;
    let asked = next_event(&mut events, EventType::ConfirmationRequired).await;
    h.confirm(&s, &asked.data["tool_id"], true, None).await;
    assert!(results(&drain(stream).await)[0].success);
}

#[tokio::test]
async fn yolo_lanes_auto_approve() {
    let mut h = Harness::start(vec![write_call(), MockReply::text("done")]).await;
    let s = h.session().await;
    let policy = ConfirmationPolicy {
        yolo_lanes: vec![SessionLane::Execute as i32],
        ..ask_all()
    };
    h.set_confirmation_policy(&s, policy).await;
    let mut events = h.events(&s, &[]).await;
    let chunks = h.turn(&s, "write").await;
    assert!(results(&chunks)[0].success);
    loop {
        let e = events.next().await.unwrap().unwrap();
        assert_ne!(
            e.r#type,
            EventType::ConfirmationRequired as i32,
            "yolo lane asked"
        );
        if e.r#type == EventType::GenerationCompleted as i32 {
            break;
        }
    }
    let policy = h
        .client
        .get_confirmation_policy(GetConfirmationPolicyRequest {
            session_id: s.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .policy
        .unwrap();
    assert_eq!(policy.default_timeout_ms, 30_000);
    assert_eq!(policy.yolo_lanes, vec![SessionLane::Execute as i32]);
}
