//! The `code-agent` SDK measured like the scripted one: the real runner
//! with its embedded engine, a mock OpenAI-compatible model on loopback that
//! answers at once (real SSE), driven through the mock control plane. The
//! figures are what the engine and its adapter add to a turn (a reply, and
//! a reply after one `bash` tool call), and what engine sessions cost in
//! memory.
//!
//! The engine's overhead is reported net of the model: the same run
//! times the mock model itself on the very requests the engine sent during
//! the timed turns ([`ModelReplay`]: each recorded body encoded before the
//! clock starts, request sent → stream ended, the same replies), and
//! reports turn − model per percentile; and what a session save costs,
//! timed on the session files the engine wrote ([`session_save_times`],
//! [`session_step_times`]).

use std::path::Path;
use std::time::{Duration, Instant};

use agent_runner_proto::runner::client_message::Payload;
use anyhow::{Context as _, Result, bail};
use code_agent_engine::testing::{
    MockLlm, MockReply, ModelReplay, session_save_times, session_step_times,
};
use serde::Serialize;
use serde_json::json;

use crate::collector::Until;
use crate::scenarios::{Rig, user_message};
use crate::stats::Summary;

const MODEL: &str = "bench-model";

#[derive(Debug, Clone, Serialize)]
pub struct CodeAgentFigures {
    /// User message sent → `TurnUpdate COMPLETED`, the model answering text.
    pub text_turn: Summary,
    /// The same when the model first asks for `bash` (`true`), then answers.
    pub tool_turn: Summary,
    /// The tool turn again with `--sandbox off`, on a thread with the same
    /// history (as many text turns first): what the thread sandbox adds to
    /// starting the shell (Landlock, capabilities). The shell is born in
    /// the thread's cgroup either way.
    pub tool_turn_unsandboxed: Summary,
    /// The mock model alone on each text turn's recorded request (request
    /// sent → stream ended).
    pub model_text: Summary,
    /// The tool turn's two model calls (tool call, then text), each on its
    /// recorded request, summed.
    pub model_tool: Summary,
    /// One session snapshot (JSON, temp file, fsync, rename) of a session
    /// after one turn, and its size.
    pub save_fresh: Summary,
    pub save_fresh_bytes: u64,
    /// The same for the measured thread's session after every timed turn.
    pub save_long: Summary,
    pub save_long_bytes: u64,
    /// One step appended to that session's log (its last two messages, what
    /// a text turn adds): what a save costs between snapshots.
    pub step_long: Summary,
    pub step_long_bytes: u64,
    /// RSS once registered (the engine starts at registration).
    pub idle_rss_bytes: u64,
    /// RSS with this many idle threads (engine FILE sessions), each after one turn.
    pub with_sessions: Vec<(usize, u64)>,
}

/// `turns` text turns and `turns` tool turns on one thread, then the
/// footprint at each of `levels` threads.
pub async fn measure(bin: &Path, turns: usize, levels: &[usize]) -> Result<CodeAgentFigures> {
    let llm = MockLlm::start(Vec::new()).await;
    let base = llm.base_url();
    let rig = rig_with(bin, &llm, MODEL, &[]).await?;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let idle_rss_bytes = rig.runner.rss()?;
    rig.create_agent_with("bench", "code-agent").await?;
    let thread = rig.create_threads_with("bench", 1, MODEL).await?;
    let Some(thread) = thread.first().cloned() else {
        bail!("no thread created");
    };

    // Warm-up (engine session, HTTP connection pool): not counted.
    llm.push(MockReply::text("ok").with_usage(10, 1));
    turn(&rig, &thread).await?;

    let first_text = llm.requests().len();
    let mut text = Vec::with_capacity(turns);
    for _ in 0..turns {
        llm.push(MockReply::text("ok").with_usage(10, 1));
        text.push(turn(&rig, &thread).await?);
    }
    let first_tool = llm.requests().len();
    let mut tool = Vec::with_capacity(turns);
    for i in 0..turns {
        llm.push(MockReply::tool_call(
            &format!("call-{i}"),
            "bash",
            json!({"command": "true"}),
        ));
        llm.push(MockReply::text("done").with_usage(20, 1));
        tool.push(turn(&rig, &thread).await?);
    }

    // The mock model alone, on the requests the engine sent.
    let mut sent = llm.requests();
    let tool_bodies = sent.split_off(first_tool);
    let text_bodies = sent.split_off(first_text);
    let replay = ModelReplay::new(&base).map_err(anyhow::Error::msg)?;
    let mut model_text = Vec::with_capacity(text_bodies.len());
    for body in &text_bodies {
        llm.push(MockReply::text("ok").with_usage(10, 1));
        model_text.push(replay.time(body).await.map_err(anyhow::Error::msg)?);
    }
    let mut model_tool = Vec::with_capacity(turns);
    for pair in tool_bodies.chunks(2) {
        llm.push(MockReply::tool_call(
            "call-x",
            "bash",
            json!({"command": "true"}),
        ));
        llm.push(MockReply::text("done").with_usage(20, 1));
        let mut both = Duration::ZERO;
        for body in pair {
            both += replay.time(body).await.map_err(anyhow::Error::msg)?;
        }
        model_tool.push(both);
    }
    let (model_text, model_tool) = (Summary::of(&model_text), Summary::of(&model_tool));
    let sessions = rig.runner.dirs.path().join("state/code-agent/sessions");
    let long_file = sessions.join(format!("{thread}.json"));
    let save_runs = turns.clamp(10, 100);
    let (save_long, save_long_bytes) = save_cost(&long_file, save_runs)?;
    let (step_times, step_long_bytes) =
        session_step_times(&long_file, save_runs, 2).map_err(anyhow::Error::msg)?;
    let step_long = Summary::of(&step_times);

    let mut with_sessions = Vec::new();
    let mut fresh_file = None;
    let mut have = 1;
    for &level in levels {
        let new = rig
            .create_threads_with("bench", level.saturating_sub(have), MODEL)
            .await?;
        for t in &new {
            llm.push(MockReply::text("ok").with_usage(10, 1));
            turn(&rig, t).await?;
            fresh_file.get_or_insert_with(|| sessions.join(format!("{t}.json")));
        }
        have += new.len();
        tokio::time::sleep(Duration::from_millis(500)).await;
        with_sessions.push((have, rig.runner.rss()?));
    }
    let (save_fresh, save_fresh_bytes) = match &fresh_file {
        Some(file) => save_cost(file, save_runs)?,
        None => (Summary::of(&[]), 0),
    };
    rig.runner.stop().await;
    let tool_turn_unsandboxed = Summary::of(&unsandboxed_tool_turns(bin, &llm, turns).await?);
    Ok(CodeAgentFigures {
        text_turn: Summary::of(&text),
        tool_turn: Summary::of(&tool),
        tool_turn_unsandboxed,
        model_text,
        model_tool,
        save_fresh,
        save_fresh_bytes,
        save_long,
        save_long_bytes,
        step_long,
        step_long_bytes,
        idle_rss_bytes,
        with_sessions,
    })
}

