//! `runner-bench`: measures the real `agent-runner` process the way its
//! users will stress it (issue 7) and prints a table, writes the same
//! figures as JSON and draws the latency distribution as a PNG.
//!
//! ```text
//! runner-bench [--quick] [--runner PATH] [--baseline-runner PATH] [--out DIR] [--only SCENARIO]
//! ```
//!
//! `--only` runs one of the issue-14 scenarios alone and prints its rows
//! (see `only.rs`); `--only a,b` runs several one after the other in this
//! one process (to see whether one slows the next, as in the full run).
//!
//! `--baseline-runner` measures update throughput with a second binary too
//! (e.g. one built before a change) and prints the ratio.
//!
//! Everything runs on loopback: the mock control plane (library) in this
//! process, the runner as a child process with the `scripted` adapter, and a
//! bare tonic stream as the cost floor, all in the same run. No figure here
//! is asserted anywhere; `bench/run.sh` builds and runs it.

mod budget;
mod chart;
mod code_agent;
mod collector;
mod delivery;
mod engine_rows;
mod floor;
mod fs_probe;
mod heartbeat;
mod idle;
mod only;
mod peers;
mod proc;
mod profile;
mod scale;
mod scenarios;
mod startup;
mod stats;

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use plotters::style::RGBColor;
use serde_json::json;

use crate::scenarios::Rig;
use crate::stats::{Machine, Summary};
use mock_control_plane::AckMode;

struct Args {
    quick: bool,
    runner: Option<PathBuf>,
    baseline: Option<PathBuf>,
    out: PathBuf,
    /// Run these scenarios alone, in order (see `only.rs`).
    only: Option<String>,
}

