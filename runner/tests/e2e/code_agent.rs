//! The `code-agent` SDK through the whole runner: the runner binary with
//! `--sdk code-agent`, the mock control plane, and the engine's model
//! provider pointed at a mock OpenAI-compatible server on loopback
//! (`code_agent_engine::testing::MockLlm`, via OPENAI_BASE_URL). A user
//! message makes the agent run a shell command and answer; the Turn, Item
//! and token-usage updates reach the control plane. Once with the engine
//! embedded in the runner, once with it in its own process
//! (`agent-runner code-agent serve`, bearer token, TLS with a test CA,
//! workspaces confined to the runner's workspace root) and the runner
//! pointed at it with `--code-agent-endpoint`, `--code-agent-auth-token-file`
//! and `--code-agent-ca-cert`.

use std::process::Stdio;

use agent_runner_proto::runner::*;
use code_agent_engine::testing::{MockLlm, MockReply};
use serde_json::json;
use tokio::process::{Child, Command};

use crate::real_sdk::{assert_workspace_file, first_command, ready_sdk, sdk_turn};
use crate::support::*;

const MODEL: &str = "mock-model";
const API_KEY: &str = "sk-e2e-never-logged";
const COMMAND: &str =
    "echo from-code-agent > proof.txt && cat proof.txt && echo key=${OPENAI_API_KEY:-none}";

pub(crate) fn script() -> Vec<MockReply> {
    vec![
        MockReply::tool_call("call_1", "bash", json!({ "command": COMMAND })).with_usage(40, 8),
        MockReply::text("All done.").with_usage(60, 3),
    ]
}

/// The engine's model settings, as an operator would export them.
pub(crate) fn model_env(mock: &MockLlm) -> Vec<(String, String)> {
    vec![
        ("OPENAI_API_KEY".into(), API_KEY.into()),
        ("OPENAI_BASE_URL".into(), mock.base_url()),
        ("CODE_AGENT_MODELS".into(), MODEL.into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_agent_turn_in_process() {
    let mock = MockLlm::start(script()).await;
    let cp = crate::support::mock().await;
    let mut opts = RunnerOpts::new(cp.url()).arg("--sdk").arg("code-agent");
    for (k, v) in model_env(&mock) {
        opts = opts.env(&k, &v);
    }
    let runner = RunnerProc::start(opts);
    coding_turn(&cp, &runner, &mock).await;
    assert!(
        runner.dirs.path().join("state/code-agent").is_dir(),
        "the embedded engine keeps its state under the runner's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_agent_turn_against_a_remote_engine() {
    let mock = MockLlm::start(script()).await;
    let engine_dir = tempfile::tempdir().expect("tempdir");
    let tls = crate::code_agent_serve::TestTls::new(engine_dir.path());
    let token_file = engine_dir.path().join("token");
    std::fs::write(&token_file, "remote-engine-token-0123\n").unwrap();
    // The runner's workspaces are the engine's root.
    let dirs = crate::support::RunnerDirs::new();
    let ws = dirs.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut args = vec![
        "--state-dir".to_owned(),
        engine_dir.path().join("state").display().to_string(),
        "--auth-token-file".to_owned(),
        token_file.display().to_string(),
        "--workspace-root".to_owned(),
        ws.display().to_string(),
    ];
    args.extend(tls.serve_args());
    let (mut engine, addr) = serve_engine(&mock, &args).await;
    let port = addr.rsplit(':').next().unwrap();
    let cp = crate::support::mock().await;
    // The runner itself has no model settings: everything is the engine's.
    let runner = RunnerProc::start_in(
        RunnerOpts::new(cp.url())
            .arg("--sdk")
            .arg("code-agent")
            .arg("--code-agent-endpoint")
            .arg(&format!("https://localhost:{port}"))
            .arg("--code-agent-auth-token-file")
            .arg(token_file.to_str().unwrap())
            .arg("--code-agent-ca-cert")
            .arg(tls.ca_file.to_str().unwrap())
            .env("OPENAI_API_KEY", "")
            .env("OPENAI_BASE_URL", ""),
        dirs,
    );
    coding_turn(&cp, &runner, &mock).await;
    assert!(
        !runner.dirs.path().join("state/code-agent").exists(),
        "no embedded engine was started"
    );
    let _ = engine.start_kill();
}

/// `agent-runner code-agent serve` on a free port with `args`; the process
/// and its address.
async fn serve_engine(mock: &MockLlm, args: &[String]) -> (Child, String) {
    let mut child = Command::new(runner_bin())
        .arg("code-agent")
        .arg("serve")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .args(args)
        .envs(model_env(mock))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn code-agent serve");
    let addr = crate::code_agent_serve::listening_addr(&mut child)
        .await
        .expect("code-agent serve prints its address first");
    (child, addr)
}

/// Register, create an agent and a thread on `code-agent`, run one coding
/// turn, and check every update it produced.
pub(crate) async fn coding_turn(
    cp: &mock_control_plane::MockControlPlane,
    runner: &RunnerProc,
    mock: &MockLlm,
) {
    let sdk = ready_sdk(cp, runner, "code-agent", WAIT).await;
    let models: Vec<&str> = sdk.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(models, [MODEL]);

    let (thread, msgs) = sdk_turn(cp, runner, ("code-agent", MODEL), "write the proof", WAIT).await;
    assert!(is_turn(&msgs[0], TurnStatus::Running), "{msgs:#?}");
    assert_eq!(said(&msgs), ["All done."]);
    let command = first_command(&msgs, runner);
    assert_eq!(command.command, COMMAND);
    assert!(
        command.process_id.parse::<u32>().is_ok_and(|pid| pid > 1),
        "{command:?}"
    );
    let output = command.output.unwrap_or_default();
    assert!(output.contains("from-code-agent"), "{output}");
    assert!(
        output.contains("key=none"),
        "the API key must not reach the agent's processes: {output}"
    );
    // A RUNNING update of the command went out too (valid: it has a process id).
    let items = items(&msgs);
    assert!(
        items
            .iter()
            .any(|(k, s, _)| *k == ItemType::CommandExecution && *s == ItemStatus::Running),
        "{items:#?}"
    );
    let usage = token_usages(&msgs);
    assert_eq!(usage.len(), 2, "{msgs:#?}");
    assert_eq!(usage[0].thread_id, thread);
    assert_eq!(usage[1].last_usage.map(|u| u.total_tokens), Some(63));
    assert_eq!(usage[1].total_usage.map(|u| u.total_tokens), Some(111));

    assert_workspace_file(runner, &thread, "proof.txt", "from-code-agent\n");
    assert_eq!(mock.requests().len(), 2);
    assert!(
        !runner.logs().contains(API_KEY),
        "the API key reached the runner's log"
    );
}

/// `agent-runner demo` takes the code-agent path when only OPENAI_BASE_URL
/// is set (a local server without auth): the thread is created on
/// `code-agent` with the advertised model, and the model is really asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_uses_code_agent_when_openai_base_url_is_set() {
    let mock = MockLlm::start(script()).await;
    let out = Command::new(runner_bin())
        .arg("demo")
        .env_remove("OPENAI_API_KEY")
        .env("OPENAI_BASE_URL", mock.base_url())
        .env("CODE_AGENT_MODELS", MODEL)
        .output()
        .await
        .expect("run agent-runner demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("user message to code-agent ({MODEL})")),
        "{text}"
    );
    assert!(text.contains("COMMAND_EXECUTION"), "{text}");
    assert_eq!(mock.requests().len(), 2, "{text}");
}
