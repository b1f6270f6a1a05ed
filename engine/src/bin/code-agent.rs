//! The `code-agent` binary: `code-agent serve`, the engine as a standalone
//! gRPC server. Its flags and what it does are the engine's `serve`
//! module (shared with the runner's `agent-runner code-agent serve`); this
//! file only parses them, accepting the binary's former `CODE_AGENT_*`
//! variables (and `RUST_LOG`) as hidden aliases, and sets up the stderr
//! log.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use code_agent_engine::serve::{self, LogFormat, ServeArgs};
use tracing_subscriber::EnvFilter;

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
    /// Serve CodeAgentService over gRPC until SIGTERM/SIGINT. Its model
    /// provider comes from the environment: OPENAI_API_KEY, OPENAI_BASE_URL
    /// (any OpenAI-compatible server), CODE_AGENT_MODELS; ANTHROPIC_API_KEY,
    /// ANTHROPIC_BASE_URL, ANTHROPIC_MODELS (Claude through the native
    /// Messages API).
    Serve(ServeArgs),
}

/// Not `#[tokio::main]`: the bearer token is taken out of the environment
/// (wiped from the environment block, so `/proc/<pid>/environ` and every
/// child no longer have it) before any thread exists.
fn main() -> anyhow::Result<()> {
    // SAFETY: no other thread exists yet.
    let canonical = unsafe { agent_launcher::take_env(serve::AUTH_TOKEN_ENV) };
    // SAFETY: as above.
    let former = unsafe { agent_launcher::take_env(serve::FORMER_AUTH_TOKEN_ENV) };
    let (token_env, token) = match (canonical, former) {
        (None, Some(v)) => (serve::FORMER_AUTH_TOKEN_ENV, Some(v)),
        (v, _) => (serve::AUTH_TOKEN_ENV, v),
    };
    let matches = Cli::command()
        .mut_subcommands(serve::accept_former_env)
        .get_matches();
    let Cli { command } = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match command {
        Command::Serve(args) => {
            init_logging(&args.log_level, args.log_format)?;
            let guard = args.guard_with_env_token(token_env, token.as_deref())?;
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(serve::run_with(args, guard))
        }
    }
}

/// Log lines on stderr, filtered by `level` (a level or a tracing filter),
/// coloured only on a terminal without `NO_COLOR`.
fn init_logging(level: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(level).map_err(|e| anyhow::anyhow!("log_level: {e}"))?;
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    }
    .map_err(|e| anyhow::anyhow!("logging: {e}"))
}
