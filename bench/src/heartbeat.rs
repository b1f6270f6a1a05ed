//! Heartbeat under load: the control plane's `HeartbeatRequest`
//! round trip (sent → `HeartbeatResponse`) while 1,000 threads are being
//! created and 100 turns stream at once — the read loop must not starve.
//! Compared with the bare tonic round trip of the same run (`floor`), and
//! with the round trip through one stream a bare client floods
//! ([`crate::floor::Flood`]): an answer cannot overtake what its stream
//! already carries, whoever sends it.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_runner_proto::runner::HeartbeatRequest;
use agent_runner_proto::runner::server_message::Request;
use anyhow::Result;
use serde::Serialize;

use crate::collector::{Collector, Until};
use crate::scenarios::{Rig, user_message};
use crate::stats::Summary;

#[derive(Debug, Clone, Serialize)]
pub struct Heartbeat {
    /// The HTTP/2 receive window the control plane granted per stream, in
    /// bytes (None: hyper's default, 1 MiB).
    pub stream_window: Option<u32>,
    pub threads_created: usize,
    pub streaming_turns: usize,
    /// Heartbeat round trips while the load ran.
    pub under_load: Summary,
    /// Of those, the beats sent while the 100 turns streamed (the link
    /// saturated: updates queued ahead of every answer), and how long that
    /// phase lasted from the load's start.
    pub while_streaming: Summary,
    pub streaming_seconds: f64,
    /// The beats sent after the last streaming turn completed: thread
    /// creations alone.
    pub after_streaming: Summary,
    /// The same with the runner idle, before the load.
    pub idle: Summary,
    /// The slowest beats under load (the tail that makes the p99), each
    /// with how many messages the control plane received while it was out:
    /// thousands say the answer waited behind updates already on the wire
    /// (in HTTP/2 and socket buffers, past the runner's reach); a handful
    /// say it waited inside the runner or for a core.
    pub slowest_under_load: Vec<SlowBeat>,
    /// Messages the runner sent while the load ran, and in how long.
    pub messages_under_load: u64,
    pub load_seconds: f64,
    /// Round trips through a separate mock while a bare client floods it
    /// with item updates at full speed, answering first
    /// ([`crate::floor::Flood`]). Its stream is saturated; the runner's,
    /// sending at its own pace, need not be.
    pub floor_under_flood: Summary,
    /// Messages the bare client's flood delivered meanwhile, and in how long.
    pub floor_flood_messages: u64,
    pub floor_flood_seconds: f64,
}

/// One heartbeat round trip and what arrived while it was out.
#[derive(Debug, Clone, Serialize)]
pub struct SlowBeat {
    pub rtt_us: f64,
    /// Messages the control plane received between sending the request
    /// and receiving its answer.
    pub received_meanwhile: u64,
    /// Whether it was sent while the turns streamed.
    pub while_streaming: bool,
}

/// How many of the slowest beats are listed.
const SLOWEST: usize = 12;

/// One beat: when it was sent, its round trip, and the messages received
/// while it was out.
type Beat = (Instant, Duration, u64);

/// Round trips measured against the flooding bare client.
const FLOOD_BEATS: usize = 200;

/// Heartbeat round trips, one every 5 ms, until `done(beats so far)`.
async fn beats(
    collector: &Collector,
    prefix: &str,
    done: impl Fn(usize) -> bool,
) -> Result<Vec<Duration>> {
    Ok(timed_beats(collector, prefix, done)
        .await?
        .into_iter()
        .map(|(_, rtt, _)| rtt)
        .collect())
}