/// A runner with the `code-agent` SDK (and `extra` flags) whose engine
/// calls `llm` for `model`.
pub async fn rig_with(bin: &Path, llm: &MockLlm, model: &str, extra: &[&str]) -> Result<Rig> {
    let base = llm.base_url();
    let env = [
        ("OPENAI_BASE_URL", base.as_str()),
        ("OPENAI_API_KEY", "bench-key"),
        ("CODE_AGENT_MODELS", model),
    ];
    let mut args = vec!["--sdk", "code-agent"];
    args.extend_from_slice(extra);
    Rig::start_with_env(bin, &args, &env).await
}

/// One user message on `thread`; its time to `TurnUpdate COMPLETED`.
async fn turn(rig: &Rig, thread: &str) -> Result<Duration> {
    let rid = rig.rid("ca-turn");
    let (first, sent, _, done): (_, Instant, _, Instant) = rig
        .collector
        .request(
            &rid,
            user_message("bench", thread, "go"),
            Until::TurnCompleted,
        )
        .await?;
    if let Some(Payload::RequestError(e)) = first.payload {
        bail!("code-agent turn refused: {}", e.error_message);
    }
    Ok(done.duration_since(sent))
}

/// `turns` tool turns on a thread of a runner with `--sandbox off`,
/// against `llm`, after the same history as the sandboxed ones had (one
/// warm-up and `turns` text turns, not timed): a request carries the whole
/// history, so a shorter one would be cheaper for that reason alone.
async fn unsandboxed_tool_turns(bin: &Path, llm: &MockLlm, turns: usize) -> Result<Vec<Duration>> {
    let rig = rig_with(bin, llm, MODEL, &["--sandbox", "off"]).await?;
    rig.create_agent_with("bench", "code-agent").await?;
    let Some(thread) = rig.create_threads_with("bench", 1, MODEL).await?.pop() else {
        bail!("no thread created");
    };
    for _ in 0..turns {
        llm.push(MockReply::text("ok").with_usage(10, 1));
        turn(&rig, &thread).await?;
    }
    let mut samples = Vec::with_capacity(turns);
    for i in 0..=turns {
        llm.push(MockReply::tool_call(
            &format!("call-{i}"),
            "bash",
            json!({"command": "true"}),
        ));
        llm.push(MockReply::text("done").with_usage(20, 1));
        let took = turn(&rig, &thread).await?;
        if i > 0 {
            samples.push(took);
        }
    }
    rig.runner.stop().await;
    Ok(samples)
}

/// One snapshot's duration, `runs` times, of the session in `file`, and
/// the snapshot's size.
fn save_cost(file: &Path, runs: usize) -> Result<(Summary, u64)> {
    std::fs::metadata(file).with_context(|| format!("the session file {}", file.display()))?;
    let (times, bytes) = session_save_times(file, runs).map_err(anyhow::Error::msg)?;
    Ok((Summary::of(&times), bytes))
}
