//! `code-agent serve`'s flags, their environment variables and their help:
//! the one definition both the engine's `code-agent` binary and the
//! runner's `agent-runner code-agent serve` parse ([`ServeArgs`]).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::former_env;
use super::guard::{GuardSources, ServeOptions};

/// Where `code-agent serve` listens unless told otherwise: loopback only,
/// and not 50051, the port the docs run the mock control plane on (a
/// runner and its engine side by side on one host must not collide).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50052";

/// The environment variable that may hold the bearer token itself (never a
/// flag: argv is world-readable).
pub const AUTH_TOKEN_ENV: &str = "AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN";

/// `code-agent serve [FLAGS]`: serve the engine's CodeAgentService over gRPC.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// `IP:PORT` to listen on (port 0 picks a free one; the address is
    /// printed on stdout as `code-agent listening on ADDR`).
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_LISTEN", default_value = DEFAULT_LISTEN)]
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
    /// directory (symlinks resolved). Default: --workspace if given, else
    /// ~/.agent-runner/workspaces (the runner's default workspace root);
    /// created if missing.
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_WORKSPACE_ROOT")]
    pub workspace_root: Option<PathBuf>,
    /// Where sessions (FILE storage), providers, memories, plans and cron
    /// jobs persist. Default: ~/.agent-runner/code-agent.
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The workspace of sessions that name none.
    #[arg(long, env = "AGENT_RUNNER_CODE_AGENT_WORKSPACE")]
    pub workspace: Option<PathBuf>,
    /// Model calls per generation at most.
    #[arg(long, default_value_t = 50)]
    pub max_steps: u32,
    /// How `bash` processes are confined: enforce (refuse to start without
    /// Landlock), best-effort or off.
    #[arg(
        long,
        env = "AGENT_RUNNER_CODE_AGENT_SANDBOX",
        default_value = "best-effort"
    )]
    pub sandbox: agent_launcher::Mode,
    /// One more absolute directory `bash` and the MCP and language servers
    /// may read and execute (a toolchain outside /usr the sandbox does not
    /// open by itself: what a started program's installation needs, its
    /// node_modules, venv and interpreter, is opened for it anyway);
    /// repeatable, comma-separated in the variable. Default: none.
    #[arg(
        long = "sandbox-read-only",
        env = "AGENT_RUNNER_CODE_AGENT_SANDBOX_READ_ONLY",
        value_name = "DIR",
        value_delimiter = ',',
        value_parser = absolute_dir
    )]
    pub sandbox_read_only: Vec<PathBuf>,
    /// The time zone cron schedules are read in, as an offset from UTC
    /// (`+02:00`, `-05:30`, `UTC`).
    #[arg(
        long,
        env = "AGENT_RUNNER_CODE_AGENT_CRON_UTC_OFFSET",
        default_value = "UTC",
        value_parser = utc_offset
    )]
    pub cron_utc_offset: i32,
    /// Log level or tracing filter.
    #[arg(long, env = "AGENT_RUNNER_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format: `text` or `json`.
    #[arg(long, env = "AGENT_RUNNER_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl ServeArgs {
    /// The files this server reads that its sandboxes must never show,
    /// besides its state dir: the token file, the TLS key, and systemd's
    /// `$CREDENTIALS_DIRECTORY` (`LoadCredential=`) when it has one. Every
    /// path-valued flag is classified in [`Self::file_flags`].
    pub fn secret_files(&self) -> Vec<PathBuf> {
        self.file_flags()
            .into_iter()
            .filter(|(_, secret, _)| *secret)
            .flat_map(|(_, _, path)| path)
            .chain(
                std::env::var_os("CREDENTIALS_DIRECTORY")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute()),
            )
            .collect()
    }

    /// Every path-valued flag: its name, whether it is secret, its value.
    /// The state dir is secret too, and protected by the engine itself;
    /// the workspaces are what the sandboxes work in; a certificate is
    /// public.
    fn file_flags(&self) -> Vec<(&'static str, bool, Vec<PathBuf>)> {
        let one = |p: &Option<PathBuf>| p.iter().cloned().collect::<Vec<_>>();
        vec![
            ("auth_token_file", true, one(&self.auth_token_file)),
            ("tls_key", true, one(&self.tls_key)),
            ("tls_cert", false, one(&self.tls_cert)),
            ("state_dir", true, one(&self.state_dir)),
            ("workspace_root", false, one(&self.workspace_root)),
            ("workspace", false, one(&self.workspace)),
            ("sandbox_read_only", false, self.sandbox_read_only.clone()),
        ]
    }

    /// The guard the flags name: the bearer token from `--auth-token-file`,
    /// else from [`AUTH_TOKEN_ENV`] (required unless `--insecure-no-auth`),
    /// and TLS when both files are given. Errors name the setting; none
    /// quotes a secret.
    pub fn guard(&self) -> anyhow::Result<ServeOptions> {
        let name = former_env::token_env(AUTH_TOKEN_ENV);
        let value = std::env::var(name).ok();
        self.guard_with_env_token(name, value.as_deref())
    }

    /// [`Self::guard`] with the token variable's value read by the caller:
    /// `name` the variable it came from (for errors), `value` its value. A
    /// caller that takes the token out of its environment at start (so no
    /// child inherits it and `/proc/<pid>/environ` does not show it) uses
    /// this.
    pub fn guard_with_env_token(
        &self,
        name: &str,
        value: Option<&str>,
    ) -> anyhow::Result<ServeOptions> {
        ServeOptions::load(GuardSources {
            token_file: self.auth_token_file.as_deref(),
            token_env: name,
            token_env_value: value,
            insecure_no_auth: self.insecure_no_auth,
            tls_cert: self.tls_cert.as_deref(),
            tls_key: self.tls_key.as_deref(),
        })
        .map_err(anyhow::Error::msg)
    }
}

