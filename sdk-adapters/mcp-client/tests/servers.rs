//! The client against the real Python MCP server on loopback: over stdio
//! (started through a thread sandbox) and over streamable HTTP with the
//! bearer token and a header the server checks.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use mcp_client::testing::{HttpServer, install_python_mcp, stdio_server};
use mcp_client::{McpError, connect};
use serde_json::json;

const T: Duration = Duration::from_secs(60);

fn site() -> Option<PathBuf> {
    match install_python_mcp() {
        Ok(site) => Some(site),
        Err(why) => {
            test_kit::skip_this_test(&format!("the Python MCP SDK cannot be installed: {why}"));
            None
        }
    }
}

#[tokio::test]
async fn stdio_server_runs_in_the_sandbox_and_answers_tools() {
    let Some(site) = site() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sdk_adapter::testing::sandbox(&dir.path().join("ws"));
    let sandbox = sandbox.get().unwrap();
    let server = stdio_server(&site, "local", &[("MCP_TEST_SECRET", "env-value-42")]);
    let client = connect(&server, Some(sandbox), T).await.unwrap();
    let tools = client.list_tools(T).await.unwrap();
    let echo = tools.iter().find(|t| t.name == "echo").expect("echo tool");
    assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");

    let r = client
        .call_tool("echo", json!({"text": "hi"}), T)
        .await
        .unwrap();
    assert_eq!(r.text, "echo:hi");
    assert!(!r.is_error);
    // The child got the server's env, and it carries the sandbox's tag
    // (so the thread's kill paths find it).
    let r = client
        .call_tool("env", json!({"name": "MCP_TEST_SECRET"}), T)
        .await
        .unwrap();
    assert_eq!(r.text, "env-value-42");
    let tag = client
        .call_tool("env", json!({"name": sdk_adapter::launcher::TAG_VAR}), T)
        .await
        .unwrap();
    assert_eq!(tag.text, sandbox.tag());

    let failed = client
        .call_tool("fail", json!({"message": "nope"}), T)
        .await
        .unwrap();
    assert!(failed.is_error, "{failed:?}");
    assert!(failed.text.contains("nope"), "{failed:?}");

    let slow = client
        .call_tool("sleep", json!({"seconds": 30}), Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(slow, McpError::Timeout { .. }), "{slow}");

    assert!(matches!(
        client.call_tool("echo", json!([1]), T).await,
        Err(McpError::Arguments(_))
    ));

    // A crash ends the connection: the next call is an error, not a hang.
    let _ = client.call_tool("crash", json!({}), T).await;
    let after = client.call_tool("echo", json!({"text": "x"}), T).await;
    assert!(after.is_err(), "{after:?}");
    client.close().await;
}

#[tokio::test]
async fn a_stdio_server_needs_a_sandbox() {
    let server = stdio_server(std::path::Path::new("/nonexistent"), "local", &[]);
    let err = connect(&server, None, T).await.unwrap_err();
    assert!(err.to_string().contains("sandbox"), "{err}");
}

#[tokio::test]
async fn a_server_that_is_not_mcp_fails_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sdk_adapter::testing::sandbox(&dir.path().join("ws"));
    let server = sdk_adapter::McpServer {
        server_id: "x".into(),
        name: "broken".into(),
        transport: sdk_adapter::McpTransport::Stdio {
            command: "sh".into(),
            args: vec!["-c".into(), "echo broken-on-purpose >&2; exit 1".into()],
            env: vec![],
        },
    };
    let err = connect(&server, Some(sandbox.get().unwrap()), T)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("MCP server broken: cannot connect"),
        "{err}"
    );
}

#[tokio::test]
async fn http_server_with_bearer_token_and_header() {
    let Some(site) = site() else { return };
    let http = HttpServer::start(&site, "bearer-secret-77", Some("hdr-secret-88"))
        .await
        .unwrap();
    let good = http.server(
        "remote",
        Some("bearer-secret-77"),
        &[("X-Test-Header", "hdr-secret-88")],
    );
    let client = connect(&good, None, T).await.unwrap();
    let r = client
        .call_tool("add", json!({"a": 2, "b": 40}), T)
        .await
        .unwrap();
    assert_eq!(r.text, "42");
    client.close().await;

    // The server checks both: a wrong token or a missing header is refused,
    // and the error never carries the secrets.
    for bad in [
        http.server(
            "remote",
            Some("wrong-token-1"),
            &[("X-Test-Header", "hdr-secret-88")],
        ),
        http.server("remote", Some("bearer-secret-77"), &[]),
    ] {
        let err = connect(&bad, None, T).await.unwrap_err().to_string();
        assert!(
            err.starts_with("MCP server remote: cannot connect"),
            "{err}"
        );
        assert!(
            !err.contains("bearer-secret-77") && !err.contains("hdr-secret-88"),
            "{err}"
        );
    }
}
