//! `agent-runner run`: start the runner, serve until a signal, drain.

use super::signals::{self, Signals};
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

/// clap's matches for this `run` command line: they tell a flag from its
/// environment variable when an error names where a value came from.
fn own_matches() -> Option<clap::ArgMatches> {
    use clap::CommandFactory as _;
    super::Cli::command()
        .try_get_matches_from(std::env::args_os())
        .ok()?
        .subcommand_matches("run")
        .cloned()
}

/// Registers and serves until SIGTERM/SIGINT (a second signal kills every
/// agent process and exits at once, 130).
pub async fn run(args: RunArgs, env_secret: Option<Secret>) -> anyhow::Result<()> {
    // Before any agent exists: not dumpable (no process of our uid reads our
    // environ or memory), no core files (they would hold our secrets).
    let hardening = agent_launcher::harden_runner();
    let matches = own_matches();
    let (config, sources) = RunConfig::resolve_sourced(args, matches.as_ref(), env_secret)?;
    // A state dir or workspace root the runner cannot write fails here,
    // named, rather than every request later.
    config.check_dirs(&sources)?;
    super::sdk::check_names(&config.sdks)?;
    super::code_agent::redact_provider_keys();
    // The bearer secret is never logged on purpose; masking it too covers
    // an agent or a library that quotes it by accident.
    if let Some(secret) = &config.secret {
        crate::util::redact::Redactor::process().add(secret.expose());
    }
    // The proxy's user and password stay in the runner (agents reach it
    // through a forwarder); masked too wherever they would be quoted.
    for secret in config.proxy.secrets() {
        crate::util::redact::Redactor::process().add(&secret);
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
    let mut signals = Signals::install()?;
    let mut runner = Runner::start(&config).await?;
    tracing::info!(
        control_plane = %config.control_plane.origin,
        sdks = ?runner.rt.sdks.names(),
        "runner started"
    );
    super::sdk::warn_unready(&runner.rt.sdks, !config.sdks.is_empty());
    // `agent-runner threads/ps/interrupt/kill`: the admin socket in the state dir
    // (0600), removed when this returns.
    // Agents are refused (their uid, their cgroup, their tag, their ancestry).
    let agent_uid = match config.sandbox.mode {
        agent_launcher::Mode::Off => None,
        _ => config.sandbox.agent_user.map(|u| u.uid),
    };
    let _admin = crate::ops::admin::serve(runner.rt.clone(), &config.state_dir, agent_uid)?;
    let idle_rt = runner.rt.clone();
    // This future runs on the main thread, which waits from here on: what
    // it allocated starting the runner and freed goes back now.
    crate::util::allocator::before_wait();
    let cause = tokio::select! {
        signal = signals.next() => signal.to_owned(),
        refused = runner.refused() => return refused,
        idle = idle_exit(&idle_rt, config.exit_when_idle) => {
            format!("idle for {} (--exit-when-idle)", crate::ops::human::duration(idle))
        }
    };
    signals::log_draining(&cause, config.drain_timeout);
    signals::force_on_next(signals, runner.rt.clone());
    runner.shutdown(config.drain_timeout).await
}
