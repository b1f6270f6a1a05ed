//! The `agent-runner` command line: `run`, `status`, `demo`, `github`, `sdk list`,
//! `code-agent serve`, and `git-credential` (what agents' git calls; not for people).
//!
//! Secrets: `AGENT_RUNNER_SECRET` is read and removed from the environment
//! before any thread starts, so no agent process ever inherits it.

use std::process::ExitCode;

use agent_runner::config::{RunArgs, RunConfig, Secret};
#[cfg(feature = "demo")]
use agent_runner::demo;
use agent_runner::runner::Runner;
use agent_runner::{
    code_agent_cmd, git_credential_cmd, github_cmd, logging, procs, sdks, status_cmd,
};
use clap::{Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser)]
#[command(
    name = "agent-runner",
    version,
    about = "Runs coding agents for a remote control plane"
)]
struct Cli {
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
    Status(status_cmd::StatusArgs),
    /// Run a mock control plane and a runner in-process and print a live
    /// transcript of one scripted turn.
    #[cfg(feature = "demo")]
    Demo(demo::DemoArgs),
    /// Git credential helper for agents' git (the runner configures it
    /// through GIT_CONFIG_* in every agent's environment): answers
    /// get/store/erase from the running runner's credential socket.
    #[command(hide = true)]
    GitCredential(git_credential_cmd::GitCredentialArgs),
    /// GitHub installations and tokens, as `run` would get them (never
    /// printing a token).
    Github {
        #[command(subcommand)]
        command: Box<github_cmd::GithubCommand>,
    },
    /// The code-agent engine (`code-agent serve --listen ADDR`: a standalone
    /// a3s CodeAgentService for `run --code-agent-endpoint`).
    CodeAgent {
        #[command(subcommand)]
        command: code_agent_cmd::CodeAgentCommand,
    },
    /// SDK adapters.
    Sdk {
        #[command(subcommand)]
        command: SdkCommand,
    },
}

#[derive(Subcommand)]
enum SdkCommand {
    /// Print each built-in adapter, its status and models.
    List,
}

fn main() -> ExitCode {
    let env_secret = take_env_secret();
    let cli = Cli::parse();
    // Git runs the helper once per credential: no async runtime needed.
    if let Command::GitCredential(args) = &cli.command {
        return match git_credential_cmd::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agent-runner git-credential: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
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
            Command::Run(args) => run(*args, env_secret).await,
            Command::Status(args) => status_cmd::run(args).await,
            #[cfg(feature = "demo")]
            Command::Demo(args) => demo::run(args).await,
            Command::CodeAgent { command } => code_agent_cmd::run(command).await,
            Command::Github { command } => github_cmd::run(*command, env_secret).await,
            Command::GitCredential(_) => Ok(()),
            Command::Sdk {
                command: SdkCommand::List,
            } => sdk_list().await,
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

fn take_env_secret() -> Option<Secret> {
    let value = std::env::var("AGENT_RUNNER_SECRET").ok();
    // SAFETY: called first thing in main, before any other thread exists.
    unsafe { std::env::remove_var("AGENT_RUNNER_SECRET") };
    value
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .map(Secret::new)
}

async fn run(args: RunArgs, env_secret: Option<Secret>) -> anyhow::Result<()> {
    let config = RunConfig::resolve(args, env_secret)?;
    code_agent_cmd::redact_provider_keys();
    // The bearer secret is never logged on purpose; masking it too covers
    // an agent or a library that quotes it by accident.
    if let Some(secret) = &config.secret {
        agent_runner::redact::Redactor::process().add(secret.expose());
    }
    logging::init(config.log_format, &config.log_level).map_err(anyhow::Error::msg)?;
    procs::warn_if_pid1();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut runner = Runner::start(&config).await?;
    tracing::info!(
        control_plane = %config.control_plane.origin,
        sdks = ?runner.rt.sdks.names(),
        "runner started"
    );
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        refused = runner.refused() => return refused,
    }
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("agent-runner: second signal, exiting at once");
        std::process::exit(130);
    });
    runner.shutdown(config.drain_timeout).await
}

async fn sdk_list() -> anyhow::Result<()> {
    let names: Vec<String> = sdks::BUILT_IN.iter().map(|s| (*s).to_owned()).collect();
    let all = sdks::Sdks::new(&names).map_err(anyhow::Error::msg)?;
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
    Ok(())
}
