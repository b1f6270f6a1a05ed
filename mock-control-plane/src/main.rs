//! The `mock-control-plane` binary: the library's control plane for
//! harnesses outside this workspace. `serve --stdio` speaks JSON lines on
//! stdin/stdout; `serve --script FILE` runs a YAML scenario and exits 0 when
//! every expectation held. Logs go to stderr only.
//!
//! Exit codes: 0 success (scenario passed, or stdin closed in --stdio), 1 a
//! scenario step failed, 2 bad arguments, configuration or scenario file (or
//! the server could not start), 130 interrupted by SIGINT/SIGTERM during a
//! scenario.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{ArgGroup, Args, Parser, Subcommand};
use mock_control_plane::{
    GithubInstallation, GithubRpcNames, MockConfig, MockControlPlane, scenario, stdio,
};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "mock-control-plane",
    version,
    about = "A real gRPC companyhelm.runner.v1 control plane for testing agent runners",
    long_about = "A real gRPC companyhelm.runner.v1.AgentRunnerControlService for testing agent \
                  runners: it accepts RegisterRunner, holds the runner's ControlChannel stream, \
                  serves the GitHub installation RPCs, and lets a harness drive the runner either \
                  through JSON lines (--stdio) or a YAML scenario (--script).\n\n\
                  Messages use the canonical protobuf JSON mapping (camelCase field names, enums \
                  by name, a oneof member as a plain field). Logs go to stderr (RUST_LOG sets the \
                  level, default info); stdout carries only the protocol (--stdio) or the \
                  scenario's progress (--script)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the control plane until stdin closes (--stdio) or the scenario ends (--script).
    Serve(ServeArgs),
}

#[derive(Args)]
#[command(group(ArgGroup::new("mode").required(true).args(["stdio", "script"])))]
struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (the URL is printed:
    /// the `listening` event in --stdio, the first line in --script).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: SocketAddr,

    /// Serve the gRPC service under this HTTP path prefix, e.g. /grpc; paths
    /// without it answer UNIMPLEMENTED.
    #[arg(long, value_name = "PREFIX")]
    path_prefix: Option<String>,

    /// Send the ControlChannel's response headers only with the first
    /// message, as grpc-go and Python grpcio servers do.
    #[arg(long)]
    delay_headers: bool,

    /// Acknowledged delivery (acked-delivery/1): `on` accepts it and
    /// acknowledges as messages are processed, `late:MS` acknowledges MS
    /// milliseconds late, `never` accepts it and never acknowledges, `off`
    /// refuses it (a legacy control plane).
    #[arg(long, value_name = "MODE", default_value = "on")]
    acked_delivery: mock_control_plane::AckMode,

    /// Spend this many microseconds on each received message before reading
    /// the next (a slow control plane, e.g. Python grpcio).
    #[arg(long, value_name = "US", default_value_t = 0)]
    read_delay_us: u64,

    /// The HTTP/2 receive window granted per stream and per connection, in
    /// bytes (16384 to 2147483647): how much a runner may have on the wire
    /// before the mock has taken it in. Default: hyper's, 1 MiB.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(16_384..=2_147_483_647))]
    stream_window: Option<u32>,

    /// Accept `approvals/1`: agents' approval requests and questions come
    /// out as `approvalRequest` messages, decided by `approvalDecision`
    /// lines (--stdio) or `decide` steps (--script; a scenario can also say
    /// `accept_approvals: true`).
    #[arg(long)]
    accept_approvals: bool,

    /// Forget what was processed on `restart` (the next registration
    /// answers acked_sequence 0), as a control plane without durable state.
    #[arg(long)]
    forget_acks_on_restart: bool,

    /// Require `authorization: Bearer <secret>` on every RPC; the secret is
    /// this file's content (surrounding whitespace trimmed).
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,

    /// Serve several runners, each known by its secret: NAME=FILE, the
    /// secret being FILE's content (trimmed); repeatable. Each is its own
    /// runner (own stream, own sequence numbers); in --stdio a line's
    /// "runner" key says which one it is for, and events name theirs.
    #[arg(long = "runner", value_name = "NAME=FILE", value_parser = parse_runner)]
    runners: Vec<(String, PathBuf)>,

    /// Serve TLS with this PEM certificate chain (needs --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// The PEM private key for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// YAML or JSON list of GitHub installations to serve, each
    /// {installationId, accessToken, expiresUnixMs, repositories}.
    #[arg(long, value_name = "FILE")]
    github_installations: Option<PathBuf>,

    /// The names the two GitHub RPCs are served under: `for-runner`
    /// (ListGithubInstallationsForRunner, GetGithubInstallationAccessTokenForRunner),
    /// `later` (ListGithubInstallations, GithubInstallationAccessToken) or
    /// `both`; the others answer UNIMPLEMENTED.
    #[arg(long, value_name = "NAMES", default_value = "for-runner")]
    github_rpc_names: GithubRpcNames,

    /// The protocol version to serve: `0.2` (agents, the GitHub RPCs) or
    /// `0.7` (thread-only; stdin lines and scenario `send` steps are then
    /// 0.7 ServerMessages, e.g. createThreadRequest with threadId, model and
    /// cliSecret). A runner must be started with the same `--protocol`.
    #[arg(long, value_name = "VERSION", default_value = "0.2")]
    protocol: mock_control_plane::Protocol,

    /// JSON lines: each stdin line is a ServerMessage (or {"command":
    /// "drop_connection"|"restart"}); each stdout line is an event
    /// (listening, registered, connected, disconnected, message, sent, error).
    /// Exits when stdin closes.
    #[arg(long)]
    stdio: bool,

    /// Run this YAML scenario, then exit: 0 when every step passed, 1 with a
    /// report of expected vs received messages otherwise.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,

    /// Set a scenario variable (usable as ${NAME}); repeatable. Overrides the
    /// scenario's own `vars`.
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var, conflicts_with = "stdio")]
    vars: Vec<(String, String)>,
}

