//! Heartbeat under load (issue 14): the control plane's `HeartbeatRequest`
//! round trip (sent → `HeartbeatResponse`) while 1,000 threads are being
//! created and 100 turns stream at once — the read loop must not starve.
//! Compared with the bare tonic round trip of the same run (`floor`).

use std::path::Path;
use std::time::{Duration, Instant};

use agent_runner_proto::runner::HeartbeatRequest;
use agent_runner_proto::runner::server_message::Request;
use anyhow::Result;
use serde::Serialize;

use crate::collector::Until;
use crate::scenarios::{Rig, user_message};
use crate::stats::Summary;

#[derive(Debug, Clone, Serialize)]
pub struct Heartbeat {
    pub threads_created: usize,
    pub streaming_turns: usize,
    /// Heartbeat round trips while the load ran.
    pub under_load: Summary,
    /// The same with the runner idle, before the load.
    pub idle: Summary,
}

/// Heartbeat round trips, one every 5 ms, until `done()`.
async fn beats(rig: &Rig, done: impl Fn() -> bool) -> Result<Vec<Duration>> {
    let mut out = Vec::new();
    while !done() {
        let rid = rig.rid("hb");
        let (_, sent, first, _) = rig
            .collector
            .request(
                &rid,
                Request::HeartbeatRequest(HeartbeatRequest {}),
                Until::FirstReply,
            )
            .await?;
        out.push(first.duration_since(sent));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(out)
}

/// `create` thread creations and `stream` turns of `lines` `say` lines each,
/// at once, with heartbeats every 5 ms throughout.
pub async fn measure(bin: &Path, create: usize, stream: usize, lines: usize) -> Result<Heartbeat> {
    let limit = (create + stream + 16).to_string();
    let queued = (2 * (create + stream) + 64).to_string();
    let rig = Rig::start(
        bin,
        &[
            "--sdk",
            "scripted",
            "--max-concurrent-turns",
            &limit,
            "--max-queued-requests",
            &queued,
        ],
    )
    .await?;
    rig.create_agent("bench").await?;
    let streamers = rig.create_threads("bench", stream).await?;
    // Idle heartbeats first.
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let t0 = Instant::now();
    let idle_beats = beats(&rig, || t0.elapsed() >= Duration::from_secs(1)).await?;
    let text: String = (0..lines)
        .map(|i| format!("say line {i}"))
        .collect::<Vec<_>>()
        .join("\n");
    let rig = &rig;
    let load = async {
        let streaming = futures::future::try_join_all(streamers.iter().map(|t| {
            let text = &text;
            async move {
                let rid = rig.rid("hs");
                rig.collector
                    .request(&rid, user_message("bench", t, text), Until::TurnCompleted)
                    .await
            }
        }));
        let creating = rig.create_threads("bench", create);
        let (s, c) = tokio::join!(streaming, creating);
        s?;
        c?;
        let _ = stop_tx.send(true);
        Ok::<_, anyhow::Error>(())
    };
    let (loaded, beaten) = tokio::join!(load, beats(rig, || *stop.borrow()));
    loaded?;
    let under = beaten?;
    Ok(Heartbeat {
        threads_created: create,
        streaming_turns: stream,
        under_load: Summary::of(&under),
        idle: Summary::of(&idle_beats),
    })
}
