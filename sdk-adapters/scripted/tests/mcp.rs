//! The scripted `mcp` step against the real Python MCP server (the official
//! SDK from PyPI, installed into target/ by `mcp_client::testing`): the
//! tool is really called and its result, or its error, is the
//! `McpToolCall` item's text.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use mcp_client::testing::{HttpServer, install_python_mcp, stdio_server};
use sdk_adapter::testing::{rest, thread_spec};
use sdk_adapter::{ItemKind, ItemStatus, SdkAdapter, TurnEvent, TurnOutcome};
use sdk_scripted::ScriptedAdapter;

/// The COMPLETED `McpToolCall` items' texts, and how the turn ended.
async fn run(spec: &sdk_adapter::ThreadSpec, script: &str) -> (Vec<String>, TurnEvent) {
    let adapter = ScriptedAdapter::new();
    adapter.create_thread(spec).await.unwrap();
    let mut turn = sdk_adapter::testing::start(&adapter, spec, script).await;
    let events = rest(&mut turn).await;
    let texts = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Item(item)
                if item.kind == ItemKind::McpToolCall && item.status == ItemStatus::Completed =>
            {
                item.text.clone()
            }
            _ => None,
        })
        .collect();
    (texts, events.last().unwrap().clone())
}

#[tokio::test]
async fn mcp_steps_call_stdio_and_http_servers() {
    let site = match install_python_mcp() {
        Ok(site) => site,
        Err(why) => {
            test_kit::skip_this_test(&format!("the Python MCP SDK cannot be installed: {why}"));
            return;
        }
    };
    let http = HttpServer::start(&site, "bearer-secret-5", None)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut spec = thread_spec(dir.path(), "scripted-fast");
    spec.mcp_servers = Arc::from(vec![
        stdio_server(&site, "local", &[("GREETING", "hello-env")]),
        http.server("remote", Some("bearer-secret-5"), &[]),
    ]);
    let (texts, last) = run(
        &spec,
        "mcp local echo {\"text\": \"hi\"}\n\
         mcp local env {\"name\": \"GREETING\"}\n\
         mcp remote add {\"a\": 1, \"b\": 2}\n\
         mcp local fail {\"message\": \"broken tool\"}\n\
         mcp nowhere echo {}\n\
         say after",
    )
    .await;
    assert_eq!(last, TurnEvent::Finished(TurnOutcome::Completed));
    assert_eq!(texts[0], "local/echo {\"text\":\"hi\"}\necho:hi");
    assert_eq!(texts[1], "local/env {\"name\":\"GREETING\"}\nhello-env");
    assert_eq!(texts[2], "remote/add {\"a\":1,\"b\":2}\n3");
    assert!(
        texts[3].starts_with("local/fail {\"message\":\"broken tool\"}\nerror: ")
            && texts[3].contains("broken tool"),
        "{}",
        texts[3]
    );
    assert!(
        texts[4].contains("no MCP server named \"nowhere\"") && texts[4].contains("restart"),
        "{}",
        texts[4]
    );
    assert_eq!(texts.len(), 5);
}

#[tokio::test]
async fn a_thread_without_servers_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let spec = thread_spec(dir.path(), "scripted-fast");
    let (texts, last) = run(&spec, "mcp docs search").await;
    assert_eq!(last, TurnEvent::Finished(TurnOutcome::Completed));
    assert_eq!(texts.len(), 1);
    assert!(
        texts[0].starts_with("docs/search {}\nerror: no MCP server named \"docs\""),
        "{}",
        texts[0]
    );
}
