//! `code-agent serve --listen ADDR`: the engine as a standalone gRPC server.
//! Logs go to stderr (`RUST_LOG` filters them); SIGTERM or Ctrl-C stop it
//! gracefully (generations cancelled, FILE sessions written).
//!
//! Whoever reaches the port runs commands in its workspaces, so: loopback
//! by default, a bearer token required (`--auth-token-file` or
//! `CODE_AGENT_AUTH_TOKEN`) unless `--insecure-no-auth`, TLS with
//! `--tls-cert`/`--tls-key`, and every workspace confined to
//! `--workspace-root` (default: `--workspace`, else the current directory).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use code_agent_engine::{Engine, EngineConfig, GuardSources, ServeOptions, serve_with};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "code-agent",
    version,
    about = "A coding-agent engine serving a3s.code.agent.v1.CodeAgentService"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve CodeAgentService over gRPC.
    Serve {
        /// Address to listen on (loopback unless told otherwise).
        #[arg(long, env = "CODE_AGENT_LISTEN", default_value = "127.0.0.1:50051")]
        listen: SocketAddr,
        /// File holding the bearer token clients must send (or the token
        /// itself in CODE_AGENT_AUTH_TOKEN; never a flag value).
        #[arg(long, env = "CODE_AGENT_AUTH_TOKEN_FILE")]
        auth_token_file: Option<PathBuf>,
        /// Serve every client that reaches the port, without a token.
        #[arg(long)]
        insecure_no_auth: bool,
        /// TLS certificate chain (PEM); with --tls-key.
        #[arg(long, env = "CODE_AGENT_TLS_CERT")]
        tls_cert: Option<PathBuf>,
        /// TLS private key (PEM); with --tls-cert.
        #[arg(long, env = "CODE_AGENT_TLS_KEY")]
        tls_key: Option<PathBuf>,
        /// Every workspace (Initialize, sessions) must be under this
        /// directory. Default: --workspace, else the current directory.
        #[arg(long, env = "CODE_AGENT_WORKSPACE_ROOT")]
        workspace_root: Option<PathBuf>,
        /// Where FILE sessions and providers.json are kept.
        #[arg(long, env = "CODE_AGENT_STATE_DIR")]
        state_dir: Option<PathBuf>,
        /// Workspace of sessions that name none.
        #[arg(long, env = "CODE_AGENT_WORKSPACE")]
        workspace: Option<PathBuf>,
        /// Model calls per generation at most.
        #[arg(long, default_value_t = 50)]
        max_steps: u32,
        /// How `bash` processes are confined: enforce (refuse to start
        /// without Landlock), best-effort or off.
        #[arg(long, env = "CODE_AGENT_SANDBOX", default_value = "best-effort")]
        sandbox: agent_launcher::Mode,
        /// The time zone cron schedules are read in, as an offset from UTC
        /// (`+02:00`, `-05:30`, `UTC`).
        #[arg(long, env = "CODE_AGENT_CRON_UTC_OFFSET", default_value = "UTC", value_parser = utc_offset)]
        cron_utc_offset: i32,
    },
}

/// Seconds east of UTC of `+HH:MM`, `-HH:MM`, `+HH`, `Z` or `UTC`.
fn utc_offset(text: &str) -> Result<i32, String> {
    let bad = || format!("{text:?} is not a UTC offset like +02:00, -05:30 or UTC");
    let text = text.trim();
    if text.eq_ignore_ascii_case("utc") || text.eq_ignore_ascii_case("z") {
        return Ok(0);
    }
    let (sign, rest) = match text.split_at_checked(1) {
        Some(("+", rest)) => (1, rest),
        Some(("-", rest)) => (-1, rest),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let (h, m): (i32, i32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if !(0..=23).contains(&h) || !(0..=59).contains(&m) {
        return Err(bad());
    }
    Ok(sign * (h * 3600 + m * 60))
}

async fn stop_signal(stop: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("stop signal received");
    stop.cancel();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let Cli { command } = Cli::parse();
    match command {
        Command::Serve {
            listen,
            auth_token_file,
            insecure_no_auth,
            tls_cert,
            tls_key,
            workspace_root,
            state_dir,
            workspace,
            max_steps,
            sandbox,
            cron_utc_offset,
        } => {
            let options = ServeOptions::load(GuardSources {
                token_file: auth_token_file.as_deref(),
                token_env: "CODE_AGENT_AUTH_TOKEN",
                insecure_no_auth,
                tls_cert: tls_cert.as_deref(),
                tls_key: tls_key.as_deref(),
            })
            .map_err(anyhow::Error::msg)?;
            let workspace_root = match workspace_root.or_else(|| workspace.clone()) {
                Some(root) => root,
                None => std::env::current_dir().context("the current directory")?,
            };
            if let Some(dir) = &state_dir {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating the state dir {}", dir.display()))?;
            }
            // Not dumpable, no core files: `bash` cannot read our memory.
            agent_launcher::harden_runner().context("hardening the engine process")?;
            let mut launcher = agent_launcher::LauncherConfig::new(sandbox, "code-agent");
            launcher.cgroups = false;
            launcher.protected = state_dir.iter().cloned().collect();
            let launcher = agent_launcher::Launcher::new(launcher).context("--sandbox")?;
            for missing in launcher.status().missing {
                tracing::warn!(%missing, "bash sandbox: not applied on this host");
            }
            let engine = Engine::start(EngineConfig {
                state_dir,
                default_workspace: workspace,
                workspace_root: Some(workspace_root),
                max_steps,
                launcher: code_agent_engine::EngineLauncher::Given(std::sync::Arc::new(launcher)),
                cron_utc_offset_seconds: cron_utc_offset,
                ..EngineConfig::default()
            })
            .await?;
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("listening on {listen}"))?;
            let stop = CancellationToken::new();
            tokio::spawn(stop_signal(stop.clone()));
            serve_with(engine, listener, options, stop).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::utc_offset;

    #[test]
    fn utc_offsets_parse() {
        assert_eq!(utc_offset("UTC"), Ok(0));
        assert_eq!(utc_offset("+02:00"), Ok(7200));
        assert_eq!(utc_offset("-05:30"), Ok(-19800));
        assert_eq!(utc_offset("+9"), Ok(32400));
        assert!(utc_offset("02:00").is_err());
        assert!(utc_offset("+25:00").is_err());
    }
}
