//! Start-up: process spawned → `RegisterRunner` received, over
//! many starts with every built-in SDK enabled — codex pointed at the real
//! `@openai/codex` the tests install into `target/codex-npm` when it is
//! there, so its app-server probe is real — and, for each start, when the
//! slow probes' `agent_sdk_update`s arrived (registration must not wait
//! for them).
//!
//! The floor beside them: `bare-client`, a bare tonic client that connects
//! and registers and does nothing else, spawned and timed the same way,
//! one after each fresh start. It shows what this machine's process start,
//! loopback connect and mock take at that moment, so a series that runs
//! slow for the machine's sake shows it in both columns.
//!
//! The timed starts find the runner's binary in the page cache: the first
//! start, not timed with them, reads it in. That one is reported on its
//! own, as the cold start, after the binary's cached pages were dropped
//! (`posix_fadvise(DONTNEED)`): a host that reclaims cold page cache (this
//! machine's DAMON pages out unmapped file pages idle for 60 s) or a fresh
//! boot starts like that. Untimed before, the first start of a
//! `--only startup` run minutes after the last took 12–19 ms where the
//! others took 7–8; dropped on purpose, it takes about 40 ms.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_runner_proto::runner::client_message::Payload;
use anyhow::Result;
use mock_control_plane::{MockConfig, MockControlPlane};
use serde::Serialize;

use crate::collector::PATIENCE;
use crate::fs_probe::FsProbe;
use crate::proc::Runner;
use crate::scenarios::ms;
use crate::stats::Summary;

#[derive(Debug, Clone, Serialize)]
pub struct Starts {
    /// Process spawned → `RegisterRunner` received, per start.
    pub start_ms: Vec<f64>,
    /// The same for the start before them, with the binary dropped from
    /// the page cache first (`None`: the pages could not be dropped; the
    /// start still ran, untimed).
    pub cold_ms: Option<f64>,
    /// Process spawned → the last `agent_sdk_update` of the start-up
    /// probes (codex's app-server), per start where one came.
    pub probed_ms: Vec<f64>,
    /// The same on an existing state dir (a restarted runner: the state
    /// and journal databases exist), per restart.
    pub restart_ms: Vec<f64>,
    /// The floor: `bare-client` spawned → its `RegisterRunner` received,
    /// one after each fresh start.
    pub bare_ms: Vec<f64>,
    /// Creating a directory and a file in it, sampled every 10 ms through
    /// the starts and restarts (`fs_probe`).
    pub fs_create: Option<Summary>,
    /// The codex binary the runner was given, if any.
    pub codex_bin: Option<String>,
}

/// The codex CLI the e2e tests install (`target/codex-npm/<version>/…`),
/// found beside the runner's target dir.
pub fn installed_codex(runner: &Path) -> Option<PathBuf> {
    let target = runner.parent()?.parent()?;
    let mut versions: Vec<PathBuf> = std::fs::read_dir(target.join("codex-npm"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    versions.sort();
    versions
        .into_iter()
        .rev()
        .map(|v| v.join("node_modules/.bin/codex"))
        .find(|p| p.exists())
}

/// `runs` fresh runners (fresh state dirs), one at a time, after the cold
/// one.
pub async fn starts(bin: &Path, runs: usize) -> Result<Starts> {
    let codex = installed_codex(bin);
    let codex_arg = codex.as_ref().map(|c| c.display().to_string());
    let mut extra: Vec<&str> = Vec::new();
    if let Some(c) = &codex_arg {
        extra.extend(["--codex-bin", c.as_str()]);
    }
    let mut out = Starts {
        start_ms: Vec::with_capacity(runs),
        cold_ms: None,
        probed_ms: Vec::new(),
        restart_ms: Vec::with_capacity(runs),
        bare_ms: Vec::with_capacity(runs),
        fs_create: None,
        codex_bin: codex_arg.clone(),
    };
    let dropped = drop_cached(bin);
    if let Err(e) = &dropped {
        eprintln!(
            "  start: cannot drop {} from the page cache ({e}); no cold start",
            bin.display()
        );
    }
    let fs = FsProbe::start()?;
    for i in 0..=runs {
        let cp = MockControlPlane::start(MockConfig::default()).await?;
        let runner = Runner::start(bin, &cp.url(), &extra)?;
        let spawned = runner.started;
        cp.wait_for_registrations(1, PATIENCE).await?;
        let took = ms(spawned.elapsed());
        if i == 0 {
            out.cold_ms = dropped.is_ok().then_some(took);
        } else {
            out.start_ms.push(took);
        }
        // The codex probe (when codex is there) answers after registration.
        if codex.is_some()
            && let Some(probed) = codex_announced(&cp, 0).await
        {
            out.probed_ms.push(ms(probed - spawned));
        }
        runner.stop().await;
        if i > 0 {
            // The floor, against the same mock, once the runner is gone.
            let before = cp.registrations().len();
            let spawned = Instant::now();
            let mut bare = crate::idle::spawn_bare_client(&cp.url())?;
            cp.wait_for_registrations(before + 1, PATIENCE).await?;
            out.bare_ms.push(ms(spawned.elapsed()));
            let _ = bare.kill().await;
        }
        cp.stop().await?;
    }
    // Restarts: one state dir, `runs` runners one after the other.
    let cp = MockControlPlane::start(MockConfig::default()).await?;
    let mut dirs = tempfile::tempdir()?;
    for i in 0..=runs {
        let runner = Runner::start_in(bin, &cp.url(), &extra, &[], dirs)?;
        let spawned = runner.started;
        if let Err(e) = cp.wait_for_registrations(i + 1, PATIENCE).await {
            anyhow::bail!("restart {i}: {e}\n{}", runner.log_tail());
        }
        // The first start created the state: not a restart.
        if i > 0 {
            out.restart_ms.push(ms(spawned.elapsed()));
        }
        // As above: the runner is stopped once its probe has answered, not
        // while node is starting (the next start would compete with the
        // one being killed, which no real restart 10 ms later does).
        if codex.is_some() {
            codex_announced(&cp, i).await;
        }
        dirs = runner.stop_keeping_dirs().await;
    }
    cp.stop().await?;
    out.fs_create = fs.finish();
    Ok(out)
}

/// Drops `file`'s pages from the page cache (those no process maps).
fn drop_cached(file: &Path) -> std::io::Result<()> {
    let f = std::fs::File::open(file)?;
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)?;
    Ok(())
}

/// When the `agent_sdk_update` for codex arrived, once `before` of them had
/// (20 s at most).
async fn codex_announced(cp: &MockControlPlane, before: usize) -> Option<Instant> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let updates = cp
            .received()
            .iter()
            .filter(|m| matches!(&m.payload, Some(Payload::AgentSdkUpdate(s)) if s.name == "codex"))
            .count();
        if updates > before {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}
