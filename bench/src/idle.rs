//! The floor for idle memory (issue 14): `bare-client`, a bare tonic client
//! holding one `ControlChannel` to a mock control plane, measured the same
//! way as the idle runner (RSS from /proc after the same settling time).

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result};
use mock_control_plane::{MockConfig, MockControlPlane};

use crate::collector::PATIENCE;

/// RSS of `bare-client` (built beside this binary) once connected.
pub async fn bare_client_rss() -> Result<u64> {
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
    let rss = crate::stats::rss_bytes(pid)?;
    let _ = child.kill().await;
    cp.stop().await?;
    Ok(rss)
}
