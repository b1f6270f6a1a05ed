//! The real `codex` CLI through the whole runner: the runner binary with
//! `--sdk codex`, the mock control plane, and codex pointed at a mock
//! Responses API on loopback (`sdk_codex::testing`). A user message makes
//! codex run a shell command in the thread's workspace; the Item, Turn and
//! token-usage updates reach the control plane.
//!
//! The same with codex laid out as nvm installs it, outside `/usr` and
//! under the default (best-effort) sandbox: `<prefix>/bin/codex` a symlink
//! into `<prefix>/lib/node_modules`, `#!/usr/bin/env node` finding the
//! prefix's own node on PATH. The sandbox opens that installation for the
//! CLI's launches, so the models are advertised and the turn runs.
//!
//! Needs npm to install the pinned `@openai/codex` (cached under the target
//! directory); without it the test prints why and passes, unless
//! `AGENT_RUNNER_REQUIRE_REAL_CODEX` is set.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_runner_proto::runner::TurnStatus;
use sdk_codex::testing::{MockResponses, install_codex, write_config};

use crate::real_sdk::{assert_workspace_file, first_command, ready_sdk, sdk_turn};
use crate::support::*;

/// Codex starts, thinks and runs a command: slower than the scripted SDK.
const CODEX_WAIT: Duration = Duration::from_secs(120);

