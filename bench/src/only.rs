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
        other => bail!("unknown scenario {other:?} (startup)"),
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}
