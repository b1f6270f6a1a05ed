//! The table rows of the `code-agent` engine and its peer: turn
//! latency, the model's own time and the engine's overhead net of it, the
//! session save per step, memory, and the codex app-server row beside the
//! engine's with their ratios.

use crate::code_agent::CodeAgentFigures;
use crate::peers::{PeerFigures, Peers};
use crate::stats::Summary;
use crate::table::{Table, mib, pct};

/// Microseconds as milliseconds, two decimals.
fn ms(us: f64) -> String {
    format!("{:.2}", us / 1e3)
}

/// `turn − model` at p50, in ms (the difference of the two
/// distributions' medians, both measured in this run). Not at p99: the
/// difference of two tails measured apart is noise, and went negative in
/// a full run (-8.5 ms) when the replayed model's slowest request was
/// slower than the slowest turn. The turn's own p99 is in its row.
fn net(turn: &Summary, model: &Summary) -> String {
    ms(turn.p50_us - model.p50_us)
}

pub fn add(t: &mut Table, ca: &CodeAgentFigures, peers: &Peers) {
    t.row(
        "code-agent turn (mock model answers), p50 / p99 / max",
        pct(&ca.text_turn),
        "us",
        None,
    );
    t.row(
        "code-agent turn with one bash tool call, p50 / p99 / max",
        pct(&ca.tool_turn),
        "us",
        None,
    );
    t.row(
        "code-agent turn with one bash tool call, --sandbox off, p50 / p99 / max",
        pct(&ca.tool_turn_unsandboxed),
        "us",
        None,
    );
    t.row(
        "code-agent: the mock model alone (the engine's recorded requests replayed), text / tool turn p50",
        format!(
            "{} / {}",
            ms(ca.model_text.p50_us),
            ms(ca.model_tool.p50_us)
        ),
        "ms",
        None,
    );
    t.row(
        "code-agent overhead net of the model, text turn p50 (target <= 1 ms)",
        net(&ca.text_turn, &ca.model_text),
        "ms",
        None,
    );
    t.row(
        "code-agent overhead net of the model, one tool call p50 (target <= 5 ms)",
        net(&ca.tool_turn, &ca.model_tool),
        "ms",
        None,
    );
    for (what, save, bytes) in [
        ("snapshot after 1 turn", &ca.save_fresh, ca.save_fresh_bytes),
        (
            "snapshot after every timed turn",
            &ca.save_long,
            ca.save_long_bytes,
        ),
        (
            "step appended to that session's log",
            &ca.step_long,
            ca.step_long_bytes,
        ),
    ] {
        t.row(
            &format!("code-agent session save, p50 / p99: {what} ({bytes} B)"),
            format!("{} / {}", ms(save.p50_us), ms(save.p99_us)),
            "ms",
            None,
        );
    }
    t.row(
        "code-agent: RSS registered (engine started)",
        format!("{:.1}", mib(ca.idle_rss_bytes)),
        "MiB",
        None,
    );
    for (n, rss) in &ca.with_sessions {
        t.row(
            &format!("code-agent: RSS with {n} idle threads (sessions)"),
            format!("{:.1}", mib(*rss)),
            "MiB",
            None,
        );
    }
    peer_rows(t, peers);
}

/// A per-thread PSS figure below this is within the noise: the runner's
/// own memory moves by a few KiB between the two samples, which divided by
/// the extra threads (10 in the full run) can come out at ±1 KiB.
const PSS_RESOLUTION: f64 = 1024.0;

/// The peer rows; the ratio column is codex ÷ code-agent.
fn peer_rows(t: &mut Table, peers: &Peers) {
    let ca = &peers.code_agent;
    let turn_row = |t: &mut Table, who: &str, f: &PeerFigures, ratio: Option<f64>| {
        t.row(
            &format!("peer: {who} turn (one shell call, then an answer), p50 / p99"),
            format!("{} / {}", ms(f.turn.p50_us), ms(f.turn.p99_us)),
            "ms",
            ratio,
        );
    };
    let memory_row = |t: &mut Table, who: &str, f: &PeerFigures, ratio: Option<f64>| {
        t.row(
            &format!(
                "peer: {who} memory per idle thread (PSS of the runner's process tree, {} threads)",
                f.extra_threads
            ),
            if f.pss_per_idle_thread_bytes < PSS_RESOLUTION {
                format!("< 1 (measured {:.0} B)", f.pss_per_idle_thread_bytes)
            } else {
                format!("{:.0}", f.pss_per_idle_thread_bytes / 1024.0)
            },
            "KiB",
            ratio,
        );
    };
    turn_row(t, "code-agent", ca, Some(1.0));
    match &peers.codex {
        Ok(codex) => turn_row(
            t,
            "codex app-server",
            codex,
            Some(codex.turn.p50_us / ca.turn.p50_us),
        ),
        Err(why) => t.row(
            "peer: codex app-server",
            format!("not measured: {why}"),
            "",
            None,
        ),
    }
    let within_noise = ca.pss_per_idle_thread_bytes < PSS_RESOLUTION;
    memory_row(t, "code-agent", ca, (!within_noise).then_some(1.0));
    if let Ok(codex) = &peers.codex {
        // No ratio to a figure within the noise (it can come out negative).
        let ratio =
            (!within_noise).then(|| codex.pss_per_idle_thread_bytes / ca.pss_per_idle_thread_bytes);
        memory_row(t, "codex app-server", codex, ratio);
    }
}
