//! The admin socket through the real binary: `ps` shows a
//! running turn's process tree, `threads` its state, `kill --tree`
//! interrupts the turn (the control plane sees it end) and kills the
//! processes; the socket is 0600 in the state dir.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// `agent-runner ARGS --state-dir <runner's>`: whether it succeeded, and
/// its stdout and stderr.
pub(crate) async fn admin(runner: &RunnerProc, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(runner_bin())
        .args(args)
        .arg("--state-dir")
        .arg(runner.dirs.path().join("state"))
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn ps_threads_and_kill_through_the_admin_socket() {
    let (cp, runner) = agent_with(|o| o).await;
    let thread = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m", "a", &thread, "run sleep 300").await;

    let socket = runner.dirs.path().join("state/admin.sock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "admin socket mode");

    // ps: the thread, its turn and the sleep under it.
    let deadline = tokio::time::Instant::now() + WAIT;
    let sleeper = loop {
        let (ok, text) = admin(&runner, &["ps", "--json"]).await;
        assert!(ok, "{text}");
        let v: Value = serde_json::from_str(text.trim()).unwrap();
        let t = v["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["thread_id"] == thread.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{v:#}"));
        let found = t["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["command"].as_str().unwrap_or("").contains("sleep 300"))
            .cloned();
        if let Some(p) = found {
            assert!(t["turn"]["turn_id"].is_string(), "{t:#}");
            assert_eq!(t["sdk"], "scripted");
            assert!(p["rss_kib"].is_u64() && p["age_s"].is_f64(), "{p:#}");
            break p["pid"].as_u64().unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no sleep in ps: {t:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (ok, human) = admin(&runner, &["ps"]).await;
    assert!(
        ok && human.contains("sleep 300") && human.contains(&thread),
        "{human}"
    );

    let (ok, text) = admin(&runner, &["threads", "--json"]).await;
    assert!(ok, "{text}");
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["agents"][0]["agent_id"], "a");
    assert_eq!(v["agents"][0]["threads"][0]["state"], "running", "{v:#}");

    // kill --tree: the turn ends as an interrupt would end it, the sleep goes.
    let (ok, text) = admin(&runner, &["kill", &thread, "--tree"]).await;
    assert!(ok && text.contains("interrupted"), "{text}");
    // The interrupt carried no request id (as a control plane's may not):
    // the turn's end is the thread's COMPLETED TurnUpdate.
    cp.wait_for(
        |m| is_turn(m, agent_runner_proto::runner::TurnStatus::Completed),
        WAIT,
    )
    .await
    .expect("the interrupted turn ends");
    test_kit::wait::until(
        || crate::sandbox::gone(i32::try_from(sleeper).unwrap()),
        || format!("sleep {sleeper} survived kill --tree"),
    )
    .await;
    let (ok, text) = admin(&runner, &["kill", "no-such-thread"]).await;
    assert!(!ok && text.contains("no thread"), "{text}");
}
