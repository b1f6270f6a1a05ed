//! `agent-runner status`: ask a running runner how it is, through its health
//! endpoints; `--probe livez|readyz` is the container HEALTHCHECK.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::config::{DEFAULT_HEALTH_ADDR, file_health_addr, parse_health_addr};
use crate::ops::health::client;
use crate::ops::status::{self, Status};

const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The runner's --health-addr (0.0.0.0 and [::] mean this host).
    /// Default: `health_addr` of the --config file, else 127.0.0.1:9464.
    #[arg(long, env = "AGENT_RUNNER_HEALTH_ADDR")]
    pub health_addr: Option<String>,
    /// The runner's config file (`run --config`), for its `health_addr`.
    #[arg(long, env = "AGENT_RUNNER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print /status as JSON instead of the summary.
    #[arg(long, conflicts_with = "probe")]
    pub json: bool,
    /// Only check one endpoint: exit 0 when it answers 200, 1 otherwise.
    #[arg(long, value_enum)]
    pub probe: Option<Probe>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Probe {
    Livez,
    Readyz,
}

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let text = match args.health_addr {
        Some(text) => text,
        None => file_health_addr(args.config.as_deref())?
            .unwrap_or_else(|| DEFAULT_HEALTH_ADDR.to_owned()),
    };
    let addr = parse_health_addr(&text)
        .map_err(|m| anyhow::anyhow!("health_addr: {m}"))?
        .ok_or_else(|| {
            anyhow::anyhow!("health_addr is empty: the runner's health endpoints are off")
        })?;
    if let Some(probe) = args.probe {
        let path = match probe {
            Probe::Livez => "/livez",
            Probe::Readyz => "/readyz",
        };
        let (code, body) = client::get(addr, path, TIMEOUT).await?;
        let body = body.trim();
        if code == 200 {
            println!("{body}");
            return Ok(());
        }
        anyhow::bail!("{path}: {code} {body}");
    }
    let (code, body) = client::get(addr, "/status", TIMEOUT).await?;
    if code != 200 {
        anyhow::bail!("/status: {code} {}", body.trim());
    }
    if args.json {
        println!("{}", body.trim_end());
        return Ok(());
    }
    let report: Status = serde_json::from_str(&body)
        .map_err(|e| anyhow::anyhow!("/status: not a status document ({e})"))?;
    print!("{}", status::render(&report));
    Ok(())
}
