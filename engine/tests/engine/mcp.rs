//! The engine's MCP against the real Python MCP server (the
//! official SDK from PyPI, pip-installed into target/ by
//! `mcp_client::testing`; skipped, saying so, only when it cannot be
//! installed): the five RPCs, session scoping through request metadata,
//! the tools in the agent loop as `mcp__<server>__<tool>` (called by the
//! mock model, results back to it), a crashed server reported and
//! reconnected, tools gone on disconnect, permission rules by MCP name.

use std::sync::Arc;

use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_engine::{EngineConfig, EngineLauncher};
use code_agent_proto::*;
use mcp_client::testing::{HttpServer, install_python_mcp, python, server_script};
use serde_json::json;

use crate::common::*;

fn stdio_config(name: &str, site: &std::path::Path) -> McpServerConfigProto {
    McpServerConfigProto {
        name: name.into(),
        enabled: true,
        env: [("PYTHONPATH".to_owned(), site.to_string_lossy().into_owned())].into(),
        transport: Some(McpTransport {
            transport: Some(mcp_transport::Transport::Stdio(McpStdioTransport {
                command: python().0.to_string_lossy().into_owned(),
                args: vec![
                    "-u".into(),
                    server_script().to_string_lossy().into_owned(),
                    "stdio".into(),
                ],
            })),
        }),
    }
}

