//! Process lifecycle: restart with state, drain on SIGTERM, config errors,
//! the demo and `sdk list`.

use crate::support::*;

#[tokio::test]
async fn sigkill_restart_keeps_state_and_reports_the_lost_turn() {
    let (cp, mut r) = agent_with(|opts| opts).await;
    let t = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m", "a", &t, "say first\nsleep 60000").await;
    r.signal(libc::SIGKILL);
    r.wait_exit(WAIT).await;
    let dirs = r.dirs.clone();
    let _r2 = RunnerProc::start_in(RunnerOpts::new(cp.url()), dirs);
    // The lost turn: RequestError saying the runner restarted, then COMPLETED.
    turn_completed(&cp, "m").await;
    let msgs = replies(&cp, "m");
    let n = msgs.len();
    let err = error_text(&msgs[n - 2]).expect("an error before COMPLETED");
    assert!(err.contains("restarted"), "{err}");
    // The agent and thread still work.
    create_agent(&cp, "a").await;
    send(&cp, "m2", user_message("a", &t, "say again", false)).await;
    turn_completed(&cp, "m2").await;
}

#[tokio::test]
async fn sigterm_drains_running_turns_then_exits_cleanly() {
    let (cp, mut r) = agent_with(|opts| opts.arg("--drain-timeout").arg("20s")).await;
    let t1 = create_thread(&cp, "a", "t1").await;
    let t2 = create_thread(&cp, "a", "t2").await;
    start_turn(&cp, "m", "a", &t1, "sleep 1000\nsay finished").await;
    r.signal(libc::SIGTERM);
    // New turns are refused while draining.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    send(&cp, "late", user_message("a", &t2, "say hi", false)).await;
    assert!(expect_error(&cp, "late").await.contains("draining"));
    // The running turn finishes normally, then the runner exits 0.
    turn_completed(&cp, "m").await;
    assert!(said(&replies(&cp, "m")).contains(&"finished".to_owned()));
    assert_eq!(r.wait_exit(WAIT).await, Some(0), "{}", r.logs());
    cp.wait_disconnected(WAIT).await.unwrap();
}

#[tokio::test]
async fn drain_timeout_interrupts_turns_and_second_signal_exits_at_once() {
    let (cp, mut r) = agent_with(|opts| opts.arg("--drain-timeout").arg("200ms")).await;
    let t = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m", "a", &t, "run sleep 60\nsay never").await;
    r.signal(libc::SIGTERM);
    turn_completed(&cp, "m").await;
    assert_eq!(r.wait_exit(WAIT).await, Some(0), "{}", r.logs());
    // The turn cut short says so, and so does its command.
    let msgs = replies(&cp, "m");
    let errors: Vec<&str> = msgs.iter().filter_map(error_text).collect();
    assert!(
        errors.iter().any(|e| e.contains("drain timeout")),
        "{errors:?}"
    );
    assert_eq!(command_outputs(&msgs), ["[interrupted]"]);

    // Second signal: no waiting for the drain.
    let (cp, mut r) = agent_with(|opts| opts.arg("--drain-timeout").arg("60s")).await;
    let t = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m", "a", &t, "sleep 60000").await;
    r.signal(libc::SIGTERM);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    r.signal(libc::SIGTERM);
    let code = r.wait_exit(WAIT).await;
    assert!(matches!(code, Some(c) if c != 0), "{code:?}");
}

