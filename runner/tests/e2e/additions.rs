//! The protocol's later additions (docs/protocol.md)
//! through the real binary: a thread id the control plane chooses, and
//! additional model instructions reaching every turn of every SDK (scripted,
//! the fake codex and claude CLIs, code-agent with a mock model), across a
//! runner restart.

use std::sync::Arc;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use code_agent_engine::testing::{MockLlm, MockReply};
use mock_control_plane::{GithubInstallation, GithubRpcNames, MockConfig, MockControlPlane};

use crate::fakes::{with_fake_claude, with_fake_codex};
use crate::support::*;

/// A `CreateThreadRequest` for `agent` on `model` with the additions set.
fn create_thread_request(
    agent: &str,
    model: &str,
    thread_id: Option<&str>,
    instructions: Option<&str>,
) -> Request {
    Request::CreateThreadRequest(CreateThreadRequest {
        agent_id: agent.into(),
        model: model.into(),
        reasoning_level: None,
        thread_id: thread_id.map(str::to_owned),
        additional_model_instructions: instructions.map(str::to_owned),
        ..Default::default()
    })
}

/// Sends the request and expects `ThreadUpdate READY`; the thread's id.
async fn thread_ready_for(cp: &MockControlPlane, rid: &str, request: Request) -> String {
    send(cp, rid, request).await;
    let m = reply(cp, rid).await;
    match payload(&m) {
        Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32 => {
            u.thread_id.clone()
        }
        _ => panic!("expected ThreadUpdate READY for {rid}, got {m:?}"),
    }
}

/// Runs `text` as one turn of `thread` (request `rid`); what the agent said.
async fn turn_says(cp: &MockControlPlane, rid: &str, thread: &str, text: &str) -> Vec<String> {
    send(cp, rid, user_message("a", thread, text, false)).await;
    turn_completed(cp, rid).await;
    let msgs = replies(cp, rid);
    assert!(
        !msgs.iter().any(|m| error_text(m).is_some()),
        "no RequestError: {msgs:#?}"
    );
    said(&msgs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_chooses_the_thread_id_and_repeats_are_idempotent() {
    let (cp, runner) = agent_with(|o| o).await;
    let request = || create_thread_request("a", "scripted-fast", Some("job-42"), None);
    let id = thread_ready_for(&cp, "t1", request()).await;
    assert_eq!(id, "job-42");
    assert!(runner.thread_workspace("a", "job-42").is_dir());
    assert_eq!(turn_says(&cp, "m1", "job-42", "say one").await, ["one"]);

    // The same request again: READY again, the same thread (its workspace
    // and its last turn are still there).
    std::fs::write(runner.thread_workspace("a", "job-42").join("keep"), "x").unwrap();
    let again = thread_ready_for(&cp, "t2", request()).await;
    assert_eq!(again, "job-42");
    assert!(runner.thread_workspace("a", "job-42").join("keep").exists());
    send(
        &cp,
        "i1",
        Request::InterruptTurnRequest(InterruptTurnRequest {
            agent_id: "a".into(),
            thread_id: "job-42".into(),
        }),
    )
    .await;
    let m = reply(&cp, "i1").await;
    assert!(is_turn(&m, TurnStatus::Completed), "{m:?}");

    // Validated like every id.
    send(
        &cp,
        "bad",
        create_thread_request("a", "scripted-fast", Some("../escape"), None),
    )
    .await;
    let text = expect_error(&cp, "bad").await;
    assert!(text.contains("create_thread_request.thread_id"), "{text}");
    // Where `threads/../escape` would have landed.
    assert!(!runner.workspace_root().join("a").join("escape").exists());

    // Another agent may not take it.
    create_agent(&cp, "b").await;
    send(
        &cp,
        "other",
        create_thread_request("b", "scripted-fast", Some("job-42"), None),
    )
    .await;
    let text = expect_error(&cp, "other").await;
    assert!(
        text.contains("create_thread_request.thread_id") && text.contains("agent a"),
        "{text}"
    );

    // Without one, the runner still chooses.
    let chosen = create_thread(&cp, "a", "t3").await;
    assert!(chosen.starts_with("thr-"), "{chosen}");
}

const INSTRUCTIONS: &str = "Always answer in French.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_threads_get_their_instructions_on_every_turn_across_a_restart() {
    let (cp, mut runner) = agent_with(|o| o).await;
    let with = thread_ready_for(
        &cp,
        "t1",
        create_thread_request("a", "scripted-fast", None, Some(INSTRUCTIONS)),
    )
    .await;
    let without = create_thread(&cp, "a", "t2").await;
    assert_eq!(
        turn_says(&cp, "m1", &with, "instructions").await,
        [INSTRUCTIONS]
    );
    assert_eq!(
        turn_says(&cp, "m2", &with, "say hi\ninstructions").await,
        ["hi", INSTRUCTIONS]
    );
    assert_eq!(
        turn_says(&cp, "m3", &without, "instructions").await,
        ["(no instructions)"]
    );

    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(WAIT).await, Some(0), "{}", runner.logs());
    let dirs = Arc::clone(&runner.dirs);
    let runner = RunnerProc::start_in(RunnerOpts::new(cp.url()), dirs);
    cp.wait_for_registrations(2, WAIT)
        .await
        .expect("re-registers");
    cp.wait_connected(WAIT).await.expect("reconnects");
    assert_eq!(
        turn_says(&cp, "m4", &with, "instructions").await,
        [INSTRUCTIONS]
    );
    drop(runner);
}