/// An engine whose own sandboxes may read the Python install, the SDK and
/// the test server's script.
async fn harness(site: &std::path::Path, replies: Vec<MockReply>) -> Harness {
    let mut launcher =
        agent_launcher::LauncherConfig::new(agent_launcher::Mode::BestEffort, "engine-mcp-tests");
    launcher.cgroups = false;
    launcher.read_only = vec![
        python().1,
        site.to_path_buf(),
        server_script().parent().unwrap().to_path_buf(),
    ];
    let config = EngineConfig {
        launcher: EngineLauncher::Given(Arc::new(agent_launcher::Launcher::new(launcher).unwrap())),
        ..EngineConfig::default()
    };
    let mock = MockLlm::start(replies).await;
    let (workspace, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    Harness::start_configured(mock, workspace, state, config).await
}

async fn list(h: &mut Harness, session: Option<&str>) -> Vec<McpServerInfo> {
    h.client
        .list_mcp_servers(scoped(ListMcpServersRequest {}, session))
        .await
        .unwrap()
        .into_inner()
        .servers
}

async fn tools(h: &mut Harness, session: Option<&str>) -> Vec<String> {
    h.client
        .get_mcp_tools(scoped(GetMcpToolsRequest { server_name: None }, session))
        .await
        .unwrap()
        .into_inner()
        .tools
        .into_iter()
        .map(|t| t.full_name)
        .collect()
}

#[tokio::test]
async fn session_scoped_stdio_server_joins_the_loop_crashes_and_reconnects() {
    let site = match install_python_mcp() {
        Ok(site) => site,
        Err(why) => {
            test_kit::skip_this_test(&format!("the Python MCP SDK cannot be installed: {why}"));
            return;
        }
    };
    let mut h = harness(
        &site,
        vec![
            MockReply::tool_call("c1", "mcp__local__echo", json!({"text": "hi"})),
            MockReply::text("echoed"),
            MockReply::tool_call("c2", "mcp__local__crash", json!({})),
            MockReply::text("crashed"),
        ],
    )
    .await;
    let s = h.session().await;
    let other = h.session().await;
    let connected = register_and_connect(&mut h, &s, stdio_config("local", &site), "local").await;
    assert!(connected.success, "{}", connected.message);
    assert!(
        connected
            .tool_names
            .contains(&"mcp__local__echo".to_owned())
    );

    // Only its session sees it.
    let mine = list(&mut h, Some(&s)).await;
    assert_eq!(mine.len(), 1);
    assert!(mine[0].connected && mine[0].tool_count >= 6, "{mine:?}");
    assert!(list(&mut h, Some(&other)).await.is_empty());
    assert!(list(&mut h, None).await.is_empty());
    assert!(tools(&mut h, Some(&other)).await.is_empty());
    let echo = h
        .client
        .get_mcp_tools(scoped(
            GetMcpToolsRequest {
                server_name: Some("local".into()),
            },
            Some(&s),
        ))
        .await
        .unwrap()
        .into_inner()
        .tools
        .into_iter()
        .find(|t| t.full_name == "mcp__local__echo")
        .unwrap();
    assert_eq!(echo.tool_name, "echo");
    let schema: serde_json::Value = serde_json::from_str(&echo.input_schema).unwrap();
    assert_eq!(schema["properties"]["text"]["type"], "string");

    // The model calls it; the result goes back to the model.
    let chunks = h.turn(&s, "echo hi").await;
    let first = results(&chunks);
    assert!(first[0].success, "{first:?}");
    assert_eq!(first[0].output, "echo:hi");
    let requests = h.mock.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"mcp__local__echo"), "{offered:?}");
    assert!(requests[1].to_string().contains("echo:hi"));

    // The server crashes mid-call: a failed tool result, the crash reported,
    // its tools gone; it reconnects.
    let chunks = h.turn(&s, "crash it").await;
    let crashed = results(&chunks);
    assert!(!crashed[0].success, "{crashed:?}");
    let after = list(&mut h, Some(&s)).await;
    assert!(!after[0].connected, "{after:?}");
    assert!(
        after[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("ConnectMcpServer"),
        "{after:?}"
    );
    assert!(tools(&mut h, Some(&s)).await.is_empty());
    let again = h
        .client
        .connect_mcp_server(scoped(
            ConnectMcpServerRequest {
                name: "local".into(),
            },
            Some(&s),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(again.success, "{}", again.message);
    assert!(list(&mut h, Some(&s)).await[0].error.is_none());

    // Disconnected: its tools leave.
    let off = h
        .client
        .disconnect_mcp_server(scoped(
            DisconnectMcpServerRequest {
                name: "local".into(),
            },
            Some(&s),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(off.success);
    assert!(tools(&mut h, Some(&s)).await.is_empty());

    // The session goes, and its servers with it.
    h.destroy(&s).await;
    let gone = h
        .client
        .list_mcp_servers(scoped(ListMcpServersRequest {}, Some(&s)))
        .await;
    assert_eq!(gone.unwrap_err().code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn global_http_server_with_headers_and_permission_rules() {
    let site = match install_python_mcp() {
        Ok(site) => site,
        Err(why) => {
            test_kit::skip_this_test(&format!("the Python MCP SDK cannot be installed: {why}"));
            return;
        }
    };
    let server = HttpServer::start(&site, "engine-bearer-1", None)
        .await
        .unwrap();
    let mut h = harness(
        &site,
        vec![
            MockReply::tool_call("c1", "mcp__remote__add", json!({"a": 20, "b": 22})),
            MockReply::text("added"),
            MockReply::tool_call("c2", "mcp__remote__add", json!({"a": 1, "b": 1})),
            MockReply::text("refused"),
        ],
    )
    .await;
    let config = McpServerConfigProto {
        name: "remote".into(),
        enabled: true,
        env: Default::default(),
        transport: Some(McpTransport {
            transport: Some(mcp_transport::Transport::Http(McpHttpTransport {
                url: format!("http://127.0.0.1:{}/mcp", server.port),
                headers: [(
                    "Authorization".to_owned(),
                    "Bearer engine-bearer-1".to_owned(),
                )]
                .into(),
            })),
        }),
    };
    let mut wrong = config.clone();
    wrong.name = "wrong".into();
    if let Some(McpTransport {
        transport: Some(mcp_transport::Transport::Http(http)),
    }) = &mut wrong.transport
    {
        http.headers
            .insert("Authorization".into(), "Bearer nope".into());
    }
    for c in [config, wrong] {
        h.client
            .register_mcp_server(RegisterMcpServerRequest { config: Some(c) })
            .await
            .unwrap();
    }
    let ok = h
        .client
        .connect_mcp_server(ConnectMcpServerRequest {
            name: "remote".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok.success, "{}", ok.message);
    let refused = h
        .client
        .connect_mcp_server(ConnectMcpServerRequest {
            name: "wrong".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!refused.success);
    let listed = list(&mut h, None).await;
    let wrong = listed.iter().find(|s| s.name == "wrong").unwrap();
    assert!(!wrong.connected && wrong.error.is_some(), "{listed:?}");
    assert!(!wrong.error.as_deref().unwrap().contains("nope"));

    // GetCapabilities lists a global server's tools.
    let caps = h
        .client
        .get_capabilities(GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(caps.features.contains(&"mcp".to_owned()));
    let add = caps
        .tools
        .iter()
        .find(|t| t.name == "mcp__remote__add")
        .unwrap();
    assert_eq!(add.parameters, ["a", "b"]);

    // Global servers are every session's.
    let s = h.session().await;
    assert!(
        tools(&mut h, Some(&s))
            .await
            .contains(&"mcp__remote__add".to_owned())
    );
    let chunks = h.turn(&s, "add").await;
    assert_eq!(results(&chunks)[0].output, "42");

    // A deny rule by MCP name reaches MCP tools like any tool.
    h.client
        .set_permission_policy(SetPermissionPolicyRequest {
            session_id: s.clone(),
            policy: Some(PermissionPolicy {
                deny: vec![PermissionRule {
                    rule: "mcp__remote__*".into(),
                }],
                enabled: true,
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let chunks = h.turn(&s, "add again").await;
    let denied = &results(&chunks)[0];
    assert!(
        !denied.success && denied.output.contains("permission denied"),
        "{denied:?}"
    );

    // Bad configs are refused by field.
    let bad = h
        .client
        .register_mcp_server(RegisterMcpServerRequest {
            config: Some(McpServerConfigProto {
                name: "a__b".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert!(
        bad.message().starts_with("config.name"),
        "{}",
        bad.message()
    );
}
