//! Engine state belongs to its thread, through the whole runner: the
//! runner binary with `--sdk code-agent` (the embedded engine), the mock
//! control plane, and the mock model driving the engine's `cron` tool. One
//! thread schedules a job that writes into its workspace; another thread's
//! model lists, runs and deletes it by name and reaches nothing; the job
//! is intact and runs for its own thread; deleting the thread takes its
//! jobs, so a thread re-created with the same id (the control plane
//! chooses it) starts with none.

use std::path::Path;

use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use code_agent_engine::testing::{MockLlm, MockReply};
use mock_control_plane::MockControlPlane;
use serde_json::json;

use crate::support::*;

pub(crate) const MODEL: &str = "mock-model";
/// The thread id the control plane gives the job's owner, twice.
const OWNER: &str = "cron-owner";

fn cron(action: &str, name: &str) -> serde_json::Value {
    json!({"action": action, "name": name})
}

fn script() -> Vec<MockReply> {
    vec![
        // The owner schedules a job that leaves a mark in its workspace.
        MockReply::tool_call(
            "a1",
            "cron",
            json!({"action": "create", "name": "nightly", "schedule": "every day at 3am",
                   "command": "echo mine > cron-ran.txt"}),
        ),
        MockReply::text("scheduled"),
        // Another thread's model goes after it by name.
        MockReply::tool_call("b1", "cron", json!({"action": "list"})),
        MockReply::tool_call("b2", "cron", cron("run", "nightly")),
        MockReply::tool_call("b3", "cron", cron("delete", "nightly")),
        MockReply::text("tried"),
        // The owner still has it, and runs it.
        MockReply::tool_call("a2", "cron", cron("run", "nightly")),
        MockReply::text("ran"),
        // The owner's id again, after a delete: nothing inherited.
        MockReply::tool_call("r1", "cron", json!({"action": "list"})),
        MockReply::tool_call("r2", "cron", cron("run", "nightly")),
        MockReply::text("listed"),
    ]
}

/// The texts of the completed tool-call items of the turn `rid`.
fn tool_texts(cp: &MockControlPlane, rid: &str) -> Vec<String> {
    items(&replies(cp, rid))
        .into_iter()
        .filter(|(k, s, _)| *k == ItemType::McpToolCall && *s == ItemStatus::Completed)
        .filter_map(|(_, _, t)| t)
        .collect()
}

/// Creates code-agent thread `id` (or one the runner names) of agent `c`.
async fn thread(cp: &MockControlPlane, rid: &str, id: Option<&str>) -> String {
    let request = Request::CreateThreadRequest(CreateThreadRequest {
        agent_id: "c".into(),
        model: MODEL.into(),
        thread_id: id.map(str::to_owned),
        ..Default::default()
    });
    send(cp, rid, request).await;
    let m = reply(cp, rid).await;
    match payload(&m) {
        Some(client_message::Payload::ThreadUpdate(u))
            if u.status == ThreadStatus::Ready as i32 =>
        {
            u.thread_id.clone()
        }
        _ => panic!("thread {rid}: {m:?}"),
    }
}

async fn turn(cp: &MockControlPlane, rid: &str, thread: &str) -> Vec<String> {
    send(cp, rid, user_message("c", thread, "go", false)).await;
    turn_completed(cp, rid).await;
    tool_texts(cp, rid)
}

fn mark(ws: &Path) -> Option<String> {
    std::fs::read_to_string(ws.join("cron-ran.txt")).ok()
}

/// A connected runner whose embedded engine talks to `llm` (model
/// [`MODEL`]), with scripted agent `a` and code-agent agent `c`;
/// `as_agent_uid`: its agents run as `agent_uid::AGENT_UID`.
pub(crate) async fn code_agent_runner(
    llm: &MockLlm,
    as_agent_uid: bool,
) -> (MockControlPlane, RunnerProc) {
    let configure = |o: RunnerOpts| {
        o.arg("--sdk")
            .arg("scripted")
            .arg("--sdk")
            .arg("code-agent")
            .env("OPENAI_API_KEY", "sk-e2e-engine")
            .env("OPENAI_BASE_URL", &llm.base_url())
            .env("CODE_AGENT_MODELS", MODEL)
    };
    let (cp, runner) = if as_agent_uid {
        crate::agent_uid::agent_as_uid(configure).await
    } else {
        agent_with(configure).await
    };
    create_sdk_agent(&cp, "c", "code-agent").await;
    (cp, runner)
}

/// The whole story; `as_agent_uid`: the runner's agents run as
/// `agent_uid::AGENT_UID`.
pub(crate) async fn cron_stays_with_its_thread(as_agent_uid: bool) {
    let llm = MockLlm::start(script()).await;
    let (cp, runner) = code_agent_runner(&llm, as_agent_uid).await;
    let owner = thread(&cp, "t-owner", Some(OWNER)).await;
    let other = thread(&cp, "t-other", None).await;
    let owner_ws = runner.thread_workspace("c", &owner);
    let other_ws = runner.thread_workspace("c", &other);

    let made = turn(&cp, "m-owner", &owner).await;
    assert!(
        made.len() == 1 && !made[0].contains("error:"),
        "{made:?}\n{}",
        runner.logs()
    );

    let tried = turn(&cp, "m-other", &other).await;
    assert_eq!(tried.len(), 3, "{tried:?}");
    assert!(tried[0].contains("no cron jobs"), "{tried:?}");
    for t in &tried[1..] {
        assert!(t.contains("error: no cron job named"), "{tried:?}");
    }
    assert_eq!(mark(&owner_ws), None, "another thread ran the owner's job");
    assert_eq!(mark(&other_ws), None);

    let ran = turn(&cp, "m-owner-2", &owner).await;
    assert!(ran.len() == 1 && !ran[0].contains("error:"), "{ran:?}");
    assert_eq!(mark(&owner_ws).as_deref(), Some("mine\n"), "{ran:?}");

    send(
        &cp,
        "d-owner",
        Request::DeleteThreadRequest(DeleteThreadRequest {
            agent_id: "c".into(),
            thread_id: owner.clone(),
        }),
    )
    .await;
    reply(&cp, "d-owner").await;
    let again = thread(&cp, "t-again", Some(OWNER)).await;
    assert_eq!(again, owner);
    let listed = turn(&cp, "m-again", &again).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed[0].contains("no cron jobs"), "{listed:?}");
    assert!(listed[1].contains("error: no cron job named"), "{listed:?}");
    assert_eq!(llm.remaining(), 0);
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_jobs_stay_with_the_thread_that_made_them() {
    cron_stays_with_its_thread(false).await;
}
