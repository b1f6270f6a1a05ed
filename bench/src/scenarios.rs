//! The measurements against the real runner: each drives it through the
//! mock control plane with the `scripted` adapter. The runner process and
//! the requests come from the shared test kit (`test-kit/`, through
//! [`crate::proc`]); the collector here times what comes back.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runner_proto::runner::ThreadStatus;
use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use anyhow::{Context as _, Result, bail};
use futures::StreamExt as _;
use mock_control_plane::{AckMode, MockConfig, MockControlPlane};
use serde::Serialize;

use crate::collector::{Collector, PATIENCE, Until};
use crate::proc::Runner;

/// A mock control plane, its collector and a connected runner.
pub struct Rig {
    pub collector: Collector,
    pub runner: Runner,
    next_rid: std::sync::atomic::AtomicU64,
}

impl Rig {
    pub async fn start(bin: &Path, extra: &[&str]) -> Result<Self> {
        Self::start_with_env(bin, extra, &[]).await
    }

    /// [`Rig::start`] with extra environment for the runner.
    pub async fn start_with_env(bin: &Path, extra: &[&str], env: &[(&str, &str)]) -> Result<Self> {
        Self::start_full(bin, extra, env, AckMode::default()).await
    }

    /// [`Rig::start`] against a mock treating acknowledged delivery as
    /// `ack` says.
    pub async fn start_configured(bin: &Path, extra: &[&str], ack: AckMode) -> Result<Self> {
        Self::start_full(bin, extra, &[], ack).await
    }

    async fn start_full(
        bin: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        ack: AckMode,
    ) -> Result<Self> {
        Self::start_with_mock(bin, extra, env, MockConfig::default().with_ack_mode(ack)).await
    }

    /// [`Rig::start`] against a mock configured as `config` says.
    pub async fn start_with_mock(
        bin: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        config: MockConfig,
    ) -> Result<Self> {
        let cp = Arc::new(MockControlPlane::start(config).await?);
        let collector = Collector::start(cp.clone());
        let runner = Runner::start_with_env(bin, &cp.url(), extra, env)?;
        if let Err(e) = cp.wait_connected(PATIENCE).await {
            bail!("runner did not connect: {e}\n{}", runner.log_tail());
        }
        Ok(Rig {
            collector,
            runner,
            next_rid: 0.into(),
        })
    }

    pub fn cp(&self) -> &MockControlPlane {
        &self.collector.cp
    }

    pub fn rid(&self, prefix: &str) -> String {
        let n = self
            .next_rid
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{prefix}-{n}")
    }

    pub async fn create_agent(&self, agent: &str) -> Result<()> {
        self.create_agent_with(agent, "scripted").await
    }

    pub async fn create_agent_with(&self, agent: &str, sdk: &str) -> Result<()> {
        let rid = self.rid("ca");
        let request = test_kit::requests::create_agent_request(agent, sdk);
        self.collector
            .request(&rid, request, Until::FirstReply)
            .await?;
        Ok(())
    }

    /// `n` threads of `agent`, at most 32 requests in flight (an agent's
    /// mailbox holds 64).
    pub async fn create_threads(&self, agent: &str, n: usize) -> Result<Vec<String>> {
        self.create_threads_with(agent, n, "scripted-fast").await
    }

