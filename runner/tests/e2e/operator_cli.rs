//! The operator's commands through the real binary, one grammar throughout
//! ("A house the next engineer can live in", items 8 and 9): `threads`
//! lists threads and `ps` processes, in aligned columns with rounded
//! durations; `interrupt` stops a turn and `kill` ends a thread's
//! processes; every one finds the runner through `--config` as `run` does;
//! `logs --follow` ends when the thread is deleted; refused requests,
//! unusable SDKs and signals say so in the log; an OS error prints once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::{DeleteThreadRequest, TurnStatus};
use serde_json::Value;

use crate::support::*;

/// A config file naming `runner`'s state dir, as `run --config` would read
/// it; the clients below get only this file (no --state-dir, no env).
fn config_for(runner: &RunnerProc) -> PathBuf {
    let file = runner.dirs.path().join("runner.toml");
    let state = runner.dirs.path().join("state");
    std::fs::write(
        &file,
        format!("state_dir = {:?}\n", state.display().to_string()),
    )
    .unwrap();
    file
}

/// Runs `agent-runner ARGS --config FILE`; (success, stdout, stderr).
async fn cli(args: &[&str], config: &Path) -> (bool, String, String) {
    let out = tokio::process::Command::new(runner_bin())
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("AGENT_RUNNER_STATE_DIR")
        .env_remove("AGENT_RUNNER_CONFIG")
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The processes `ps --json` shows for `thread`, once `needle` is among
/// their command lines.
async fn processes_once(config: &Path, thread: &str, needle: &str) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (ok, out, err) = cli(&["ps", "--json"], config).await;
        assert!(ok, "{err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        let procs: Vec<Value> = v["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["thread_id"] == thread)
            .flat_map(|t| t["processes"].as_array().cloned().unwrap_or_default())
            .collect();
        let found = procs
            .iter()
            .filter(|p| p["command"].as_str().unwrap_or("").contains(needle))
            .count();
        if found > 0 {
            return procs;
        }
        assert!(tokio::time::Instant::now() < deadline, "no {needle}: {v:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn gone(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.contains(") Z"))
        .unwrap_or(true)
}

