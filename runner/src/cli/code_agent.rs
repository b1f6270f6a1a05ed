//! `agent-runner code-agent serve --listen ADDR`: the code-agent engine as
//! a standalone `a3s.code.agent.v1.CodeAgentService` gRPC server, for
//! runners started with `--code-agent-endpoint` (an engine in another
//! container) and for any other client of that interface.
//!
//! Whoever reaches the port can run commands in the engine's workspaces,
//! so it listens on loopback by default, requires a bearer token (from
//! `--auth-token-file` or `AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN`, never a
//! flag value) unless `--insecure-no-auth`, serves TLS with `--tls-cert`
//! and `--tls-key`, and confines every workspace (`Initialize`, sessions)
//! to `--workspace-root`.
//!
//! Also where model-provider keys are handed to the log redactor: the
//! engine reads `OPENAI_API_KEY`, `ANTHROPIC_API_KEY` (and `<PROVIDER>_API_KEY`) from the
//! environment (and `GITHUB_TOKEN` / `GH_TOKEN` may sit there too), and no
//! log line or update of this process may ever show one.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::config::LogFormat;
use crate::util::redact::Redactor;

/// `agent-runner code-agent …`.
#[derive(Debug, Subcommand)]
pub enum CodeAgentCommand {
    /// Serve the engine's CodeAgentService on ADDR until SIGTERM/SIGINT.
    /// Its model provider comes from the environment: OPENAI_API_KEY,
    /// OPENAI_BASE_URL (any OpenAI-compatible server), CODE_AGENT_MODELS;
    /// ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_MODELS (Claude
    /// through the native Messages API).
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// `IP:PORT` to listen on (port 0 picks a free one; the address is
    /// printed on stdout as `code-agent listening on ADDR`).
    #[arg(
        long,
        env = "AGENT_RUNNER_CODE_AGENT_LISTEN",
        default_value = DEFAULT_LISTEN
    )]
    pub listen: String,
    /// File holding the bearer token every client must send (or the token
    /// itself in AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN).
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// Serve every client that reaches the port, without a token.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// TLS certificate chain (PEM); with --tls-key.
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); with --tls-cert.
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Every workspace (Initialize's, a session's) must be at or under this
    /// directory (symlinks resolved). Default: ~/.agent-runner/workspaces
    /// (the runner's default workspace root), created if missing.
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_WORKSPACE_ROOT")]
    pub workspace_root: Option<PathBuf>,
    /// Where sessions (FILE storage) and providers persist.
    /// Default: ~/.agent-runner/code-agent.
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Log level or tracing filter. Default: info.
    #[arg(long, env = "AGENT_RUNNER_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format: `text` or `json`.
    #[arg(long, env = "AGENT_RUNNER_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

/// Where `code-agent serve` listens unless told otherwise: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";

/// Hand every secret-looking value of the environment ([`is_secret_var`])
/// to the process-wide redactor, so a key quoted anywhere (an upstream
/// error, a tool's output) is logged as `***`.
pub fn redact_provider_keys() {
    let redactor = Redactor::process();
    for (name, value) in std::env::vars_os() {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            continue;
        };
        if is_secret_var(name) && !value.trim().is_empty() {
            redactor.add(value.trim());
        }
    }
}

/// Variables whose values are secrets: model-provider keys (`*_API_KEY`),
/// bearer tokens (`*_AUTH_TOKEN`) and GitHub tokens (`GITHUB_TOKEN`,
/// `GH_TOKEN`), the same set the engine keeps from its tools' processes.
pub fn is_secret_var(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_API_KEY")
        || upper.ends_with("_AUTH_TOKEN")
        || matches!(upper.as_str(), "GITHUB_TOKEN" | "GH_TOKEN")
}

pub async fn run(command: CodeAgentCommand) -> anyhow::Result<()> {
    match command {
        CodeAgentCommand::Serve(args) => serve(args).await,
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    redact_provider_keys();
    crate::ops::logging::init(args.log_format, &args.log_level).map_err(anyhow::Error::msg)?;
    let addr: std::net::SocketAddr = args
        .listen
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("listen: {:?} is not IP:PORT", args.listen))?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let state_dir = match args.state_dir {
        Some(dir) => dir,
        None => home.join(".agent-runner/code-agent"),
    };
    tokio::fs::create_dir_all(&state_dir)
        .await
        .map_err(|e| anyhow::anyhow!("state_dir: {}: {e}", state_dir.display()))?;
    let options = code_agent_engine::ServeOptions::load(code_agent_engine::GuardSources {
        token_file: args.auth_token_file.as_deref(),
        token_env: crate::config::CODE_AGENT_AUTH_TOKEN_ENV,
        insecure_no_auth: args.insecure_no_auth,
        tls_cert: args.tls_cert.as_deref(),
        tls_key: args.tls_key.as_deref(),
    })
    .map_err(anyhow::Error::msg)?;
    match &options.token {
        Some(token) => Redactor::process().add(token.expose()),
        None => tracing::warn!(
            %addr,
            "serving WITHOUT authentication (--insecure-no-auth): whoever reaches this port can run commands in its workspaces"
        ),
    }
    let workspace_root = match args.workspace_root {
        Some(dir) => dir,
        None => home.join(".agent-runner/workspaces"),
    };
    tokio::fs::create_dir_all(&workspace_root)
        .await
        .map_err(|e| anyhow::anyhow!("workspace_root: {}: {e}", workspace_root.display()))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("listen: {addr}: {e}"))?;
    let engine = code_agent_engine::Engine::start(code_agent_engine::EngineConfig {
        state_dir: Some(state_dir),
        workspace_root: Some(workspace_root),
        ..Default::default()
    })
    .await?;
    let local = listener.local_addr()?;
    println!("code-agent listening on {local}");
    let shutdown = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let stop = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        stop.cancel();
    });
    code_agent_engine::serve_with(engine, listener, options, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `--listen` the engine listens on loopback only.
    #[test]
    fn serve_listens_on_loopback_by_default() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(subcommand)]
            command: CodeAgentCommand,
        }
        let Cli {
            command: CodeAgentCommand::Serve(args),
        } = Cli::try_parse_from(["code-agent", "serve"]).unwrap();
        let addr: std::net::SocketAddr = args.listen.parse().unwrap();
        assert!(addr.ip().is_loopback(), "{addr}");
        assert!(!args.insecure_no_auth);
    }

    #[test]
    fn provider_keys_and_github_tokens_are_secret() {
        for name in [
            "OPENAI_API_KEY",
            "anthropic_api_key",
            "GITHUB_TOKEN",
            "GH_TOKEN",
            "AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN",
        ] {
            assert!(is_secret_var(name), "{name}");
        }
        for name in [
            "OPENAI_BASE_URL",
            "API_KEY_FILE",
            "PATH",
            "GITHUB_TOKEN_FILE",
            "AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN_FILE",
        ] {
            assert!(!is_secret_var(name), "{name}");
        }
    }
}
