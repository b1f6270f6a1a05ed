//! Scale: many threads in one runner, each with a running turn
//! at the same moment; the runner's RSS at that peak, the bytes each thread
//! costs, and whether every turn then completes. The 10,000-thread form
//! lives here, not in CI (`runner/tests/e2e/scale.rs` has smaller counts).

use std::path::Path;
use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::collector::{PATIENCE, Until};
use crate::scenarios::{Rig, user_message};

#[derive(Debug, Clone, Serialize)]
pub struct Scale {
    pub threads: usize,
    /// Registered, no agent yet.
    pub idle_rss_bytes: u64,
    /// Every thread's turn running (the `sleep` step), all at once.
    pub peak_rss_bytes: u64,
    pub bytes_per_thread: f64,
    /// Turns that ended with `TurnUpdate COMPLETED` (and no RequestError).
    pub completed: usize,
}

/// `n` threads, each given the turn `sleep 15000` then `say done`.
pub async fn measure(bin: &Path, n: usize) -> Result<Scale> {
    let turns = (n + 16).to_string();
    let queued = (2 * n + 64).to_string();
    let rig = Rig::start(
        bin,
        &[
            "--sdk",
            "scripted",
            "--max-concurrent-turns",
            &turns,
            "--max-queued-requests",
            &queued,
        ],
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let idle = rig.runner.rss()?;
    rig.create_agent("bench").await?;
    let threads = rig.create_threads("bench", n).await?;
    let mut waits = Vec::with_capacity(n);
    for t in &threads {
        let rid = rig.rid("sc");
        let w = rig.collector.register(&rid, Until::TurnCompleted);
        rig.cp()
            .send_request(&rid, user_message("bench", t, "sleep 15000\nsay done"))
            .await?;
        waits.push(w);
    }
    let mut dones = Vec::with_capacity(n);
    for w in waits {
        let (_, first) = tokio::time::timeout(PATIENCE, w.first)
            .await
            .context("turn did not start")??;
        if let Some(Payload::RequestError(e)) = first.payload {
            bail!("turn refused: {}", e.error_message);
        }
        dones.push(w.done);
    }
    // Every turn has started and sits in its sleep: the peak.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peak = rig.runner.rss()?;
    let mut completed = 0;
    for d in dones {
        if let Ok(Ok(Ok(_))) = tokio::time::timeout(PATIENCE, d).await {
            completed += 1;
        }
    }
    rig.runner.stop().await;
    Ok(Scale {
        threads: n,
        idle_rss_bytes: idle,
        peak_rss_bytes: peak,
        bytes_per_thread: (peak as f64 - idle as f64) / n.max(1) as f64,
        completed,
    })
}
