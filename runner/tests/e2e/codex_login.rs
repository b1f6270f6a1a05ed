//! `CodexConfigurationRequest` through the real binary against the fake
//! codex: an API key logs codex in (on codex's stdin: never on a command
//! line, never in a log or an update) and `agent_sdk_update` says READY; a
//! device-code login sends `CodexDeviceCode`, then `agent_sdk_update` when
//! it completes or fails; bad requests get a RequestError naming the field.

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::MockControlPlane;

use crate::fakes::with_fake_codex;
use crate::support::*;

const KEY: &str = "sk-e2e-codex-login-key-0123456789";

fn configure(auth: CodexAuthType, key: Option<&str>) -> Request {
    Request::CodexConfigurationRequest(CodexConfigurationRequest {
        auth_type: auth as i32,
        codex_api_key: key.map(str::to_owned),
    })
}

/// The first `agent_sdk_update` answering `rid`.
async fn sdk_update(cp: &MockControlPlane, rid: &str) -> AgentSdk {
    let rid = rid.to_owned();
    let m = cp
        .wait_for(
            move |m| rid_is(m, &rid) && matches!(payload(m), Some(Payload::AgentSdkUpdate(_))),
            WAIT,
        )
        .await
        .expect("an agent_sdk_update");
    match payload(&m) {
        Some(Payload::AgentSdkUpdate(s)) => s.clone(),
        _ => unreachable!(),
    }
}

