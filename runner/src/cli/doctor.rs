//! `agent-runner doctor` (issue 15): with the same settings `run` would use,
//! checks everything the runner needs before it starts and says what to fix.
//!
//! Each check is `ok`, `warn` (the runner starts, something is missing) or
//! `fail` (the runner would not start, or not work: settings that do not
//! resolve, a control plane it cannot reach, credentials refused, a state
//! dir it cannot write, a sandbox that refuses every turn). The exit code is
//! 0 when nothing failed, 1 otherwise.
//!
//! The credentials probe is the read-only `ListGithubInstallationsForRunner`
//! RPC, not `RegisterRunner`: registering would take over the registration
//! of a runner already running with the same credentials.

use std::path::Path;
use std::time::Duration;

use agent_runner_proto::runner::ListGithubInstallationsForRunnerRequest;
use clap::parser::ValueSource;
use serde::Serialize;

use crate::config::{RunArgs, RunConfig, Secret};

/// Below this, the state dir or workspace root gets a warning.
const LOW_SPACE_BYTES: u64 = 1024 * 1024 * 1024;
/// How long the control plane may take to answer the probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// Flags of `agent-runner doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print one JSON document instead of lines.
    #[arg(long)]
    json: bool,
    /// The same settings as `run`.
    #[command(flatten)]
    run: RunArgs,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Outcome {
    Ok,
    Warn,
    Fail,
}

/// One check: what was looked at, what was found, and the fix.
#[derive(Debug, Serialize)]
struct Check {
    check: String,
    outcome: Outcome,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

/// One resolved setting and where its value came from.
#[derive(Debug, Serialize)]
struct Setting {
    key: &'static str,
    value: String,
    source: String,
}

#[derive(Debug, Serialize)]
struct Report {
    would_start: bool,
    settings: Vec<Setting>,
    checks: Vec<Check>,
}

fn check(name: &str, outcome: Outcome, detail: impl Into<String>, fix: Option<String>) -> Check {
    Check {
        check: name.to_owned(),
        outcome,
        detail: detail.into(),
        fix,
    }
}

/// Runs every check, prints the report; `Ok(false)` when the runner would
/// not start (the caller exits 1).
pub async fn run(
    args: DoctorArgs,
    matches: Option<clap::ArgMatches>,
    env_secret: Option<Secret>,
) -> anyhow::Result<bool> {
    let file_keys = file_keys(args.run.config.as_deref());
    let secret_from_env = env_secret.is_some();
    let mut checks = Vec::new();
    let mut settings = Vec::new();
    let resolved = RunConfig::resolve(args.run.clone(), env_secret);
    match &resolved {
        Ok(config) => {
            settings = describe_settings(config, matches.as_ref(), &file_keys, secret_from_env);
            checks.push(check(
                "configuration",
                Outcome::Ok,
                "every setting resolves",
                None,
            ));
        }
        Err(e) => checks.push(check(
            "configuration",
            Outcome::Fail,
            e.to_string(),
            Some("fix the setting named (flag, AGENT_RUNNER_* variable or config file key)".into()),
        )),
    }
    if let Ok(config) = &resolved {
        checks.push(control_plane(config).await);
        checks.push(directory("state dir", &config.state_dir));
        checks.push(directory("workspace root", &config.workspace_root));
        checks.push(git());
        match super::sdk::probe(config).await {
            Ok((sdks, sandbox)) => {
                for d in sdks {
                    let ready = matches!(d.status, sdk_adapter::SdkStatus::Ready);
                    let status = format!("{:?}", d.status).to_lowercase();
                    let models: Vec<&str> = d.models.iter().map(|m| m.name.as_str()).collect();
                    checks.push(check(
                        &format!("sdk {}", d.name),
                        if ready { Outcome::Ok } else { Outcome::Warn },
                        format!("{status}; models: {}", models.join(", ")),
                        d.error_message.clone(),
                    ));
                }
                checks.push(sandbox_check(&sandbox));
            }
            Err(e) => checks.push(check(
                "sdks and sandbox",
                Outcome::Fail,
                format!("{e:#}"),
                None,
            )),
        }
        checks.push(check(
            "proxy",
            Outcome::Ok,
            match config.proxy.for_destination(
                config.control_plane.tls,
                &config.control_plane.host,
                config.control_plane.port(),
            ) {
                Some((p, _)) => {
                    format!("{}; the control plane through {p}", config.proxy.describe())
                }
                None => format!("{}; the control plane directly", config.proxy.describe()),
            },
            None,
        ));
    }
    let would_start = !checks.iter().any(|c| c.outcome == Outcome::Fail);
    let report = Report {
        would_start,
        settings,
        checks,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", human(&report));
    }
    Ok(would_start)
}

fn human(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "settings");
    for s in &report.settings {
        let _ = writeln!(out, "  {:<16} {}  ({})", s.key, s.value, s.source);
    }
    let _ = writeln!(out, "checks");
    for c in &report.checks {
        let mark = match c.outcome {
            Outcome::Ok => "ok  ",
            Outcome::Warn => "WARN",
            Outcome::Fail => "FAIL",
        };
        let _ = writeln!(out, "  {mark} {:<18} {}", c.check, c.detail);
        if let Some(fix) = &c.fix {
            let _ = writeln!(out, "       fix: {fix}");
        }
    }
    let _ = writeln!(
        out,
        "{}",
        if report.would_start {
            "the runner would start"
        } else {
            "the runner would NOT start (see FAIL above)"
        }
    );
    out
}

