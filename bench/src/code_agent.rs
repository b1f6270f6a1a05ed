//! The `code-agent` SDK measured like the scripted one: the real runner
//! with its embedded engine, a mock OpenAI-compatible model on loopback that
//! answers at once (real SSE), driven through the mock control plane. The
//! figures are what the engine and its adapter add to a turn (a reply, and
//! a reply after one `bash` tool call), and what engine sessions cost in
//! memory.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_runner_proto::runner::client_message::Payload;
use anyhow::{Result, bail};
use code_agent_engine::testing::{MockLlm, MockReply};
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
    let env = [
        ("OPENAI_BASE_URL", base.as_str()),
        ("OPENAI_API_KEY", "bench-key"),
        ("CODE_AGENT_MODELS", MODEL),
    ];
    let rig = Rig::start_with_env(bin, &["--sdk", "code-agent"], &env).await?;
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

    let mut text = Vec::with_capacity(turns);
    for _ in 0..turns {
        llm.push(MockReply::text("ok").with_usage(10, 1));
        text.push(turn(&rig, &thread).await?);
    }
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

    let mut with_sessions = Vec::new();
    let mut have = 1;
    for &level in levels {
        let new = rig
            .create_threads_with("bench", level.saturating_sub(have), MODEL)
            .await?;
        for t in &new {
            llm.push(MockReply::text("ok").with_usage(10, 1));
            turn(&rig, t).await?;
        }
        have += new.len();
        tokio::time::sleep(Duration::from_millis(500)).await;
        with_sessions.push((have, rig.runner.rss()?));
    }
    rig.runner.stop().await;
    Ok(CodeAgentFigures {
        text_turn: Summary::of(&text),
        tool_turn: Summary::of(&tool),
        idle_rss_bytes,
        with_sessions,
    })
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