/// Agent `a` on `sdk`, a thread on `model` with [`INSTRUCTIONS`], and two
/// turns that ask the (fake) model what it was told; then the runner is
/// restarted on the same state and asked again.
async fn instructions_through(
    sdk: &str,
    model: &str,
    configure: impl Fn(RunnerOpts) -> RunnerOpts,
) {
    let cp = mock().await;
    let mut runner = RunnerProc::start(configure(RunnerOpts::new(cp.url())));
    cp.wait_connected(WAIT).await.expect("runner connects");
    sdk_probed(&cp, sdk).await;
    create_sdk_agent(&cp, "a", sdk).await;
    let thread = thread_ready_for(
        &cp,
        "t1",
        create_thread_request("a", model, None, Some(INSTRUCTIONS)),
    )
    .await;
    for rid in ["m1", "m2"] {
        let said = turn_says(&cp, rid, &thread, "instructions").await;
        assert_eq!(said, [INSTRUCTIONS], "{}", runner.logs());
    }
    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(WAIT).await, Some(0), "{}", runner.logs());
    let dirs = Arc::clone(&runner.dirs);
    let runner = RunnerProc::start_in(configure(RunnerOpts::new(cp.url())), dirs);
    cp.wait_for_registrations(2, WAIT)
        .await
        .expect("re-registers");
    cp.wait_connected(WAIT).await.expect("reconnects");
    let said = turn_says(&cp, "m3", &thread, "instructions").await;
    assert_eq!(said, [INSTRUCTIONS], "{}", runner.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_threads_get_their_instructions_as_developer_instructions() {
    let state = tempfile::tempdir().unwrap();
    let path = state.path().to_owned();
    instructions_through("codex", "fake-fast", move |o| with_fake_codex(o, &path)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_threads_get_their_instructions_appended_to_the_system_prompt() {
    let state = tempfile::tempdir().unwrap();
    let path = state.path().to_owned();
    instructions_through("claude-code", "sonnet", move |o| with_fake_claude(o, &path)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_agent_threads_get_their_instructions_in_the_system_prompt() {
    let mock = MockLlm::start(vec![
        MockReply::text("first"),
        MockReply::text("second"),
        MockReply::text("plain"),
    ])
    .await;
    let (cp, runner) = connected_with(|o| {
        o.arg("--sdk")
            .arg("code-agent")
            .env("OPENAI_API_KEY", "sk-unused")
            .env("OPENAI_BASE_URL", &mock.base_url())
            .env("CODE_AGENT_MODELS", "mock-model")
    })
    .await;
    create_sdk_agent(&cp, "a", "code-agent").await;
    let with = thread_ready_for(
        &cp,
        "t1",
        create_thread_request("a", "mock-model", None, Some(INSTRUCTIONS)),
    )
    .await;
    let without = thread_ready_for(
        &cp,
        "t2",
        create_thread_request("a", "mock-model", None, None),
    )
    .await;
    assert_eq!(turn_says(&cp, "m1", &with, "hello").await, ["first"]);
    assert_eq!(turn_says(&cp, "m2", &with, "again").await, ["second"]);
    assert_eq!(turn_says(&cp, "m3", &without, "hello").await, ["plain"]);
    let systems: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| {
            r["messages"][0]["content"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(systems.len(), 3, "{}", runner.logs());
    for system in &systems[..2] {
        assert!(system.ends_with(INSTRUCTIONS), "{system}");
        // The engine's own prompt is kept.
        assert!(system.contains("coding agent"), "{system}");
    }
    assert!(!systems[2].contains(INSTRUCTIONS), "{}", systems[2]);
    assert!(systems[2].contains("coding agent"), "{}", systems[2]);
}

/// `agent-runner github check` against a control plane serving the GitHub
/// RPCs under `names`: it succeeds, and the mock saw these calls.
async fn github_check_with(names: GithubRpcNames) -> Vec<String> {
    const TOKEN: &str = "ghs_e2e_rpc_names_token_0001";
    let cp = MockControlPlane::start(
        MockConfig::default()
            .with_github_rpc_names(names)
            .with_github_installation(GithubInstallation {
                installation_id: 9,
                access_token: TOKEN.into(),
                expires_unix_ms: 0,
                repositories: vec!["acme/names".into()],
            }),
    )
    .await
    .unwrap();
    let out = tokio::process::Command::new(runner_bin())
        .args(["github", "check", "--repo", "acme/names"])
        .args(["--control-plane-url", &cp.url()])
        .env_remove("AGENT_RUNNER_SECRET")
        .env("AGENT_RUNNER_HEALTH_ADDR", "")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("acme/names: covered by installation 9"),
        "{stdout}"
    );
    assert!(!format!("{stdout}{stderr}").contains(TOKEN));
    assert_eq!(cp.github_token_requests(), [9]);
    cp.github_rpc_calls()
}

#[tokio::test]
async fn github_rpcs_under_their_0_2_0_names() {
    assert_eq!(
        github_check_with(GithubRpcNames::ForRunner).await,
        [
            "ListGithubInstallationsForRunner",
            "GetGithubInstallationAccessTokenForRunner"
        ]
    );
    // Serving both, the first names are used.
    assert_eq!(
        github_check_with(GithubRpcNames::Both).await,
        [
            "ListGithubInstallationsForRunner",
            "GetGithubInstallationAccessTokenForRunner"
        ]
    );
}

#[tokio::test]
async fn github_rpcs_under_their_later_names_and_remembered() {
    // UNIMPLEMENTED for the first name, so the later one; remembered, so
    // the token comes from the later name at once.
    assert_eq!(
        github_check_with(GithubRpcNames::Later).await,
        [
            "ListGithubInstallationsForRunner",
            "ListGithubInstallations",
            "GithubInstallationAccessToken"
        ]
    );
}

/// The mock's YAML scenario of the additions (thread id, instructions,
/// thread name) passes against the real runner.
#[tokio::test]
async fn the_additions_scenario_passes_against_the_real_runner() {
    let cp = mock().await;
    let _r = RunnerProc::start(RunnerOpts::new(cp.url()));
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../mock-control-plane/scenarios/additions.yaml"
    ))
    .unwrap();
    let parsed = mock_control_plane::scenario::parse(&yaml).unwrap();
    let mut out = Vec::new();
    let result =
        mock_control_plane::scenario::run(&cp, &parsed, Default::default(), &mut out).await;
    let progress = String::from_utf8_lossy(&out);
    result.unwrap_or_else(|e| panic!("{e:#}\n{progress}"));
}

/// The `ThreadNameUpdate`s among `msgs`, as (thread, name).
fn names(msgs: &[ClientMessage]) -> Vec<(String, Option<String>)> {
    msgs.iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ThreadNameUpdate(u)) => {
                Some((u.thread_id.clone(), u.thread_name.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Agent `a` on `sdk`, a thread on `model`, and a turn running `script`;
/// the thread and the ThreadNameUpdates the turn caused.
async fn named_by(
    cp: &MockControlPlane,
    sdk: &str,
    model: &str,
    script: &str,
) -> (String, Vec<(String, Option<String>)>) {
    sdk_probed(cp, sdk).await;
    create_sdk_agent(cp, "a", sdk).await;
    let thread = thread_ready_for(cp, "t1", create_thread_request("a", model, None, None)).await;
    turn_says(cp, "m1", &thread, script).await;
    (thread.clone(), names(&replies(cp, "m1")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_name_steps_name_the_thread() {
    let (cp, _runner) = connected().await;
    let (thread, named) = named_by(
        &cp,
        "scripted",
        "scripted-fast",
        "name Fix the build\nsay ok",
    )
    .await;
    assert_eq!(named, [(thread, Some("Fix the build".to_owned()))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_thread_names_reach_the_control_plane() {
    let state = tempfile::tempdir().unwrap();
    let (cp, _runner) = connected_with(|o| with_fake_codex(o, state.path())).await;
    let (thread, named) = named_by(&cp, "codex", "fake-fast", "name Fix the build\nsay ok").await;
    assert_eq!(named, [(thread, Some("Fix the build".to_owned()))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_session_titles_name_the_thread_once() {
    let state = tempfile::tempdir().unwrap();
    let (cp, _runner) = connected_with(|o| with_fake_claude(o, state.path())).await;
    let (thread, named) = named_by(&cp, "claude-code", "sonnet", "name Fix the build").await;
    assert_eq!(named, [(thread.clone(), Some("Fix the build".to_owned()))]);
    // The same title is not reported again; a new one is.
    turn_says(&cp, "m2", &thread, "say more").await;
    assert_eq!(names(&replies(&cp, "m2")), []);
    turn_says(&cp, "m3", &thread, "name Fix the tests").await;
    assert_eq!(
        names(&replies(&cp, "m3")),
        [(thread, Some("Fix the tests".to_owned()))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_agent_threads_are_named_after_their_first_message() {
    let mock = MockLlm::start(vec![MockReply::text("one"), MockReply::text("two")]).await;
    let (cp, _runner) = connected_with(|o| {
        o.arg("--sdk")
            .arg("code-agent")
            .env("OPENAI_API_KEY", "sk-unused")
            .env("OPENAI_BASE_URL", &mock.base_url())
            .env("CODE_AGENT_MODELS", "mock-model")
    })
    .await;
    let (thread, named) = named_by(
        &cp,
        "code-agent",
        "mock-model",
        "Fix   the build\nand then the tests",
    )
    .await;
    assert_eq!(named, [(thread.clone(), Some("Fix the build…".to_owned()))]);
    turn_says(&cp, "m2", &thread, "again").await;
    assert_eq!(names(&replies(&cp, "m2")), []);
}

/// The first `agent_sdk_update` for `sdk` with `status`.
async fn sdk_update(cp: &MockControlPlane, sdk: &str, status: AgentSdkStatus) -> AgentSdk {
    let sdk = sdk.to_owned();
    let m = cp
        .wait_for(
            move |m| {
                matches!(payload(m), Some(Payload::AgentSdkUpdate(s))
                    if s.name == sdk && s.status == status as i32)
            },
            WAIT,
        )
        .await
        .expect("an agent_sdk_update");
    match payload(&m) {
        Some(Payload::AgentSdkUpdate(s)) => s.clone(),
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_that_becomes_ready_after_registration_is_announced() {
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join("logged-out"), "").unwrap();
    let (cp, runner) = connected_with(|o| {
        with_fake_codex(o, state.path())
            .arg("--sdk-probe-interval")
            .arg("100ms")
    })
    .await;
    let registered = cp.registrations().remove(0).request.agent_sdks;
    assert_eq!(registered[0].status, AgentSdkStatus::Unconfigured as i32);
    create_sdk_agent(&cp, "a", "codex").await;
    send(
        &cp,
        "early",
        create_thread_request("a", "fake-fast", None, None),
    )
    .await;
    let text = expect_error(&cp, "early").await;
    assert!(text.contains("not ready"), "{text}");

    // Someone logs codex in outside the runner.
    std::fs::remove_file(state.path().join("logged-out")).unwrap();
    let update = sdk_update(&cp, "codex", AgentSdkStatus::Ready).await;
    assert!(
        update.models.iter().any(|m| m.name == "fake-fast"),
        "{update:?}\n{}",
        runner.logs()
    );
    // Requests are checked against what was announced.
    thread_ready_for(
        &cp,
        "later",
        create_thread_request("a", "fake-fast", None, None),
    )
    .await;
}

/// The mock's `serve --stdio` JSON lines carry the additions both ways:
/// `threadId` and `additionalModelInstructions` in, `threadNameUpdate` out.
#[tokio::test]
async fn stdio_json_lines_carry_the_additions() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let cp = std::sync::Arc::new(mock().await);
    let _r = RunnerProc::start(RunnerOpts::new(cp.url()));
    let (mut input_w, input_r) = tokio::io::duplex(64 * 1024);
    let (output_w, output_r) = tokio::io::duplex(1024 * 1024);
    let p = cp.clone();
    tokio::spawn(async move {
        mock_control_plane::stdio::run(&p, BufReader::new(input_r), output_w).await
    });
    let first = [
        r#"{"requestId":"r1","createAgentRequest":{"agentId":"a","agentSdk":"scripted"}}"#,
        r#"{"requestId":"r2","createThreadRequest":{"agentId":"a","model":"scripted-fast","threadId":"job-7","additionalModelInstructions":"Be brief."}}"#,
    ];
    for line in first {
        input_w
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    let mut out = BufReader::new(output_r).lines();
    let mut seen = Vec::new();
    let mut asked = false;
    let done = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = out.next_line().await {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            // The message goes once the thread is READY, as a control plane would.
            if !asked && v["event"] == "message" && v["message"]["requestId"] == "r2" {
                asked = true;
                let text = r#"{"requestId":"r3","createUserMessageRequest":{"agentId":"a","threadId":"job-7","text":"instructions\nname Job seven"}}"#;
                input_w.write_all(format!("{text}\n").as_bytes()).await.unwrap();
            }
            let finished = v["message"]["requestId"] == "r3"
                && v["message"]["turnUpdate"]["status"] == "TURN_STATUS_COMPLETED";
            seen.push(v);
            if finished {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(done, Ok(true), "{seen:#?}");
    let message = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        seen.iter()
            .any(|v| v["event"] == "message" && pred(&v["message"]))
    };
    assert!(
        message(&|m| m["threadUpdate"]["threadId"] == "job-7"),
        "{seen:#?}"
    );
    assert!(
        message(&|m| m["itemUpdate"]["text"] == "Be brief."),
        "{seen:#?}"
    );
    assert!(
        message(&|m| m["threadNameUpdate"]
            == serde_json::json!({"threadId": "job-7", "threadName": "Job seven"})),
        "{seen:#?}"
    );
}