/// The keys present in the config file (empty without one or when it does
/// not parse: the configuration check reports that).
fn file_keys(path: Option<&Path>) -> Vec<String> {
    path.and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| text.parse::<toml::Table>().ok())
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default()
}

fn describe_settings(
    config: &RunConfig,
    matches: Option<&clap::ArgMatches>,
    file_keys: &[String],
    secret_from_env: bool,
) -> Vec<Setting> {
    let source = |key: &'static str, env: &str| -> String {
        match matches.and_then(|m| m.value_source(key)) {
            Some(ValueSource::CommandLine) => format!("flag --{}", key.replace('_', "-")),
            Some(ValueSource::EnvVariable) => format!("env {env}"),
            _ if file_keys.iter().any(|k| k == key) => "config file".to_owned(),
            _ => "default".to_owned(),
        }
    };
    let mut out = vec![
        Setting {
            key: "control_plane_url",
            value: format!(
                "{}{}",
                config.control_plane.origin, config.control_plane.path_prefix
            ),
            source: source("control_plane_url", "AGENT_RUNNER_CONTROL_PLANE_URL"),
        },
        Setting {
            key: "secret",
            // Never the secret itself.
            value: if config.secret.is_some() {
                "set".into()
            } else {
                "none".into()
            },
            source: match &config.secret_file {
                Some(p) => format!("file {}", p.display()),
                None if secret_from_env => "env AGENT_RUNNER_SECRET".into(),
                None => "none".into(),
            },
        },
        Setting {
            key: "state_dir",
            value: config.state_dir.display().to_string(),
            source: source("state_dir", "AGENT_RUNNER_STATE_DIR"),
        },
        Setting {
            key: "workspace_root",
            value: config.workspace_root.display().to_string(),
            source: source("workspace_root", "AGENT_RUNNER_WORKSPACE_ROOT"),
        },
        Setting {
            key: "sdk",
            value: if config.sdks.is_empty() {
                "every built-in SDK".into()
            } else {
                config.sdks.join(",")
            },
            source: source("sdk", "AGENT_RUNNER_SDK"),
        },
        Setting {
            key: "health_addr",
            value: config
                .health
                .map(|h| h.addr.to_string())
                .unwrap_or_else(|| "off".into()),
            source: source("health_addr", "AGENT_RUNNER_HEALTH_ADDR"),
        },
        Setting {
            key: "sandbox",
            value: config.sandbox.mode.to_string(),
            source: source("sandbox", "AGENT_RUNNER_SANDBOX"),
        },
        Setting {
            key: "proxy",
            value: config.proxy.describe(),
            source: match matches.and_then(|m| m.value_source("proxy")) {
                Some(ValueSource::CommandLine) => "flag --proxy".into(),
                Some(ValueSource::EnvVariable) => "env AGENT_RUNNER_PROXY".into(),
                _ if file_keys.iter().any(|k| k == "proxy") => "config file".into(),
                _ if config.proxy.is_set() => "env HTTPS_PROXY/HTTP_PROXY/NO_PROXY".into(),
                _ => "default".into(),
            },
        },
    ];
    if let Some(path) = matches.and_then(|m| m.get_one::<std::path::PathBuf>("config")) {
        out.insert(
            0,
            Setting {
                key: "config",
                value: path.display().to_string(),
                source: source("config", "AGENT_RUNNER_CONFIG"),
            },
        );
    }
    out
}

