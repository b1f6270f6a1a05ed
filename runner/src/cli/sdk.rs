//! `agent-runner sdk list`: each built-in adapter, its status and models,
//! and the agent sandbox this host allows (default settings).

use std::sync::Arc;

use crate::sandbox::{AgentSandboxes, launcher_config};
use crate::{config::SandboxConfig, sdks};

/// Prints what each built-in SDK would register, then the sandbox.
pub async fn list() -> anyhow::Result<()> {
    let names: Vec<String> = sdks::BUILT_IN.iter().map(|s| (*s).to_owned()).collect();
    // The codex probe runs in a sandbox like any agent process: a throwaway
    // one, under a temporary directory.
    let scratch =
        std::env::temp_dir().join(format!("agent-runner-sdk-list-{}", std::process::id()));
    let workspaces = crate::workspace::Workspaces::new(scratch.join("workspaces"))?;
    let mut config = launcher_config(
        &SandboxConfig::default(),
        format!("agent-runner-sdk-list-{}", std::process::id()),
        Vec::new(),
    );
    config.cgroups = false;
    let sandboxes = Arc::new(AgentSandboxes::with_probe(
        config,
        agent_launcher::probe_host(),
    )?);
    let mut options = sdks::SdkOptions::default();
    options.codex.probe_sandbox = sandboxes.probe(&workspaces);
    let all = sdks::Sdks::with_options(&names, &options).map_err(anyhow::Error::msg)?;
    for d in all.describe_all().await {
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
    let _ = crate::status::write_sandbox(&mut text, sandboxes.status());
    print!("{text}");
    sandboxes.close_everything();
    drop(all);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
