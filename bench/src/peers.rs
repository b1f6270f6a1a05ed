//! The peer rows: the real `codex app-server` (the pinned
//! `@openai/codex` the tests install into the target directory) driven by
//! the runner against a mock Responses API, beside the runner's own
//! `code-agent` engine against the mock Chat Completions API, with the same
//! script: each turn the model asks for one shell command
//! ([`PROOF_COMMAND`]), then answers "All done.". Both mocks answer at once,
//! so the latency is what each agent adds.
//!
//! Memory per idle thread: a codex thread is an app-server process, an
//! engine thread is a session in the runner. Both are measured the same
//! way: the proportional set size of the runner's whole process tree with
//! one thread, then with `extra` more threads (each after one turn, then
//! idle), the difference divided by `extra`.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_runner_proto::runner::client_message::Payload;
use anyhow::{Context as _, Result, bail};
use code_agent_engine::testing::{MockLlm, MockReply};
use sdk_codex::testing::{MockResponses, PROOF_COMMAND, install_codex, write_config};
use serde::Serialize;
use serde_json::json;

use crate::collector::Until;
use crate::scenarios::{Rig, user_message};
use crate::stats::{Summary, tree_pss_bytes};

/// One agent's row.
#[derive(Debug, Clone, Serialize)]
pub struct PeerFigures {
    /// User message sent → `TurnUpdate COMPLETED` (one shell call, then
    /// a text answer), after one warm-up turn.
    pub turn: Summary,
    /// PSS of the runner's process tree with one thread.
    pub tree_pss_one_thread_bytes: u64,
    /// PSS of the tree with `1 + extra_threads` idle threads.
    pub tree_pss_more_threads_bytes: u64,
    pub extra_threads: usize,
    /// (more − one) / extra: what one more idle thread costs.
    pub pss_per_idle_thread_bytes: f64,
}

/// Both rows, or why the codex one could not be measured.
#[derive(Debug, Clone, Serialize)]
pub struct Peers {
    pub code_agent: PeerFigures,
    pub codex: Result<PeerFigures, String>,
}

/// How long codex may take to become ready and to run one turn.
const CODEX_PATIENCE: Duration = Duration::from_secs(120);
/// The model both mocks serve.
const MODEL: &str = "mock-model";

/// `turns` timed turns and `extra` more idle threads for each agent.
pub async fn measure(bin: &Path, turns: usize, extra: usize) -> Result<Peers> {
    let code_agent = code_agent(bin, turns, extra).await?;
    let codex = match install_codex() {
        Ok(codex_bin) => codex(bin, &codex_bin, turns, extra)
            .await
            .map_err(|e| format!("{e:#}")),
        Err(why) => Err(format!("codex not installed: {why}")),
    };
    Ok(Peers { code_agent, codex })
}

async fn code_agent(bin: &Path, turns: usize, extra: usize) -> Result<PeerFigures> {
    let llm = MockLlm::start(Vec::new()).await;
    let rig = crate::code_agent::rig_with(bin, &llm, MODEL, &[]).await?;
    rig.create_agent_with("peer", "code-agent").await?;
    let script = || {
        llm.push(MockReply::tool_call(
            "call-1",
            "bash",
            json!({ "command": PROOF_COMMAND }),
        ));
        llm.push(MockReply::text("All done.").with_usage(100, 20));
    };
    let figures = match rig.create_threads_with("peer", 1, MODEL).await?.pop() {
        Some(thread) => run(&rig, thread, turns, extra, Duration::from_secs(30), script).await,
        None => Err(anyhow::anyhow!("no thread created")),
    };
    rig.runner.stop().await;
    figures
}

async fn codex(bin: &Path, codex_bin: &Path, turns: usize, extra: usize) -> Result<PeerFigures> {
    let responses = MockResponses::start().await?;
    let home = tempfile::tempdir()?;
    write_config(home.path(), responses.port)?;
    let codex_bin = codex_bin.to_string_lossy().into_owned();
    let home_path = home.path().to_string_lossy().into_owned();
    let args = [
        "--sdk",
        "codex",
        "--codex-bin",
        codex_bin.as_str(),
        "--codex-approval-policy",
        "never",
        "--codex-sandbox",
        "danger-full-access",
    ];
    let rig = Rig::start_with_env(bin, &args, &[("CODEX_HOME", home_path.as_str())]).await?;
    // Registration does not wait for codex's probe; the agent is refused
    // ("being probed") until the probe is done.
    let deadline = Instant::now() + CODEX_PATIENCE;
    let thread = loop {
        rig.create_agent_with("peer", "codex").await?;
        if let Ok(mut created) = rig.create_threads_with("peer", 1, MODEL).await
            && let Some(thread) = created.pop()
        {
            break thread;
        }
        if Instant::now() > deadline {
            bail!("codex never became ready\n{}", rig.runner.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let figures = run(&rig, thread, turns, extra, CODEX_PATIENCE, || ()).await;
    rig.runner.stop().await;
    figures
}

/// The measurement both rows share; `script` queues one turn's model
/// replies (codex's mock needs none: it answers by the request's shape).
async fn run(
    rig: &Rig,
    thread: String,
    turns: usize,
    extra: usize,
    patience: Duration,
    script: impl Fn(),
) -> Result<PeerFigures> {
    // Warm-up (process start, HTTP connections): not counted.
    script();
    turn(rig, &thread, patience).await?;
    let mut samples = Vec::with_capacity(turns);
    for _ in 0..turns {
        script();
        samples.push(turn(rig, &thread, patience).await?);
    }
    settle().await;
    let pid = rig.runner.pid()?;
    let one = tree_pss_bytes(pid)?;
    for t in rig.create_threads_with("peer", extra, MODEL).await? {
        script();
        turn(rig, &t, patience).await?;
    }
    settle().await;
    let more = tree_pss_bytes(pid)?;
    Ok(PeerFigures {
        turn: Summary::of(&samples),
        tree_pss_one_thread_bytes: one,
        tree_pss_more_threads_bytes: more,
        extra_threads: extra,
        pss_per_idle_thread_bytes: (more as f64 - one as f64) / extra.max(1) as f64,
    })
}

/// Lets freed memory go back and background work finish before a reading.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1000)).await;
}

/// One user message on `thread`; its time to `TurnUpdate COMPLETED`.
async fn turn(rig: &Rig, thread: &str, patience: Duration) -> Result<Duration> {
    let rid = rig.rid("peer-turn");
    let request = rig.collector.request(
        &rid,
        user_message("peer", thread, "run the proof"),
        Until::TurnCompleted,
    );
    let (first, sent, _, done) = tokio::time::timeout(patience, request)
        .await
        .context("the turn did not complete in time")??;
    if let Some(Payload::RequestError(e)) = first.payload {
        bail!("turn refused: {}", e.error_message);
    }
    Ok(done.duration_since(sent))
}
