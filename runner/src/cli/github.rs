//! `agent-runner github installations` and `agent-runner github check
//! --repo owner/repo`: what an operator asks to see whether the runner's
//! GitHub set-up works. They take the same settings as `run` (flags, env,
//! `--config`) and get tokens the way `run` would: as the runner's GitHub
//! App when `--github-app-id` is set, else from the control plane, dialled
//! with the runner's URL, CA and bearer secret (the GitHub RPCs need no
//! registration). They print installations, repositories and token expiry,
//! never a token.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand};

use crate::config::{self, GithubArgs, LogFormat, RunArgs, RunConfig, Secret};
use crate::host::github::{self, GithubError, TokenBroker};
use crate::util::proxy::ProxyConfig;
use crate::util::redact::Redactor;

/// `agent-runner github …`
#[derive(Debug, Subcommand)]
pub enum GithubCommand {
    /// List the installations available to this runner, the repositories
    /// each covers and when its current token expires.
    Installations(InstallationsArgs),
    /// Say which installation covers a repository and when its token
    /// expires (exit 1 when none covers it).
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct InstallationsArgs {
    /// Print the installations as one JSON document (expiry as RFC 3339).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub run: GithubSettings,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The repository, `owner/repo`.
    #[arg(long)]
    pub repo: String,
    #[command(flatten)]
    pub run: GithubSettings,
}

/// The settings of `run` that `github` uses (same flags, env and
/// `--config` keys): the control plane and how to reach it, or the
/// runner's own GitHub App. Only these show in `--help`.
#[derive(Debug, Args)]
pub struct GithubSettings {
    /// TOML file with `run`'s settings (only the ones below are used).
    #[arg(long, env = "AGENT_RUNNER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The control plane URL, as for `run` (not needed with `--github-app-id`).
    #[arg(long, env = "AGENT_RUNNER_CONTROL_PLANE_URL")]
    pub control_plane_url: Option<String>,
    /// Extra CA certificate (PEM) for an `https://` control plane.
    #[arg(long, env = "AGENT_RUNNER_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// File holding the bearer secret (or set AGENT_RUNNER_SECRET).
    #[arg(long, env = "AGENT_RUNNER_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,
    /// Log level for what the command logs on stderr. Default: warn.
    #[arg(long, env = "AGENT_RUNNER_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Outbound HTTP proxy, as for `run` (else HTTPS_PROXY/HTTP_PROXY,
    /// with NO_PROXY exceptions).
    #[arg(long, env = "AGENT_RUNNER_PROXY")]
    pub proxy: Option<String>,
    /// Where tokens come from.
    #[command(flatten)]
    pub github: GithubArgs,
}

impl From<GithubSettings> for RunArgs {
    fn from(s: GithubSettings) -> Self {
        RunArgs {
            config: s.config,
            control_plane_url: s.control_plane_url,
            ca_cert: s.ca_cert,
            secret_file: s.secret_file,
            log_level: s.log_level,
            proxy: s.proxy,
            github: s.github,
            ..Default::default()
        }
    }
}

pub async fn run(command: GithubCommand, env_secret: Option<Secret>) -> anyhow::Result<()> {
    match command {
        GithubCommand::Installations(args) => {
            let broker = connect(args.run.into(), env_secret)?;
            let installations = broker.installations().await?;
            if args.json {
                println!("{}", installations_json(&broker, &installations));
                return Ok(());
            }
            print!("{}", render_installations(&broker, &installations));
            Ok(())
        }
        GithubCommand::Check(args) => {
            let (owner, repo) = split_repo(&args.repo)?;
            let broker = connect(args.run.into(), env_secret)?;
            let token = broker.token_for_repo(owner, repo).await?;
            println!(
                "{}: covered by installation {}; token expires {}",
                args.repo,
                token.installation_id,
                when(token.expires_at)
            );
            Ok(())
        }
    }
}

fn split_repo(text: &str) -> Result<(&str, &str), GithubError> {
    let bad = || GithubError::BadRepo {
        repo: text.to_owned(),
    };
    let (owner, repo) = text.split_once('/').ok_or_else(bad)?;
    github::repo_key(owner, repo).ok_or_else(bad)?;
    Ok((owner, repo))
}

/// The broker `run` would use, from the same settings.
fn connect(args: RunArgs, env_secret: Option<Secret>) -> anyhow::Result<TokenBroker> {
    let level = args.log_level.clone().unwrap_or_else(|| "warn".to_owned());
    let format = args.log_format.unwrap_or_default();
    let github_config = config::resolve_github(&args)?;
    let (client, proxies) = if github_config.app.is_some() {
        let proxies = ProxyConfig::resolve(args.proxy.as_deref())
            .map_err(|m| anyhow::anyhow!("proxy: {m}"))?;
        (None, proxies)
    } else {
        let config = RunConfig::resolve(args, env_secret)?;
        (Some(crate::host::client::client(&config)?), config.proxy)
    };
    for secret in proxies.secrets() {
        crate::util::redact::Redactor::process().add(&secret);
    }
    init_logging(format, &level)?;
    Ok(github::broker(
        &github_config,
        client,
        Redactor::process(),
        &proxies,
    )?)
}

fn init_logging(format: LogFormat, level: &str) -> anyhow::Result<()> {
    crate::ops::logging::init(format, level).map_err(anyhow::Error::msg)
}

fn render_installations(broker: &TokenBroker, installations: &[github::Installation]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} installation(s) from {} (git host {})",
        installations.len(),
        broker.describe_source(),
        broker.git_host()
    );
    for i in installations {
        let account = i
            .account
            .as_deref()
            .map(|a| format!(" ({a})"))
            .unwrap_or_default();
        match (&i.error, i.token_expires_at) {
            (Some(error), _) => {
                let _ = writeln!(out, "installation {}{account}: error: {error}", i.id);
            }
            (None, expires) => {
                let _ = writeln!(
                    out,
                    "installation {}{account}: {} repositories; token expires {}",
                    i.id,
                    i.repositories.len(),
                    expires.map(when).unwrap_or_else(|| "(unknown)".to_owned())
                );
                for r in &i.repositories {
                    let _ = writeln!(out, "    {r}");
                }
            }
        }
    }
    out
}

