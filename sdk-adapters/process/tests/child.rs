//! `JsonChild` against small `sh` children: routing of responses and other
//! lines, malformed input, exit reasons, timeouts, and killing the whole
//! process tree. Timings are only bounded generously from above.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use sdk_adapter::testing::{PATIENCE, shared_sandbox, wait_dead};
use sdk_process::{ChildError, ChildSpec, JsonChild, ResponseKey};
use serde_json::{Value, json};

/// Lines with an `"id"` and no `"method"` are responses, keyed by the id.
fn by_id() -> ResponseKey {
    Arc::new(|v: &Value| {
        if v.get("method").is_some() {
            return None;
        }
        v.get("id").map(|id| id.to_string())
    })
}

fn sh(script: &str) -> ChildSpec {
    ChildSpec::new("test child", "sh").arg("-c").arg(script)
}

#[tokio::test]
async fn responses_go_to_their_request_and_the_rest_in_order() {
    // Echoes a notification, junk, then the response for each request line.
    let script = r#"
        while read -r line; do
            echo '{"method":"note","params":{"n":1}}'
            echo 'this is not json'
            echo '{"method":"note","params":{"n":2}}'
            echo "{\"id\":7,\"result\":$line}"
        done
    "#;
    let (child, mut inbound) = JsonChild::spawn(sh(script), &shared_sandbox(), by_id()).unwrap();
    let response = child
        .request("7".into(), &json!({"x": 1}), PATIENCE)
        .await
        .unwrap();
    assert_eq!(response, json!({"id": 7, "result": {"x": 1}}));
    let first = inbound.recv().await.unwrap();
    let second = inbound.recv().await.unwrap();
    assert_eq!(first["params"]["n"], 1);
    assert_eq!(second["params"]["n"], 2);
}

#[tokio::test]
async fn an_exit_fails_waiting_requests_with_status_and_stderr() {
    let script = "read -r line; echo 'boom: no credentials' >&2; exit 3";
    let (child, mut inbound) = JsonChild::spawn(sh(script), &shared_sandbox(), by_id()).unwrap();
    let err = child
        .request("1".into(), &json!({"id": 1}), PATIENCE)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ChildError::Exited { .. }), "{text}");
    assert!(text.contains("exit status 3"), "{text}");
    assert!(text.contains("boom: no credentials"), "{text}");
    assert_eq!(
        tokio::time::timeout(PATIENCE, inbound.recv())
            .await
            .unwrap(),
        None
    );
    assert!(child.is_gone());
    assert!(child.exit_reason().unwrap().contains("exit status 3"));
    // Later requests fail at once.
    let err = child
        .request("2".into(), &json!({}), PATIENCE)
        .await
        .unwrap_err();
    assert!(matches!(err, ChildError::Exited { .. }), "{err}");
}

#[tokio::test]
async fn an_unanswered_request_times_out() {
    let (child, _inbound) =
        JsonChild::spawn(sh("cat >/dev/null"), &shared_sandbox(), by_id()).unwrap();
    let err = child
        .request("1".into(), &json!({}), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, ChildError::Timeout { .. }), "{err}");
}

#[tokio::test]
async fn kill_takes_the_whole_tree() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!(
        "sleep 300 & echo $! > {p}; sleep 300 & echo $! >> {p}; wait",
        p = pids.display()
    );
    let (child, _inbound) = JsonChild::spawn(sh(&script), &shared_sandbox(), by_id()).unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let grandchildren: Vec<i32> = loop {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        if text.lines().count() == 2 && text.ends_with('\n') {
            break text.lines().map(|l| l.parse().unwrap()).collect();
        }
        assert!(tokio::time::Instant::now() < deadline, "no pids");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let leader = child.pid() as i32;
    let handle = child.handle();
    handle.kill();
    // Unusable at once, before its output even drains.
    assert!(handle.is_gone());
    drop(child);
    wait_dead(leader).await;
    for pid in grandchildren {
        wait_dead(pid).await;
    }
}

#[tokio::test]
async fn a_missing_program_is_not_found() {
    let err = JsonChild::spawn(
        ChildSpec::new("x", "surely-no-such-agent-cli"),
        &shared_sandbox(),
        by_id(),
    )
    .unwrap_err();
    assert!(matches!(err, ChildError::NotFound { .. }), "{err}");
    let err = JsonChild::spawn(
        sh("true").cwd("/nonexistent/dir"),
        &shared_sandbox(),
        by_id(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test]
async fn shutdown_closes_stdin_and_the_child_goes() {
    let (child, mut inbound) = JsonChild::spawn(
        sh("cat >/dev/null; echo '{\"bye\":1}'"),
        &shared_sandbox(),
        by_id(),
    )
    .unwrap();
    let handle = child.handle();
    tokio::time::timeout(PATIENCE, child.shutdown(PATIENCE))
        .await
        .unwrap();
    assert!(handle.is_gone());
    assert_eq!(inbound.recv().await.unwrap(), json!({"bye": 1}));
    assert!(handle.exit_reason().unwrap().contains("exit status 0"));
}
