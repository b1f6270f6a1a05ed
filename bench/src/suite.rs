//! The full run, phase by phase: one function per group of scenarios, run
//! in the order the full run needs (start-up first, on a quiet disk), each
//! returning its figures for the report.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use mock_control_plane::AckMode;

use crate::budget::CpuBudget;
use crate::code_agent::CodeAgentFigures;
use crate::delivery::DeliveryRun;
use crate::heartbeat::Heartbeat;
use crate::idle::Idle;
use crate::peers::Peers;
use crate::profile::Profile;
use crate::scale::Scale;
use crate::scenarios::{Footprint, OutboxDrain, Rig, StartReconnect, Throughput};
use crate::startup::Starts;
use crate::stats::Summary;
use crate::{Args, Sizes};
use crate::{budget, code_agent, delivery, floor, heartbeat, idle, peers, profile};
use crate::{scale, scenarios, startup, stats};

/// Everything the full run measured.
pub struct Results {
    pub start_reconnect: StartReconnect,
    pub starts: Starts,
    pub floor: Floor,
    pub link: Link,
    pub delivery: Delivery,
    pub memory: Memory,
    pub load: Load,
    pub code_agent: CodeAgentFigures,
    pub peers: Peers,
}

/// The cost floor: a bare tonic stream and the mock's own ingest.
pub struct Floor {
    /// Every bare-stream run (msg/s): the one before everything and those
    /// before each throughput run and each drain; sorted once all are in.
    pub runs: Vec<f64>,
    /// The median of `runs`: the ratios' denominator.
    pub median: f64,
    pub mock_ingest: f64,
    pub round_trip: Vec<Duration>,
    pub round_trip_s: Summary,
}

/// One runner's dispatch latency, update throughput and outbox drains.
pub struct Link {
    pub lat1: Vec<Duration>,
    pub lat100: Vec<Duration>,
    pub lat1_s: Summary,
    pub lat100_s: Summary,
    pub tps1: f64,
    pub tps100: f64,
    /// The median of the counted throughput runs.
    pub tp: Throughput,
    pub tp_cpu: Option<CpuBudget>,
    pub prof: Option<Profile>,
    /// The drains' rates (msg/s), sorted.
    pub drain_rates: Vec<f64>,
    /// The median drain.
    pub ob: OutboxDrain,
    /// A drain of far more updates than the outbox holds.
    pub ob_over: OutboxDrain,
    /// ClientMessages the mock saw break buf.validate.
    pub invalid: usize,
}

/// Acked and legacy control planes, and the baseline binary if any.
pub struct Delivery {
    pub acked: DeliveryRun,
    pub legacy: DeliveryRun,
    pub baseline: Option<DeliveryRun>,
}

/// Memory: with threads, and idle beside a bare client.
pub struct Memory {
    pub fp: Footprint,
    pub idle_both: Idle,
    pub bare_both: Idle,
}

/// Many threads at once, and heartbeats under load.
pub struct Load {
    pub scale: Scale,
    pub hb: Heartbeat,
    /// The same load against a control plane granting a small HTTP/2
    /// stream window ([`heartbeat::SMALL_WINDOW`]).
    pub hb_small: Heartbeat,
}

/// Every phase, in order.
pub async fn run(bin: &Path, a: &Args, sz: &Sizes) -> Result<Results> {
    // Start-up first: the scenarios that make thousands of threads leave
    // thousands of directories to delete, and on this machine's disk
    // (ext4, online discard) every process's file creations run about
    // eight times slower for a minute or more after that (`fs_probe`).
    eprintln!("[1/6] start and reconnect");
    let start_reconnect = scenarios::start_and_reconnect(bin, sz.start_runs).await?;
    let starts = startup::starts(bin, sz.startup_runs).await?;
    eprintln!("[1b/6] cost floor (bare tonic stream)");
    let mut floor = cost_floor(sz).await?;
    eprintln!("[2/6] dispatch latency, update throughput, outbox drain");
    let link = link(bin, a, sz, &mut floor).await?;
    eprintln!("[2b/6] delivery: acked vs legacy control plane, journal cost, baseline");
    let delivery = delivery_modes(bin, a, sz).await?;
    eprintln!("[3/6] footprint");
    let memory = memory(bin, sz).await?;
    eprintln!("[4/6] scale and heartbeat under load");
    let load = load(bin, a.quick).await?;
    eprintln!("[5/6] code-agent SDK (embedded engine, mock model)");
    let code_agent = code_agent::measure(bin, sz.code_agent_turns, &sz.code_agent_levels).await?;
    eprintln!("[5b/6] peers: codex app-server vs the code-agent engine, same script");
    let peers = peers::measure(bin, sz.peer_turns, sz.peer_threads).await?;
    Ok(Results {
        start_reconnect,
        starts,
        floor,
        link,
        delivery,
        memory,
        load,
        code_agent,
        peers,
    })
}

