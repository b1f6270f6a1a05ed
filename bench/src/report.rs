//! The report of the full run: the latency chart, the table printed to
//! stdout (one function per section), and the same figures as JSON
//! (`results_json.rs`).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use plotters::style::RGBColor;

use crate::heartbeat::Heartbeat;
use crate::stats::{Machine, Summary};
use crate::suite::{Delivery, Floor, Link, Load, Memory, Results};
use crate::table::{Table, median, mib, ms_samples, pct};
use crate::{Args, Sizes, chart, engine_rows, idle, results_json};

/// Writes the chart, prints the table and writes `results.json` under
/// `a.out`.
pub fn write(a: &Args, bin: &Path, sz: &Sizes, machine: &Machine, r: &Results) -> Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let png = latency_chart(&a.out, &r.link, &r.floor)?;
    let mut t = Table(vec![]);
    link_rows(&mut t, &r.link, &r.floor);
    delivery_rows(&mut t, &r.delivery, r.floor.median, a);
    outbox_rows(&mut t, &r.link, r.floor.median);
    memory_rows(&mut t, &r.memory);
    load_rows(&mut t, &r.load, &r.floor);
    let starts = StartSummaries::of(r);
    start_rows(&mut t, r, &starts);
    engine_rows::add(&mut t, &r.code_agent, &r.peers);
    print(&t, &r.link);
    let results = results_json::of(a, bin, sz, machine, r, &starts, &png);
    let json_path = a.out.join("results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&results)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    println!("JSON:  {}", json_path.display());
    println!("chart: {}", png.display());
    Ok(())
}

/// The dispatch latency distribution, beside the floor's round trip, as a
/// PNG in `out`; returns its path.
fn latency_chart(out: &Path, link: &Link, floor: &Floor) -> Result<PathBuf> {
    let Link { lat1, lat100, .. } = link;
    let floor_rt = &floor.round_trip;
    let png = out.join("latency.png");
    chart::latency_png(
        &png,
        "agent-runner dispatch latency (`say x` turns over loopback)",
        &[
            chart::Series {
                name: "1 thread",
                samples: lat1,
                color: RGBColor(31, 119, 180),
            },
            chart::Series {
                name: "100 threads",
                samples: lat100,
                color: RGBColor(214, 39, 40),
            },
            chart::Series {
                name: "floor (bare tonic round trip)",
                samples: floor_rt,
                color: RGBColor(120, 120, 120),
            },
        ],
    )?;
    Ok(png)
}

/// The floor, dispatch latency and update throughput.
fn link_rows(t: &mut Table, link: &Link, floor: &Floor) {
    let Link {
        lat1_s,
        lat100_s,
        tps1,
        tps100,
        tp,
        tp_cpu,
        ..
    } = link;
    let Floor {
        runs: floors,
        median: floor_tp,
        mock_ingest: mock_tp,
        round_trip_s: floor_rt_s,
        ..
    } = floor;
    let floor_tp = *floor_tp;
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
        pct(floor_rt_s),
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
        pct(lat1_s),
        "us",
        Some(floor_rt_s.p50_us / lat1_s.p50_us),
    );
    t.row(
        "dispatch latency, 100 threads p50 / p99 / max",
        pct(lat100_s),
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
        b.add_rows(t, floor_tp);
    }
}

/// Update throughput by delivery mode, the journal's cost, CPU per turn.
fn delivery_rows(t: &mut Table, d: &Delivery, floor_tp: f64, a: &Args) {
    let Delivery {
        acked,
        legacy,
        baseline,
    } = d;
    for run in [Some(acked), Some(legacy), baseline.as_ref()]
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
    for run in [acked, legacy] {
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
    for run in [Some(acked), Some(legacy), baseline.as_ref()]
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
}

/// The outbox drained after a reconnect, and overflowing.
fn outbox_rows(t: &mut Table, link: &Link, floor_tp: f64) {
    let Link {
        drain_rates,
        ob,
        ob_over,
        ..
    } = link;
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
}

/// Memory: idle, beside a bare client, and with threads.
fn memory_rows(t: &mut Table, m: &Memory) {
    let Memory {
        fp,
        idle_both,
        bare_both,
    } = m;
    let (idle_runner, bare) = (&idle_both.settled, &bare_both.settled);
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
}

/// Scale, and heartbeats under load against the floor's.
fn load_rows(t: &mut Table, load: &Load, floor: &Floor) {
    let Load {
        scale,
        hb,
        hb_small,
    } = load;
    let floor_rt_s = &floor.round_trip_s;
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
    small_window_rows(t, hb, hb_small, floor_rt_s);
}

/// The same load against a control plane granting a small stream window:
/// what the answers wait behind on the wire, at what cost in rate.
fn small_window_rows(t: &mut Table, hb: &Heartbeat, small: &Heartbeat, floor_rt_s: &Summary) {
    let kib = small.stream_window.unwrap_or(0) / 1024;
    t.row(
        &format!(
            "control plane granting a {kib} KiB stream window: heartbeat round trip under the same load ({} msgs in {:.1} s), p50 / p99 / max",
            small.messages_under_load, small.load_seconds
        ),
        pct(&small.under_load),
        "us",
        None,
    );
    t.row(
        &format!("  ({kib} KiB window) heartbeat p99 under load / floor round trip p99"),
        format!("{:.1}", small.under_load.p99_us / floor_rt_s.p99_us),
        "ratio",
        None,
    );
    t.row(
        &format!(
            "  ({kib} KiB window) heartbeat p99 under load / p99 of a bare client flooding the same"
        ),
        format!(
            "{:.2}",
            small.under_load.p99_us / small.floor_under_flood.p99_us
        ),
        "ratio",
        None,
    );
    t.row(
        &format!(
            "  ({kib} KiB window) time the {} turns took to stream / at the default window",
            small.streaming_turns
        ),
        format!("{:.2}", small.streaming_seconds / hb.streaming_seconds),
        "ratio",
        None,
    );
}

/// The start-up figures as summaries (the table's and the JSON's).
pub struct StartSummaries {
    pub start_s: Summary,
    pub bare_start_s: Summary,
    pub restart_s: Summary,
}

impl StartSummaries {
    fn of(r: &Results) -> Self {
        let starts = &r.starts;
        Self {
            start_s: Summary::of(&ms_samples(&starts.start_ms)),
            bare_start_s: Summary::of(&ms_samples(&starts.bare_ms)),
            restart_s: Summary::of(&ms_samples(&starts.restart_ms)),
        }
    }
}

/// Start, restart and reconnect times.
fn start_rows(t: &mut Table, r: &Results, s: &StartSummaries) {
    let (starts, sr) = (&r.starts, &r.start_reconnect);
    let StartSummaries {
        start_s,
        bare_start_s,
        restart_s,
    } = s;
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
}

/// The table, the profile's top functions and the notes, to stdout.
fn print(t: &Table, link: &Link) {
    let Link { prof, invalid, .. } = link;
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
    if *invalid > 0 {
        println!("WARNING: the mock saw {invalid} ClientMessages that broke buf.validate");
    }
}
