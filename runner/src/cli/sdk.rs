//! `agent-runner sdk list`: what `run` would register with the same
//! settings (flags, env, `--config`: which SDKs, their CLIs and options),
//! and the agent sandbox those settings give on this host.

use std::sync::Arc;

use crate::config::{RunArgs, RunConfig, Secret};
use crate::host::sandbox::{AgentSandboxes, launcher_config, protected_paths};
use crate::tasks::sdks;

/// Prints what each enabled SDK would register, then the sandbox.
pub async fn list(mut args: RunArgs, env_secret: Option<Secret>) -> anyhow::Result<()> {
    // Listing needs no control plane: when neither the flags nor the file
    // name one, any valid URL lets the rest of the settings resolve.
    if args.control_plane_url.is_none() {
        let in_file = crate::config::file_control_plane_url(args.config.as_deref())?;
        args.control_plane_url = Some(in_file.unwrap_or_else(|| "http://localhost".to_owned()));
    }
    let run = RunConfig::resolve(args, env_secret)?;
    let (descriptions, sandbox) = probe(&run).await?;
    for d in descriptions {
        let status = format!("{:?}", d.status).to_lowercase();
        match &d.error_message {
            Some(why) => println!("{}  {status}  ({why})", d.name),
            None => println!("{}  {status}", d.name),
        }
        for m in &d.models {
            if m.reasoning_levels.is_empty() {
                println!("    {}", m.name);
            } else {
                println!(
                    "    {}  reasoning: {}",
                    m.name,
                    m.reasoning_levels.join(", ")
                );
            }
        }
    }
    let mut text = String::new();
    let _ = crate::ops::status::write_sandbox(&mut text, &sandbox);
    print!("{text}");
    Ok(())
}

/// What each enabled SDK would register with `run`'s settings, and the
/// sandbox those settings give on this host (`sdk list`, `doctor`).
pub(super) async fn probe(
    run: &RunConfig,
) -> anyhow::Result<(
    Vec<sdk_adapter::SdkDescription>,
    crate::host::sandbox::SandboxStatus,
)> {
    // The codex probe runs in a sandbox like any agent process: a throwaway
    // one, under a temporary directory, with run's sandbox settings.
    let scratch =
        std::env::temp_dir().join(format!("agent-runner-sdk-list-{}", std::process::id()));
    let workspaces = crate::host::workspace::Workspaces::new(scratch.join("workspaces"))?;
    let mut config = launcher_config(
        &run.sandbox,
        format!("agent-runner-sdk-list-{}", std::process::id()),
        protected_paths(run),
    );
    config.cgroups = false;
    let sandboxes = Arc::new(AgentSandboxes::with_probe(
        config,
        agent_launcher::probe_host(),
    )?);
    let mut options = run.sdk_options.clone();
    options.codex.probe_sandbox = sandboxes.probe(&workspaces);
    let all = sdks::Sdks::with_options(&run.sdks, &options).map_err(anyhow::Error::msg)?;
    let descriptions = all.describe_all().await;
    let status = sandboxes.status().clone();
    sandboxes.close_everything();
    drop(all);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok((descriptions, status))
}