/// The pinned codex, or `None` after recording why it cannot be had.
fn codex_or_skip() -> Option<PathBuf> {
    match install_codex() {
        Ok(bin) => Some(bin),
        Err(reason) => {
            if std::env::var_os("AGENT_RUNNER_REQUIRE_REAL_CODEX").is_some() {
                panic!("the real codex e2e test cannot run: {reason}");
            }
            test_kit::skip_this_test(&format!("codex e2e test: {reason}"));
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_turn_runs_a_command_and_reports_items_and_usage() {
    let Some(bin) = codex_or_skip() else {
        return;
    };
    codex_turn(&bin, &[]).await;
}

/// `<root>/nvm/versions/node/v20` as nvm lays it out, around the cached
/// install: `lib/node_modules` is the cache's, `bin/codex` links into it,
/// `bin/node` is a node of the prefix's own (a hard link to, or a copy of,
/// the system's: a path outside `/usr`). `None` without a node.
fn nvm_prefix(root: &Path, installed: &Path) -> Option<PathBuf> {
    let node = which("node")?;
    let modules = std::fs::canonicalize(installed.parent()?.parent()?).ok()?;
    let prefix = root.join("nvm/versions/node/v20");
    std::fs::create_dir_all(prefix.join("bin")).ok()?;
    std::fs::create_dir_all(prefix.join("lib")).ok()?;
    if std::fs::hard_link(&node, prefix.join("bin/node")).is_err() {
        std::fs::copy(&node, prefix.join("bin/node")).ok()?;
    }
    std::os::unix::fs::symlink(&modules, prefix.join("lib/node_modules")).ok()?;
    // What marks a whole node installation (nvm's has it).
    std::fs::create_dir_all(prefix.join("include/node")).ok()?;
    std::fs::write(prefix.join("include/node/node.h"), "").ok()?;
    std::os::unix::fs::symlink(
        "../lib/node_modules/@openai/codex/bin/codex.js",
        prefix.join("bin/codex"),
    )
    .ok()?;
    Some(prefix)
}

/// The canonical path of `name` on the test's PATH.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_installed_as_nvm_does_runs_under_the_default_sandbox() {
    let Some(bin) = codex_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().expect("tempdir");
    let root_path = root.path().canonicalize().expect("canonical tempdir");
    let Some(prefix) = nvm_prefix(&root_path, &bin) else {
        test_kit::skip_this_test("codex nvm e2e test: no node on PATH to lay out an nvm prefix");
        return;
    };
    let path = format!(
        "{}:{}",
        prefix.join("bin").display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    );
    codex_turn(&prefix.join("bin/codex"), &[("PATH", path.as_str())]).await;
}

/// A runner with `--sdk codex --codex-bin BIN` (and `env`) under the
/// default sandbox: codex advertises its config's model, and a turn runs a
/// command in the thread's workspace and reports items and usage.
async fn codex_turn(bin: &Path, env: &[(&str, &str)]) {
    let responses = MockResponses::start().await.expect("mock Responses API");
    let home = tempfile::tempdir().expect("tempdir");
    write_config(home.path(), responses.port).expect("codex config");

    let cp = mock().await;
    let bin = bin.to_string_lossy().into_owned();
    let home_path = home.path().to_string_lossy().into_owned();
    let mut opts = RunnerOpts::new(cp.url())
        .arg("--sdk")
        .arg("codex")
        .arg("--codex-bin")
        .arg(&bin)
        .arg("--codex-approval-policy")
        .arg("never")
        .arg("--codex-sandbox")
        .arg("danger-full-access")
        .env("CODEX_HOME", &home_path);
    for (k, v) in env {
        opts = opts.env(k, v);
    }
    let runner = RunnerProc::start(opts);
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

/// A hostile codex thread plants links in its `CODEX_HOME`
/// (`~/.codex/auth.json` and `config.toml` pointing at a file outside its
/// sandbox, as it would at the runner's `state.db`); the runner restarts on
/// the same state, and the next start of the thread's codex seeds
/// `CODEX_HOME` again: the links are replaced, the file outside is not
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_codex_home_link_is_replaced_not_written_through() {
    planted_codex_home_link(false).await;
}

/// The whole story; `as_agent_uid`: the runner's agents (codex and what it
/// runs) run as `agent_uid::AGENT_UID`.
pub(crate) async fn planted_codex_home_link(as_agent_uid: bool) {
    let Some(bin) = codex_or_skip() else {
        return;
    };
    let responses = MockResponses::start().await.expect("mock Responses API");
    let home = tempfile::tempdir().expect("tempdir");
    write_config(home.path(), responses.port).expect("codex config");
    std::fs::write(
        home.path().join("auth.json"),
        "{\"OPENAI_API_KEY\":\"sk-test\"}",
    )
    .unwrap();
    let outside = tempfile::tempdir().expect("tempdir");
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    responses.set_command(&format!(
        "ln -sf {v} \"$HOME/.codex/auth.json\" && ln -sf {v} \"$HOME/.codex/config.toml\" && echo planted",
        v = victim.display()
    ));

    let cp = mock().await;
    let opts = RunnerOpts::new(cp.url())
        .arg("--sdk")
        .arg("codex")
        .arg("--codex-bin")
        .arg(&bin.to_string_lossy())
        .arg("--codex-approval-policy")
        .arg("never")
        .arg("--codex-sandbox")
        .arg("danger-full-access")
        .env("CODEX_HOME", &home.path().to_string_lossy());
    let mut runner = if as_agent_uid {
        // codex's describe probe runs on the operator's CODEX_HOME itself,
        // so the agent uid must own it (docs/security.md, "codex with
        // --agent-uid"); Landlock keeps every thread out of it.
        let uid: u32 = crate::agent_uid::AGENT_UID.parse().unwrap();
        for entry in [home.path().to_path_buf()].into_iter().chain(
            std::fs::read_dir(home.path())
                .unwrap()
                .map(|e| e.unwrap().path()),
        ) {
            std::os::unix::fs::lchown(&entry, Some(uid), Some(uid)).unwrap();
        }
        let dirs = RunnerDirs::new();
        std::fs::set_permissions(dirs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let opts = opts.arg("--agent-uid").arg(crate::agent_uid::AGENT_UID);
        RunnerProc::start_in(opts, dirs)
    } else {
        RunnerProc::start(opts)
    };
    let model = "mock-model";
    ready_sdk(&cp, &runner, "codex", CODEX_WAIT).await;
    let (thread, msgs) = sdk_turn(&cp, &runner, ("codex", model), "plant", CODEX_WAIT).await;
    let planted = first_command(&msgs, &runner);
    assert!(
        planted.output.as_deref().unwrap_or("").contains("planted"),
        "{planted:?}"
    );
    let codex_home = runner
        .workspace_root()
        .join("a/private")
        .join(&thread)
        .join("home/.codex");
    assert!(
        codex_home.join("auth.json").is_symlink(),
        "the agent planted it"
    );

    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(WAIT).await, Some(0), "{}", runner.logs());
    let runner = runner.start_again();
    cp.wait_for_registrations(2, WAIT)
        .await
        .expect("re-registers");
    cp.wait_connected(WAIT).await.expect("reconnects");
    responses.set_command(sdk_codex::testing::PROOF_COMMAND);
    send(&cp, "m2", user_message("a", &thread, "again", false)).await;
    cp.wait_for(
        |m| rid_is(m, "m2") && is_turn(m, TurnStatus::Completed),
        CODEX_WAIT,
    )
    .await
    .unwrap_or_else(|e| panic!("turn completes: {e:?}\n{}", runner.logs()));

    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    for seeded in ["auth.json", "config.toml"] {
        let path = codex_home.join(seeded);
        assert!(!path.is_symlink(), "{} is still a link", path.display());
    }
    assert_eq!(
        std::fs::read_to_string(codex_home.join("auth.json")).unwrap(),
        "{\"OPENAI_API_KEY\":\"sk-test\"}"
    );
    assert_workspace_file(&runner, &thread, "proof.txt", "hello-from-codex\n");
}
