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

use sdk_codex::testing::{MockResponses, install_codex, write_config};

use crate::real_sdk::{assert_workspace_file, first_command, ready_sdk, sdk_turn};
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
            test_kit::skip_this_test(&format!("codex e2e test: {reason}"));
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
    let codex = ready_sdk(&cp, &runner, "codex", CODEX_WAIT).await;
    // The model of codex's config.toml is advertised besides the catalog.
    let model = "mock-model";
    assert!(
        codex.models.iter().any(|m| m.name == model),
        "{:?}",
        codex.models
    );

    let (thread, msgs) =
        sdk_turn(&cp, &runner, ("codex", model), "run the proof", CODEX_WAIT).await;
    assert_eq!(said(&msgs), ["All done."]);
    let command = first_command(&msgs, &runner);
    assert!(command.command.contains("proof.txt"), "{command:?}");
    assert!(
        command.output.as_deref().unwrap_or("").contains("done"),
        "{command:?}"
    );
    let usage = token_usages(&msgs).into_iter().next().expect("token usage");
    assert_eq!(usage.thread_id, thread);
    assert_eq!(usage.last_usage.map(|u| u.total_tokens), Some(120));

    assert_workspace_file(&runner, &thread, "proof.txt", "hello-from-codex\n");
}