/// What `installations --json` prints: the source, and each installation
/// with its repositories and token expiry (never a token).
fn installations_json(
    broker: &TokenBroker,
    installations: &[github::Installation],
) -> serde_json::Value {
    let list: Vec<serde_json::Value> = installations
        .iter()
        .map(|i| {
            serde_json::json!({
                "id": i.id,
                "account": i.account,
                "repositories": i.repositories,
                "token_expires_at": i
                    .token_expires_at
                    .map(|t| humantime::format_rfc3339_seconds(t).to_string()),
                "error": i.error,
            })
        })
        .collect();
    serde_json::json!({
        "source": broker.describe_source(),
        "git_host": broker.git_host(),
        "installations": list,
    })
}

/// `2026-05-01T12:00:00Z (in 59m 58s)`.
fn when(t: SystemTime) -> String {
    let stamp = humantime::format_rfc3339_seconds(t);
    match t.duration_since(SystemTime::now()) {
        Ok(left) => format!(
            "{stamp} (in {})",
            crate::ops::human::duration(Duration::from_secs(left.as_secs()))
        ),
        Err(_) => format!("{stamp} (expired)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_commands_take_only_the_settings_they_use() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["agent-runner", "github", "check", "--repo", "a/b"];
            argv.extend_from_slice(extra);
            crate::cli::Cli::try_parse_from(argv).map(|_| ())
        };
        parse(&["--control-plane-url", "http://x", "--github-app-id", "1"]).unwrap();
        parse(&[
            "--config",
            "f.toml",
            "--secret-file",
            "s",
            "--log-level",
            "info",
        ])
        .unwrap();
        for unrelated in [["--drain-timeout", "1s"], ["--sdk", "codex"]] {
            let err = parse(&unrelated).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument, "{err}");
        }
    }

    #[test]
    fn repo_argument_must_be_owner_slash_repo() {
        assert_eq!(split_repo("acme/widgets").unwrap(), ("acme", "widgets"));
        for bad in ["acme", "acme/", "/w", "a/b/c", "a b/c"] {
            assert!(
                matches!(split_repo(bad), Err(GithubError::BadRepo { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn expiry_is_shown_with_time_left() {
        let t = SystemTime::now() + Duration::from_secs(3600);
        assert!(when(t).contains("(in 59m 5"), "{}", when(t));
        let t = SystemTime::now() - Duration::from_secs(5);
        assert!(when(t).ends_with("(expired)"));
    }
}