fn args() -> Result<Args> {
    let mut a = Args {
        quick: false,
        runner: None,
        baseline: None,
        out: PathBuf::from("target/bench"),
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--runner" => a.runner = Some(it.next().context("--runner needs a path")?.into()),
            "--out" => a.out = it.next().context("--out needs a directory")?.into(),
            "--only" => a.only = Some(it.next().context("--only needs a scenario name")?),
            "--baseline-runner" => {
                a.baseline = Some(it.next().context("--baseline-runner needs a path")?.into());
            }
            "-h" | "--help" => {
                println!(
                    "runner-bench [--quick] [--runner PATH] [--baseline-runner PATH] [--out DIR]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(a)
}

/// How much of everything: `--quick` runs in well under a minute.
struct Sizes {
    floor_messages: usize,
    floor_round_trips: usize,
    latency_turns: usize,
    throughput_threads: usize,
    throughput_lines: usize,
    outbox_threads: usize,
    outbox_lines: usize,
    /// Drains timed (the median reported).
    drains: usize,
    overflow_lines: usize,
    footprint_levels: Vec<usize>,
    start_runs: usize,
    startup_runs: usize,
    code_agent_turns: usize,
    code_agent_levels: Vec<usize>,
    /// Timed turns and extra idle threads of each peer row.
    peer_turns: usize,
    peer_threads: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                floor_messages: 20_000,
                floor_round_trips: 2_000,
                latency_turns: 1_000,
                throughput_threads: 2,
                throughput_lines: 1_000,
                outbox_threads: 2,
                outbox_lines: 1_000,
                drains: 1,
                overflow_lines: 10_000,
                footprint_levels: vec![1, 100, 1_000],
                start_runs: 2,
                startup_runs: 5,
                code_agent_turns: 50,
                code_agent_levels: vec![10],
                peer_turns: 5,
                peer_threads: 2,
            }
        } else {
            Sizes {
                floor_messages: 200_000,
                floor_round_trips: 10_000,
                latency_turns: 10_000,
                throughput_threads: 8,
                throughput_lines: 10_000,
                outbox_threads: 4,
                outbox_lines: 1_200,
                drains: 5,
                overflow_lines: 5_000,
                footprint_levels: vec![1, 100, 1_000],
                start_runs: 5,
                startup_runs: 20,
                code_agent_turns: 300,
                code_agent_levels: vec![10, 100],
                peer_turns: 30,
                peer_threads: 10,
            }
        }
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Milliseconds as durations (for [`Summary::of`]).
fn ms_samples(v: &[f64]) -> Vec<std::time::Duration> {
    v.iter()
        .map(|m| std::time::Duration::from_secs_f64(m / 1e3))
        .collect()
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

struct Table(Vec<[String; 4]>);

impl Table {
    fn row(&mut self, what: &str, value: String, unit: &str, vs_floor: Option<f64>) {
        let ratio = vs_floor.map_or_else(String::new, |r| format!("{r:.3}"));
        self.0
            .push([what.to_owned(), value, unit.to_owned(), ratio]);
    }

    fn print(&self) {
        let head = ["measurement", "value", "unit", "vs floor"];
        let mut w = head.map(str::len);
        for r in &self.0 {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |c: &[String; 4]| {
            println!(
                "| {:<w0$} | {:>w1$} | {:<w2$} | {:>w3$} |",
                c[0],
                c[1],
                c[2],
                c[3],
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3]
            );
        };
        line(&head.map(str::to_owned));
        println!(
            "|{}|{}|{}|{}|",
            "-".repeat(w[0] + 2),
            "-".repeat(w[1] + 2),
            "-".repeat(w[2] + 2),
            "-".repeat(w[3] + 2)
        );
        for r in &self.0 {
            line(r);
        }
    }
}

fn pct(s: &Summary) -> String {
    format!("{:.0} / {:.0} / {:.0}", s.p50_us, s.p99_us, s.max_us)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let a = args()?;
    let bin = proc::locate(a.runner.clone())?;
    if let Some(name) = &a.only {
        for name in name.split(',') {
            only::run(name, &bin, a.quick).await?;
        }
        return Ok(());
    }
    let sz = Sizes::new(a.quick);
    let machine = Machine::read();
    eprintln!(
        "runner-bench: {} mode, runner {}, {} x {}, {:.1} GiB",
        if a.quick { "quick" } else { "full" },
        bin.display(),
        machine.nproc,
        machine.cpu_model,
        machine.mem_total_kib as f64 / (1024.0 * 1024.0)
    );

    // Start-up first: the scenarios that make thousands of threads leave
    // thousands of directories to delete, and on this machine's disk
    // (ext4, online discard) every process's file creations run about
    // eight times slower for a minute or more after that (`fs_probe`).
    eprintln!("[1/6] start and reconnect");
    let sr = scenarios::start_and_reconnect(&bin, sz.start_runs).await?;
    let starts = startup::starts(&bin, sz.startup_runs).await?;

    eprintln!("[1b/6] cost floor (bare tonic stream)");
    // The floor is measured again before each throughput run and each
    // drain, and the median of all is the ratios' denominator: one bare
    // run varies by a third within a process (610 k to 1,038 k msg/s in
    // four runs of one process on this machine), more than most changes
    // measured against it.
    let mut floors = vec![floor::throughput(sz.floor_messages).await?];
    let mock_tp = floor::mock_ingest(sz.floor_messages).await?;
    let floor_rt = floor::round_trip(sz.floor_round_trips).await?;
    let floor_rt_s = Summary::of(&floor_rt);

    eprintln!("[2/6] dispatch latency, update throughput, outbox drain");
    let rig = Rig::start(&bin, &["--reconnect-max-delay", "1s"]).await?;
    rig.create_agent("bench").await?;
    let threads = rig.create_threads("bench", 100).await?;
    // Warm-up (allocations, SQLite pages, connection windows): not counted.
    scenarios::dispatch_latency(&rig, &threads[..1], 200).await?;
    let (lat1, tps1) = scenarios::dispatch_latency(&rig, &threads[..1], sz.latency_turns).await?;
    let (lat100, tps100) = scenarios::dispatch_latency(&rig, &threads, sz.latency_turns).await?;
    let (lat1_s, lat100_s) = (Summary::of(&lat1), Summary::of(&lat100));
    // Three runs, the median reported (one run is a fraction of a second).
    let (n, lines) = (sz.throughput_threads, sz.throughput_lines);
    let mut tps = Vec::new();
    let mut tp_floors = Vec::new();
    for _ in 0..3 {
        let f = floor::throughput_cpu(sz.floor_messages).await?;
        floors.push(f.messages_per_s);
        tp_floors.push(f);
        tps.push(scenarios::update_throughput(&rig, &threads[..n], lines).await?);
    }
    // The profile comes from three more runs, not counted: perf copying
    // each sample's stack and writing its file takes CPU from the two
    // cores the runner and the mock share, and the floor runs unprofiled.
    let recording = profile::start(rig.runner.pid()?, &a.out).await;
    if recording.is_some() {
        for _ in 0..3 {
            scenarios::update_throughput(&rig, &threads[..n], lines).await?;
        }
    }
    let prof = profile::finish(recording, &a.out.join("profile.svg")).await;
    tps.sort_by(|a, b| a.item_updates_per_s.total_cmp(&b.item_updates_per_s));
    let tp = tps[1].clone();
    // A drain lasts ~15 ms, so one is mostly noise: the median of several.
    let mut drains = Vec::new();
    for _ in 0..sz.drains {
        let d = &threads[..sz.outbox_threads];
        floors.push(floor::throughput(sz.floor_messages).await?);
        drains.push(scenarios::outbox_drain(&rig, d, sz.outbox_lines).await?);
    }
    drains.sort_by(|a, b| a.messages_per_s.total_cmp(&b.messages_per_s));
    let drain_rates: Vec<f64> = drains.iter().map(|d| d.messages_per_s).collect();
    let ob = drains[drains.len() / 2].clone();
    // The same with far more updates than the outbox holds (10,000).
    let ob_over =
        scenarios::outbox_drain(&rig, &threads[..sz.outbox_threads], sz.overflow_lines).await?;
    let invalid = rig.cp().invalid_received().len();
    let floor_tp = stats::median(floors.iter().copied());
    // The throughput runs' CPU, against the run's median floor (the
    // counted runs, none of them profiled).
    let tp_cpu = budget::CpuBudget::of(&tp_floors, &tps, floor_tp);
    floors.sort_by(f64::total_cmp);
    rig.runner.stop().await;

    eprintln!("[2b/6] delivery: acked vs legacy control plane, journal cost, baseline");
    let (dn, dl) = (sz.throughput_threads, sz.throughput_lines);
    let dt = sz.latency_turns;
    let acked = delivery::measure(&bin, "acked", AckMode::Immediate, dn, dl, dt).await?;
    let legacy = delivery::measure(&bin, "legacy", AckMode::Refuse, dn, dl, dt).await?;
    let baseline = match &a.baseline {
        Some(b) => Some(delivery::measure(b, "baseline", AckMode::Immediate, dn, dl, dt).await?),
        None => None,
    };

    eprintln!("[3/6] footprint");
    let fp = scenarios::footprint(&bin, &sz.footprint_levels).await?;
    let (idle_both, bare_both) = idle::both(&bin).await?;
    let (idle_runner, bare) = (idle_both.settled, bare_both.settled);
    eprintln!("[4/6] scale and heartbeat under load");
    let scale = scale::measure(&bin, if a.quick { 1_000 } else { 10_000 }).await?;
    let (hc, hs, hl) = if a.quick {
        (200, 20, 200)
    } else {
        (1_000, 100, 1_000)
    };
    let hb = heartbeat::measure(&bin, hc, hs, hl).await?;

    eprintln!("[5/6] code-agent SDK (embedded engine, mock model)");
    let ca = code_agent::measure(&bin, sz.code_agent_turns, &sz.code_agent_levels).await?;
    eprintln!("[5b/6] peers: codex app-server vs the code-agent engine, same script");
    let peers = peers::measure(&bin, sz.peer_turns, sz.peer_threads).await?;

    eprintln!("[6/6] writing results");
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let png = a.out.join("latency.png");
    chart::latency_png(
        &png,
        "agent-runner dispatch latency (`say x` turns over loopback)",
        &[
            chart::Series {
                name: "1 thread",
                samples: &lat1,
                color: RGBColor(31, 119, 180),
            },
            chart::Series {
                name: "100 threads",
                samples: &lat100,
                color: RGBColor(214, 39, 40),
            },
            chart::Series {
                name: "floor (bare tonic round trip)",
                samples: &floor_rt,
                color: RGBColor(120, 120, 120),
            },
        ],
    )?;

    let mut t = Table(vec![]);
    t.row(
        &format!(
            "floor: bare tonic stream, ClientMessages (median of {}, {:.0}-{:.0} k)",
            floors.len(),
            floors.first().copied().unwrap_or(0.0) / 1e3,
            floors.last().copied().unwrap_or(0.0) / 1e3,
        ),
        format!("{floor_tp:.0}"),
        "msg/s",
        Some(1.0),
    );
    t.row(
        "floor: bare round trip p50 / p99 / max",
        pct(&floor_rt_s),
        "us",
        None,
    );
    t.row(
        "mock control plane ingest (bare client)",
        format!("{mock_tp:.0}"),
        "msg/s",
        Some(mock_tp / floor_tp),
    );
    t.row(
        "dispatch latency, 1 thread p50 / p99 / max",
        pct(&lat1_s),
        "us",
        Some(floor_rt_s.p50_us / lat1_s.p50_us),
    );
    t.row(
        "dispatch latency, 100 threads p50 / p99 / max",
        pct(&lat100_s),
        "us",
        Some(floor_rt_s.p50_us / lat100_s.p50_us),
    );
    t.row(
        "turns completed, 1 thread / 100 threads",
        format!("{tps1:.0} / {tps100:.0}"),
        "turns/s",
        None,
    );
    t.row(
        &format!(
            "update throughput, {} turns x {} say (median of 3)",
            tp.threads, tp.lines_per_turn
        ),
        format!("{:.0}", tp.item_updates_per_s),
        "item upd/s",
        Some(tp.messages_per_s / floor_tp),
    );
    if let Some(b) = &tp_cpu {
        b.add_rows(&mut t, floor_tp);
    }
    for run in [Some(&acked), Some(&legacy), baseline.as_ref()]
        .into_iter()
        .flatten()
    {
        let what = match run.mode.as_str() {
            "acked" => "control plane acknowledges (acked-delivery/1)".to_owned(),
            "legacy" => "control plane without acknowledgements".to_owned(),
            _ => format!(
                "baseline binary {}",
                a.baseline
                    .as_ref()
                    .map_or(String::new(), |b| b.display().to_string())
            ),
        };
        let tp = &run.throughput;
        t.row(
            &format!(
                "update throughput, {what}, {} turns x {} say (median of 3)",
                tp.threads, tp.lines_per_turn
            ),
            format!("{:.0}", tp.item_updates_per_s),
            "item upd/s",
            Some(tp.messages_per_s / floor_tp),
        );
    }
    for run in [&acked, &legacy] {
        if let (Some(us), Some(jobs), Some(commits)) = (
            run.journal_us_per_update,
            run.journal_jobs,
            run.journal_commits,
        ) {
            t.row(
                &format!(
                    "journal cost ({}): store-thread time per update produced ({:.0} writes in {:.0} group commits)",
                    run.mode, jobs, commits
                ),
                format!("{us:.2}"),
                "us",
                None,
            );
        }
    }
    for run in [Some(&acked), Some(&legacy), baseline.as_ref()]
        .into_iter()
        .flatten()
    {
        t.row(
            &format!(
                "runner CPU per turn ({}), 100 threads, {} say-x turns",
                run.mode, run.turns
            ),
            format!("{:.1}", run.cpu_us_per_turn),
            "us",
            None,
        );
        if let Some(c) = run.state_commits_per_turn {
            t.row(
                &format!("state store commits per turn ({})", run.mode),
                format!("{c:.3}"),
                "commits",
                None,
            );
        }
    }
    if let Some(b) = &baseline {
        t.row(
            "update throughput, this binary (acked) / baseline",
            format!(
                "{:.3}",
                acked.throughput.item_updates_per_s / b.throughput.item_updates_per_s
            ),
            "ratio",
            None,
        );
    }
    t.row(
        &format!(
            "outbox drain after reconnect ({} of {} msgs; median of {}, {:.2}-{:.2} of the floor)",
            ob.messages_after_reconnect,
            ob.expected_messages,
            drain_rates.len(),
            drain_rates.first().copied().unwrap_or(0.0) / floor_tp,
            drain_rates.last().copied().unwrap_or(0.0) / floor_tp,
        ),
        format!("{:.0}", ob.messages_per_s),
        "msg/s",
        Some(ob.messages_per_s / floor_tp),
    );
    t.row(
        &format!(
            "outbox overflow: {} msgs into 10000, delivered after reconnect",
            ob_over.expected_messages
        ),
        format!("{}", ob_over.messages_after_reconnect),
        "msgs",
        None,
    );
    t.row(
        "runner CPU per update queued while disconnected: fits / overflows",
        format!(
            "{:.2} / {:.2}",
            ob.cpu_us_per_update, ob_over.cpu_us_per_update
        ),
        "us",
        None,
    );
    t.row(
        "RSS idle (registered)",
        format!("{:.1}", mib(fp.idle_rss_bytes)),
        "MiB",
        None,
    );
    t.row(
        "RSS 1 s after connecting: runner / bare client (before start-up pages are released)",
        format!(
            "{:.1} / {:.1}",
            mib(idle_both.connected_1s.rss_bytes),
            mib(bare_both.connected_1s.rss_bytes)
        ),
        "MiB",
        None,
    );
    t.row(
        &format!("RSS idle, settled ({} s): bare tonic client holding one ControlChannel (floor): RSS / anonymous", idle::SETTLED.as_secs()),
        format!("{:.1} / {:.1}", mib(bare.rss_bytes), mib(bare.anon_bytes)),
        "MiB",
        None,
    );
    t.row(
        &format!(
            "RSS idle, settled ({} s): runner (every built-in SDK): RSS / anonymous",
            idle::SETTLED.as_secs()
        ),
        format!(
            "{:.1} / {:.1}",
            mib(idle_runner.rss_bytes),
            mib(idle_runner.anon_bytes)
        ),
        "MiB",
        None,
    );
    t.row(
        &format!(
            "RSS idle, settled ({} s): runner / bare client: RSS / anonymous",
            idle::SETTLED.as_secs()
        ),
        format!(
            "{:.2} / {:.2}",
            idle_runner.rss_bytes as f64 / bare.rss_bytes as f64,
            idle_runner.anon_bytes as f64 / bare.anon_bytes as f64
        ),
        "ratio",
        None,
    );
    for (n, rss) in &fp.with_threads {
        t.row(
            &format!("RSS with {n} threads in a sleep turn"),
            format!("{:.1}", mib(*rss)),
            "MiB",
            None,
        );
    }
    t.row(
        "bytes per thread (running turn)",
        format!("{:.0}", fp.bytes_per_thread),
        "B",
        None,
    );
    t.row(
        &format!(
            "scale: RSS with {} threads, each turn running at once (completed: {})",
            scale.threads, scale.completed
        ),
        format!(
            "{:.1} ({:.0} B/thread)",
            mib(scale.peak_rss_bytes),
            scale.bytes_per_thread
        ),
        "MiB",
        None,
    );
    t.row(
        &format!(
            "heartbeat round trip while {} threads are created and {} turns stream ({} msgs in {:.1} s), p50 / p99 / max",
            hb.threads_created, hb.streaming_turns, hb.messages_under_load, hb.load_seconds
        ),
        pct(&hb.under_load),
        "us",
        None,
    );
    t.row(
        &format!(
            "  of those, sent while the {} turns streamed (first {:.2} s; {} beats), p50 / p99 / max",
            hb.streaming_turns, hb.streaming_seconds, hb.while_streaming.n
        ),
        pct(&hb.while_streaming),
        "us",
        None,
    );
    t.row(
        &format!(
            "  sent after the streams ended, threads still being created ({} beats), p50 / p99 / max",
            hb.after_streaming.n
        ),
        pct(&hb.after_streaming),
        "us",
        None,
    );
    t.row(
        "heartbeat p99 under that load / floor round trip p99",
        format!("{:.1}", hb.under_load.p99_us / floor_rt_s.p99_us),
        "ratio",
        None,
    );
    t.row(
        &format!(
            "floor: heartbeat round trip while a bare client floods a mock ({} msgs in {:.1} s), p50 / p99 / max",
            hb.floor_flood_messages, hb.floor_flood_seconds
        ),
        pct(&hb.floor_under_flood),
        "us",
        None,
    );
    t.row(
        "heartbeat p99 after the streams ended / floor round trip p99",
        format!("{:.1}", hb.after_streaming.p99_us / floor_rt_s.p99_us),
        "ratio",
        None,
    );
    t.row(
        "heartbeat p99 while the turns streamed / p99 of the flooded (saturated) bare stream",
        format!(
            "{:.2}",
            hb.while_streaming.p99_us / hb.floor_under_flood.p99_us
        ),
        "ratio",
        None,
    );
    t.row(
        "heartbeat p99 under load / p99 of the flooded (saturated) bare stream",
        format!("{:.2}", hb.under_load.p99_us / hb.floor_under_flood.p99_us),
        "ratio",
        None,
    );
    let start_s = Summary::of(&ms_samples(&starts.start_ms));
    t.row(
        &format!(
            "start: spawn -> RegisterRunner, {} starts, every SDK{}, p50 / p99 / max",
            starts.start_ms.len(),
            if starts.codex_bin.is_some() {
                " (real codex)"
            } else {
                ""
            }
        ),
        format!(
            "{:.1} / {:.1} / {:.1}",
            start_s.p50_us / 1e3,
            start_s.p99_us / 1e3,
            start_s.max_us / 1e3
        ),
        "ms",
        None,
    );
    let bare_start_s = Summary::of(&ms_samples(&starts.bare_ms));
    t.row(
        &format!(
            "start floor: bare tonic client spawn -> RegisterRunner, {} starts (one after each), p50 / p99 / max",
            starts.bare_ms.len()
        ),
        format!(
            "{:.1} / {:.1} / {:.1}",
            bare_start_s.p50_us / 1e3,
            bare_start_s.p99_us / 1e3,
            bare_start_s.max_us / 1e3
        ),
        "ms",
        None,
    );
    t.row(
        "start p50 / the floor's p50",
        format!("{:.2}", start_s.p50_us / bare_start_s.p50_us),
        "ratio",
        None,
    );
    if let Some(fs) = &starts.fs_create {
        t.row(
            "filesystem during the starts: mkdir + create a file, p50 / p90 / max",
            format!(
                "{:.2} / {:.2} / {:.2}",
                fs.p50_us / 1e3,
                fs.p90_us / 1e3,
                fs.max_us / 1e3
            ),
            "ms",
            None,
        );
    }
    if let Some(cold) = starts.cold_ms {
        t.row(
            "start with the binary dropped from the page cache first (cold), spawn -> RegisterRunner",
            format!("{cold:.1}"),
            "ms",
            None,
        );
    }
    let restart_s = Summary::of(&ms_samples(&starts.restart_ms));
    t.row(
        &format!(
            "restart (existing state dir): spawn -> RegisterRunner, {} restarts, p50 / p99 / max",
            starts.restart_ms.len()
        ),
        format!(
            "{:.1} / {:.1} / {:.1}",
            restart_s.p50_us / 1e3,
            restart_s.p99_us / 1e3,
            restart_s.max_us / 1e3
        ),
        "ms",
        None,
    );
    if !starts.probed_ms.is_empty() {
        t.row(
            "start: spawn -> codex probed (agent_sdk_update), median",
            format!("{:.0}", median(&starts.probed_ms)),
            "ms",
            None,
        );
    }
    t.row(
        "reconnect: control plane restarted -> registered (median)",
        format!("{:.0}", median(&sr.reconnect_ms)),
        "ms",
        None,
    );
    engine_rows::add(&mut t, &ca, &peers);
    println!();
    t.print();
    if let Some(p) = &prof {
        println!(
            "\nprofile of the runner during three more throughput runs (not counted): {} (sample weight {}); most self time:",
            p.svg.display(),
            p.weight
        );
        for (f, share) in &p.top_self {
            println!("  {:5.1} %  {f}", share * 100.0);
        }
    }
    println!();
    println!(
        "vs floor: throughput rows are msg/s as a fraction of the bare stream's; latency rows are floor p50 / runner p50."
    );
    if invalid > 0 {
        println!("WARNING: the mock saw {invalid} ClientMessages that broke buf.validate");
    }

    let results = json!({
        "mode": if a.quick { "quick" } else { "full" },
        "machine": machine,
        "runner": bin.display().to_string(),
        "floor": {
            "bare_stream_msgs_per_s": floor_tp,
            "bare_stream_runs_msgs_per_s": floors,
            "mock_ingest_msgs_per_s": mock_tp,
            "round_trip": floor_rt_s,
            "messages": sz.floor_messages,
        },
        "dispatch_latency": {
            "one_thread": lat1_s,
            "hundred_threads": lat100_s,
            "turn": "say x",
            "p50_vs_floor_one_thread": floor_rt_s.p50_us / lat1_s.p50_us,
            "p50_vs_floor_hundred_threads": floor_rt_s.p50_us / lat100_s.p50_us,
            "turns_per_s_one_thread": tps1,
            "turns_per_s_hundred_threads": tps100,
        },
        "update_throughput": tp,
        "update_throughput_cpu": tp_cpu,
        "delivery": {
            "acked": acked,
            "legacy": legacy,
            "baseline": baseline,
        },
        "profile": prof,
        "update_throughput_vs_floor": tp.messages_per_s / floor_tp,
        "outbox_drain": ob,
        "outbox_drain_vs_floor": ob.messages_per_s / floor_tp,
        "outbox_drains_vs_floor": drain_rates.iter().map(|r| r / floor_tp).collect::<Vec<_>>(),
        "outbox_overflow": ob_over,
        "footprint": fp,
        "idle_memory": { "runner": idle_both, "bare_client": bare_both },
        "scale": scale,
        "heartbeat_under_load": hb,
        "start_and_reconnect": {
            "start_ms": sr.start_ms,
            "reconnect_ms": sr.reconnect_ms,
            "stop_ms": sr.stop_ms,
            "start_ms_median": median(&sr.start_ms),
            "reconnect_ms_median": median(&sr.reconnect_ms),
            "starts": starts,
            "starts_summary": start_s,
            "bare_client_starts_summary": bare_start_s,
            "restarts_summary": restart_s,
        },
        "code_agent": ca,
        "peers": peers,
        "invalid_client_messages": invalid,
        "chart": png.display().to_string(),
    });
    let json_path = a.out.join("results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&results)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    println!("JSON:  {}", json_path.display());
    println!("chart: {}", png.display());
    Ok(())
}