/// [`beats`], each with when it was sent.
async fn timed_beats(
    collector: &Collector,
    prefix: &str,
    done: impl Fn(usize) -> bool,
) -> Result<Vec<Beat>> {
    let mut out = Vec::new();
    while !done(out.len()) {
        let rid = format!("{prefix}-{}", out.len());
        let before = collector.received();
        let (_, sent, first, _) = collector
            .request(
                &rid,
                Request::HeartbeatRequest(HeartbeatRequest {}),
                Until::FirstReply,
            )
            .await?;
        // Counted when the answer has been taken in: the messages ahead of
        // it on its stream, and any the runner sent beside it meanwhile.
        let meanwhile = collector.received().saturating_sub(before);
        out.push((sent, first.duration_since(sent), meanwhile));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(out)
}

/// The smaller control-plane stream window the load is measured with
/// again: about a millisecond of the mock's intake on this machine, so
/// that what an answer can wait behind on the wire is that much.
pub const SMALL_WINDOW: u32 = 64 * 1024;

/// `create` thread creations and `stream` turns of `lines` `say` lines each,
/// at once, with heartbeats every 5 ms throughout, against a control plane
/// granting `stream_window` bytes of HTTP/2 window (None: its default).
pub async fn measure(
    bin: &Path,
    create: usize,
    stream: usize,
    lines: usize,
    stream_window: Option<u32>,
) -> Result<Heartbeat> {
    let limit = (create + stream + 16).to_string();
    let queued = (2 * (create + stream) + 64).to_string();
    let mock = mock_control_plane::MockConfig {
        stream_window,
        ..Default::default()
    };
    let rig = Rig::start_with_mock(
        bin,
        &[
            "--sdk",
            "scripted",
            "--max-concurrent-turns",
            &limit,
            "--max-queued-requests",
            &queued,
        ],
        &[],
        mock,
    )
    .await?;
    rig.create_agent("bench").await?;
    let streamers = rig.create_threads("bench", stream).await?;
    // Idle heartbeats first.
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let t0 = Instant::now();
    let idle_beats = beats(&rig.collector, "hbi", |_| {
        t0.elapsed() >= Duration::from_secs(1)
    })
    .await?;
    let text: String = (0..lines)
        .map(|i| format!("say line {i}"))
        .collect::<Vec<_>>()
        .join("\n");
    let rig = &rig;
    let before = rig.collector.received();
    let load_start = Instant::now();
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
        let streamed = async {
            streaming.await?;
            Ok::<_, anyhow::Error>(Instant::now())
        };
        let creating = rig.create_threads("bench", create);
        let (s, c) = tokio::join!(streamed, creating);
        let streamed_at = s?;
        c?;
        let _ = stop_tx.send(true);
        Ok::<_, anyhow::Error>(streamed_at)
    };
    let (loaded, beaten) =
        tokio::join!(load, timed_beats(&rig.collector, "hbl", |_| *stop.borrow()));
    let streamed_at = loaded?;
    let beaten = beaten?;
    let under: Vec<Duration> = beaten.iter().map(|(_, rtt, _)| *rtt).collect();
    let (streaming, after): (Vec<_>, Vec<_>) =
        beaten.iter().partition(|(sent, ..)| *sent < streamed_at);
    let rtts = |beats: Vec<&Beat>| -> Vec<Duration> {
        beats.into_iter().map(|(_, rtt, _)| *rtt).collect()
    };
    let mut slowest: Vec<SlowBeat> = beaten
        .iter()
        .map(|(sent, rtt, meanwhile)| SlowBeat {
            rtt_us: rtt.as_secs_f64() * 1e6,
            received_meanwhile: *meanwhile,
            while_streaming: *sent < streamed_at,
        })
        .collect();
    slowest.sort_by(|a, b| b.rtt_us.total_cmp(&a.rtt_us));
    slowest.truncate(SLOWEST);
    let messages_under_load = rig.collector.received() - before;
    let load_seconds = load_start.elapsed().as_secs_f64();

    let mut flood = crate::floor::Flood::start(stream_window).await?;
    let flood_start = Instant::now();
    let flooded = beats(&flood.collector, "hbf", |n| n >= FLOOD_BEATS).await;
    let floor_flood_seconds = flood_start.elapsed().as_secs_f64();
    // Stopped and freed here, not behind the next scenario's back: the
    // mock keeps every message it received (millions).
    let floor_flood_messages = flood.finish().await;
    drop(flood);
    let flooded = flooded?;
    Ok(Heartbeat {
        stream_window,
        threads_created: create,
        streaming_turns: stream,
        under_load: Summary::of(&under),
        while_streaming: Summary::of(&rtts(streaming)),
        streaming_seconds: streamed_at.duration_since(load_start).as_secs_f64(),
        after_streaming: Summary::of(&rtts(after)),
        idle: Summary::of(&idle_beats),
        slowest_under_load: slowest,
        messages_under_load,
        load_seconds,
        floor_under_flood: Summary::of(&flooded),
        floor_flood_messages,
        floor_flood_seconds,
    })
}