/// Reachable, TLS valid, credentials accepted: one read-only RPC.
async fn control_plane(config: &RunConfig) -> Check {
    let url = format!(
        "{}{}",
        config.control_plane.origin, config.control_plane.path_prefix
    );
    let name = "control plane";
    let mut client = match crate::host::client::client(config) {
        Ok(c) => c,
        Err(e) => return check(name, Outcome::Fail, e.to_string(), None),
    };
    let rpc = "ListGithubInstallationsForRunner";
    let answer = tokio::time::timeout(
        PROBE_TIMEOUT,
        client.list_github_installations_for_runner(ListGithubInstallationsForRunnerRequest {}),
    )
    .await;
    let tls = if config.control_plane.tls {
        ", TLS valid"
    } else {
        " (plaintext)"
    };
    match answer {
        Err(_) => check(
            name,
            Outcome::Fail,
            format!("{url}: no answer within {PROBE_TIMEOUT:?}"),
            Some("is the address reachable from here (firewall, proxy)?".into()),
        ),
        Ok(Ok(_)) => check(
            name,
            Outcome::Ok,
            format!("{url} reachable{tls}, credentials accepted"),
            None,
        ),
        Ok(Err(status)) => match status.code() {
            tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => check(
                name,
                Outcome::Fail,
                format!(
                    "{url} reachable{tls}, credentials REFUSED ({:?}: {})",
                    status.code(),
                    status.message()
                ),
                Some(
                    "check the bearer secret (--secret-file or AGENT_RUNNER_SECRET) against the control plane's"
                        .into(),
                ),
            ),
            tonic::Code::Unimplemented => check(
                name,
                Outcome::Warn,
                format!(
                    "{url} reachable{tls}; it does not serve {rpc}, so the credentials were not checked"
                ),
                None,
            ),
            _ => check(
                name,
                Outcome::Fail,
                crate::link::problem::describe(&url, rpc, &status, false),
                None,
            ),
        },
    }
}

/// Exists (or can be made), writable, with room left.
fn directory(name: &str, dir: &Path) -> Check {
    if let Err(e) = std::fs::create_dir_all(dir) {
        return check(
            name,
            Outcome::Fail,
            format!("{}: cannot create: {e}", dir.display()),
            Some("create it, writable by the runner's user".into()),
        );
    }
    let probe = dir.join(format!(".agent-runner-doctor-{}", std::process::id()));
    if let Err(e) = std::fs::write(&probe, b"doctor") {
        return check(
            name,
            Outcome::Fail,
            format!("{}: not writable: {e}", dir.display()),
            Some("make it writable by the runner's user (chown/chmod)".into()),
        );
    }
    let _ = std::fs::remove_file(&probe);
    match free_bytes(dir) {
        Some(free) if free < LOW_SPACE_BYTES => check(
            name,
            Outcome::Warn,
            format!("{}: writable, only {} MiB free", dir.display(), free >> 20),
            Some("free space or move it to a larger volume".into()),
        ),
        Some(free) => check(
            name,
            Outcome::Ok,
            format!("{}: writable, {} MiB free", dir.display(), free >> 20),
            None,
        ),
        None => check(
            name,
            Outcome::Ok,
            format!("{}: writable (free space unknown)", dir.display()),
            None,
        ),
    }
}

fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs only writes into the struct we pass; the path is a
    // valid NUL-terminated string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

fn git() -> Check {
    match std::process::Command::new("git").arg("--version").output() {
        Ok(out) if out.status.success() => check(
            "git",
            Outcome::Ok,
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            None,
        ),
        _ => check(
            "git",
            Outcome::Warn,
            "git not found on PATH",
            Some("install git (skill packages and agents' repositories need it)".into()),
        ),
    }
}

fn sandbox_check(sandbox: &crate::host::sandbox::SandboxStatus) -> Check {
    let probe = agent_launcher::probe_host();
    let mut facts = sandbox.host.clone();
    if !facts.iter().any(|f| f.starts_with("user namespaces")) {
        facts.push(match probe.user_namespaces {
            Some(true) => "user namespaces: allowed".into(),
            Some(false) => "user namespaces: not allowed".into(),
            None => "user namespaces: unknown".into(),
        });
    }
    let mut detail = format!("mode {}; {}", sandbox.mode, facts.join("; "));
    if !sandbox.missing.is_empty() {
        detail.push_str(&format!("; not applied: {}", sandbox.missing.join("; ")));
    }
    match &sandbox.refused {
        Some(why) => check(
            "sandbox",
            Outcome::Fail,
            format!("{detail}; REFUSING every turn: {why}"),
            Some("run on a kernel with Landlock, or set --sandbox best-effort".into()),
        ),
        None if !sandbox.missing.is_empty() => check("sandbox", Outcome::Warn, detail, None),
        None => check("sandbox", Outcome::Ok, detail, None),
    }
}
