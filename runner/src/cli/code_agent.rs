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

use clap::Subcommand;
use code_agent_engine::serve::ServeArgs;

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

/// The bearer token from the environment, taken out of it (wiped from the
/// environment block too): `AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN`, or its
/// former name when only that one is set; (variable, value). Both are
/// removed.
///
/// Call while no other thread exists.
pub fn take_env_token() -> Option<(&'static str, String)> {
    use code_agent_engine::serve::{AUTH_TOKEN_ENV, FORMER_AUTH_TOKEN_ENV};
    // SAFETY: the caller runs this before starting any thread.
    let canonical = unsafe { agent_launcher::take_env(AUTH_TOKEN_ENV) };
    // SAFETY: as above.
    let former = unsafe { agent_launcher::take_env(FORMER_AUTH_TOKEN_ENV) };
    match (canonical, former) {
        (Some(v), _) => Some((AUTH_TOKEN_ENV, v)),
        (None, Some(v)) => Some((FORMER_AUTH_TOKEN_ENV, v)),
        (None, None) => None,
    }
}

/// Runs `command`; `env_token` is [`take_env_token`]'s.
pub async fn run(
    command: CodeAgentCommand,
    env_token: Option<(&'static str, String)>,
) -> anyhow::Result<()> {
    match command {
        CodeAgentCommand::Serve(args) => serve(args, env_token).await,
    }
}

async fn serve(args: ServeArgs, env_token: Option<(&'static str, String)>) -> anyhow::Result<()> {
    redact_provider_keys();
    let format = match args.log_format {
        code_agent_engine::serve::LogFormat::Text => LogFormat::Text,
        code_agent_engine::serve::LogFormat::Json => LogFormat::Json,
    };
    crate::ops::logging::init(format, &args.log_level).map_err(anyhow::Error::msg)?;
    let (name, value) = match &env_token {
        Some((name, value)) => (*name, Some(value.as_str())),
        None => (code_agent_engine::serve::AUTH_TOKEN_ENV, None),
    };
    let guard = args.guard_with_env_token(name, value)?;
    if let Some(token) = &guard.token {
        Redactor::process().add(token.expose());
    }
    // The flags, their defaults, the no-auth warning and the signals are
    // the engine's one definition (`code_agent_engine::serve`).
    code_agent_engine::serve::run_with(args, guard).await
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
        // Not the mock control plane's port in the docs' examples.
        assert_ne!(addr.port(), 50051, "{addr}");
        assert_ne!(
            addr.port(),
            crate::config::DEFAULT_HEALTH_ADDR
                .rsplit(':')
                .next()
                .and_then(|p| p.parse::<u16>().ok())
                .unwrap(),
            "{addr}"
        );
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
