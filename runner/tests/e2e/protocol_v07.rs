//! Protocol 0.7 (thread-only) through the whole runner: the binary with
//! `--protocol 0.7` against a control plane built from the 0.7 definitions
//! ([`crate::v07_cp`]), which checks every message by 0.7's rules.
//! Registration (model names unique across SDKs), threads created by model
//! for the scripted SDK, the code-agent engine and codex (the fake), a turn's
//! items and token usage, the `cli_secret` in the agent's environment and
//! masked everywhere, refusals, interrupt, steering, delete, heartbeat, a
//! restart on the same state dir, and acknowledged delivery across a drop.

use std::time::Duration;

use agent_runner_proto::runner_v07::client_message::Payload;
use agent_runner_proto::runner_v07::server_message::Request;
use agent_runner_proto::runner_v07::*;
use code_agent_engine::testing::{MockLlm, MockReply};
use serde_json::json;

use crate::support::*;
use crate::v07_cp::V07ControlPlane;

const SECRET: &str = "cli-secret-e2e-0123456789abcdef";
const API_URL: &str = "http://127.0.0.1:9/agent-api";
/// The scripted SDK's implicit agent (where its threads' workspaces are).
const SCRIPTED_AGENT: &str = "_threads-scripted";

fn create_thread(thread: &str, model: &str, secret: &str) -> Request {
    Request::CreateThreadRequest(CreateThreadRequest {
        thread_id: thread.into(),
        model: model.into(),
        cli_secret: secret.into(),
        ..Default::default()
    })
}

fn message(thread: &str, text: &str, allow_steer: bool) -> Request {
    Request::CreateUserMessageRequest(CreateUserMessageRequest {
        thread_id: thread.into(),
        text: text.into(),
        allow_steer,
        model: None,
        model_reasoning_level: None,
    })
}

fn error_of(m: &ClientMessage) -> Option<&str> {
    match &m.payload {
        Some(Payload::RequestError(e)) => Some(&e.error_message),
        _ => None,
    }
}

fn turn_ended(m: &ClientMessage) -> bool {
    matches!(&m.payload, Some(Payload::TurnUpdate(t)) if t.status == TurnStatus::Completed as i32)
}

fn said(msgs: &[ClientMessage]) -> Vec<String> {
    msgs.iter()
        .filter_map(|m| match &m.payload {
            Some(Payload::ItemUpdate(i))
                if i.status == ItemStatus::Completed as i32
                    && i.item_type == ItemType::AgentMessage as i32 =>
            {
                i.text.clone()
            }
            _ => None,
        })
        .collect()
}

fn outputs(msgs: &[ClientMessage]) -> Vec<String> {
    msgs.iter()
        .filter_map(|m| match &m.payload {
            Some(Payload::ItemUpdate(i)) if i.status == ItemStatus::Completed as i32 => i
                .command_execution_item
                .as_ref()
                .and_then(|c| c.output.clone()),
            _ => None,
        })
        .collect()
}

/// A runner speaking 0.7 against `cp`, with `extra` flags.
fn v07_runner(cp: &V07ControlPlane, extra: &[&str]) -> RunnerProc {
    let mut opts = RunnerOpts::new(cp.url())
        .arg("--protocol")
        .arg("0.7")
        .arg("--agent-api-url")
        .arg(API_URL);
    for a in extra {
        opts = opts.arg(a);
    }
    RunnerProc::start(opts)
}

/// Creates `thread` on `model`; the READY update.
async fn ready(cp: &V07ControlPlane, rid: &str, thread: &str, model: &str) {
    cp.send(rid, create_thread(thread, model, SECRET));
    let m = cp
        .wait_for("the thread's update", |m| {
            m.request_id.as_deref() == Some(rid)
        })
        .await;
    assert!(
        matches!(&m.payload, Some(Payload::ThreadUpdate(t)) if t.thread_id == thread && t.status == ThreadStatus::Ready as i32),
        "{m:?}"
    );
}

/// Runs `text` as a turn of `thread`; its messages once it ended.
async fn turn(cp: &V07ControlPlane, rid: &str, thread: &str, text: &str) -> Vec<ClientMessage> {
    cp.send(rid, message(thread, text, false));
    cp.wait_for("the turn's end", |m| {
        m.request_id.as_deref() == Some(rid) && turn_ended(m)
    })
    .await;
    cp.replies(rid)
}

