//! `agent-runner sdk list`: what `run` would register with the same
//! settings (flags, env, `--config`: which SDKs, their CLIs and options),
//! and the agent sandbox those settings give on this host. Also the check
//! of `--sdk` names that `run`, `sdk list` and `demo` share ([`check_names`]:
//! an unknown name close to a known one gets a "did you mean").

use std::sync::Arc;

use serde_json::json;

use crate::config::{RunArgs, RunConfig, Secret};
use crate::host::sandbox::{AgentSandboxes, launcher_config, protected_paths};
use crate::tasks::sdks;

/// Flags of `agent-runner sdk list`: `run`'s, and `--json`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Print the SDKs and the sandbox as one JSON document.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    run: RunArgs,
}

/// Every name in `names` (blank ones aside) is a built-in SDK; the error
/// names the first that is not ([`sdks::check_name`]).
pub fn check_names(names: &[String]) -> anyhow::Result<()> {
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        sdks::check_name(name).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// Logs each enabled SDK that cannot take agents, as far as that is known
/// without a probe (a CLI that is not installed): at WARN, with the fix
/// `sdk list` shows, when the operator asked for it (`named`: `--sdk`),
/// at INFO when it only came with the default (every built-in SDK).
pub fn warn_unready(all: &sdks::Sdks, named: bool) {
    for name in all.names() {
        let Some(d) = all.get(&name).and_then(|adapter| adapter.known()) else {
            continue;
        };
        if d.status == sdk_adapter::SdkStatus::Ready {
            continue;
        }
        let why = d.error_message.as_deref().unwrap_or("no reason given");
        let status = format!("{:?}", d.status).to_lowercase();
        if named {
            tracing::warn!(sdk = %name, %status, "SDK {name} is enabled but cannot take agents: {why} (`agent-runner sdk list` checks again)");
        } else {
            tracing::info!(sdk = %name, %status, "SDK {name} cannot take agents: {why}");
        }
    }
}

/// Prints what each enabled SDK would register, then the sandbox.
pub async fn list(args: ListArgs, env_secret: Option<Secret>) -> anyhow::Result<()> {
    let ListArgs {
        json,
        run: mut args,
    } = args;
    check_names(&args.sdk)?;
    // Listing needs no control plane: when neither the flags nor the file
    // name one, any valid URL lets the rest of the settings resolve.
    if args.control_plane_url.is_none() {
        let in_file = crate::config::file_control_plane_url(args.config.as_deref())?;
        args.control_plane_url = Some(in_file.unwrap_or_else(|| "http://localhost".to_owned()));
    }
    let run = RunConfig::resolve(args, env_secret)?;
    let (descriptions, sandbox) = probe(&run).await?;
    if json {
        let sdks: Vec<serde_json::Value> = descriptions
            .iter()
            .map(|d| {
                json!({
                    "name": d.name,
                    "status": format!("{:?}", d.status).to_lowercase(),
                    "error_message": d.error_message,
                    "models": d.models.iter().map(|m| json!({
                        "name": m.name,
                        "reasoning_levels": m.reasoning_levels,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", json!({"sdks": sdks, "sandbox": sandbox}));
        return Ok(());
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn unknown_sdk_names_get_the_closest_built_in_one() {
        check_names(&names(&["scripted", "codex", " claude-code ", ""])).unwrap();
        let err = check_names(&names(&["codex", "claude"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("sdk: unknown SDK \"claude\" (did you mean claude-code? built in: "),
            "{err}"
        );
        assert_eq!(sdks::suggest("codx"), Some("codex"));
        assert_eq!(sdks::suggest("Claude"), Some("claude-code"));
        assert_eq!(sdks::suggest("code-agents"), Some("code-agent"));
        assert_eq!(sdks::suggest("scriptd"), Some("scripted"));
        let err = check_names(&names(&["gpt"])).unwrap_err().to_string();
        assert!(!err.contains("did you mean"), "{err}");
    }
}
