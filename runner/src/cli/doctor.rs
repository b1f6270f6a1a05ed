//! `agent-runner doctor`: with the same settings `run` would use,
//! checks everything the runner needs before it starts and says what to fix.
//!
//! Each check is `ok`, `warn` (the runner starts, something is missing) or
//! `fail` (the runner would not start, or not work: settings that do not
//! resolve, a control plane it cannot reach, credentials refused, a state
//! dir it cannot write, a sandbox that refuses every turn). The exit code is
//! 0 when nothing failed, 1 otherwise.
//!
//! The credentials probe is the read-only `ListGithubInstallationsForRunner`
//! RPC (or its later name, `ListGithubInstallations`), not `RegisterRunner`:
//! registering would take over the registration of a runner already running
//! with the same credentials. A control plane that serves neither name is
//! not there: the URL's path (the prefix of every RPC) is wrong, and `run`
//! would fail to register for the same reason, said the same way
//! ([`crate::link::problem`]).
//!
//! The settings and where each came from are the ones recorded while the
//! configuration was merged ([`crate::config::Sources`]); the state dir and
//! workspace root get the check `run` makes at start-up
//! ([`crate::config::check_writable_dir`]).

use std::path::Path;
use std::time::Duration;

use agent_runner_proto::runner::{
    ListGithubInstallationsForRunnerRequest, ListGithubInstallationsRequest,
};
use serde::Serialize;

