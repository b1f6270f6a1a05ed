//! Tests across the settings: the sources recorded while merging, errors
//! that say where a bad value came from, and documented defaults that are
//! the real ones.

use clap::FromArgMatches as _;

use super::defs::{command, definitions};
use super::file::file_command;
use super::*;

/// `run`'s flags parsed from `argv` (no variables read), with the matches.
fn parse(argv: &[&str]) -> (RunArgs, clap::ArgMatches) {
    let matches = file_command().try_get_matches_from(argv).unwrap();
    (RunArgs::from_arg_matches(&matches).unwrap(), matches)
}

fn write_file(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("runner.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn each_setting_says_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "control_plane_url = \"http://file:1\"\nstate_dir = \"/from/file\"\nsdk = [\"scripted\", \"codex\"]\nsandbox_nofile = 99\n",
    );
    let config_flag = format!("--config={}", file.display());
    let (args, matches) = parse(&[&config_flag, "--state-dir=/from/flag", "--sandbox=off"]);
    let (config, sources) = RunConfig::resolve_sourced(args, Some(&matches), None).unwrap();
    assert_eq!(config.state_dir, PathBuf::from("/from/flag"));
    assert_eq!(config.control_plane.origin, "http://file:1");
    assert_eq!(config.sdks, ["scripted", "codex"]);
    assert_eq!(config.sandbox.rlimits.nofile, Some(99));

    let state = sources.get("state_dir");
    assert_eq!(state.source, Source::Flag("state-dir".into()));
    assert_eq!(state.text.as_deref(), Some("/from/flag"));
    assert_eq!(sources.source("sandbox").to_string(), "flag --sandbox");
    assert_eq!(sources.source("config").to_string(), "flag --config");
    let url = sources.get("control_plane_url");
    assert_eq!(url.source, Source::File(file.clone()));
    assert_eq!(url.text.as_deref(), Some("http://file:1"));
    assert_eq!(
        sources.source("sdk").to_string(),
        format!("file {}", file.display())
    );
    assert_eq!(sources.get("sdk").text.as_deref(), Some("scripted,codex"));
    assert_eq!(*sources.source("drain_timeout"), Source::Default);
    assert_eq!(sources.get("drain_timeout").text, None);
    // Every setting has an entry.
    assert_eq!(sources.iter().count(), definitions().len());
}

#[test]
fn a_bad_value_names_its_key_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "agent_uid = \"nope\"\n");
    let resolve = |argv: &[&str]| {
        let (args, matches) = parse(argv);
        match RunConfig::resolve_sourced(args, Some(&matches), None) {
            Ok(_) => panic!("{argv:?} resolved"),
            Err(e) => e.to_string(),
        }
    };
    let url = "--control-plane-url=http://x:1";
    let err = resolve(&[url, "--sandbox=strict"]);
    assert!(err.starts_with("sandbox: "), "{err}");
    assert!(err.ends_with("(from flag --sandbox)"), "{err}");

    let config_flag = format!("--config={}", file.display());
    let err = resolve(&[url, &config_flag]);
    assert!(err.starts_with("agent_uid: "), "{err}");
    assert!(err.ends_with(&format!("(in {})", file.display())), "{err}");

    let err = resolve(&["--control-plane-url=ftp://x"]);
    assert!(err.starts_with("control_plane_url: "), "{err}");
    assert!(err.ends_with("(from flag --control-plane-url)"), "{err}");

    // A default that conflicts with a setting given: the key, no source.
    let err = resolve(&[url, "--reconnect-min-delay=1m"]);
    assert!(
        err.starts_with("reconnect_min_delay: must be above zero"),
        "{err}"
    );
}

/// The `Default: `x`` of a setting's help is its real default: giving that
/// value resolves to the same configuration as giving nothing.
#[test]
fn documented_defaults_are_the_defaults() {
    // Defaults that depend on another setting, or whose value marks them
    // as given (health_addr: set by the operator is fatal when taken).
    let skip = ["github_api_url", "github_token_permissions", "health_addr"];
    let base = [
        "--control-plane-url=http://x:1",
        "--state-dir=/state",
        "--workspace-root=/ws",
    ];
    let resolve = |extra: Option<String>| {
        let mut argv: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        argv.extend(extra);
        let matches = file_command().try_get_matches_from(&argv).unwrap();
        let args = RunArgs::from_arg_matches(&matches).unwrap();
        format!("{:?}", RunConfig::resolve(args, None).unwrap())
    };
    let nothing = resolve(None);
    let mut checked = Vec::new();
    for d in definitions() {
        let Some(default) = d.default.as_deref() else {
            continue;
        };
        let Some(literal) = default
            .strip_prefix('`')
            .and_then(|rest| rest.split_once('`'))
            .map(|(literal, _)| literal)
        else {
            continue;
        };
        if skip.contains(&d.key.as_str()) {
            continue;
        }
        let given = resolve(Some(format!("--{}={literal}", d.long)));
        assert_eq!(
            given, nothing,
            "{}: the documented default `{literal}`",
            d.key
        );
        checked.push(d.key);
    }
    for key in [
        "drain_timeout",
        "max_concurrent_turns",
        "claude_models",
        "sandbox",
        "log_level",
    ] {
        assert!(
            checked.iter().any(|k| k == key),
            "{key} not checked: {checked:?}"
        );
    }
}

/// `--help` groups the flags by section, the same sections as the docs.
#[test]
fn help_shows_the_sections() {
    let help = command().render_long_help().to_string();
    for heading in [
        "Connection:",
        "Directories and limits:",
        "SDKs:",
        "GitHub:",
        "Agent sandbox:",
        "Observability:",
    ] {
        assert!(help.contains(heading), "{heading}\n{help}");
    }
    assert!(help.contains("[env: AGENT_RUNNER_DRAIN_TIMEOUT"), "{help}");
}

#[test]
fn engine_tools_needing_approval_are_checked_and_reach_the_adapter() {
    let (args, matches) = parse(&[
        "--control-plane-url=http://cp:1",
        "--code-agent-approve-tools=bash, write",
        "--approval-timeout=2m",
    ]);
    let (config, _) = RunConfig::resolve_sourced(args, Some(&matches), None).unwrap();
    let engine = &config.sdk_options.code_agent;
    assert_eq!(engine.approve_tools, ["bash", "write"]);
    assert_eq!(engine.approval_timeout, std::time::Duration::from_secs(120));
    let (args, matches) = parse(&["--control-plane-url=http://cp:1"]);
    let (config, _) = RunConfig::resolve_sourced(args, Some(&matches), None).unwrap();
    assert!(config.sdk_options.code_agent.approve_tools.is_empty());
    let (args, matches) = parse(&[
        "--control-plane-url=http://cp:1",
        "--code-agent-approve-tools=rm -rf",
    ]);
    let err = RunConfig::resolve_sourced(args, Some(&matches), None).unwrap_err();
    assert!(
        err.to_string().contains("code_agent_approve_tools"),
        "{err}"
    );
}