/// Creates `thread` on `model`, again until it is READY: an SDK probed
/// after registration announces its models a moment later.
async fn created(cp: &V07ControlPlane, thread: &str, model: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    for attempt in 0.. {
        let rid = format!("create-{attempt}");
        cp.send(&rid, create_thread(thread, model, SECRET));
        let m = cp
            .wait_for("the answer", |m| {
                m.request_id.as_deref() == Some(rid.as_str())
            })
            .await;
        if matches!(m.payload, Some(Payload::ThreadUpdate(_))) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{m:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Nothing any message carries, in any field, holds the secret.
fn assert_secret_nowhere(cp: &V07ControlPlane) {
    for m in cp.received() {
        assert!(
            !format!("{m:?}").contains(SECRET),
            "the secret leaked: {m:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_is_0_7_with_unique_model_names_and_a_refusal_is_all_there_is() {
    let llm = MockLlm::start(vec![]).await;
    let cp = V07ControlPlane::start(true).await;
    let runner = RunnerProc::start(
        RunnerOpts::new(cp.url())
            .arg("--protocol")
            .arg("0.7")
            .arg("--sdk")
            .arg("scripted")
            .arg("--sdk")
            .arg("code-agent")
            .env("OPENAI_API_KEY", "sk-unused")
            .env("OPENAI_BASE_URL", &llm.base_url())
            .env("CODE_AGENT_MODELS", "mock-model,scripted-fast"),
    );
    cp.wait_channels(1).await;
    let reg = &cp.registrations()[0];
    assert!(
        reg.features.iter().any(|f| f == "acked-delivery/1"),
        "{reg:?}"
    );
    // The latest model names of each SDK: registration, then any update.
    let names = |sdk: &str| -> Vec<String> {
        let mut latest: Option<Vec<String>> = None;
        for s in &reg.agent_sdks {
            if s.name == sdk {
                latest = Some(s.models.iter().map(|m| m.name.clone()).collect());
            }
        }
        for m in cp.received() {
            if let Some(Payload::AgentSdkUpdate(s)) = &m.payload
                && s.name == sdk
            {
                latest = Some(s.models.iter().map(|m| m.name.clone()).collect());
            }
        }
        latest.unwrap_or_default()
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while names("code-agent").is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(names("scripted"), ["scripted-fast", "scripted-slow"]);
    assert_eq!(
        names("code-agent"),
        ["mock-model", "code-agent/scripted-fast"]
    );

    // A qualified name goes to its SDK, a plain one to the first.
    ready(&cp, "c1", "t-qualified", "code-agent/scripted-fast").await;
    ready(&cp, "c2", "t-plain", "scripted-fast").await;
    assert!(
        runner
            .thread_workspace("_threads-code-agent", "t-qualified")
            .is_dir()
    );
    assert!(runner.thread_workspace(SCRIPTED_AGENT, "t-plain").is_dir());

    // Refused with one RequestError naming the field, and nothing else.
    cp.send(
        "bad-secret",
        create_thread("t-nosecret", "scripted-fast", ""),
    );
    cp.send(
        "bad-model",
        create_thread("t-nomodel", "no-such-model", SECRET),
    );
    cp.send("hb", Request::HeartbeatRequest(HeartbeatRequest {}));
    cp.wait_for("the heartbeat", |m| {
        m.request_id.as_deref() == Some("hb")
            && matches!(m.payload, Some(Payload::HeartbeatResponse(_)))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (rid, field) in [
        ("bad-secret", "create_thread_request.cli_secret"),
        ("bad-model", "create_thread_request.model"),
    ] {
        let replies = cp.replies(rid);
        assert_eq!(replies.len(), 1, "{rid}: {replies:?}");
        let text = error_of(&replies[0]).expect("a RequestError");
        assert!(text.contains(field), "{rid}: {text}");
    }
    for m in cp.received() {
        if let Some(Payload::ThreadUpdate(t)) = &m.payload {
            assert!(!t.thread_id.starts_with("t-no"), "{m:?}");
        }
    }
    assert!(
        !runner
            .thread_workspace(SCRIPTED_AGENT, "t-nosecret")
            .exists()
    );
    cp.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_thread_has_its_secret_in_its_environment_masked_everywhere_and_after_a_restart()
{
    let cp = V07ControlPlane::start(true).await;
    let runner = v07_runner(&cp, &["--sdk", "scripted"]);
    cp.wait_channels(1).await;
    ready(&cp, "c1", "t1", "scripted-fast").await;
    let script = "run printenv AGENT_API_TOKEN\n\
                  run printenv AGENT_API_TOKEN > token.txt; printenv AGENT_API_URL > url.txt\n\
                  usage 10 5\n\
                  say done";
    let msgs = turn(&cp, "m1", "t1", script).await;
    assert_eq!(said(&msgs), ["done"]);
    let out = outputs(&msgs);
    assert!(out[0].contains("***"), "masked in the item: {out:?}");
    let ws = runner.thread_workspace(SCRIPTED_AGENT, "t1");
    assert_eq!(
        std::fs::read_to_string(ws.join("token.txt"))
            .unwrap()
            .trim(),
        SECRET
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("url.txt")).unwrap().trim(),
        API_URL
    );
    // Items and usage name their thread and turn.
    let mut turn_ids = std::collections::BTreeSet::new();
    let mut usage = 0;
    for m in &msgs {
        match &m.payload {
            Some(Payload::ItemUpdate(i)) => {
                assert_eq!(i.thread_id, "t1");
                turn_ids.insert(i.sdk_turn_id.clone());
            }
            Some(Payload::ThreadTokenUsageUpdate(u)) => {
                assert_eq!(u.thread_id, "t1");
                turn_ids.insert(u.sdk_turn_id.clone());
                assert_eq!(u.total_usage.as_ref().map(|t| t.total_tokens), Some(15));
                usage += 1;
            }
            _ => {}
        }
    }
    assert_eq!(usage, 1);
    assert_eq!(turn_ids.len(), 1, "{turn_ids:?}");
    assert!(!runner.logs().contains(SECRET), "the secret is in the log");
    // No process's command line holds it while the thread's agent runs.
    cp.send("m-argv", message("t1", "sleep 1500", false));
    cp.wait_for("the sleeping turn", |m| {
        m.request_id.as_deref() == Some("m-argv")
    })
    .await;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline);
            assert!(!text.contains(SECRET), "in argv: {text}");
        }
    }
    cp.wait_for("the sleeping turn's end", |m| {
        m.request_id.as_deref() == Some("m-argv") && turn_ended(m)
    })
    .await;

    // A restart on the same state dir: the thread is back, its secret too.
    runner.signal(libc::SIGTERM);
    let mut runner = runner;
    assert_eq!(runner.wait_exit(WAIT).await, Some(0), "{}", runner.logs());
    let again = runner.start_again();
    cp.wait_channels(2).await;
    let msgs = turn(
        &cp,
        "m2",
        "t1",
        "run printenv AGENT_API_TOKEN > again.txt\nsay back",
    )
    .await;
    assert_eq!(said(&msgs), ["back"]);
    assert_eq!(
        std::fs::read_to_string(ws.join("again.txt"))
            .unwrap()
            .trim(),
        SECRET
    );
    // Another thread gets its own secret, never t1's.
    cp.send(
        "c2",
        create_thread("t2", "scripted-slow", "another-secret-0000000000"),
    );
    cp.wait_for("t2 ready", |m| m.request_id.as_deref() == Some("c2"))
        .await;
    turn(&cp, "m3", "t2", "run printenv AGENT_API_TOKEN > mine.txt").await;
    let other = std::fs::read_to_string(
        again
            .thread_workspace(SCRIPTED_AGENT, "t2")
            .join("mine.txt"),
    )
    .unwrap();
    assert_eq!(other.trim(), "another-secret-0000000000");
    assert!(!again.logs().contains(SECRET), "the secret is in the log");
    // The transcripts hold the masked updates; the store alone the secret.
    let transcripts = again.dirs.path().join("state/transcripts");
    let (mut seen, mut dirs) = (0, vec![transcripts.clone()]);
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read(&path).unwrap_or_default();
            assert!(!String::from_utf8_lossy(&text).contains(SECRET), "{path:?}");
            seen += usize::from(!text.is_empty());
        }
    }
    assert!(seen > 0, "no transcript in {}", transcripts.display());
    assert_secret_nowhere(&cp);
    cp.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_interrupt_and_delete_find_the_thread_by_its_id_alone() {
    let cp = V07ControlPlane::start(false).await;
    let _runner = v07_runner(&cp, &["--sdk", "scripted"]);
    cp.wait_channels(1).await;
    ready(&cp, "c1", "t1", "scripted-fast").await;
    // Steering: the second message joins the running turn.
    cp.send("m1", message("t1", "sleep 1500\nsay first", false));
    cp.wait_for("the turn's start", |m| {
        m.request_id.as_deref() == Some("m1") && matches!(&m.payload, Some(Payload::TurnUpdate(_)))
    })
    .await;
    cp.send("s1", message("t1", "say steered", true));
    // Once steered, the turn's updates carry the steering message's id.
    cp.wait_for("the turn's end", |m| {
        matches!(m.request_id.as_deref(), Some("m1" | "s1")) && turn_ended(m)
    })
    .await;
    let mut all = cp.replies("m1");
    all.extend(cp.replies("s1"));
    let mut words = said(&all);
    words.sort();
    assert_eq!(words, ["first", "steered"], "{all:#?}");
    // Interrupt: a long turn ends at once.
    cp.send("m2", message("t1", "sleep 60000", false));
    cp.wait_for("the long turn's start", |m| {
        m.request_id.as_deref() == Some("m2") && matches!(&m.payload, Some(Payload::TurnUpdate(_)))
    })
    .await;
    let asked = std::time::Instant::now();
    cp.send(
        "i1",
        Request::InterruptTurnRequest(InterruptTurnRequest {
            thread_id: "t1".into(),
        }),
    );
    // The end answers the interrupt.
    cp.wait_for("the interrupted turn's end", |m| {
        matches!(m.request_id.as_deref(), Some("m2" | "i1")) && turn_ended(m)
    })
    .await;
    assert!(asked.elapsed() < Duration::from_secs(30));
    // Delete, then the thread is unknown.
    cp.send(
        "d1",
        Request::DeleteThreadRequest(DeleteThreadRequest {
            thread_id: "t1".into(),
        }),
    );
    let m = cp
        .wait_for("the deletion", |m| m.request_id.as_deref() == Some("d1"))
        .await;
    assert!(
        matches!(&m.payload, Some(Payload::ThreadUpdate(t)) if t.status == ThreadStatus::Deleted as i32),
        "{m:?}"
    );
    cp.send("m3", message("t1", "say gone", false));
    let m = cp
        .wait_for("the refusal", |m| m.request_id.as_deref() == Some("m3"))
        .await;
    assert!(
        error_of(&m).is_some_and(|e| e.contains("unknown thread")),
        "{m:?}"
    );
    // A legacy (not acknowledging) 0.7 control plane gets no sequences.
    assert!(cp.received().iter().all(|m| m.sequence == 0));
    cp.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_delivery_loses_and_repeats_nothing_across_a_dropped_channel() {
    let cp = V07ControlPlane::start(true).await;
    let _runner = v07_runner(&cp, &["--sdk", "scripted"]);
    cp.wait_channels(1).await;
    ready(&cp, "c1", "t1", "scripted-fast").await;
    let script: String = (0..30).map(|i| format!("sleep 40\nsay n{i}\n")).collect();
    cp.send("m1", message("t1", &script, false));
    cp.wait_for("the first words", |m| {
        said(std::slice::from_ref(m)).iter().any(|s| s == "n5")
    })
    .await;
    cp.drop_channel();
    cp.wait_channels(2).await;
    cp.wait_for("the turn's end", |m| {
        m.request_id.as_deref() == Some("m1") && turn_ended(m)
    })
    .await;
    let words = said(&cp.replies("m1"));
    let expected: Vec<String> = (0..30).map(|i| format!("n{i}")).collect();
    assert_eq!(words, expected, "every word once, in order");
    let sequences: Vec<u64> = cp.received().iter().map(|m| m.sequence).collect();
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
    assert!(cp.registrations().len() >= 2, "the runner registered again");
    // The acknowledgements (messages with no request id, no request) were
    // read as such: nothing answered them.
    assert!(
        cp.received().iter().all(|m| error_of(m).is_none()),
        "{:#?}",
        cp.received()
    );
    cp.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_agent_thread_by_model_runs_a_command_with_its_secret() {
    let command = "printenv AGENT_API_TOKEN > token.txt && echo wrote";
    let llm = MockLlm::start(vec![
        MockReply::tool_call("call_1", "bash", json!({ "command": command })).with_usage(40, 8),
        MockReply::text("All done.").with_usage(60, 3),
    ])
    .await;
    let cp = V07ControlPlane::start(true).await;
    let runner = RunnerProc::start(
        RunnerOpts::new(cp.url())
            .arg("--protocol")
            .arg("0.7")
            .arg("--sdk")
            .arg("code-agent")
            .env("OPENAI_API_KEY", "sk-e2e-unused")
            .env("OPENAI_BASE_URL", &llm.base_url())
            .env("CODE_AGENT_MODELS", "mock-model"),
    );
    cp.wait_channels(1).await;
    // The engine's models may be announced after registration.
    created(&cp, "t1", "mock-model").await;
    let msgs = turn(&cp, "m1", "t1", "write the token").await;
    assert_eq!(said(&msgs), ["All done."], "{msgs:#?}");
    assert!(
        msgs.iter().any(|m| matches!(&m.payload, Some(Payload::ThreadTokenUsageUpdate(u)) if u.thread_id == "t1" && !u.sdk_turn_id.is_empty())),
        "{msgs:#?}"
    );
    let ws = runner.thread_workspace("_threads-code-agent", "t1");
    assert_eq!(
        std::fs::read_to_string(ws.join("token.txt"))
            .unwrap()
            .trim(),
        SECRET
    );
    assert_secret_nowhere(&cp);
    cp.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_thread_by_model_states_the_agent_api_in_its_instructions() {
    let state = tempfile::tempdir().unwrap();
    let cp = V07ControlPlane::start(true).await;
    let _runner = RunnerProc::start(crate::fakes::with_fake_codex(
        RunnerOpts::new(cp.url())
            .arg("--protocol")
            .arg("0.7")
            .arg("--agent-api-url")
            .arg(API_URL),
        state.path(),
    ));
    cp.wait_channels(1).await;
    created(&cp, "t1", "fake-fast").await;
    let msgs = turn(&cp, "m1", "t1", "instructions\nusage").await;
    let words = said(&msgs);
    assert!(
        words
            .iter()
            .any(|w| w.contains(API_URL) && w.contains("AGENT_API_TOKEN")),
        "{words:?}"
    );
    assert!(
        msgs.iter().any(|m| matches!(&m.payload, Some(Payload::ThreadTokenUsageUpdate(u)) if u.thread_id == "t1" && !u.sdk_turn_id.is_empty())),
        "{msgs:#?}"
    );
    assert_secret_nowhere(&cp);
    cp.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_and_status_name_the_protocol_and_where_git_credentials_come_from() {
    let cp = V07ControlPlane::start(true).await;
    let (code, report, stderr) =
        crate::doctor::doctor(&cp.url(), &[("AGENT_RUNNER_PROTOCOL", "0.7")]).await;
    assert_eq!(code, 0, "{report:#} {stderr}");
    let protocol = crate::doctor::find(&report, "checks", "check", "protocol");
    assert!(
        protocol["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("0.7")),
        "{protocol:#}"
    );
    let git = crate::doctor::find(&report, "checks", "check", "git credentials");
    assert!(
        git["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("none")),
        "{git:#}"
    );
    let runner = v07_runner(&cp, &["--sdk", "scripted", "--health-addr", "127.0.0.1:0"]);
    cp.wait_channels(1).await;
    let addr = crate::health::health_addr(&runner).await;
    let (status, body) = crate::health::wait_get(&addr, "/status", |s, _| s == 200).await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
    assert_eq!(json["connection"]["protocol"], "0.7", "{json:#}");
    cp.assert_clean();
}
