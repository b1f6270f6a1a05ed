//! `agent-runner run`: start the runner, serve until a signal, drain.

use tokio::signal::unix::{SignalKind, signal};

use crate::config::{RunArgs, RunConfig, Secret};
use crate::runner::Runner;
use crate::{logging, procs};

/// Registers and serves until SIGTERM/SIGINT (a second signal exits at once).
pub async fn run(args: RunArgs, env_secret: Option<Secret>) -> anyhow::Result<()> {
    let config = RunConfig::resolve(args, env_secret)?;
    super::code_agent::redact_provider_keys();
    // The bearer secret is never logged on purpose; masking it too covers
    // an agent or a library that quotes it by accident.
    if let Some(secret) = &config.secret {
        crate::redact::Redactor::process().add(secret.expose());
    }
    logging::init(config.log_format, &config.log_level).map_err(anyhow::Error::msg)?;
    procs::warn_if_pid1();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut runner = Runner::start(&config).await?;
    tracing::info!(
        control_plane = %config.control_plane.origin,
        sdks = ?runner.rt.sdks.names(),
        "runner started"
    );
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        refused = runner.refused() => return refused,
    }
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("agent-runner: second signal, exiting at once");
        std::process::exit(130);
    });
    runner.shutdown(config.drain_timeout).await
}