    pub async fn create_threads_with(
        &self,
        agent: &str,
        n: usize,
        model: &str,
    ) -> Result<Vec<String>> {
        let results: Vec<Result<String>> = futures::stream::iter(0..n)
            .map(|_| async move {
                let rid = self.rid("ct");
                let request = test_kit::requests::create_thread_request(agent, model);
                let (reply, ..) = self
                    .collector
                    .request(&rid, request, Until::FirstReply)
                    .await?;
                match reply.payload {
                    Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32 => {
                        Ok(u.thread_id)
                    }
                    other => bail!("expected ThreadUpdate READY, got {other:?}"),
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        results.into_iter().collect()
    }
}

/// A user message (no steering) on `thread` of `agent`.
pub fn user_message(agent: &str, thread: &str, text: &str) -> Request {
    test_kit::requests::user_message(agent, thread, text, false)
}

/// `turns` single-step turns (`say x`) spread over `threads`, each thread
/// sending its next message when its previous turn completed. Returns the
/// time from sending each message to the first update for it, and the
/// turns completed per second over the whole run.
pub async fn dispatch_latency(
    rig: &Rig,
    threads: &[String],
    turns: usize,
) -> Result<(Vec<Duration>, f64)> {
    let per_thread = turns.div_ceil(threads.len());
    let start = Instant::now();
    let runs = threads.iter().map(|t| async move {
        let mut samples = Vec::with_capacity(per_thread);
        for _ in 0..per_thread {
            let rid = rig.rid("lat");
            let (_, sent, first, _) = rig
                .collector
                .request(
                    &rid,
                    user_message("bench", t, "say x"),
                    Until::TurnCompleted,
                )
                .await?;
            samples.push(first.duration_since(sent));
        }
        Ok::<_, anyhow::Error>(samples)
    });
    let all = futures::future::try_join_all(runs).await?;
    let samples: Vec<Duration> = all.into_iter().flatten().collect();
    let turns_per_s = samples.len() as f64 / start.elapsed().as_secs_f64();
    Ok((samples, turns_per_s))
}

#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub threads: usize,
    pub lines_per_turn: usize,
    pub item_updates: u64,
    /// Item updates the turns produced; the difference was coalesced or
    /// dropped by a full outbox (RUNNING snapshots only).
    pub item_updates_produced: u64,
    pub messages: u64,
    pub seconds: f64,
    /// The runner's CPU time over the run (its live threads), and by
    /// thread name.
    pub runner_cpu_seconds: f64,
    pub runner_cpu_by_thread: std::collections::BTreeMap<String, f64>,
    /// The bench process's CPU time over the run: the mock control plane
    /// receiving and acknowledging, and the collector counting.
    pub bench_cpu_seconds: f64,
    pub item_updates_per_s: f64,
    pub messages_per_s: f64,
}

fn says(lines: usize) -> String {
    (0..lines)
        .map(|i| format!("say line {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One turn of `lines` `say` lines on each thread, all at once.
pub async fn update_throughput(rig: &Rig, threads: &[String], lines: usize) -> Result<Throughput> {
    let text = says(lines);
    let items0 = rig.collector.item_updates();
    let msgs0 = rig.collector.received();
    let pid = rig.runner.pid()?;
    let (runner0, bench0) = (
        crate::stats::cpu_by_thread(pid)?,
        crate::stats::live_threads_cpu(std::process::id())?,
    );
    let start = Instant::now();
    let runs = threads.iter().map(|t| {
        let text = &text;
        async move {
            let rid = rig.rid("tp");
            let (.., done) = rig
                .collector
                .request(&rid, user_message("bench", t, text), Until::TurnCompleted)
                .await?;
            Ok::<_, anyhow::Error>(done)
        }
    });
    let ends = futures::future::try_join_all(runs).await?;
    let end = ends.into_iter().max().unwrap_or_else(Instant::now);
    let seconds = end.duration_since(start).as_secs_f64();
    let item_updates = rig.collector.item_updates() - items0;
    let messages = rig.collector.received() - msgs0;
    // At least 0: a thread that exited meanwhile takes its time with it.
    let bench_cpu_seconds = (crate::stats::live_threads_cpu(std::process::id())? - bench0).max(0.0);
    let runner_cpu_by_thread: std::collections::BTreeMap<String, f64> =
        crate::stats::cpu_by_thread(pid)?
            .into_iter()
            .map(|(name, s)| {
                let before = runner0.get(&name).copied().unwrap_or(0.0);
                (name, (s - before).max(0.0))
            })
            .collect();
    Ok(Throughput {
        threads: threads.len(),
        lines_per_turn: lines,
        item_updates,
        item_updates_produced: (threads.len() * 2 * (lines + 1)) as u64,
        messages,
        seconds,
        runner_cpu_seconds: runner_cpu_by_thread.values().sum(),
        runner_cpu_by_thread,
        bench_cpu_seconds,
        item_updates_per_s: item_updates as f64 / seconds,
        messages_per_s: messages as f64 / seconds,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct OutboxDrain {
    pub threads: usize,
    pub lines_per_turn: usize,
    /// Messages that arrived after the reconnect.
    pub messages_after_reconnect: u64,
    pub item_updates_after_reconnect: u64,
    /// Expected if nothing was coalesced or dropped: every `say` item
    /// (RUNNING and COMPLETED) and each turn's COMPLETED.
    pub expected_messages: u64,
    /// From the new stream going live to the last turn's COMPLETED.
    pub drain_seconds: f64,
    /// From the new stream going live to its first message.
    pub first_message_seconds: f64,
    pub messages_per_s: f64,
    /// From stopping the control plane to the runner's next registration
    /// (includes the downtime and the backoff).
    pub outage_seconds: f64,
    /// Runner CPU time while disconnected (the turns producing into the
    /// outbox), and per update produced.
    pub cpu_seconds_disconnected: f64,
    pub cpu_us_per_update: f64,
}

/// Turns that sleep past a control-plane stop, produce their updates into
/// the outbox while disconnected, and drain after the restart.
pub async fn outbox_drain(rig: &Rig, threads: &[String], lines: usize) -> Result<OutboxDrain> {
    const SLEEP_MS: u64 = 1000;
    let text = format!("sleep {SLEEP_MS}\n{}", says(lines));
    let mut waits = Vec::new();
    for t in threads {
        let rid = rig.rid("ob");
        let w = rig.collector.register(&rid, Until::TurnCompleted);
        rig.cp()
            .send_request(&rid, user_message("bench", t, &text))
            .await?;
        waits.push(w);
    }
    let mut dones = Vec::new();
    for w in waits {
        tokio::time::timeout(PATIENCE, w.first)
            .await
            .context("turn did not start")??;
        dones.push(w.done);
    }
    let regs = rig.cp().registrations().len();
    let pid = rig.runner.pid()?;
    let stopped = Instant::now();
    rig.cp().stop().await?;
    // The runner's threads' time on a CPU in nanoseconds: the whole
    // process's `stat` counts 10 ms ticks, and producing 9,604 updates
    // takes one or two of them (the row read 1.04 or 2.08 µs per update).
    let cpu0 = crate::stats::live_threads_cpu(pid)?;
    // Let every turn finish into the outbox while nobody listens: the sleep,
    // then ample time to produce the items.
    tokio::time::sleep(Duration::from_millis(SLEEP_MS + 1500)).await;
    let msgs0 = rig.collector.received();
    let items0 = rig.collector.item_updates();
    let streams0 = rig.collector.connected().len();
    // At least 0: a thread that exited meanwhile takes its time with it.
    let cpu = (crate::stats::live_threads_cpu(pid)? - cpu0).max(0.0);
    rig.cp().restart().await?;
    rig.cp().wait_for_registrations(regs + 1, PATIENCE).await?;
    let outage = stopped.elapsed();
    let mut end = Instant::now();
    for d in dones {
        let at = tokio::time::timeout(PATIENCE, d)
            .await
            .context("turn did not complete after the reconnect")??
            .map_err(anyhow::Error::msg)?;
        end = end.max(at);
    }
    let connected = rig
        .collector
        .connected()
        .get(streams0)
        .copied()
        .context("no reconnect seen")?;
    let drain = end.duration_since(connected).as_secs_f64();
    let first = rig
        .collector
        .first_after_connect(streams0)
        .context("no message after the reconnect")?
        .duration_since(connected)
        .as_secs_f64();
    let messages = rig.collector.received() - msgs0;
    Ok(OutboxDrain {
        threads: threads.len(),
        lines_per_turn: lines,
        messages_after_reconnect: messages,
        item_updates_after_reconnect: rig.collector.item_updates() - items0,
        expected_messages: (threads.len() * (2 * lines + 1)) as u64,
        drain_seconds: drain,
        first_message_seconds: first,
        messages_per_s: messages as f64 / drain,
        outage_seconds: outage.as_secs_f64(),
        cpu_seconds_disconnected: cpu,
        cpu_us_per_update: cpu * 1e6 / (threads.len() * (2 * lines + 1)) as f64,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct Footprint {
    pub idle_rss_bytes: u64,
    /// (threads, RSS) with every thread holding a running `sleep` turn.
    pub with_threads: Vec<(usize, u64)>,
    pub bytes_per_thread: f64,
}

pub async fn footprint(bin: &Path, levels: &[usize]) -> Result<Footprint> {
    let max = levels.iter().copied().max().unwrap_or(0);
    let limit = (max + 16).to_string();
    let rig = Rig::start(bin, &["--max-concurrent-turns", &limit]).await?;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let idle = rig.runner.rss()?;
    rig.create_agent("bench").await?;
    let mut threads: Vec<String> = Vec::new();
    let mut with_threads = Vec::new();
    for &level in levels {
        let new = rig.create_threads("bench", level - threads.len()).await?;
        let mut waits = Vec::new();
        for t in &new {
            let rid = rig.rid("fp");
            let w = rig.collector.register(&rid, Until::TurnCompleted);
            rig.cp()
                .send_request(&rid, user_message("bench", t, "sleep 3600000"))
                .await?;
            waits.push(w);
        }
        for w in waits {
            let (_, first) = tokio::time::timeout(PATIENCE, w.first)
                .await
                .context("sleep turn did not start")??;
            if let Some(Payload::RequestError(e)) = first.payload {
                bail!("sleep turn refused: {}", e.error_message);
            }
        }
        threads.extend(new);
        tokio::time::sleep(Duration::from_millis(500)).await;
        with_threads.push((level, rig.runner.rss()?));
    }
    let top = with_threads.last().copied().unwrap_or((1, idle));
    let per_thread = (top.1 as f64 - idle as f64) / top.0.max(1) as f64;
    rig.runner.stop().await;
    Ok(Footprint {
        idle_rss_bytes: idle,
        with_threads,
        bytes_per_thread: per_thread,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct StartReconnect {
    /// Process spawned → `RegisterRunner` received, per run.
    pub start_ms: Vec<f64>,
    /// Control plane stopped → restarted at once → registered again, per run.
    pub reconnect_ms: Vec<f64>,
    /// How long each `stop()` took (graceful close of the old connection).
    pub stop_ms: Vec<f64>,
}

/// Each run uses a fresh runner with default reconnect settings (a runner's
/// backoff only resets after its channel stayed up 10 s).
pub async fn start_and_reconnect(bin: &Path, runs: usize) -> Result<StartReconnect> {
    let mut out = StartReconnect {
        start_ms: vec![],
        reconnect_ms: vec![],
        stop_ms: vec![],
    };
    for _ in 0..runs {
        let cp = MockControlPlane::start(MockConfig::default()).await?;
        let runner = Runner::start(bin, &cp.url(), &[])?;
        let spawned = runner.started;
        cp.wait_for_registrations(1, PATIENCE).await?;
        out.start_ms.push(ms(spawned.elapsed()));
        cp.wait_connected(PATIENCE).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t = Instant::now();
        cp.stop().await?;
        out.stop_ms.push(ms(t.elapsed()));
        let stopped = Instant::now();
        cp.restart().await?;
        cp.wait_for_registrations(2, PATIENCE).await?;
        out.reconnect_ms.push(ms(stopped.elapsed()));
        runner.stop().await;
    }
    Ok(out)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
