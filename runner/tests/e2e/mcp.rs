//! A thread's MCP servers (`CreateThreadRequest.mcp_servers`
//! item 8) through the real binary and the mock control plane, against the
//! real Python MCP server (the official SDK from PyPI, pip-installed into
//! target/ by `mcp_client::testing`; skipped, saying so, only when it
//! cannot be installed): a scripted turn's `mcp` steps call a stdio server
//! (started through the thread's sandbox) and a streamable HTTP server that
//! checks its bearer token and header; the secrets never reach updates,
//! logs, `/status` or a process's argv; after a restart the thread has no
//! servers and says so.

use std::path::PathBuf;

use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::thread_mcp_server::TransportConfig;
use agent_runner_proto::runner::*;
use mcp_client::testing::{HttpServer, install_python_mcp, python, server_script};
use mock_control_plane::MockControlPlane;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

const BEARER: &str = "mcp-bearer-SECRET-e2e-1";
const HEADER: &str = "mcp-header-SECRET-e2e-2";
const ENV: &str = "mcp-env-SECRET-e2e-3";

fn site_or_skip() -> Option<PathBuf> {
    match install_python_mcp() {
        Ok(site) => Some(site),
        Err(why) => {
            test_kit::skip_this_test(&format!("the Python MCP SDK cannot be installed: {why}"));
            None
        }
    }
}

/// A runner whose sandbox lets agents read the Python install, the
/// pip-installed SDK and the test server's script, with health endpoints.
fn runner_opts(cp: &MockControlPlane, site: &std::path::Path) -> RunnerOpts {
    let (_, prefix) = python();
    let script_dir = server_script().parent().unwrap().to_path_buf();
    let mut opts = RunnerOpts::new(cp.url())
        .arg("--health-addr")
        .arg("127.0.0.1:0")
        .env("MCP_E2E_RUNNER_ONLY", "runner-env-value");
    for dir in [prefix, site.to_path_buf(), script_dir] {
        opts = opts.arg("--sandbox-read-only").arg(dir.to_str().unwrap());
    }
    opts
}

fn header(key: &str, value: &str) -> ThreadMcpHeader {
    ThreadMcpHeader {
        key: key.into(),
        value: value.into(),
    }
}

fn stdio(site: &std::path::Path) -> ThreadMcpServer {
    ThreadMcpServer {
        server_id: "srv-1".into(),
        name: "local".into(),
        transport_config: Some(TransportConfig::Stdio(ThreadMcpStdioConfig {
            command: python().0.to_string_lossy().into_owned(),
            args: vec![
                "-u".into(),
                server_script().to_string_lossy().into_owned(),
                "stdio".into(),
            ],
            env_vars: vec![
                header("PYTHONPATH", site.to_str().unwrap()),
                header("MCP_ENV_SECRET", ENV),
            ],
        })),
    }
}

fn http(port: u16) -> ThreadMcpServer {
    ThreadMcpServer {
        server_id: "srv-2".into(),
        name: "remote".into(),
        transport_config: Some(TransportConfig::StreamableHttp(
            ThreadMcpStreamableHttpConfig {
                url: format!("http://127.0.0.1:{port}/mcp"),
                auth_type: ThreadMcpAuthType::BearerToken as i32,
                bearer_token: Some(BEARER.into()),
                headers: vec![header("X-Test-Header", HEADER)],
            },
        )),
    }
}

fn create_thread_with(servers: Vec<ThreadMcpServer>) -> Request {
    Request::CreateThreadRequest(CreateThreadRequest {
        agent_id: "a".into(),
        model: "scripted-fast".into(),
        thread_id: Some("mcp-thread".into()),
        mcp_servers: servers,
        ..Default::default()
    })
}

/// The texts of the COMPLETED `MCP_TOOL_CALL` items of request `rid`.
fn mcp_results(cp: &MockControlPlane, rid: &str) -> Vec<String> {
    items(&replies(cp, rid))
        .into_iter()
        .filter(|(kind, status, _)| {
            *kind == ItemType::McpToolCall && *status == ItemStatus::Completed
        })
        .filter_map(|(_, _, text)| text)
        .collect()
}

