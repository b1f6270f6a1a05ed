//! `agent-runner demo`: placeholder until the mock control plane lands.

use clap::Args;

#[derive(Debug, Args)]
pub struct DemoArgs {}

pub async fn run(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("demo not built yet")
}
