//! What delivery costs: update throughput against a control
//! plane that acknowledges and one that does not, the outbox journal's own
//! cost per update (read from the runner's `/metrics`: the store thread's
//! busy time, off the async workers), and optionally the same throughput
//! with a baseline binary (e.g. one built before the journal) for the
//! "within 10 %" comparison.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use mock_control_plane::AckMode;
use serde::Serialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::scenarios::{Rig, Throughput, dispatch_latency, update_throughput};

/// The journal's store thread, as the runner names it in its metrics.
const JOURNAL_THREAD: &str = "outbox-journal";

/// Throughput and journal cost in one mode.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryRun {
    /// `acked`, `legacy` or `baseline`.
    pub mode: String,
    /// The median of three throughput runs.
    pub throughput: Throughput,
    /// Each of the three runs' messages per second, in the order run.
    pub runs_msgs_per_s: Vec<f64>,
    /// Acknowledgement-only messages the control plane sent over the three
    /// runs, and the runs' messages per acknowledgement (0 acknowledgements:
    /// legacy).
    pub acks: u64,
    pub messages_per_ack: Option<f64>,
    /// Store-thread seconds over the three runs (None: not exposed, e.g. a
    /// baseline binary without the journal).
    pub journal_busy_seconds: Option<f64>,
    /// Journal jobs (appends, sequence marks, forgets) over the three runs.
    pub journal_jobs: Option<f64>,
    /// Group commits over the three runs.
    pub journal_commits: Option<f64>,
    /// Store-thread time per update produced (RUNNING and COMPLETED items,
    /// turn updates), in microseconds.
    pub journal_us_per_update: Option<f64>,
    /// The runner's CPU time (all its threads) per `say x` turn, with 100
    /// threads each running turns back to back: what a turn's bookkeeping
    /// (state store, journal, link) costs, for comparing binaries.
    pub cpu_us_per_turn: f64,
    /// Turns measured for `cpu_us_per_turn`.
    pub turns: usize,
    /// The state store thread's commits per turn over those turns (None: a
    /// binary without that thread, whose per-turn writes were one commit
    /// each, two per turn).
    pub state_commits_per_turn: Option<f64>,
}

/// A free loopback port (bound, read, released).
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a probe port")?;
    Ok(l.local_addr()?.port())
}

/// `GET /metrics` over a plain TCP connection (HTTP/1.0: the server closes).
async fn scrape(port: u16) -> Result<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .context("connecting to the runner's health port")?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await?;
    let mut body = String::new();
    s.read_to_string(&mut body).await?;
    Ok(body)
}

/// The value of the sample `name{…thread="outbox-journal"…}`, if present.
fn sample(text: &str, name: &str) -> Option<f64> {
    sample_of(text, name, JOURNAL_THREAD)
}

/// The value of the sample `name{…thread="<thread>"…}`, if present.
fn sample_of(text: &str, name: &str, thread: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(&format!("thread=\"{thread}\"")))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The state store's per-turn writes thread, as the runner names it.
const STATE_THREAD: &str = "state-store";

/// Group commits of the state store's thread so far (None: not exposed,
/// e.g. a binary whose per-turn writes are on the async workers).
async fn state_commits(port: u16) -> Result<Option<f64>> {
    let text = scrape(port).await?;
    Ok(sample_of(
        &text,
        "agent_runner_store_thread_commits_total",
        STATE_THREAD,
    ))
}

struct Journal {
    busy: Option<f64>,
    jobs: Option<f64>,
    commits: Option<f64>,
}

async fn journal(port: u16) -> Result<Journal> {
    let text = scrape(port).await?;
    Ok(Journal {
        busy: sample(&text, "agent_runner_store_thread_busy_seconds_total"),
        jobs: sample(&text, "agent_runner_store_thread_jobs_total"),
        commits: sample(&text, "agent_runner_store_thread_commits_total"),
    })
}

