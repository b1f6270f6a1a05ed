//! `runner-bench`: measures the real `agent-runner` process the way its
//! users will stress it and prints a table, writes the same
//! figures as JSON and draws the latency distribution as a PNG.
//!
//! ```text
//! runner-bench [--quick] [--runner PATH] [--baseline-runner PATH] [--out DIR] [--only SCENARIO]
//! ```
//!
//! `--only` runs one scenario alone and prints its figures (see
//! `only.rs`); `--only a,b` runs several one after the other in this one
//! process (to see whether one slows the next, as in the full run).
//!
//! `--baseline-runner` measures update throughput with a second binary too
//! (e.g. one built before a change) and prints the ratio.
//!
//! Everything runs on loopback: the mock control plane (library) in this
//! process, the runner as a child process with the `scripted` adapter, and a
//! bare tonic stream as the cost floor, all in the same run. No figure here
//! is asserted anywhere; `bench/run.sh` builds and runs it.
//!
//! The full run's phases are in `suite.rs`, its table in `report.rs`, its
//! JSON in `results_json.rs`; each scenario is a module of its own.

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
mod report;
mod results_json;
mod scale;
mod scenarios;
mod startup;
mod stats;
mod suite;
mod table;

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};

use crate::stats::Machine;

/// The command line.
struct Args {
    quick: bool,
    runner: Option<PathBuf>,
    baseline: Option<PathBuf>,
    out: PathBuf,
    /// Run these scenarios alone, in order (see `only.rs`).
    only: Option<String>,
}

/// Parses the command line (`--help` prints usage and exits).
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
    let results = suite::run(&bin, &a, &sz).await?;
    eprintln!("[6/6] writing results");
    report::write(&a, &bin, &sz, &machine, &results)
}