/// `threads` lists threads, `ps` processes (aligned, durations rounded),
/// `interrupt` ends the turn, `kill` the processes and says how many;
/// all through `--config` alone.
#[tokio::test]
async fn threads_ps_interrupt_and_kill_through_the_config_file() {
    let (cp, runner) = agent_with(|o| o).await;
    let config = config_for(&runner);
    let thread = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m1", "a", &thread, "run sleep 300").await;
    processes_once(&config, &thread, "sleep 300").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let (ok, threads, err) = cli(&["threads"], &config).await;
    assert!(ok, "{err}");
    let mut lines = threads.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("AGENT  SDK"), "{threads}");
    let row = lines
        .find(|l| l.contains(&thread))
        .unwrap_or_else(|| panic!("{threads}"));
    assert!(row.contains("running"), "{threads}");
    // FOR: right-aligned under its header, one rounded unit (`1.2s`).
    let end = header.find("FOR").unwrap() + 3;
    let cell = row[..end].rsplit(' ').next().unwrap();
    assert!(
        cell.ends_with('s') && cell.contains('.'),
        "{cell:?} in\n{threads}"
    );

    let (ok, ps, err) = cli(&["ps"], &config).await;
    assert!(ok, "{err}");
    let header = ps.lines().next().unwrap();
    assert!(header.starts_with("THREAD"), "{ps}");
    let command_at = header.find("COMMAND").unwrap();
    let pid_end = header.find("PID").unwrap() + 3;
    for line in ps.lines().skip(1) {
        assert!(line.starts_with(&thread), "{ps}");
        let pid_cell = &line[..pid_end];
        assert!(pid_cell.ends_with(|c: char| c.is_ascii_digit()), "{ps}");
        assert!(line.len() > command_at, "{ps}");
        assert!(!line.contains("us ") && !line.contains("ns"), "{ps}");
    }
    let root = ps.lines().nth(1).unwrap();
    assert!(
        !root[command_at..].starts_with(' '),
        "COMMAND aligned:\n{ps}"
    );

    let (ok, out, err) = cli(&["interrupt", &thread], &config).await;
    assert!(ok && out.contains("running turn interrupted"), "{out}{err}");
    // The interrupt carries no request id (as a control plane's may not):
    // the turn's end is the thread's COMPLETED TurnUpdate.
    cp.wait_for(|m| is_turn(m, TurnStatus::Completed), WAIT)
        .await
        .expect("the interrupted turn ends");

    // kill: ends every process of the thread and counts them.
    start_turn(
        &cp,
        "m2",
        "a",
        &thread,
        "run sleep 301 & sleep 301 & sleep 301 & wait",
    )
    .await;
    let procs = loop {
        let procs = processes_once(&config, &thread, "sleep 301").await;
        let sleeps = procs.iter().filter(|p| p["command"] == "sleep 301").count();
        if sleeps == 3 {
            break procs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mark = cp.received_count();
    let (ok, out, err) = cli(&["kill", &thread, "--json"], &config).await;
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["interrupted"], true, "{v}");
    assert!(v["killed"].as_u64().unwrap() >= 3, "{v} after {procs:#?}");
    cp.wait_for_after(mark, |m| is_turn(m, TurnStatus::Completed), WAIT)
        .await
        .expect("the killed turn ends");
    for p in &procs {
        let pid = p["pid"].as_u64().unwrap();
        let deadline = tokio::time::Instant::now() + WAIT;
        while !gone(pid) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{pid} survived kill"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let (ok, out, err) = cli(&["kill", &thread, "--tree"], &config).await;
    assert!(ok, "--tree still accepted: {err}");
    assert!(out.contains("no process was running"), "{out}");
}

/// `logs --follow` ends, exit 0 with a note, once the thread is deleted.
#[tokio::test]
async fn logs_follow_ends_when_the_thread_is_deleted() {
    let (cp, runner) = agent_with(|o| o).await;
    let config = config_for(&runner);
    let thread = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m1", "a", &thread, "say followed").await;
    turn_completed(&cp, "m1").await;
    let mut follow = tokio::process::Command::new(runner_bin())
        .args(["logs", &thread, "--follow", "--config"])
        .arg(&config)
        .env_remove("AGENT_RUNNER_STATE_DIR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(follow.try_wait().unwrap().is_none(), "follow keeps running");
    send(
        &cp,
        "d1",
        Request::DeleteThreadRequest(DeleteThreadRequest {
            agent_id: "a".into(),
            thread_id: thread.clone(),
        }),
    )
    .await;
    reply(&cp, "d1").await;
    let out = tokio::time::timeout(WAIT, follow.wait_with_output())
        .await
        .expect("logs --follow ends once the thread is deleted")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("followed"), "{stdout}");
    assert!(stderr.contains("was deleted"), "{stderr}");
}

/// A refused request leaves a WARN line naming it, its kind and why.
#[tokio::test]
async fn refused_requests_are_logged_at_warn() {
    let (cp, runner) = agent_with(|o| o).await;
    send(&cp, "bad-id", user_message("a", "../x", "say x", false)).await;
    expect_error(&cp, "bad-id").await;
    send(&cp, "no-thread", user_message("a", "nope", "say x", false)).await;
    expect_error(&cp, "no-thread").await;
    for rid in ["bad-id", "no-thread"] {
        let logs = runner.logs();
        let line = logs
            .lines()
            .find(|l| l.contains("request refused") && l.contains(rid))
            .unwrap_or_else(|| panic!("no refusal of {rid} in:\n{logs}"));
        assert!(line.contains("WARN"), "{line}");
        assert!(
            line.contains("kind=\"create_user_message_request\""),
            "{line}"
        );
    }
    let logs = runner.logs();
    assert!(logs.contains("unknown thread nope"), "{logs}");
}

/// An SDK that cannot work is a WARN with its fix; a misspelt one is
/// refused with the name it was probably meant to be.
#[tokio::test]
async fn unusable_and_misspelt_sdks_are_told() {
    let (_cp, runner) = connected_with(|o| {
        o.arg("--sdk")
            .arg("scripted,codex")
            .arg("--codex-bin")
            .arg("/nonexistent/e2e/codex")
    })
    .await;
    runner
        .wait_log("SDK codex is enabled but cannot take agents")
        .await;
    let logs = runner.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("SDK codex is enabled"))
        .unwrap();
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("npm install -g @openai/codex"), "{line}");

    let out = tokio::process::Command::new(runner_bin())
        .args([
            "run",
            "--control-plane-url",
            "http://127.0.0.1:9",
            "--sdk",
            "claude",
        ])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("did you mean claude-code?"), "{stderr}");
}

/// `demo --script FILE` runs what the file says; an unreadable file is an
/// error naming it.
#[tokio::test]
async fn demo_script_is_read_from_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("demo.script");
    std::fs::write(&script, "say read from the file\n").unwrap();
    let demo = |path: &Path| {
        let mut cmd = tokio::process::Command::new(runner_bin());
        cmd.args(["demo", "--sdk", "scripted", "--script"])
            .arg(path)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL");
        async move { cmd.output().await.unwrap() }
    };
    let out = demo(&script).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("read from the file"), "{stdout}");
    let missing = dir.path().join("missing.script");
    let out = demo(&missing).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("--script {}", missing.display())),
        "{stderr}"
    );
}

