//! The `agent-runner` command line: `run`, `status`, `doctor`, `logs`,
//! `threads`, `ps`, `interrupt`, `kill`, `demo`, `github`, `sdk list`,
//! `code-agent serve`, and `git-credential` (what agents' git calls; not for
//! people). Definitions and dispatch here; each subcommand in its own module.
//!
//! One grammar throughout: a command that lists takes `--json`; a command
//! that talks to a running runner finds it as `run` finds its settings
//! (`--config`, `--state-dir`, their `AGENT_RUNNER_*` variables:
//! `locate`); errors print once each, as `agent-runner: what: why`.

mod admin;
mod code_agent;
#[cfg(feature = "demo")]
mod demo;
mod doctor;
mod git_credential;
mod github;
mod locate;
mod logs;
mod parse_error;
mod run;
mod sdk;
mod signals;
mod status;
mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{RunArgs, Secret};

pub use code_agent::redact_provider_keys;
pub use parse_error::parse;

/// The command line.
#[derive(Parser)]
#[command(
    name = "agent-runner",
    version,
    about = "Runs coding agents for a remote control plane"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Register with the control plane and serve it until SIGTERM/SIGINT
    /// (first signal drains, a second exits at once).
    Run(Box<RunArgs>),
    /// Print a running runner's status (connection, turns, outbox, SDKs),
    /// read from its health endpoints; `--probe` checks /livez or /readyz.
    Status(status::StatusArgs),
    /// Check, with the same settings as `run`, everything the runner needs:
    /// settings and where each came from, the control plane (reachable, TLS,
    /// credentials), state dir and workspace root, SDKs, git, the sandbox
    /// this host allows, the proxy. Exit code 0 when the runner would start.
    Doctor(Box<doctor::DoctorArgs>),
    /// Print a thread's transcript (every update sent for it), from the
    /// state dir; `--follow` keeps printing until the thread is deleted,
    /// `--json` prints the lines as stored.
    Logs(logs::LogsArgs),
    /// List a running runner's threads: agent, SDK, state, running turn
    /// and for how long, model (`ps` lists their processes).
    Threads(admin::AdminArgs),
    /// List a running runner's agent processes: every live process of
    /// every thread, as trees (pid, CPU, RSS, age, command; `threads`
    /// lists the threads themselves).
    Ps(admin::AdminArgs),
    /// Interrupt a thread's running turn, as the control plane's interrupt
    /// would; its processes are left to the SDK (`kill` ends them).
    Interrupt(admin::InterruptArgs),
    /// End a thread's processes: interrupt its running turn, then kill
    /// every process of the thread (those that left its process group
    /// too). `--tree`, which this used to need, is still accepted.
    Kill(admin::KillArgs),
    /// Run a mock control plane and a runner in-process and print a live
    /// transcript of one scripted turn.
    #[cfg(feature = "demo")]
    Demo(demo::DemoArgs),
    /// Git credential helper for agents' git (the runner configures it
    /// through GIT_CONFIG_* in every agent's environment): answers
    /// get/store/erase from the running runner's credential socket.
    #[command(hide = true)]
    GitCredential(git_credential::GitCredentialArgs),
    /// GitHub installations and tokens, as `run` would get them (never
    /// printing a token).
    Github {
        #[command(subcommand)]
        command: Box<github::GithubCommand>,
    },
    /// The code-agent engine (`code-agent serve --listen ADDR`: a standalone
    /// a3s CodeAgentService for `run --code-agent-endpoint`).
    CodeAgent {
        #[command(subcommand)]
        command: code_agent::CodeAgentCommand,
    },
    /// SDK adapters.
    Sdk {
        #[command(subcommand)]
        command: SdkCommand,
    },
}

#[derive(Subcommand)]
enum SdkCommand {
    /// Print what `run` would register with the same settings (flags, env,
    /// `--config`): each enabled adapter, its status and models, and the
    /// agent sandbox.
    List(Box<sdk::ListArgs>),
}

/// Runs the parsed command line. `env_secret` is `AGENT_RUNNER_SECRET`,
/// taken out of the environment before anything else ran.
pub fn main(cli: Cli, env_secret: Option<Secret>) -> ExitCode {
    // Git runs the helper once per credential: no async runtime needed.
    if let Command::GitCredential(args) = &cli.command {
        return match git_credential::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agent-runner git-credential: {}", error_text(&e));
                ExitCode::FAILURE
            }
        };
    }
    // Before the runtime's threads exist: the engine's bearer token leaves
    // the environment (and its block) as `run`'s secret did in `main`.
    let serve_token = match &cli.command {
        Command::CodeAgent { .. } => code_agent::take_env_token(),
        _ => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(crate::runner::BLOCKING_THREAD_KEEP_ALIVE)
        .on_thread_park(crate::util::allocator::before_wait)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agent-runner: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => run::run(*args, env_secret).await,
            Command::Status(args) => status::run(args).await,
            Command::Logs(args) => logs::run(args).await,
            Command::Ps(args) => admin::ps(args).await,
            Command::Threads(args) => admin::threads(args).await,
            Command::Interrupt(args) => admin::interrupt(args).await,
            Command::Kill(args) => admin::kill(args).await,
            Command::Doctor(args) => {
                use clap::CommandFactory as _;
                // Where each value came from (flag, env, default): clap knows.
                let matches = Cli::command()
                    .try_get_matches_from(std::env::args_os())
                    .ok()
                    .and_then(|m| m.subcommand_matches("doctor").cloned());
                match doctor::run(*args, matches, env_secret).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(anyhow::anyhow!("doctor: the runner would not start")),
                    Err(e) => Err(e),
                }
            }
            #[cfg(feature = "demo")]
            Command::Demo(args) => demo::run(args).await,
            Command::CodeAgent { command } => code_agent::run(command, serve_token).await,
            Command::Github { command } => github::run(*command, env_secret).await,
            Command::GitCredential(_) => Ok(()),
            Command::Sdk {
                command: SdkCommand::List(args),
            } => sdk::list(*args, env_secret).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent-runner: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// `e` and its causes, `: `-separated, each said once: an error whose own
/// message ends with its cause's (`state dir: Not a directory (os error
/// 20)`, whose cause is that io error) would otherwise print the cause
/// twice, as `{e:#}` does.
pub(crate) fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_text;

    /// An error whose message quotes its source, as `#[error("state dir:
    /// {0}")] Io(#[from] io::Error)` does.
    #[derive(Debug)]
    struct Quoting(std::io::Error);

    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "state dir: {}", self.0)
        }
    }

    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = std::io::Error::from_raw_os_error(13);
        let e = anyhow::Error::new(Quoting(io)).context("state_dir /srv/x");
        let text = error_text(&e);
        assert_eq!(
            text,
            format!(
                "state_dir /srv/x: state dir: {}",
                std::io::Error::from_raw_os_error(13)
            )
        );
        assert_eq!(text.matches("os error 13").count(), 1, "{text}");
        // Causes that add something are all kept, in order.
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(error_text(&e), "outer: middle: inner");
    }
}