/// The first floor runs; [`link`] adds more and sets the median.
async fn cost_floor(sz: &Sizes) -> Result<Floor> {
    // The floor is measured again before each throughput run and each
    // drain, and the median of all is the ratios' denominator: one bare
    // run varies by a third within a process (610 k to 1,038 k msg/s in
    // four runs of one process on this machine), more than most changes
    // measured against it.
    let runs = vec![floor::throughput(sz.floor_messages).await?];
    let mock_ingest = floor::mock_ingest(sz.floor_messages).await?;
    let round_trip = floor::round_trip(sz.floor_round_trips).await?;
    let round_trip_s = Summary::of(&round_trip);
    Ok(Floor {
        runs,
        median: 0.0,
        mock_ingest,
        round_trip,
        round_trip_s,
    })
}

/// Dispatch latency, update throughput (with a profile of extra runs) and
/// outbox drains, on one runner; the floor measured again before each
/// throughput run and drain.
async fn link(bin: &Path, a: &Args, sz: &Sizes, floor: &mut Floor) -> Result<Link> {
    let rig = Rig::start(bin, &["--reconnect-max-delay", "1s"]).await?;
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
        floor.runs.push(f.messages_per_s);
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
        floor.runs.push(floor::throughput(sz.floor_messages).await?);
        drains.push(scenarios::outbox_drain(&rig, d, sz.outbox_lines).await?);
    }
    drains.sort_by(|a, b| a.messages_per_s.total_cmp(&b.messages_per_s));
    let drain_rates: Vec<f64> = drains.iter().map(|d| d.messages_per_s).collect();
    let ob = drains[drains.len() / 2].clone();
    // The same with far more updates than the outbox holds (10,000).
    let ob_over =
        scenarios::outbox_drain(&rig, &threads[..sz.outbox_threads], sz.overflow_lines).await?;
    let invalid = rig.cp().invalid_received().len();
    floor.median = stats::median(floor.runs.iter().copied());
    // The throughput runs' CPU, against the run's median floor (the
    // counted runs, none of them profiled).
    let tp_cpu = budget::CpuBudget::of(&tp_floors, &tps, floor.median);
    floor.runs.sort_by(f64::total_cmp);
    rig.runner.stop().await;
    Ok(Link {
        lat1,
        lat100,
        lat1_s,
        lat100_s,
        tps1,
        tps100,
        tp,
        tp_cpu,
        prof,
        drain_rates,
        ob,
        ob_over,
        invalid,
    })
}

/// Update throughput against an acking and a legacy control plane (and
/// the baseline binary's, if given), with the journal's cost.
async fn delivery_modes(bin: &Path, a: &Args, sz: &Sizes) -> Result<Delivery> {
    let (dn, dl) = (sz.throughput_threads, sz.throughput_lines);
    let dt = sz.latency_turns;
    let acked = delivery::measure(bin, "acked", AckMode::Immediate, dn, dl, dt).await?;
    let legacy = delivery::measure(bin, "legacy", AckMode::Refuse, dn, dl, dt).await?;
    let baseline = match &a.baseline {
        Some(b) => Some(delivery::measure(b, "baseline", AckMode::Immediate, dn, dl, dt).await?),
        None => None,
    };
    Ok(Delivery {
        acked,
        legacy,
        baseline,
    })
}

/// Memory with threads in a sleep turn, and idle beside a bare client.
async fn memory(bin: &Path, sz: &Sizes) -> Result<Memory> {
    let fp = scenarios::footprint(bin, &sz.footprint_levels).await?;
    let (idle_both, bare_both) = idle::both(bin).await?;
    Ok(Memory {
        fp,
        idle_both,
        bare_both,
    })
}

/// Many threads each running a turn at once, and heartbeats while threads
/// are created and turns stream.
async fn load(bin: &Path, quick: bool) -> Result<Load> {
    let scale = scale::measure(bin, if quick { 1_000 } else { 10_000 }).await?;
    let (hc, hs, hl) = if quick {
        (200, 20, 200)
    } else {
        (1_000, 100, 1_000)
    };
    let hb = heartbeat::measure(bin, hc, hs, hl, None).await?;
    let hb_small = heartbeat::measure(bin, hc, hs, hl, Some(heartbeat::SMALL_WINDOW)).await?;
    Ok(Load {
        scale,
        hb,
        hb_small,
    })
}
