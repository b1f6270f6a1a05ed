//! The operator's endpoints on `--health-addr`: `/livez`, `/readyz` through
//! registration, link loss and drain; every metric moving when its event
//! happens; `agent-runner status` (summary, JSON, probes); the address's
//! rules (a taken explicit port is fatal, empty turns the endpoints off).
//!
//! Each runner listens on `127.0.0.1:0` and the test reads the bound address
//! from its log, so parallel tests never share a port. HTTP is spoken by
//! hand here (one HTTP/1.0 GET), independent of the runner's own client.

use std::process::Output;

use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::{MockConfig, MockControlPlane};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Status;

use crate::support::*;

const POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// A runner against `url` with its health endpoints on a free loopback port.
fn start_with_health(url: &str, extra: &[&str]) -> RunnerProc {
    let mut opts = RunnerOpts::new(url).arg("--health-addr").arg("127.0.0.1:0");
    for a in extra {
        opts = opts.arg(a);
    }
    RunnerProc::start(opts)
}

/// The bound address, from the runner's "health endpoints listening on" line.
pub(crate) async fn health_addr(r: &RunnerProc) -> String {
    let marker = "listening on http://";
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let logs = r.logs();
        if let Some(at) = logs.find(marker) {
            let rest = &logs[at + marker.len()..];
            let end = rest.find(|c: char| c.is_whitespace()).unwrap_or(rest.len());
            return rest[..end].to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no health address logged:\n{logs}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// One `GET`: status code and body.
async fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    (code, body.to_owned())
}

/// Poll `path` until its answer satisfies `ok`; that answer.
pub(crate) async fn wait_get(
    addr: &str,
    path: &str,
    ok: impl Fn(u16, &str) -> bool,
) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (code, body) = get(addr, path).await;
        if ok(code, &body) {
            return (code, body);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never matched; last: {code} {body}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The value of one series (`name{labels}` exactly as exposed), if present.
fn series(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(s, _)| *s == name)
        .and_then(|(_, v)| v.parse().ok())
}

async fn metric(addr: &str, name: &str) -> Option<f64> {
    let (code, body) = get(addr, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    series(&body, name)
}

/// Poll `/metrics` until `name` satisfies `ok`; its value.
async fn wait_metric(addr: &str, name: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, body) = get(addr, "/metrics").await;
        if let Some(v) = series(&body, name)
            && ok(v)
        {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} never matched:\n{body}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Poll `/metrics` until `name` is `value`.
pub(crate) async fn wait_metric_is(addr: &str, name: &str, value: f64) {
    wait_metric(addr, name, |v| v == value).await;
}

/// [`wait_metric_is`] `value` for each of `names`, in order.
async fn wait_metrics_at(addr: &str, value: f64, names: &[&str]) {
    for name in names {
        wait_metric_is(addr, name, value).await;
    }
}

/// A mock and a connected runner with its health endpoints on (`extra`
/// arguments added); the endpoints' address.
async fn connected_with_health(extra: &[&str]) -> (MockControlPlane, RunnerProc, String) {
    let cp = mock().await;
    let r = start_with_health(&cp.url(), extra);
    cp.wait_connected(WAIT).await.unwrap();
    let addr = health_addr(&r).await;
    (cp, r, addr)
}

async fn status_cmd(args: &[&str]) -> Output {
    tokio::process::Command::new(runner_bin())
        .arg("status")
        .args(args)
        .env_remove("AGENT_RUNNER_HEALTH_ADDR")
        .output()
        .await
        .expect("run agent-runner status")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// Interrupt the turn of `thread` of agent `a` (request `i`) and wait until
/// it ends: the COMPLETED of an interrupted turn answers the interrupt.
async fn interrupt_turn(cp: &MockControlPlane, thread: &str) {
    let request = Request::InterruptTurnRequest(InterruptTurnRequest {
        agent_id: "a".into(),
        thread_id: thread.into(),
    });
    send(cp, "i", request).await;
    turn_completed(cp, "i").await;
}

/// grpc-go and Python grpcio servers send response headers only with their
/// first message: against such an idle control plane the channel is open
/// (ready, counted connected) once the call is accepted, not once headers
/// arrive; and it still works when the first request comes.
#[tokio::test]
async fn ready_against_a_control_plane_that_holds_its_headers() {
    let cp = MockControlPlane::start(MockConfig::default().with_delayed_headers())
        .await
        .unwrap();
    let r = start_with_health(&cp.url(), &[]);
    let addr = health_addr(&r).await;
    cp.wait_connected(WAIT).await.unwrap();
    // Nothing was sent to the runner: no headers yet.
    wait_get(&addr, "/readyz", |c, _| c == 200).await;
    assert_eq!(
        metric(&addr, "agent_runner_connection_state{state=\"connected\"}").await,
        Some(1.0)
    );
    // The first request brings the headers with it.
    create_agent(&cp, "a").await;
}

#[tokio::test]
async fn readyz_follows_registration_link_loss_and_drain() {
    let cp = mock().await;
    cp.fail_register_with(Some(Status::unavailable("warming up")));
    let mut r = start_with_health(&cp.url(), &["--drain-timeout", "60s"]);
    let addr = health_addr(&r).await;

    // Not registered yet: alive, not ready, the reason in the body.
    assert_eq!(get(&addr, "/livez").await, (200, "ok\n".to_owned()));
    wait_metric(
        &addr,
        "agent_runner_register_failures_total{code=\"UNAVAILABLE\"}",
        |v| v >= 1.0,
    )
    .await;
    let (code, body) = get(&addr, "/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("not registered"), "{body}");
    assert_eq!(
        metric(&addr, "agent_runner_connection_state{state=\"connected\"}").await,
        Some(0.0)
    );
    wait_metric(&addr, "agent_runner_reconnects_total", |v| v >= 1.0).await;

    // Registered and the channel open: ready.
    cp.fail_register_with(None);
    cp.wait_connected(WAIT).await.unwrap();
    wait_get(&addr, "/readyz", |c, _| c == 200).await;
    assert_eq!(
        metric(&addr, "agent_runner_connection_state{state=\"connected\"}").await,
        Some(1.0)
    );
    assert_eq!(
        metric(&addr, "agent_runner_connection_state{state=\"connecting\"}").await,
        Some(0.0)
    );

    // The channel drops: not ready until the runner is back.
    let reconnects = metric(&addr, "agent_runner_reconnects_total")
        .await
        .unwrap();
    cp.stop().await.unwrap();
    let (_, body) = wait_get(&addr, "/readyz", |c, _| c == 503).await;
    assert!(
        body.contains("not registered") || body.contains("not open"),
        "{body}"
    );
    wait_metric(&addr, "agent_runner_reconnects_total", |v| v > reconnects).await;
    cp.restart().await.unwrap();
    cp.wait_connected(WAIT).await.unwrap();
    wait_get(&addr, "/readyz", |c, _| c == 200).await;

    // Draining: alive, not ready, says so; the endpoints stay up meanwhile.
    create_agent(&cp, "a").await;
    let t = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m", "a", &t, "sleep 60000").await;
    r.signal(libc::SIGTERM);
    let (_, body) = wait_get(&addr, "/readyz", |c, _| c == 503).await;
    assert!(body.starts_with("draining"), "{body}");
    assert_eq!(get(&addr, "/livez").await.0, 200);
    let out = status_cmd(&["--health-addr", &addr, "--probe", "readyz"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("draining"),
        "{}",
        text(&out.stderr)
    );
    let out = status_cmd(&["--health-addr", &addr]).await;
    assert!(
        text(&out.stdout).contains("draining    yes"),
        "{}",
        text(&out.stdout)
    );

    // The running turn ends; the runner exits cleanly.
    interrupt_turn(&cp, &t).await;
    assert_eq!(r.wait_exit(WAIT).await, Some(0), "{}", r.logs());
}

#[tokio::test]
async fn every_metric_moves_when_its_event_happens() {
    let (cp, _r, addr) = connected_with_health(&[]).await;

    // Present from the start.
    assert_eq!(
        metric(&addr, "agent_runner_running_turns{sdk=\"scripted\"}").await,
        Some(0.0)
    );
    assert_eq!(
        metric(&addr, "agent_runner_token_refreshes_total").await,
        Some(0.0),
        "nothing has asked for a GitHub token yet"
    );
    assert_eq!(metric(&addr, "agent_runner_outbox_depth").await, Some(0.0));
    assert_eq!(
        metric(&addr, "agent_runner_child_processes").await,
        Some(0.0)
    );

    // Requests by kind and outcome; updates by kind; latency by kind.
    send(&cp, "hb", Request::HeartbeatRequest(HeartbeatRequest {})).await;
    reply(&cp, "hb").await;
    wait_metrics_at(
        &addr,
        1.0,
        &[
            "agent_runner_requests_total{kind=\"heartbeat_request\",outcome=\"answered\"}",
            "agent_runner_updates_sent_total{kind=\"heartbeat_response\"}",
            "agent_runner_request_duration_seconds_count{kind=\"heartbeat_request\"}",
        ],
    )
    .await;

    send(
        &cp,
        "bad",
        Request::CreateAgentRequest(CreateAgentRequest {
            agent_id: "../escape".into(),
            agent_sdk: "scripted".into(),
        }),
    )
    .await;
    expect_error(&cp, "bad").await;
    wait_metrics_at(
        &addr,
        1.0,
        &[
            "agent_runner_requests_total{kind=\"create_agent_request\",outcome=\"invalid\"}",
            "agent_runner_updates_sent_total{kind=\"request_error\"}",
        ],
    )
    .await;

    send(
        &cp,
        "nothread",
        user_message("a", "thr-none", "say x", false),
    )
    .await;
    expect_error(&cp, "nothread").await;
    wait_metric_is(
        &addr,
        "agent_runner_requests_total{kind=\"create_user_message_request\",outcome=\"rejected\"}",
        1.0,
    )
    .await;

    create_agent(&cp, "a").await;
    let t = create_thread(&cp, "a", "t").await;
    wait_metrics_at(
        &addr,
        1.0,
        &[
            "agent_runner_requests_total{kind=\"create_thread_request\",outcome=\"completed\"}",
            "agent_runner_updates_sent_total{kind=\"agent_update\"}",
            "agent_runner_request_duration_seconds_count{kind=\"create_thread_request\"}",
        ],
    )
    .await;
    // Handed to the agent, then refused there (a model the SDK does not
    // advertise): it counts as failed, not as accepted.
    let refused = try_create_thread(&cp, "a", "nomodel", "no-such-model", WAIT).await;
    assert!(refused.is_err(), "{refused:?}");
    wait_metric_is(
        &addr,
        "agent_runner_requests_total{kind=\"create_thread_request\",outcome=\"failed\"}",
        1.0,
    )
    .await;

    // A running turn with a live command: running turns and child processes.
    start_turn(&cp, "m", "a", &t, "run sleep 60").await;
    wait_metric_is(&addr, "agent_runner_running_turns{sdk=\"scripted\"}", 1.0).await;
    wait_metric(&addr, "agent_runner_child_processes", |v| v >= 1.0).await;
    interrupt_turn(&cp, &t).await;
    wait_metric_is(&addr, "agent_runner_running_turns{sdk=\"scripted\"}", 0.0).await;
    wait_metric_is(
        &addr,
        "agent_runner_turn_duration_seconds_count{sdk=\"scripted\",outcome=\"interrupted\"}",
        1.0,
    )
    .await;
    wait_metric_is(&addr, "agent_runner_child_processes", 0.0).await;
    wait_metric(
        &addr,
        "agent_runner_updates_sent_total{kind=\"item_update\"}",
        |v| v >= 1.0,
    )
    .await;

    // A failed turn is an adapter error, and a turn of its own outcome.
    send(&cp, "f", user_message("a", &t, "fail boom", false)).await;
    turn_completed(&cp, "f").await;
    wait_metrics_at(
        &addr,
        1.0,
        &[
            "agent_runner_adapter_errors_total{sdk=\"scripted\",operation=\"turn\"}",
            "agent_runner_turn_duration_seconds_count{sdk=\"scripted\",outcome=\"failed\"}",
        ],
    )
    .await;

    send(&cp, "ok", user_message("a", &t, "say done", false)).await;
    turn_completed(&cp, "ok").await;
    wait_metric_is(
        &addr,
        "agent_runner_turn_duration_seconds_count{sdk=\"scripted\",outcome=\"completed\"}",
        1.0,
    )
    .await;
}

#[tokio::test]
async fn outbox_metrics_show_what_a_full_outbox_sheds() {
    let (cp, _r, addr) = connected_with_health(&["--outbox-capacity", "16"]).await;
    create_agent(&cp, "a").await;
    let t = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m", "a", &t, &sleep_then_says(300, 60)).await;
    cp.stop().await.unwrap();

    // Disconnected: updates pile up to the bound, intermediate ones go.
    // The bound counts what is queued and what was sent but not yet known
    // to have arrived (acknowledged delivery): together they reach it.
    wait_metric(&addr, "agent_runner_outbox_dropped_total", |v| v >= 1.0).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let held = metric(&addr, "agent_runner_outbox_depth")
            .await
            .unwrap_or(0.0)
            + metric(&addr, "agent_runner_delivery_unsettled")
                .await
                .unwrap_or(0.0);
        if held >= 16.0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "held {held}");
        tokio::time::sleep(POLL).await;
    }
    let out = status_cmd(&["--health-addr", &addr, "--json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert!(json["outbox"]["depth"].as_u64() >= Some(1), "{json}");
    assert!(json["outbox"]["dropped"].as_u64() >= Some(1), "{json}");

    cp.restart().await.unwrap();
    turn_completed(&cp, "m").await;
    wait_metric_is(&addr, "agent_runner_outbox_depth", 0.0).await;
}

/// A control plane that does not acknowledge (legacy mode): a sent
/// terminal update is kept for a re-send, then settles once its window has
/// passed (the link's once-a-second timer, armed in this mode only). The
/// window is twice keepalive's interval and timeout, at least 10 s
/// (`runner.rs`): with the defaults 60 s, longer than `WAIT` (30 s), so the
/// test shortens keepalive to reach the 10 s floor.
#[tokio::test]
async fn legacy_mode_settles_sent_updates_after_their_window() {
    let cp = MockControlPlane::start(
        MockConfig::default().with_ack_mode(mock_control_plane::AckMode::Refuse),
    )
    .await
    .expect("mock starts");
    let r = start_with_health(
        &cp.url(),
        &["--keepalive-interval", "1s", "--keepalive-timeout", "1s"],
    );
    cp.wait_connected(WAIT).await.unwrap();
    let addr = health_addr(&r).await;
    create_agent(&cp, "a").await;
    let t = create_thread(&cp, "a", "t").await;
    send(&cp, "m", user_message("a", &t, "say kept", false)).await;
    turn_completed(&cp, "m").await;
    wait_metric(&addr, "agent_runner_delivery_unsettled", |v| v >= 1.0).await;
    wait_metric_is(&addr, "agent_runner_delivery_unsettled", 0.0).await;
}

#[tokio::test]
async fn status_prints_connection_turns_outbox_and_sdks() {
    let (cp, mut r, addr) = connected_with_health(&[]).await;
    create_agent(&cp, "a").await;
    let t = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m", "a", &t, "sleep 60000").await;

    let out = status_cmd(&["--health-addr", &addr]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    for want in [
        "agent-runner ",
        "connection  connected (ready)",
        "draining    no",
        "agents      1",
        "threads     1",
        "turns       1 running (limit 256)",
        "outbox      ",
        "sdks",
        "  scripted  ready  models: scripted-fast, scripted-slow",
    ] {
        assert!(summary.contains(want), "missing {want:?} in\n{summary}");
    }
    // Counts only: which thread runs is the admin socket's to say.
    assert!(summary.contains("  scripted  1 running\n"), "{summary}");
    assert!(summary.contains("  oldest running for "), "{summary}");
    assert!(!summary.contains(t.as_str()), "{summary}");

    // `--config` as `run` takes it: its health_addr, when no flag or env says.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runner.toml");
    std::fs::write(&file, format!("health_addr = \"{addr}\"\n")).unwrap();
    let out = status_cmd(&["--config", file.to_str().unwrap(), "--probe", "readyz"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = status_cmd(&["--health-addr", &addr, "--json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(json["connection"]["state"], "connected");
    assert_eq!(json["connection"]["ready"], true);
    assert_eq!(json["running_turns"], 1);
    assert_eq!(json["running_turns_by_sdk"]["scripted"], 1);
    assert!(!json.to_string().contains(t.as_str()), "{json}");
    let sdks = json["sdks"].as_array().expect("sdks");
    assert!(sdks.iter().any(|s| s["name"] == "scripted"), "{sdks:?}");

    for probe in ["livez", "readyz"] {
        let out = status_cmd(&["--health-addr", &addr, "--probe", probe]).await;
        assert_eq!(out.status.code(), Some(0), "{probe}: {}", text(&out.stderr));
    }

    // A wildcard address means this host, as in the image's HEALTHCHECK.
    let port = addr.rsplit_once(':').map(|(_, p)| p).unwrap();
    let out = status_cmd(&[
        "--health-addr",
        &format!("0.0.0.0:{port}"),
        "--probe",
        "livez",
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    interrupt_turn(&cp, &t).await;
    r.signal(libc::SIGKILL);
    r.wait_exit(WAIT).await;
    let out = status_cmd(&["--health-addr", &addr]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot reach"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn taken_health_addr_is_fatal_and_empty_turns_the_endpoints_off() {
    let cp = mock().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut r = RunnerProc::start(RunnerOpts::new(cp.url()).arg("--health-addr").arg(&addr));
    assert_eq!(r.wait_exit(WAIT).await, Some(1), "{}", r.logs());
    assert!(r.logs().contains("health_addr"), "{}", r.logs());
    assert!(
        cp.registrations().is_empty(),
        "nothing runs before it listens"
    );

    // The suite's default (AGENT_RUNNER_HEALTH_ADDR=""): off, and said so.
    let r = RunnerProc::start(RunnerOpts::new(cp.url()));
    cp.wait_connected(WAIT).await.unwrap();
    assert!(r.logs().contains("health endpoints off"), "{}", r.logs());
    let out = tokio::process::Command::new(runner_bin())
        .args(["status"])
        .env("AGENT_RUNNER_HEALTH_ADDR", "")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("off"), "{}", text(&out.stderr));
}
