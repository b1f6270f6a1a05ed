//! The floor for idle memory: `bare-client`, a bare tonic client
//! holding one `ControlChannel` to a mock control plane, measured the same
//! way as the idle runner (from /proc at the same moments). Both RSS and its
//! anonymous part: much of an idle runner's RSS is clean pages of its own
//! executable (shared with the page cache, dropped first under memory
//! pressure), which a small client has far fewer of.
//!
//! Two moments: 1 s after connecting, and [`SETTLED`] after it, once the
//! runner has given back its start-up pages (`startup_pages`) and the first
//! HTTP/2 keepalive ping (every 20 s) has run on both sides.

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

/// When the settled sample is taken, after connecting.
pub const SETTLED: Duration = Duration::from_secs(25);

/// Memory at the two moments.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Idle {
    /// 1 s after connecting.
    pub connected_1s: Memory,
    /// [`SETTLED`] after connecting.
    pub settled: Memory,
}

async fn samples(pid: u32) -> Result<Idle> {
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let connected_1s = memory(pid)?;
    tokio::time::sleep(SETTLED.saturating_sub(Duration::from_millis(1000))).await;
    Ok(Idle {
        connected_1s,
        settled: memory(pid)?,
    })
}

/// The idle runner (every built-in SDK) and the bare client, side by side
/// (each with its own mock control plane).
pub async fn both(bin: &std::path::Path) -> Result<(Idle, Idle)> {
    tokio::try_join!(runner(bin), bare_client())
}

/// The idle runner (every built-in SDK), registered.
pub async fn runner(bin: &std::path::Path) -> Result<Idle> {
    let rig = crate::scenarios::Rig::start(bin, &[]).await?;
    let m = samples(rig.runner.pid()?).await;
    rig.runner.stop().await;
    m
}

/// Starts `bare-client` (built beside this binary) against `url`; killed
/// when dropped.
pub fn spawn_bare_client(url: &str) -> Result<tokio::process::Child> {
    let me = std::env::current_exe().context("locating runner-bench")?;
    let bin = me.with_file_name("bare-client");
    tokio::process::Command::new(&bin)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (cargo build --release -p runner-bench)",
                bin.display()
            )
        })
}

/// `bare-client`, connected.
pub async fn bare_client() -> Result<Idle> {
    let cp = MockControlPlane::start(MockConfig::default()).await?;
    let mut child = spawn_bare_client(&cp.url())?;
    cp.wait_connected(PATIENCE).await?;
    let pid = child.id().context("bare-client exited")?;
    let m = samples(pid).await?;
    let _ = child.kill().await;
    cp.stop().await?;
    Ok(m)
}