/// Update throughput (median of three, after a warm-up) with `bin` against
/// a mock in `ack`, and what the journal cost meanwhile.
pub async fn measure(
    bin: &Path,
    mode: &str,
    ack: AckMode,
    threads: usize,
    lines: usize,
    turns: usize,
) -> Result<DeliveryRun> {
    let port = free_port()?;
    let health = format!("127.0.0.1:{port}");
    let rig = Rig::start_configured(
        bin,
        &["--reconnect-max-delay", "1s", "--health-addr", &health],
        ack,
    )
    .await?;
    rig.create_agent("bench").await?;
    let all = rig
        .create_threads("bench", TURN_THREADS.max(threads))
        .await?;
    let ids = &all[..threads];
    update_throughput(&rig, ids, lines / 10).await?;
    let before = journal(port).await?;
    let acks0 = rig.cp().sequence_report().acks_sent;
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(update_throughput(&rig, ids, lines).await?);
    }
    let after = journal(port).await?;
    let acks = rig.cp().sequence_report().acks_sent - acks0;
    let messages: u64 = runs.iter().map(|r| r.messages).sum();
    let messages_per_ack = (acks > 0).then(|| messages as f64 / acks as f64);
    let commits0 = state_commits(port).await?;
    let (cpu_us_per_turn, done) = cpu_per_turn(&rig, &all[..TURN_THREADS], turns).await?;
    let commits1 = state_commits(port).await?;
    let state_commits_per_turn = match (commits0, commits1) {
        (Some(a), Some(b)) => Some((b - a) / done as f64),
        _ => None,
    };
    let invalid = rig.cp().invalid_received().len();
    rig.runner.stop().await;
    if invalid > 0 {
        bail!("{mode}: the mock saw {invalid} invalid ClientMessages");
    }
    let runs_msgs_per_s = runs.iter().map(|r| r.messages_per_s).collect();
    let produced: u64 = runs
        .iter()
        .map(|r| r.item_updates_produced + 2 * r.threads as u64)
        .sum();
    runs.sort_by(|a, b| a.item_updates_per_s.total_cmp(&b.item_updates_per_s));
    let delta = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
    let busy = delta(before.busy, after.busy);
    Ok(DeliveryRun {
        mode: mode.to_owned(),
        throughput: runs[1].clone(),
        runs_msgs_per_s,
        acks,
        messages_per_ack,
        journal_busy_seconds: busy,
        journal_jobs: delta(before.jobs, after.jobs),
        journal_commits: delta(before.commits, after.commits),
        journal_us_per_update: busy.map(|b| b * 1e6 / produced as f64),
        cpu_us_per_turn,
        turns,
        state_commits_per_turn,
    })
}

/// Threads running turns at once for the CPU-per-turn figure.
const TURN_THREADS: usize = 100;

/// The runner's CPU time per `say x` turn over `turns` turns spread over
/// `threads` (after a warm-up), in microseconds, and the turns run.
async fn cpu_per_turn(rig: &Rig, threads: &[String], turns: usize) -> Result<(f64, usize)> {
    dispatch_latency(rig, threads, threads.len() * 2).await?;
    let pid = rig.runner.pid()?;
    let cpu0 = crate::stats::cpu_seconds(pid)?;
    dispatch_latency(rig, threads, turns).await?;
    let cpu = crate::stats::cpu_seconds(pid)? - cpu0;
    let done = turns.div_ceil(threads.len()) * threads.len();
    Ok((cpu * 1e6 / done as f64, done))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_journal_thread_sample() {
        let text = "# TYPE x counter\nagent_runner_store_thread_jobs_total{thread=\"other\"} 1\nagent_runner_store_thread_jobs_total{thread=\"outbox-journal\"} 42\n";
        assert_eq!(
            sample(text, "agent_runner_store_thread_jobs_total"),
            Some(42.0)
        );
        assert_eq!(
            sample(text, "agent_runner_store_thread_busy_seconds_total"),
            None
        );
    }
}