async fn health_get(runner: &RunnerProc, path: &str) -> String {
    let marker = "listening on http://";
    let logs = runner.logs();
    let at = logs.find(marker).expect("health address logged") + marker.len();
    let rest = &logs[at..];
    let addr = &rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())];
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    String::from_utf8_lossy(&raw).into_owned()
}

/// Every process's argv on this machine, one line each.
fn all_argv() -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            out.push_str(&String::from_utf8_lossy(&cmdline).replace('\0', " "));
            out.push('\n');
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_mcp_steps_call_the_threads_servers_and_secrets_stay_secret() {
    let Some(site) = site_or_skip() else { return };
    let server = HttpServer::start(&site, BEARER, Some(HEADER))
        .await
        .unwrap();
    let cp = mock().await;
    let runner = RunnerProc::start(runner_opts(&cp, &site));
    cp.wait_connected(WAIT).await.expect("runner connects");
    create_agent(&cp, "a").await;

    send(
        &cp,
        "t1",
        create_thread_with(vec![stdio(&site), http(server.port)]),
    )
    .await;
    let m = reply(&cp, "t1").await;
    assert!(error_text(&m).is_none(), "{m:?}");

    send(
        &cp,
        "m1",
        user_message(
            "a",
            "mcp-thread",
            "mcp local echo {\"text\": \"hi\"}\n\
             mcp remote add {\"a\": 2, \"b\": 3}\n\
             mcp local env {\"name\": \"MCP_ENV_SECRET\"}\n\
             mcp local env {\"name\": \"MCP_E2E_RUNNER_ONLY\"}",
            false,
        ),
    )
    .await;
    turn_completed(&cp, "m1").await;
    let results = mcp_results(&cp, "m1");
    assert_eq!(
        results[..2],
        [
            "local/echo {\"text\":\"hi\"}\necho:hi".to_owned(),
            "remote/add {\"a\":2,\"b\":3}\n5".to_owned(),
        ],
        "{:#?}",
        replies(&cp, "m1")
    );
    // The server really got its env, but the value is a secret: masked in
    // the update that would carry it.
    assert_eq!(
        results[2], "local/env {\"name\":\"MCP_ENV_SECRET\"}\n***",
        "{results:?}"
    );
    // The stdio server runs in the thread's sandbox: the runner's own
    // environment is not passed through.
    assert_eq!(results[3], "local/env {\"name\":\"MCP_E2E_RUNNER_ONLY\"}\n");

    // Now the stdio server is gone with its turn; while the runner holds
    // the secrets, none is on any process's argv, in /status, the logs or
    // any update.
    let status = health_get(&runner, "/status").await;
    let argv = all_argv();
    let updates = format!("{:?}", cp.received());
    let logs = runner.logs();
    for secret in [BEARER, HEADER, ENV] {
        for (place, text) in [
            ("/status", &status),
            ("argv", &argv),
            ("updates", &updates),
            ("logs", &logs),
        ] {
            assert!(!text.contains(secret), "{secret} in {place}: {text}");
        }
    }
    drop(runner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_thread_has_no_mcp_servers_and_says_so() {
    let Some(site) = site_or_skip() else { return };
    let cp = mock().await;
    let mut runner = RunnerProc::start(runner_opts(&cp, &site));
    cp.wait_connected(WAIT).await.expect("runner connects");
    create_agent(&cp, "a").await;
    send(&cp, "t1", create_thread_with(vec![stdio(&site)])).await;
    let m = reply(&cp, "t1").await;
    assert!(error_text(&m).is_none(), "{m:?}");
    send(
        &cp,
        "m1",
        user_message(
            "a",
            "mcp-thread",
            "mcp local add {\"a\": 1, \"b\": 1}",
            false,
        ),
    )
    .await;
    turn_completed(&cp, "m1").await;
    assert_eq!(mcp_results(&cp, "m1"), ["local/add {\"a\":1,\"b\":1}\n2"]);

    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(WAIT).await, Some(0), "{}", runner.logs());
    let dirs = std::sync::Arc::clone(&runner.dirs);
    let runner = RunnerProc::start_in(runner_opts(&cp, &site), dirs);
    cp.wait_for_registrations(2, WAIT)
        .await
        .expect("re-registers");
    cp.wait_connected(WAIT).await.expect("reconnects");
    send(
        &cp,
        "m2",
        user_message(
            "a",
            "mcp-thread",
            "mcp local add {\"a\": 1, \"b\": 1}",
            false,
        ),
    )
    .await;
    turn_completed(&cp, "m2").await;
    let after = mcp_results(&cp, "m2");
    assert_eq!(after.len(), 1);
    assert!(
        after[0].contains("error: no MCP server named \"local\"") && after[0].contains("restart"),
        "{after:?}"
    );
    // Nothing secret was written to the runner's state.
    let state = runner.dirs.path().join("state");
    for entry in walk(&state) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(ENV),
            "{} holds the secret",
            entry.display()
        );
    }
    drop(runner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_mcp_servers_are_refused_by_field() {
    let (cp, _runner) = agent_with(|o| o).await;
    let mut twice = vec![http(1), http(2)];
    twice[1].server_id = "other".into();
    send(&cp, "dup", create_thread_with(twice)).await;
    let text = expect_error(&cp, "dup").await;
    assert!(
        text.starts_with("create_thread_request.mcp_servers[1].name"),
        "{text}"
    );

    let mut no_token = http(1);
    if let Some(TransportConfig::StreamableHttp(h)) = &mut no_token.transport_config {
        h.bearer_token = None;
    }
    send(&cp, "tok", create_thread_with(vec![no_token])).await;
    let text = expect_error(&cp, "tok").await;
    assert!(
        text.contains("mcp_servers[0].streamable_http.bearer_token"),
        "{text}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Agent `a` on `sdk` (a fake CLI), a thread with a stdio and an HTTP MCP
/// server (never contacted: the fakes only report what they were given),
/// and a turn running the fake's `mcp` step; what it said. Checks that no
/// secret is on any argv while the CLI runs, nor in logs or updates.
async fn delivered_to(
    sdk: &str,
    model: &str,
    configure: impl Fn(RunnerOpts) -> RunnerOpts,
) -> String {
    let cp = mock().await;
    let runner = RunnerProc::start(configure(RunnerOpts::new(cp.url())));
    cp.wait_connected(WAIT).await.expect("runner connects");
    create_sdk_agent(&cp, "a", sdk).await;
    let mut stdio = stdio(std::path::Path::new("/site"));
    if let Some(TransportConfig::Stdio(s)) = &mut stdio.transport_config {
        s.command = "mcp-server-bin".into();
        s.args = vec!["--flag".into()];
    }
    let mut request = create_thread_with(vec![stdio, http(1)]);
    if let Request::CreateThreadRequest(r) = &mut request {
        r.model = model.into();
    }
    send(&cp, "t1", request).await;
    let m = reply(&cp, "t1").await;
    assert!(error_text(&m).is_none(), "{m:?}\n{}", runner.logs());
    send(&cp, "m1", user_message("a", "mcp-thread", "mcp", false)).await;
    turn_completed(&cp, "m1").await;
    let msgs = replies(&cp, "m1");
    assert!(!msgs.iter().any(|m| error_text(m).is_some()), "{msgs:#?}");
    // The CLI still runs (one process per thread): its argv is checked.
    let argv = all_argv();
    let updates = format!("{:?}", cp.received());
    let logs = runner.logs();
    for secret in [BEARER, HEADER, ENV] {
        for (place, text) in [("argv", &argv), ("updates", &updates), ("logs", &logs)] {
            assert!(!text.contains(secret), "{secret} in {place}: {text}");
        }
    }
    said(&msgs).join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_gets_the_threads_mcp_servers_as_config_with_secrets_in_env() {
    let state = tempfile::tempdir().unwrap();
    let path = state.path().to_owned();
    let said = delivered_to("codex", "fake-fast", move |o| {
        crate::fakes::with_fake_codex(o, &path)
    })
    .await;
    // The fake resolved the env vars the config names: the values it found
    // are the secrets (masked by the runner in the update that carries them).
    assert_eq!(
        said,
        "local stdio mcp-server-bin --flag env MCP_ENV_SECRET=*** PYTHONPATH=/site; \
         remote http http://127.0.0.1:1/mcp bearer=*** header X-Test-Header=***"
    );
    // Nothing secret in codex's home (its config.toml is the operator's).
    for file in walk(state.path()) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap_or_default()).into_owned();
        for secret in [BEARER, HEADER] {
            assert!(!text.contains(secret), "{} holds {secret}", file.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_gets_a_private_strict_mcp_config_file() {
    let state = tempfile::tempdir().unwrap();
    let path = state.path().to_owned();
    let said = delivered_to("claude-code", "sonnet", move |o| {
        crate::fakes::with_fake_claude(o, &path)
    })
    .await;
    assert_eq!(
        said,
        "strict mode 0600; \
         local stdio mcp-server-bin --flag env MCP_ENV_SECRET=*** PYTHONPATH=/site; \
         remote http http://127.0.0.1:1/mcp header Authorization=Bearer *** X-Test-Header=***"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_agent_threads_use_their_mcp_servers_as_session_tools() {
    use code_agent_engine::testing::{MockLlm, MockReply};
    let Some(site) = site_or_skip() else { return };
    let server = HttpServer::start(&site, BEARER, Some(HEADER))
        .await
        .unwrap();
    let mock = MockLlm::start(vec![
        MockReply::tool_call("c1", "mcp__local__echo", serde_json::json!({"text": "hi"})),
        MockReply::tool_call(
            "c2",
            "mcp__remote__add",
            serde_json::json!({"a": 40, "b": 2}),
        ),
        MockReply::text("both tools answered"),
        MockReply::text("plain thread"),
    ])
    .await;
    let cp = mock_cp().await;
    let runner = RunnerProc::start(
        runner_opts(&cp, &site)
            .arg("--sdk")
            .arg("code-agent")
            .env("OPENAI_API_KEY", "sk-unused")
            .env("OPENAI_BASE_URL", &mock.base_url())
            .env("CODE_AGENT_MODELS", "mock-model"),
    );
    cp.wait_connected(WAIT).await.expect("runner connects");
    create_sdk_agent(&cp, "a", "code-agent").await;
    let mut request = create_thread_with(vec![stdio(&site), http(server.port)]);
    if let Request::CreateThreadRequest(r) = &mut request {
        r.model = "mock-model".into();
    }
    send(&cp, "t1", request).await;
    let m = reply(&cp, "t1").await;
    assert!(error_text(&m).is_none(), "{m:?}\n{}", runner.logs());
    // A second thread without servers: it must not see the first's.
    let mut request = create_thread_with(vec![]);
    if let Request::CreateThreadRequest(r) = &mut request {
        r.model = "mock-model".into();
        r.thread_id = Some("plain-thread".into());
    }
    send(&cp, "t2", request).await;
    let m = reply(&cp, "t2").await;
    assert!(error_text(&m).is_none(), "{m:?}");
    let plain = "plain-thread";

    send(
        &cp,
        "m1",
        user_message("a", "mcp-thread", "use the tools", false),
    )
    .await;
    turn_completed(&cp, "m1").await;
    let msgs = replies(&cp, "m1");
    assert!(!msgs.iter().any(|m| error_text(m).is_some()), "{msgs:#?}");
    let results = mcp_results(&cp, "m1");
    assert!(
        results
            .iter()
            .any(|t| t.starts_with("local/echo") && t.contains("echo:hi")),
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .any(|t| t.starts_with("remote/add") && t.contains("42")),
        "{results:?}"
    );
    assert_eq!(said(&msgs), ["both tools answered"]);
    let offered = |request: &serde_json::Value| -> Vec<String> {
        request["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(offered(&mock.requests()[0]).contains(&"mcp__remote__add".to_owned()));

    send(&cp, "m2", user_message("a", plain, "hello", false)).await;
    turn_completed(&cp, "m2").await;
    let last = mock.requests().last().cloned().unwrap();
    assert!(
        !offered(&last).iter().any(|n| n.starts_with("mcp__")),
        "{:?}",
        offered(&last)
    );

    let updates = format!("{:?}", cp.received());
    let logs = runner.logs();
    let argv = all_argv();
    for secret in [BEARER, HEADER, ENV] {
        for (place, text) in [("updates", &updates), ("logs", &logs), ("argv", &argv)] {
            assert!(!text.contains(secret), "{secret} in {place}: {text}");
        }
    }
}

async fn mock_cp() -> MockControlPlane {
    mock().await
}
