//! The floor for idle memory (issue 14): `bare-client`, a bare tonic client
//! holding one `ControlChannel` to a mock control plane, measured the same
//! way as the idle runner (from /proc after the same settling time). Both
//! RSS and its anonymous part: most of an idle runner's RSS is clean pages
//! of its own executable (shared with the page cache, dropped first under
//! memory pressure), which a small client does not have.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result};
use mock_control_plane::{MockConfig, MockControlPlane};

use crate::collector::PATIENCE;

/// RSS and anonymous RSS of a process, in bytes.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Memory {
    pub rss_bytes: u64,
    pub anon_bytes: u64,
}

fn memory(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok(Memory {
        rss_bytes: field("VmRSS:")?,
        anon_bytes: field("RssAnon:")?,
    })
}

/// The idle runner (every built-in SDK), registered, after 1 s.
pub async fn runner(bin: &std::path::Path) -> Result<Memory> {
    let rig = crate::scenarios::Rig::start(bin, &[]).await?;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let m = memory(rig.runner.pid()?)?;
    rig.runner.stop().await;
    Ok(m)
}

/// `bare-client` (built beside this binary) once connected, after 1 s.
pub async fn bare_client() -> Result<Memory> {
    let me = std::env::current_exe().context("locating runner-bench")?;
    let bin = me.with_file_name("bare-client");
    let cp = MockControlPlane::start(MockConfig::default()).await?;
    let mut child = tokio::process::Command::new(&bin)
        .arg(cp.url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (cargo build --release -p runner-bench)",
                bin.display()
            )
        })?;
    cp.wait_connected(PATIENCE).await?;
    // As long as the idle runner is given to settle (scenarios::footprint).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let pid = child.id().context("bare-client exited")?;
    let m = memory(pid)?;
    let _ = child.kill().await;
    cp.stop().await?;
    Ok(m)
}