use crate::config::{RunArgs, RunConfig, Secret, Source, Sources, check_writable_dir};

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
    key: String,
    value: String,
    source: String,
    /// Printed even when it is the default (the human report shows the
    /// others only when given).
    #[serde(skip)]
    always: bool,
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
    let secret_from_env = env_secret.is_some();
    let mut checks = Vec::new();
    let mut settings = Vec::new();
    let resolved = RunConfig::resolve_sourced(args.run.clone(), matches.as_ref(), env_secret);
    match &resolved {
        Ok((config, sources)) => {
            settings = describe_settings(config, sources, secret_from_env);
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
    if let Ok((config, sources)) = &resolved {
        checks.push(protocol(config));
        checks.push(control_plane(config).await);
        checks.push(git_credentials(config));
        checks.push(directory(
            "state dir",
            "state_dir",
            &config.state_dir,
            sources,
        ));
        checks.push(directory(
            "workspace root",
            "workspace_root",
            &config.workspace_root,
            sources,
        ));
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
        if s.always || s.source != "default" {
            let _ = writeln!(out, "  {:<28} {}  ({})", s.key, s.value, s.source);
        }
    }
    let hidden = report
        .settings
        .iter()
        .filter(|s| !s.always && s.source == "default")
        .count();
    if hidden > 0 {
        let _ = writeln!(
            out,
            "  ({hidden} more at their defaults; --json lists them)"
        );
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

/// Every setting with its value and source, as recorded while merging:
/// first the ones that matter most, with their resolved values, then the
/// rest as given (or their documented default).
fn describe_settings(config: &RunConfig, sources: &Sources, secret_from_env: bool) -> Vec<Setting> {
    let setting = |key: &str, value: String| Setting {
        key: key.to_owned(),
        value,
        source: sources.source(key).to_string(),
        always: true,
    };
    let proxy_source = match sources.source("proxy") {
        Source::Default if config.proxy.is_set() => "env HTTPS_PROXY/HTTP_PROXY/NO_PROXY".into(),
        other => other.to_string(),
    };
    let mut out = vec![
        setting(
            "control_plane_url",
            format!(
                "{}{}",
                config.control_plane.origin, config.control_plane.path_prefix
            ),
        ),
        Setting {
            key: "secret".into(),
            // Never the secret itself.
            value: if config.secret.is_some() {
                "set".into()
            } else {
                "none".into()
            },
            // A secret file wins over AGENT_RUNNER_SECRET wherever it is set.
            source: match &config.secret_file {
                Some(p) => format!(
                    "file {} (secret_file: {})",
                    p.display(),
                    sources.source("secret_file")
                ),
                None if secret_from_env => "env AGENT_RUNNER_SECRET".into(),
                None => "none".into(),
            },
            always: true,
        },
        setting("state_dir", config.state_dir.display().to_string()),
        setting(
            "workspace_root",
            config.workspace_root.display().to_string(),
        ),
        setting(
            "sdk",
            if config.sdks.is_empty() {
                "every built-in SDK".into()
            } else {
                config.sdks.join(",")
            },
        ),
        setting(
            "health_addr",
            config
                .health
                .map(|h| h.addr.to_string())
                .unwrap_or_else(|| "off".into()),
        ),
        setting("sandbox", config.sandbox.mode.to_string()),
        Setting {
            source: proxy_source,
            ..setting("proxy", config.proxy.describe())
        },
    ];
    for def in crate::config::defs::definitions() {
        if out.iter().any(|s| s.key == def.key) {
            continue;
        }
        let given = sources.get(&def.key);
        let value = match &given.text {
            Some(text) => without_credentials(text),
            None if given.source == Source::Default => {
                def.default.as_deref().unwrap_or("none").replace('`', "")
            }
            None => "(given)".to_owned(),
        };
        out.push(Setting {
            key: def.key.clone(),
            value,
            source: given.source.to_string(),
            always: def.key == "config" && given.source != Source::Default,
        });
    }
    out
}

/// `scheme://user:pass@host…` with the user and password left out.
fn without_credentials(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://<credentials>@{}", &rest[at + 1..]),
        None => text.to_owned(),
    }
}

/// Reachable, TLS valid, credentials accepted: one read-only RPC.
/// The protocol version `run` would speak.
fn protocol(config: &RunConfig) -> Check {
    let detail = match config.protocol {
        crate::config::Protocol::V02 => "0.2 (agents and threads)".to_owned(),
        crate::config::Protocol::V07 => format!(
            "0.7 (thread-only; agent API URL: {})",
            config.agent_api_url.as_deref().unwrap_or("none")
        ),
    };
    check("protocol", Outcome::Ok, detail, None)
}

/// Where the agents' git credentials would come from.
fn git_credentials(config: &RunConfig) -> Check {
    let name = "git credentials";
    match (&config.github.app, config.protocol) {
        (Some(app), _) => check(
            name,
            Outcome::Ok,
            format!("the runner's own GitHub App {}", app.app_id),
            None,
        ),
        (None, crate::config::Protocol::V02) => {
            check(name, Outcome::Ok, "the control plane's GitHub RPCs", None)
        }
        (None, crate::config::Protocol::V07) => check(
            name,
            Outcome::Warn,
            "none: protocol 0.7 has no GitHub RPCs and no GitHub App is configured (public repositories only)",
            Some(
                "set github_app_id and github_app_private_key_file for private repositories".into(),
            ),
        ),
    }
}

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
    let answer = tokio::time::timeout(PROBE_TIMEOUT, probe(&mut client)).await;
    let tls = if config.control_plane.tls {
        ", TLS valid"
    } else {
        " (plaintext)"
    };
    // 0.7 has no read-only RPC: any gRPC answer shows the control plane
    // reachable; the path and credentials are checked by registration.
    if config.protocol == crate::config::Protocol::V07
        && let Ok((_, Err(status))) = &answer
        && status.code() == tonic::Code::Unimplemented
    {
        return check(
            name,
            Outcome::Warn,
            format!(
                "{url} reachable{tls}; protocol 0.7 has no read-only RPC, so the path and credentials are checked only when `run` registers"
            ),
            None,
        );
    }
    match answer {
        Err(_) => check(
            name,
            Outcome::Fail,
            format!("{url}: no answer within {PROBE_TIMEOUT:?}"),
            Some("is the address reachable from here (firewall, proxy)?".into()),
        ),
        Ok((_, Ok(()))) => check(
            name,
            Outcome::Ok,
            format!("{url} reachable{tls}, credentials accepted"),
            None,
        ),
        Ok((rpc, Err(status))) => match status.code() {
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
            // Neither name: no control plane at this path. `run` fails to
            // register for the same reason, said the same way.
            tonic::Code::Unimplemented => check(
                name,
                Outcome::Fail,
                crate::link::problem::describe(&url, rpc, &status, false),
                Some("fix control_plane_url: `run` could not register there either".into()),
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

/// The read-only probe: `ListGithubInstallationsForRunner`, else (when the
/// control plane does not serve it) its later name; which was called last.
async fn probe(
    client: &mut crate::host::client::Client,
) -> (&'static str, Result<(), tonic::Status>) {
    match client
        .list_github_installations_for_runner(ListGithubInstallationsForRunnerRequest {})
        .await
    {
        Err(status) if status.code() == tonic::Code::Unimplemented => {}
        other => return ("ListGithubInstallationsForRunner", other.map(drop)),
    }
    (
        "ListGithubInstallations",
        client
            .list_github_installations(ListGithubInstallationsRequest {})
            .await
            .map(drop),
    )
}

/// Exists (or can be made), writable (the check `run` makes at start-up),
/// with room left.
fn directory(name: &str, key: &'static str, dir: &Path, sources: &Sources) -> Check {
    if let Err(e) = check_writable_dir(key, dir) {
        return check(
            name,
            Outcome::Fail,
            sources.locate(e).to_string(),
            Some("make it writable by the runner's user (chown/chmod), or set it elsewhere".into()),
        );
    }
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
            Some(if why.contains("signal scoping") {
                "run agents as another uid with --agent-uid (root runner), use a kernel with Landlock ABI 6 (Linux 6.12), or set --sandbox best-effort".into()
            } else if why.contains("cgroup") {
                "run the runner as root with a writable cgroupfs, or delegate it a cgroup v2 subtree (systemd Delegate=yes); or set --sandbox best-effort".into()
            } else {
                "run on a kernel with Landlock, or set --sandbox best-effort".into()
            }),
        ),
        None if !sandbox.missing.is_empty() => check("sandbox", Outcome::Warn, detail, None),
        None => check("sandbox", Outcome::Ok, detail, None),
    }
}

#[cfg(test)]
mod tests {
    use mock_control_plane::{GithubRpcNames, MockConfig, MockControlPlane};

    use super::*;

    fn config(url: &str) -> RunConfig {
        RunConfig::resolve(
            RunArgs {
                control_plane_url: Some(url.to_owned()),
                ..Default::default()
            },
            None,
        )
        .unwrap()
    }

    /// A URL without the control plane's path prefix fails the check, with
    /// the hint `run` gives when it cannot register there.
    #[tokio::test]
    async fn a_wrong_path_prefix_fails_as_run_would() {
        let cp = MockControlPlane::start(MockConfig::default().with_path_prefix("/grpc"))
            .await
            .unwrap();
        let good = control_plane(&config(&cp.url())).await;
        assert_eq!(good.outcome, Outcome::Ok, "{good:?}");
        let bare = cp.url().trim_end_matches("/grpc").to_owned();
        let bad = control_plane(&config(&bare)).await;
        assert_eq!(bad.outcome, Outcome::Fail, "{bad:?}");
        let run_says = crate::link::problem::hint(
            &bare,
            "ListGithubInstallations",
            tonic::Code::Unimplemented,
            "",
        )
        .unwrap();
        assert!(bad.detail.contains(&run_says), "{bad:?}");
        assert!(bad.detail.contains("check its path"), "{bad:?}");
        assert!(cp.registrations().is_empty());
    }

    /// A control plane that serves only the later names passes.
    #[tokio::test]
    async fn the_later_rpc_names_are_probed_too() {
        let cp = MockControlPlane::start(
            MockConfig::default().with_github_rpc_names(GithubRpcNames::Later),
        )
        .await
        .unwrap();
        let c = control_plane(&config(&cp.url())).await;
        assert_eq!(c.outcome, Outcome::Ok, "{c:?}");
    }

    #[test]
    fn credentials_in_values_are_left_out() {
        assert_eq!(
            without_credentials("http://u:p@proxy:3128/x"),
            "http://<credentials>@proxy:3128/x"
        );
        assert_eq!(without_credentials("http://h:1/a@b"), "http://h:1/a@b");
        assert_eq!(without_credentials("/a@b"), "/a@b");
    }

    #[test]
    fn settings_come_with_their_recorded_sources() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(&file, "drain_timeout = \"45s\"\n").unwrap();
        let args = RunArgs {
            control_plane_url: Some("http://x:1".into()),
            config: Some(file.clone()),
            ..Default::default()
        };
        let (config, sources) = RunConfig::resolve_sourced(args, None, None).unwrap();
        let settings = describe_settings(&config, &sources, true);
        let find = |key: &str| settings.iter().find(|s| s.key == key).unwrap();
        assert_eq!(find("control_plane_url").source, "flag --control-plane-url");
        assert_eq!(find("secret").source, "env AGENT_RUNNER_SECRET");
        let drain = find("drain_timeout");
        assert_eq!(drain.value, "45s");
        assert_eq!(drain.source, format!("file {}", file.display()));
        let turns = find("max_concurrent_turns");
        assert_eq!(
            (turns.value.as_str(), turns.source.as_str()),
            ("256", "default")
        );
        let text = human(&Report {
            would_start: true,
            settings,
            checks: Vec::new(),
        });
        assert!(text.contains("drain_timeout"), "{text}");
        assert!(!text.contains("max_concurrent_turns"), "{text}");
        assert!(text.contains("more at their defaults"), "{text}");
    }
}
