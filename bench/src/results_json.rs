//! `results.json`: every figure of the full run, for comparing runs and
//! for `bench/HISTORY.md`; the printed table is `report.rs`.

use std::path::Path;

use serde_json::json;

use crate::report::StartSummaries;
use crate::stats::Machine;
use crate::suite::{Delivery, Floor, Link, Load, Memory, Results};
use crate::table::median;
use crate::{Args, Sizes};

/// Every figure, as `results.json` holds them.
pub fn of(
    a: &Args,
    bin: &Path,
    sz: &Sizes,
    machine: &Machine,
    r: &Results,
    s: &StartSummaries,
    png: &Path,
) -> serde_json::Value {
    let Link {
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
        ..
    } = &r.link;
    let Floor {
        runs: floors,
        median: floor_tp,
        mock_ingest: mock_tp,
        round_trip_s: floor_rt_s,
        ..
    } = &r.floor;
    let floor_tp = *floor_tp;
    let Delivery {
        acked,
        legacy,
        baseline,
    } = &r.delivery;
    let Memory {
        fp,
        idle_both,
        bare_both,
    } = &r.memory;
    let Load {
        scale,
        hb,
        hb_small,
    } = &r.load;
    let (sr, starts) = (&r.start_reconnect, &r.starts);
    let (ca, peers) = (&r.code_agent, &r.peers);
    let StartSummaries {
        start_s,
        bare_start_s,
        restart_s,
    } = s;
    json!({
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
        "heartbeat_under_load_small_window": hb_small,
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
    })
}
