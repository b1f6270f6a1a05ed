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
            let summary = Summary::of(&crate::ms_samples(&starts.start_ms));
            let restarts = Summary::of(&crate::ms_samples(&starts.restart_ms));
            serde_json::json!({ "starts": starts, "first_start_us": summary, "restart_us": restarts })
        }
        "idle" => {
            let fp = crate::scenarios::footprint(bin, &[1]).await?;
            let bare = crate::idle::bare_client_rss().await?;
            serde_json::json!({
                "runner_idle_rss_bytes": fp.idle_rss_bytes,
                "bare_client_rss_bytes": bare,
                "ratio": fp.idle_rss_bytes as f64 / bare as f64,
            })
        }
        "scale" => {
            let n = if quick { 1_000 } else { 10_000 };
            serde_json::to_value(crate::scale::measure(bin, n).await?)?
        }
        other => bail!("unknown scenario {other:?} (startup, idle, scale)"),
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}