/// The first signal says how long the drain may take and that a second
/// forces; the second's lines are JSON like every other and count the
/// agent processes it really killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_say_the_deadline_and_count_what_they_kill() {
    let (cp, mut runner) = agent_with(|o| {
        o.arg("--log-format")
            .arg("json")
            .arg("--drain-timeout")
            .arg("5m")
    })
    .await;
    let config = config_for(&runner);
    let thread = create_thread(&cp, "a", "t").await;
    start_turn(
        &cp,
        "m1",
        "a",
        &thread,
        "run sleep 302 & sleep 302 & sleep 302 & wait",
    )
    .await;
    let procs = loop {
        let procs = processes_once(&config, &thread, "sleep 302").await;
        if procs.iter().filter(|p| p["command"] == "sleep 302").count() == 3 {
            break procs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    runner.signal(libc::SIGTERM);
    runner.wait_log("a second SIGTERM or SIGINT kills").await;
    let logs = runner.logs();
    let first = logs
        .lines()
        .find(|l| l.contains("a second SIGTERM or SIGINT kills"))
        .unwrap();
    let v: Value = serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert_eq!(v["drain_timeout"], "5m 0s", "{first}");
    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(WAIT).await, Some(130), "{}", runner.logs());
    let logs = runner.logs();
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            serde_json::from_str::<Value>(line).is_ok(),
            "not a JSON line: {line}"
        );
    }
    let killed = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["killed"].is_u64() && v["message"].as_str().unwrap_or("").contains("exiting"))
        .unwrap_or_else(|| panic!("no count of killed processes:\n{logs}"));
    assert_eq!(
        killed["killed"].as_u64().unwrap() as usize,
        procs.len(),
        "{killed} after {procs:#?}"
    );
}

/// An OS error is printed once, not once per layer that quoted it (the
/// state store's error quotes the io error it also names as its cause).
#[tokio::test]
async fn an_os_error_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // The state dir's lock file cannot be made: a directory is in its way.
    std::fs::create_dir_all(state.join("state.lock")).unwrap();
    let out = tokio::process::Command::new(runner_bin())
        .args(["run", "--control-plane-url", "http://127.0.0.1:9"])
        .arg("--state-dir")
        .arg(&state)
        .arg("--workspace-root")
        .arg(dir.path().join("ws"))
        .env("AGENT_RUNNER_HEALTH_ADDR", "")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("agent-runner: state_dir "), "{stderr}");
    assert_eq!(last.matches("(os error 21)").count(), 1, "{last}");
}

/// Every command that lists takes `--json`: `sdk list` and `github
/// installations` too (`threads` and `ps` above, `logs` and `status` in
/// their own tests).
#[tokio::test]
async fn listing_commands_take_json() {
    use mock_control_plane::github_api::{
        GithubApiConfig, MockGithubApi, MockInstallation, test_app_key,
    };
    let out = tokio::process::Command::new(runner_bin())
        .args(["sdk", "list", "--json", "--sdk", "scripted"])
        .env_remove("AGENT_RUNNER_CONFIG")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["sdks"][0]["name"], "scripted", "{v}");
    assert_eq!(v["sdks"][0]["status"], "ready", "{v}");
    assert!(v["sandbox"]["mode"].is_string(), "{v}");

    let api = MockGithubApi::start(
        GithubApiConfig::new(777, &test_app_key().public_pem)
            .with_installation(MockInstallation::new(11, "acme", &["acme/one"])),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = test_app_key()
        .write_private_key(dir.path(), "app.pem")
        .unwrap();
    let out = tokio::process::Command::new(runner_bin())
        .args([
            "github",
            "installations",
            "--json",
            "--github-app-id",
            "777",
        ])
        .arg("--github-app-private-key-file")
        .arg(&key)
        .arg("--github-api-url")
        .arg(api.url())
        .env_remove("AGENT_RUNNER_CONFIG")
        .env_remove("AGENT_RUNNER_SECRET")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["installations"][0]["id"], 11, "{v}");
    assert_eq!(v["installations"][0]["repositories"][0], "acme/one", "{v}");
    assert!(v["installations"][0]["token_expires_at"].is_string(), "{v}");
    for t in api.issued_tokens() {
        assert!(!stdout.contains(t.as_str()), "a token leaked: {stdout}");
    }
}