fn parse_var(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("expected NAME=VALUE, got {text:?}")),
    }
}

fn parse_runner(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_owned(), PathBuf::from(file)))
        }
        _ => Err(format!("expected NAME=FILE, got {text:?}")),
    }
}

/// The trimmed content of the secret file `path`; empty is an error.
fn read_secret(path: &PathBuf) -> Result<String> {
    let secret = read(path, "the secret file")?.trim().to_owned();
    if secret.is_empty() {
        bail!("the secret file {} is empty", path.display());
    }
    Ok(secret)
}

fn read(path: &PathBuf, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {what} {}", path.display()))
}

fn config(args: &ServeArgs) -> Result<MockConfig> {
    let mut config = MockConfig {
        listen: Some(args.listen),
        path_prefix: args.path_prefix.clone(),
        delay_headers: args.delay_headers,
        ack_mode: args.acked_delivery,
        forget_acks_on_restart: args.forget_acks_on_restart,
        github_rpc_names: args.github_rpc_names,
        protocol: args.protocol,
        read_delay: std::time::Duration::from_micros(args.read_delay_us),
        stream_window: args.stream_window,
        ..MockConfig::default()
    };
    if let Some(path) = &args.secret_file {
        config.bearer_secret = Some(read_secret(path)?);
    }
    for (name, path) in &args.runners {
        config = config.with_runner(name, read_secret(path)?);
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.tls = Some((
            read(cert, "the TLS certificate")?,
            read(key, "the TLS key")?,
        ));
    }
    if let Some(path) = &args.github_installations {
        let text = read(path, "the GitHub installations file")?;
        config.github_installations = serde_yaml::from_str::<Vec<GithubInstallation>>(&text)
            .with_context(|| format!("parsing {}", path.display()))?;
    }
    Ok(config)
}

/// Resolves on Ctrl-C or SIGTERM.
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
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
}

async fn serve(args: ServeArgs) -> Result<ExitCode> {
    // Read and check the scenario before binding, so a typo fails at once.
    let script = match &args.script {
        Some(path) => Some(
            scenario::parse(&read(path, "the scenario")?)
                .with_context(|| format!("in {}", path.display()))?,
        ),
        None => None,
    };
    let plane = MockControlPlane::start(config(&args)?).await?;
    // Before anyone knows the URL, so the first registration sees it.
    plane.accept_approvals(args.accept_approvals);
    if let Some(script) = &script {
        script.apply(&plane);
    }

    let code = if let Some(script) = script {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "mock control plane listening on {}", plane.url());
        let vars: BTreeMap<String, String> = args.vars.into_iter().collect();
        tokio::select! {
            result = scenario::run(&plane, &script, vars, &mut out) => match result {
                Ok(_) => ExitCode::SUCCESS,
                Err(err) => {
                    let _ = writeln!(out, "FAILED: {err:#}");
                    eprintln!("scenario failed (see stdout for the report)");
                    ExitCode::FAILURE
                }
            },
            () = terminated() => ExitCode::from(130),
        }
    } else {
        let stdin = tokio::io::BufReader::new(tokio::io::stdin());
        tokio::select! {
            result = stdio::run(&plane, stdin, tokio::io::stdout()) => match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("mock-control-plane: {err:#}");
                    ExitCode::FAILURE
                }
            },
            () = terminated() => ExitCode::SUCCESS,
        }
    };
    plane.stop().await?;
    Ok(code)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("mock-control-plane: {err:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exactly_one_mode_is_required() {
        assert!(Cli::try_parse_from(["m", "serve"]).is_err());
        assert!(Cli::try_parse_from(["m", "serve", "--stdio", "--script", "x"]).is_err());
        assert!(Cli::try_parse_from(["m", "serve", "--stdio"]).is_ok());
        assert!(Cli::try_parse_from(["m", "serve", "--script", "x", "--var", "a=b"]).is_ok());
        assert!(Cli::try_parse_from(["m", "serve", "--stdio", "--var", "a=b"]).is_err());
        assert!(Cli::try_parse_from(["m", "serve", "--stdio", "--tls-cert", "c"]).is_err());
        assert!(Cli::try_parse_from(["m", "serve", "--script", "x", "--var", "novalue"]).is_err());
        let two = ["--runner", "r0=/s0", "--runner", "r1=/s1"];
        assert!(Cli::try_parse_from([&["m", "serve", "--stdio"][..], &two[..]].concat()).is_ok());
        assert!(Cli::try_parse_from(["m", "serve", "--stdio", "--runner", "r0"]).is_err());
        assert!(Cli::try_parse_from(["m", "serve", "--stdio", "--runner", "=/s"]).is_err());
    }
}
