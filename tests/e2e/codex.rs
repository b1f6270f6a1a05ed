//! The real `codex` CLI through the whole runner: the runner binary with
//! `--sdk codex`, the mock control plane, and codex pointed at a mock
//! Responses API on loopback (`sdk_codex::testing`). A user message makes
//! codex run a shell command in the thread's workspace; the Item, Turn and
//! token-usage updates reach the control plane.
//!
//! Needs npm to install the pinned `@openai/codex` (cached under the target
//! directory); without it the test prints why and passes, unless
//! `AGENT_RUNNER_REQUIRE_REAL_CODEX` is set.

use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use sdk_codex::testing::{MockResponses, install_codex, write_config};

use crate::support::*;

/// Codex starts, thinks and runs a command: slower than the scripted SDK.
const CODEX_WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_turn_runs_a_command_and_reports_items_and_usage() {
    let bin = match install_codex() {
        Ok(bin) => bin,
        Err(reason) => {
            if std::env::var_os("AGENT_RUNNER_REQUIRE_REAL_CODEX").is_some() {
                panic!("the real codex e2e test cannot run: {reason}");
            }
            eprintln!("SKIPPED codex e2e test: {reason}");
            return;
        }
    };
    let responses = MockResponses::start().await.expect("mock Responses API");
    let home = tempfile::tempdir().expect("tempdir");
    write_config(home.path(), responses.port).expect("codex config");

    let cp = mock().await;
    let bin = bin.to_string_lossy().into_owned();
    let home_path = home.path().to_string_lossy().into_owned();
    let runner = RunnerProc::start(
        RunnerOpts::new(cp.url())
            .arg("--sdk")
            .arg("codex")
            .arg("--codex-bin")
            .arg(&bin)
            .arg("--codex-approval-policy")
            .arg("never")
            .arg("--codex-sandbox")
            .arg("danger-full-access")
            .env("CODEX_HOME", &home_path),
    );
    cp.wait_connected(CODEX_WAIT)
        .await
        .unwrap_or_else(|e| panic!("runner connects: {e:?}\n{}", runner.logs()));
    let registration = cp.registrations().remove(0).request;
    let codex = registration
        .agent_sdks
        .iter()
        .find(|s| s.name == "codex")
        .expect("codex advertised");
    assert_eq!(
        codex.status,
        AgentSdkStatus::Ready as i32,
        "{codex:?}\n{}",
        runner.logs()
    );
    // The model of codex's config.toml is advertised besides the catalog.
    let model = "mock-model".to_owned();
    assert!(
        codex.models.iter().any(|m| m.name == model),
        "{:?}",
        codex.models
    );

    send(
        &cp,
        "ca",
        Request::CreateAgentRequest(CreateAgentRequest {
            agent_id: "a".into(),
            agent_sdk: "codex".into(),
        }),
    )
    .await;
    let m = reply(&cp, "ca").await;
    assert!(
        matches!(payload(&m), Some(Payload::AgentUpdate(_))),
        "{m:?}"
    );
    send(
        &cp,
        "ct",
        Request::CreateThreadRequest(CreateThreadRequest {
            agent_id: "a".into(),
            model,
            reasoning_level: None,
        }),
    )
    .await;
    let m = cp
        .wait_for(|m| rid_is(m, "ct"), CODEX_WAIT)
        .await
        .expect("thread reply");
    let thread = match payload(&m) {
        Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32 => {
            u.thread_id.clone()
        }
        _ => panic!("expected ThreadUpdate READY, got {m:?}\n{}", runner.logs()),
    };

    send(
        &cp,
        "m1",
        user_message("a", &thread, "run the proof", false),
    )
    .await;
    cp.wait_for(
        |m| rid_is(m, "m1") && is_turn(m, TurnStatus::Completed),
        CODEX_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("turn completes: {e:?}\n{}", runner.logs()));
    let msgs = replies(&cp, "m1");
    assert!(
        !msgs.iter().any(|m| error_text(m).is_some()),
        "no RequestError: {msgs:#?}"
    );
    let items = items(&msgs);
    assert!(
        items.contains(&(
            ItemType::UserMessage,
            ItemStatus::Completed,
            Some("run the proof".into())
        )),
        "{items:#?}"
    );
    assert_eq!(said(&msgs), ["All done."]);
    let command = msgs
        .iter()
        .find_map(|m| match payload(m) {
            Some(Payload::ItemUpdate(i))
                if i.status == ItemStatus::Completed as i32
                    && i.item_type == ItemType::CommandExecution as i32 =>
            {
                i.command_execution_item.clone()
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("a completed command item in {msgs:#?}\n{}", runner.logs()));
    assert!(command.command.contains("proof.txt"), "{command:?}");
    assert!(
        command.output.as_deref().unwrap_or("").contains("done"),
        "{command:?}"
    );
    let usage = msgs
        .iter()
        .find_map(|m| match payload(m) {
            Some(Payload::ThreadTokenUsageUpdate(u)) => Some(u.clone()),
            _ => None,
        })
        .expect("token usage");
    assert_eq!(usage.thread_id, thread);
    assert_eq!(usage.last_usage.map(|u| u.total_tokens), Some(120));

    let proof = runner
        .workspace_root()
        .join("a")
        .join("threads")
        .join(&thread)
        .join("proof.txt");
    assert_eq!(
        std::fs::read_to_string(&proof).unwrap_or_default(),
        "hello-from-codex\n",
        "{}",
        proof.display()
    );
}