/// An absolute path (a relative one would depend on where the server was
/// started).
fn absolute_dir(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(format!("{text} is not an absolute path"))
    }
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn utc_offsets_parse() {
        assert_eq!(utc_offset("UTC"), Ok(0));
        assert_eq!(utc_offset("+02:00"), Ok(7200));
        assert_eq!(utc_offset("-05:30"), Ok(-19800));
        assert_eq!(utc_offset("+9"), Ok(32400));
        assert!(utc_offset("02:00").is_err());
        assert!(utc_offset("+25:00").is_err());
    }

    /// Without flags: loopback, a token required, best-effort sandbox, UTC.
    #[test]
    fn the_defaults_are_safe() {
        let args = Cli::try_parse_from(["serve"]).unwrap().serve;
        let addr: std::net::SocketAddr = args.listen.parse().unwrap();
        assert!(addr.ip().is_loopback(), "{addr}");
        assert!(!args.insecure_no_auth);
        assert_eq!(args.sandbox, agent_launcher::Mode::BestEffort);
        assert_eq!(args.cron_utc_offset, 0);
        assert_eq!(args.max_steps, 50);
        assert_eq!(args.log_format, LogFormat::Text);
    }

    /// Every path-valued flag is classified, and the secret ones (token
    /// file, TLS key) are what the sandboxes are told to hide.
    #[test]
    fn every_file_flag_is_classified_and_secrets_are_hidden() {
        use clap::CommandFactory;
        let mut flags: Vec<String> = Cli::command()
            .get_arguments()
            .filter(|a| a.get_value_parser().type_id() == std::any::TypeId::of::<PathBuf>())
            .map(|a| a.get_id().as_str().to_owned())
            .collect();
        let args = Cli::try_parse_from([
            "serve",
            "--auth-token-file=/s/token",
            "--tls-key=/s/key",
            "--tls-cert=/p/cert",
            "--state-dir=/s/state",
            "--workspace-root=/p/ws",
            "--workspace=/p/ws/one",
            "--sandbox-read-only=/p/tools,/p/more",
        ])
        .unwrap()
        .serve;
        let mut table: Vec<String> = args
            .file_flags()
            .iter()
            .map(|(name, _, _)| (*name).to_owned())
            .collect();
        flags.sort();
        table.sort();
        assert_eq!(flags, table);
        for (name, secret, paths) in args.file_flags() {
            assert!(!paths.is_empty(), "{name} not read");
            for path in paths {
                assert_eq!(path.starts_with("/s"), secret, "{name}");
                assert_eq!(args.secret_files().contains(&path), secret, "{name}");
            }
        }
        assert_eq!(
            args.sandbox_read_only,
            ["/p/tools", "/p/more"].map(PathBuf::from)
        );
        assert!(Cli::try_parse_from(["serve", "--sandbox-read-only=relative"]).is_err());
    }

    #[test]
    fn flags_parse() {
        let args = Cli::try_parse_from([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--insecure-no-auth",
            "--sandbox",
            "off",
            "--cron-utc-offset",
            "+02:00",
            "--max-steps",
            "7",
            "--log-format",
            "json",
        ])
        .unwrap()
        .serve;
        assert_eq!(args.listen, "0.0.0.0:0");
        assert!(args.insecure_no_auth);
        assert_eq!(args.sandbox, agent_launcher::Mode::Off);
        assert_eq!(args.cron_utc_offset, 7200);
        assert_eq!(args.max_steps, 7);
        assert_eq!(args.log_format, LogFormat::Json);
        assert!(Cli::try_parse_from(["serve", "--cron-utc-offset", "9"]).is_err());
    }
}