#[tokio::test]
async fn malformed_config_exits_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runner.toml");
    std::fs::write(
        &file,
        "control_plane_url = \"http://127.0.0.1:1\"\nmax_concurrent_turns = \"lots\"\n",
    )
    .unwrap();
    let out = tokio::process::Command::new(runner_bin())
        .args(["run", "--config", file.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_concurrent_turns"), "{err}");

    let out = tokio::process::Command::new(runner_bin())
        .args(["run", "--control-plane-url", "ftp://x"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("control_plane_url"));
}

/// A directory start-up must make but cannot (a file stands there) stops
/// the runner with the path named, for the ones made on the blocking pool
/// beside the databases as for the rest.
#[tokio::test]
async fn start_up_dirs_that_cannot_be_made_are_named() {
    let run = |state: &std::path::Path, workspaces: &std::path::Path| {
        let mut cmd = tokio::process::Command::new(runner_bin());
        cmd.args(["run", "--control-plane-url", "http://127.0.0.1:1"])
            .arg("--state-dir")
            .arg(state)
            .arg("--workspace-root")
            .arg(workspaces);
        async move {
            let out = cmd.output().await.unwrap();
            assert!(!out.status.success());
            String::from_utf8_lossy(&out.stderr).into_owned()
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let (state, workspaces) = (dir.path().join("state"), dir.path().join("ws"));
    std::fs::create_dir(&state).unwrap();
    let transcripts = state.join("transcripts");
    std::fs::write(&transcripts, "not a dir").unwrap();
    let err = run(&state, &workspaces).await;
    assert!(
        err.contains(&format!("transcripts dir {}", transcripts.display())),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (state, workspaces) = (dir.path().join("state"), dir.path().join("ws"));
    std::fs::write(&workspaces, "not a dir").unwrap();
    let err = run(&state, &workspaces).await;
    assert!(
        err.contains(&format!("workspace_root {}", workspaces.display())),
        "{err}"
    );
}

/// A bad value says where it came from: the environment variable, the
/// config file (with a guess for a misspelt key), or the flag.
#[tokio::test]
async fn bad_values_say_where_they_came_from() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = tokio::process::Command::new(runner_bin());
        cmd.arg("run").args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        async move {
            let out = cmd.output().await.unwrap();
            assert!(!out.status.success());
            String::from_utf8_lossy(&out.stderr).into_owned()
        }
    };
    let url = ["--control-plane-url", "http://127.0.0.1:1"];
    let err = run(&url, &[("AGENT_RUNNER_DRAIN_TIMEOUT", "abc")]).await;
    assert!(
        err.contains("in the environment variable AGENT_RUNNER_DRAIN_TIMEOUT"),
        "{err}"
    );
    let err = run(
        &[&url[..], &["--drain-timeout", "abc"]].concat(),
        &[("AGENT_RUNNER_DRAIN_TIMEOUT", "abc")],
    )
    .await;
    assert!(err.contains("'--drain-timeout"), "{err}");
    assert!(!err.contains("environment variable"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runner.toml");
    let path = file.to_str().unwrap();
    std::fs::write(&file, "drain_timeout = \"3x\"\n").unwrap();
    let err = run(&[&url[..], &["--config", path]].concat(), &[]).await;
    assert!(err.contains("drain_timeout: "), "{err}");
    assert!(err.contains(&format!("(in {path})")), "{err}");
    std::fs::write(&file, "drain_timout = \"3s\"\n").unwrap();
    let err = run(&[&url[..], &["--config", path]].concat(), &[]).await;
    assert!(err.contains("did you mean `drain_timeout`?"), "{err}");
}

#[tokio::test]
async fn sdk_list_prints_adapters_and_models() {
    // Like run, it reads the default state dir under HOME.
    let home = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(runner_bin())
        .args(["sdk", "list"])
        .env("HOME", home.path())
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("scripted  ready"), "{text}");
    assert!(
        text.contains("scripted-fast  reasoning: low, high"),
        "{text}"
    );
    assert!(text.contains("scripted-slow"), "{text}");
}

/// `sdk list` shows what `run` would register with the same settings: the
/// SDKs asked for, with the CLI given by flag, env or file (it used to
/// ignore them all and probe the defaults).
#[tokio::test]
async fn sdk_list_takes_the_settings_of_run() {
    let home = tempfile::tempdir().unwrap();
    let list = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = tokio::process::Command::new(runner_bin());
        cmd.args(["sdk", "list"])
            .args(args)
            .env("HOME", home.path())
            .env_remove("AGENT_RUNNER_CODEX_BIN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        async move {
            let out = cmd.output().await.unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let text = list(
        &["--sdk", "codex", "--codex-bin", "/nonexistent/flag/codex"],
        &[],
    )
    .await;
    assert!(text.contains("codex  unconfigured"), "{text}");
    assert!(text.contains("`/nonexistent/flag/codex`"), "{text}");
    assert!(
        !text.contains("scripted"),
        "only the SDKs asked for:\n{text}"
    );
    let text = list(
        &["--sdk", "codex"],
        &[("AGENT_RUNNER_CODEX_BIN", "/nonexistent/env/codex")],
    )
    .await;
    assert!(text.contains("`/nonexistent/env/codex`"), "{text}");
    let file = home.path().join("runner.toml");
    std::fs::write(
        &file,
        "sdk = [\"codex\"]\ncodex_bin = \"/nonexistent/file/codex\"\n",
    )
    .unwrap();
    let text = list(&["--config", file.to_str().unwrap()], &[]).await;
    assert!(text.contains("`/nonexistent/file/codex`"), "{text}");
}

/// A demo whose turn fails exits non-zero, saying why (it exited 0).
#[tokio::test]
async fn a_demo_whose_turn_fails_exits_non_zero() {
    let out = tokio::process::Command::new(runner_bin())
        .arg("demo")
        .arg("--script-text")
        .arg("say before\nfail the model refused")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("the model refused"), "{stderr}");
}

/// `demo --protocol 0.7` runs the same turn over protocol 0.7: a thread
/// named by its model, no agent, its cli_secret masked in every update.
#[tokio::test]
async fn the_demo_speaks_protocol_07() {
    let out = tokio::process::Command::new(runner_bin())
        .args(["demo", "--protocol", "0.7", "--script-text"])
        .arg("say hello over 0.7\nrun test -n \"$AGENT_API_TOKEN\" && echo token-set")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("protocol 0.7"), "{stdout}");
    assert!(!stdout.contains("AgentUpdate"), "{stdout}");
    assert!(stdout.contains("hello over 0.7"), "{stdout}");
    assert!(stdout.contains("token-set"), "{stdout}");
    assert!(!stdout.contains("demo-cli-secret"), "{stdout}");
}

/// `--sdk` picks the demo's SDK; one that cannot run is an error, not a
/// silent switch to the scripted SDK, and an option the SDK would ignore
/// is refused before anything starts.
#[tokio::test]
async fn demo_sdk_choice_is_honoured_or_refused() {
    let demo = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(runner_bin());
        cmd.arg("demo")
            .args(args)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL");
        async move { cmd.output().await.unwrap() }
    };
    let out = demo(&["--sdk", "code-agent"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--sdk code-agent: code-agent is not ready"),
        "{stderr}"
    );
    let out = demo(&["--sdk", "code-agent", "--script-text", "say x"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--script is for the scripted SDK"),
        "{stderr}"
    );
    let out = demo(&["--sdk", "scripted", "--script-text", "say picked"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("picked"), "{stdout}");
}

#[tokio::test]
async fn demo_prints_a_live_transcript() {
    // Without a model provider in the environment the demo is the scripted one.
    let out = tokio::process::Command::new(runner_bin())
        .arg("demo")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "AgentUpdate",
        "ThreadUpdate",
        "USER_MESSAGE",
        "AGENT_MESSAGE",
        "REASONING",
        "COMMAND_EXECUTION",
        "COMPLETED",
    ] {
        assert!(text.contains(needle), "missing {needle} in:\n{text}");
    }
}
