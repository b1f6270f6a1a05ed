//! `agent-runner run`: start the runner, serve until a signal, drain.

use tokio::signal::unix::{SignalKind, signal};

use crate::config::{RunArgs, RunConfig, Secret};
use crate::runner::Runner;
use crate::{host::procs, ops::logging};

/// Returns once the runner has been idle (no turn running, no request) for
/// `limit`; never without one.
async fn idle_exit(
    rt: &std::sync::Arc<crate::tasks::context::Runtime>,
    limit: Option<std::time::Duration>,
) -> std::time::Duration {
    let Some(limit) = limit else {
        return std::future::pending().await;
    };
    // Checked a few times per limit (at least every second): precise enough
    // for scale-to-zero, cheap when idle.
    let tick = (limit / 4).clamp(
        std::time::Duration::from_millis(50),
        std::time::Duration::from_secs(1),
    );
    loop {
        tokio::time::sleep(tick).await;
        if let Some(idle) = rt.idle_for()
            && idle >= limit
        {
            return idle;
        }
    }
}

/// Registers and serves until SIGTERM/SIGINT (a second signal kills every
/// agent process and exits at once, 130).
pub async fn run(args: RunArgs, env_secret: Option<Secret>) -> anyhow::Result<()> {
    // Before any agent exists: not dumpable (no process of our uid reads our
    // environ or memory), no core files (they would hold our secrets).
    let hardening = agent_launcher::harden_runner();
    let config = RunConfig::resolve(args, env_secret)?;
    super::code_agent::redact_provider_keys();
    // The bearer secret is never logged on purpose; masking it too covers
    // an agent or a library that quotes it by accident.
    if let Some(secret) = &config.secret {
        crate::util::redact::Redactor::process().add(secret.expose());
    }
    logging::init(config.log_format, &config.log_level).map_err(anyhow::Error::msg)?;
    procs::warn_if_pid1();
    match hardening {
        Ok(h) => tracing::debug!(
            not_dumpable = h.not_dumpable,
            no_core = h.no_core,
            "runner hardened"
        ),
        Err(e) => tracing::warn!(error = %e, "could not harden the runner process"),
    }
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut runner = Runner::start(&config).await?;
    tracing::info!(
        control_plane = %config.control_plane.origin,
        sdks = ?runner.rt.sdks.names(),
        "runner started"
    );
    // `agent-runner ps/threads/kill`: the admin socket in the state dir
    // (0600), removed when this returns.
    let _admin = crate::ops::admin::serve(runner.rt.clone(), &config.state_dir)?;
    let idle_rt = runner.rt.clone();
    // This future runs on the main thread, which waits from here on: what
    // it allocated starting the runner and freed goes back now.
    crate::util::allocator::before_wait();
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        refused = runner.refused() => return refused,
        idle = idle_exit(&idle_rt, config.exit_when_idle) => {
            tracing::info!(idle = %humantime::format_duration(idle), "idle (--exit-when-idle): draining and exiting");
        }
    }
    let sandboxes = runner.rt.sandboxes.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("agent-runner: second signal, killing every agent process and exiting");
        // Agents run in sessions of their own: the terminal's signal never
        // reached them. Nothing of theirs may outlive us.
        let killed = tokio::task::spawn_blocking(move || sandboxes.close_everything()).await;
        if let Ok(killed) = killed {
            eprintln!("agent-runner: killed {killed} agent processes");
        }
        std::process::exit(130);
    });
    runner.shutdown(config.drain_timeout).await
}
