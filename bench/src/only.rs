//! `runner-bench --only SCENARIO`: one scenario alone, its figures printed
//! as JSON — for working on one target without the whole run.

use std::path::Path;

use anyhow::{Result, bail};

use crate::stats::Summary;

/// Runs scenario `name` against the runner `bin`.
pub async fn run(name: &str, bin: &Path, quick: bool) -> Result<()> {
    let value = match name {
        "startup" => {
            let runs = if quick { 5 } else { 20 };
            let starts = crate::startup::starts(bin, runs).await?;
            let summary = Summary::of(&crate::table::ms_samples(&starts.start_ms));
            let restarts = Summary::of(&crate::table::ms_samples(&starts.restart_ms));
            let bare = Summary::of(&crate::table::ms_samples(&starts.bare_ms));
            serde_json::json!({
                "starts": starts,
                "first_start_us": summary,
                "restart_us": restarts,
                "bare_client_start_us": bare,
                "p50_vs_bare": summary.p50_us / bare.p50_us,
            })
        }
        "idle" => {
            let (runner, bare) = crate::idle::both(bin).await?;
            let (r, b) = (runner.settled, bare.settled);
            serde_json::json!({
                "runner": runner,
                "bare_client": bare,
                "rss_ratio": r.rss_bytes as f64 / b.rss_bytes as f64,
                "anon_ratio": r.anon_bytes as f64 / b.anon_bytes as f64,
                "rss_ratio_connected_1s": runner.connected_1s.rss_bytes as f64
                    / bare.connected_1s.rss_bytes as f64,
            })
        }
        "scale" => {
            let n = if quick { 1_000 } else { 10_000 };
            serde_json::to_value(crate::scale::measure(bin, n).await?)?
        }
        "heartbeat" => {
            let floor = Summary::of(&crate::floor::round_trip(2_000).await?);
            let (create, stream, lines) = if quick {
                (200, 20, 200)
            } else {
                (1_000, 100, 1_000)
            };
            // At the control plane's default window, then at a small one.
            let mut out = serde_json::Map::new();
            out.insert("floor_round_trip".into(), serde_json::to_value(&floor)?);
            for (key, window) in [
                ("heartbeat", None),
                ("small_window", Some(crate::heartbeat::SMALL_WINDOW)),
            ] {
                let hb = crate::heartbeat::measure(bin, create, stream, lines, window).await?;
                out.insert(
                    key.into(),
                    serde_json::json!({
                        "run": hb,
                        "p99_vs_floor_p99": hb.under_load.p99_us / floor.p99_us,
                        "p99_vs_flooded_floor_p99": hb.under_load.p99_us / hb.floor_under_flood.p99_us,
                        "streaming_p99_vs_flooded_floor_p99": hb.while_streaming.p99_us / hb.floor_under_flood.p99_us,
                        "after_streaming_p99_vs_floor_p99": hb.after_streaming.p99_us / floor.p99_us,
                        "streaming_seconds": hb.streaming_seconds,
                    }),
                );
            }
            serde_json::Value::Object(out)
        }
        "code-agent" => {
            let (turns, levels) = if quick {
                (50, vec![10])
            } else {
                (300, vec![10, 100])
            };
            serde_json::to_value(crate::code_agent::measure(bin, turns, &levels).await?)?
        }
        "throughput" => {
            let (floor_n, threads, lines) = if quick {
                (20_000, 2, 1_000)
            } else {
                (200_000, 8, 10_000)
            };
            let (ingest, rig, ids) = ingest_and_rig(bin, floor_n, threads, &[]).await?;
            // Warm-up, not counted; then three runs, the median reported.
            crate::scenarios::update_throughput(&rig, &ids, lines / 10).await?;
            // The floor again before each run; the median of those is the
            // denominator (as in the full run).
            let mut runs = Vec::new();
            let mut floors = Vec::new();
            let mut floor_runs = Vec::new();
            for _ in 0..3 {
                let f = crate::floor::throughput_cpu(floor_n).await?;
                floors.push(f.messages_per_s);
                floor_runs.push(f);
                runs.push(crate::scenarios::update_throughput(&rig, &ids, lines).await?);
            }
            rig.runner.stop().await;
            let floor = crate::stats::median(floors.iter().copied());
            let cpu = crate::budget::CpuBudget::of(&floor_runs, &runs, floor);
            runs.sort_by(|a, b| a.messages_per_s.total_cmp(&b.messages_per_s));
            let median = runs[1].clone();
            serde_json::json!({
                "floor_msgs_per_s": floor,
                "floor_runs_msgs_per_s": floors,
                "mock_ingest_msgs_per_s": ingest,
                "update_throughput": median,
                "cpu": cpu,
                "vs_floor": median.messages_per_s / floor,
                "runs_msgs_per_s": runs.iter().map(|r| r.messages_per_s).collect::<Vec<_>>(),
            })
        }
        "drain" => {
            let (floor_n, threads, lines) = if quick {
                (20_000, 2, 1_000)
            } else {
                (200_000, 4, 1_200)
            };
            let reconnect = ["--reconnect-max-delay", "1s"];
            let (ingest, rig, ids) = ingest_and_rig(bin, floor_n, threads, &reconnect).await?;
            // Warm-up, not counted; then the drains (each a few tens of
            // milliseconds, so several).
            crate::scenarios::update_throughput(&rig, &ids, lines).await?;
            let mut runs = Vec::new();
            let mut floors = Vec::new();
            for _ in 0..if quick { 3 } else { 9 } {
                floors.push(crate::floor::throughput(floor_n).await?);
                runs.push(crate::scenarios::outbox_drain(&rig, &ids, lines).await?);
            }
            rig.runner.stop().await;
            let floor = crate::stats::median(floors.iter().copied());
            serde_json::json!({
                "floor_msgs_per_s": floor,
                "floor_runs_msgs_per_s": floors,
                "mock_ingest_msgs_per_s": ingest,
                "vs_floor": runs.iter().map(|r| r.messages_per_s / floor).collect::<Vec<_>>(),
                "median_vs_floor": crate::stats::median(runs.iter().map(|r| r.messages_per_s)) / floor,
                "drains": runs,
            })
        }
        "delivery" => {
            // The delivery table's two rows (acked, legacy) back to back,
            // each against the median of bare runs made around them.
            let (floor_n, threads, lines, turns) = if quick {
                (20_000, 2, 1_000, 200)
            } else {
                (200_000, 8, 10_000, 1_000)
            };
            let mut floors = vec![crate::floor::throughput_cpu(floor_n).await?.messages_per_s];
            let acked = crate::delivery::measure(
                bin,
                "acked",
                mock_control_plane::AckMode::Immediate,
                threads,
                lines,
                turns,
            )
            .await?;
            floors.push(crate::floor::throughput_cpu(floor_n).await?.messages_per_s);
            let legacy = crate::delivery::measure(
                bin,
                "legacy",
                mock_control_plane::AckMode::Refuse,
                threads,
                lines,
                turns,
            )
            .await?;
            floors.push(crate::floor::throughput_cpu(floor_n).await?.messages_per_s);
            let floor = crate::stats::median(floors.iter().copied());
            serde_json::json!({
                "floor_msgs_per_s": floor,
                "floor_runs_msgs_per_s": floors,
                "acked_vs_floor": acked.throughput.messages_per_s / floor,
                "legacy_vs_floor": legacy.throughput.messages_per_s / floor,
                "acked": acked,
                "legacy": legacy,
            })
        }
        "peers" => {
            let (turns, threads) = if quick { (5, 2) } else { (30, 10) };
            serde_json::to_value(crate::peers::measure(bin, turns, threads).await?)?
        }
        other => {
            bail!(
                "unknown scenario {other:?} (startup, idle, scale, heartbeat, code-agent, peers, throughput, drain, delivery)"
            )
        }
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

/// The mock's ingest from a bare client (`floor_n` messages), then a
/// runner (with `extra` arguments) with one agent and `threads` threads.
async fn ingest_and_rig(
    bin: &Path,
    floor_n: usize,
    threads: usize,
    extra: &[&str],
) -> Result<(f64, crate::scenarios::Rig, Vec<String>)> {
    let ingest = crate::floor::mock_ingest(floor_n).await?;
    let rig = crate::scenarios::Rig::start(bin, extra).await?;
    rig.create_agent("bench").await?;
    let ids = rig.create_threads("bench", threads).await?;
    Ok((ingest, rig, ids))
}