/// A runner on the fake codex, logged out.
async fn logged_out() -> (tempfile::TempDir, MockControlPlane, RunnerProc) {
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join("logged-out"), "").unwrap();
    let (cp, runner) = connected_with(|o| with_fake_codex(o, state.path())).await;
    let sdks = cp.registrations().remove(0).request.agent_sdks;
    assert_eq!(
        sdks[0].status,
        AgentSdkStatus::Unconfigured as i32,
        "{sdks:?}"
    );
    (state, cp, runner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_logs_codex_in_and_never_shows() {
    let (state, cp, runner) = logged_out().await;
    send(
        &cp,
        "bad",
        configure(CodexAuthType::ApiKey, Some("not-a-key")),
    )
    .await;
    let text = expect_error(&cp, "bad").await;
    assert!(text.contains("invalid API key"), "{text}");

    send(&cp, "k1", configure(CodexAuthType::ApiKey, Some(KEY))).await;
    let update = sdk_update(&cp, "k1").await;
    assert_eq!(update.name, "codex");
    assert_eq!(
        update.status,
        AgentSdkStatus::Ready as i32,
        "{update:?}\n{}",
        runner.logs()
    );
    assert!(update.models.iter().any(|m| m.name == "fake-fast"));
    // Codex got it (it keeps it in its home, as `codex login` does)...
    let auth = std::fs::read_to_string(state.path().join("auth.json")).unwrap();
    assert!(auth.contains(KEY));
    // ...on no command line, in no log line and no update.
    let fake_log = std::fs::read_to_string(state.path().join("log")).unwrap();
    assert!(fake_log.contains("args "), "{fake_log}");
    assert!(!fake_log.contains(KEY), "{fake_log}");
    assert!(!runner.logs().contains(KEY));
    assert!(!format!("{:?}", cp.received()).contains(KEY));
    // And codex now takes threads.
    create_sdk_agent(&cp, "a", "codex").await;
    try_create_thread(&cp, "a", "t1", "fake-fast", WAIT)
        .await
        .unwrap_or_else(|m| panic!("{m:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_code_login_sends_the_code_then_the_outcome() {
    let (state, cp, runner) = logged_out().await;
    send(&cp, "d1", configure(CodexAuthType::DeviceCode, None)).await;
    let m = reply(&cp, "d1").await;
    assert!(
        matches!(payload(&m), Some(Payload::CodexDeviceCode(c)) if c.device_code == "FAKE-1234"),
        "{m:?}\n{}",
        runner.logs()
    );
    // The person enters the code.
    std::fs::write(state.path().join("device-approved"), "").unwrap();
    let update = sdk_update(&cp, "d1").await;
    assert_eq!(update.status, AgentSdkStatus::Ready as i32, "{update:?}");
    assert!(replies(&cp, "d1").iter().all(|m| error_text(m).is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_device_code_login_is_reported() {
    let (state, cp, _runner) = logged_out().await;
    send(&cp, "d1", configure(CodexAuthType::DeviceCode, None)).await;
    reply(&cp, "d1").await;
    std::fs::write(state.path().join("device-denied"), "").unwrap();
    let update = sdk_update(&cp, "d1").await;
    assert_eq!(
        update.status,
        AgentSdkStatus::Unconfigured as i32,
        "{update:?}"
    );
    let text = expect_error_among(&cp, "d1").await;
    assert!(text.contains("denied"), "{text}");
}

/// The RequestError among the replies to `rid` (not necessarily the first reply).
async fn expect_error_among(cp: &MockControlPlane, rid: &str) -> String {
    let r = rid.to_owned();
    let m = cp
        .wait_for(move |m| rid_is(m, &r) && error_text(m).is_some(), WAIT)
        .await
        .expect("a RequestError");
    error_text(&m).unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_codex_configuration_requests_name_the_field() {
    let (_state, cp, _runner) = logged_out().await;
    send(&cp, "nokey", configure(CodexAuthType::ApiKey, None)).await;
    let text = expect_error(&cp, "nokey").await;
    assert!(
        text.contains("codex_configuration_request.codex_api_key"),
        "{text}"
    );
    send(&cp, "notype", configure(CodexAuthType::Unspecified, None)).await;
    let text = expect_error(&cp, "notype").await;
    assert!(
        text.contains("codex_configuration_request.auth_type"),
        "{text}"
    );

    // A runner without codex says so.
    let (cp2, _r2) = connected_with(|o| o.arg("--sdk").arg("scripted")).await;
    send(&cp2, "k", configure(CodexAuthType::ApiKey, Some(KEY))).await;
    let text = expect_error(&cp2, "k").await;
    assert!(text.contains("codex SDK is not enabled"), "{text}");
}

/// The real `@openai/codex` (installed under target/ by npm; skipped
/// without npm unless `AGENT_RUNNER_REQUIRE_REAL_CODEX` is set): an empty
/// codex home registers UNCONFIGURED, and an API key logs it in offline.
/// (A device-code login needs OpenAI's servers: the fake covers it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_codex_logs_in_with_an_api_key() {
    let bin = match sdk_codex::testing::install_codex() {
        Ok(bin) => bin,
        Err(reason) => {
            if std::env::var_os("AGENT_RUNNER_REQUIRE_REAL_CODEX").is_some() {
                panic!("the real codex login test cannot run: {reason}");
            }
            test_kit::skip_this_test(&format!("real codex login test: {reason}"));
            return;
        }
    };
    let home = tempfile::tempdir().unwrap();
    let (bin, home_path) = (
        bin.to_string_lossy().into_owned(),
        home.path().to_string_lossy().into_owned(),
    );
    let cp = crate::support::mock().await;
    let runner = RunnerProc::start(
        RunnerOpts::new(cp.url())
            .arg("--sdk")
            .arg("codex")
            .arg("--codex-bin")
            .arg(&bin)
            .env("CODEX_HOME", &home_path),
    );
    let wait = std::time::Duration::from_secs(120);
    cp.wait_connected(wait)
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", runner.logs()));
    let sdks = cp.registrations().remove(0).request.agent_sdks;
    assert_eq!(
        sdks[0].status,
        AgentSdkStatus::Unconfigured as i32,
        "{sdks:?}"
    );
    send(&cp, "k1", configure(CodexAuthType::ApiKey, Some(KEY))).await;
    let m = cp
        .wait_for(
            |m| rid_is(m, "k1") && matches!(payload(m), Some(Payload::AgentSdkUpdate(_))),
            wait,
        )
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", runner.logs()));
    let Some(Payload::AgentSdkUpdate(update)) = payload(&m) else {
        unreachable!()
    };
    assert_eq!(update.status, AgentSdkStatus::Ready as i32, "{update:?}");
    assert!(!runner.logs().contains(KEY));
}
