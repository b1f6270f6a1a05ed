//! The `agent-runner` command line: `run`, `status`, `doctor`, `logs`, `ps`, `threads`, `kill`, `demo`, `github`, `sdk list`,
//! `code-agent serve`, and `git-credential` (what agents' git calls; not for
//! people). Definitions and dispatch here; each subcommand in its own module.

mod admin;
mod code_agent;
#[cfg(feature = "demo")]
mod demo;
mod doctor;
mod git_credential;
mod github;
mod logs;
mod parse_error;
mod run;
mod sdk;
mod status;

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
    /// state dir; `--follow` keeps printing, `--json` prints the lines as stored.
    Logs(logs::LogsArgs),
    /// List a running runner's threads with their running turn and every
    /// live process of the thread as a tree (pid, CPU, RSS, age, command),
    /// through its admin socket in the state dir.
    Ps(admin::AdminArgs),
    /// List a running runner's agents and threads with their state.
    Threads(admin::AdminArgs),
    /// Interrupt a thread's running turn as the control plane's interrupt
    /// would; `--tree` also kills every process of the thread.
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
    List(Box<RunArgs>),
}

/// Runs the parsed command line. `env_secret` is `AGENT_RUNNER_SECRET`,
/// taken out of the environment before anything else ran.
pub fn main(cli: Cli, env_secret: Option<Secret>) -> ExitCode {
    // Git runs the helper once per credential: no async runtime needed.
    if let Command::GitCredential(args) = &cli.command {
        return match git_credential::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agent-runner git-credential: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
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
            Command::CodeAgent { command } => code_agent::run(command).await,
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
            eprintln!("agent-runner: {e:#}");
            ExitCode::FAILURE
        }
    }
}
