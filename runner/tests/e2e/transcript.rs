//! Transcripts and `agent-runner logs` through the real binary:
//! a thread's updates land in its transcript (secrets masked), `logs`
//! prints them readably and as JSON, `--follow` shows new ones as they
//! come, and deleting the thread removes the transcript.

use std::time::Duration;

use agent_runner_proto::runner::DeleteThreadRequest;
use agent_runner_proto::runner::server_message::Request;
use tokio::io::AsyncBufReadExt as _;

use crate::support::*;

fn logs_cmd(runner: &RunnerProc, thread: &str) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(runner_bin());
    c.arg("logs")
        .arg(thread)
        .arg("--state-dir")
        .arg(runner.dirs.path().join("state"))
        .env_remove("AGENT_RUNNER_STATE_DIR");
    c
}

async fn logs_until(runner: &RunnerProc, thread: &str, args: &[&str], needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let out = logs_cmd(runner, thread).args(args).output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains(needle) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {needle:?} in `logs {}`:\n{text}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_threads_updates_are_its_transcript_and_go_with_it() {
    let (cp, runner) = agent_with(|o| o).await;
    let thread = create_thread(&cp, "a", "t").await;
    // The thread-created reply (sent by the command handler, not the
    // thread's task) is in the transcript too.
    logs_until(&runner, &thread, &[], "thread_update  [t]  status=Ready").await;
    send(
        &cp,
        "m",
        user_message("a", &thread, "run echo hello-transcript", false),
    )
    .await;
    turn_completed(&cp, "m").await;

    let text = logs_until(&runner, &thread, &[], "turn_update  [m]  status=Completed").await;
    assert!(text.contains("hello-transcript"), "{text}");
    assert!(text.contains("item_update  [m]"), "{text}");
    let json = logs_until(&runner, &thread, &["--json"], "turn_update").await;
    for line in json.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["kind"].is_string() && v["ts_ms"].is_u64(), "{line}");
    }

    // --follow prints a later turn as it happens.
    let mut follow = logs_cmd(&runner, &thread)
        .arg("--follow")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(follow.stdout.take().unwrap()).lines();
    send(
        &cp,
        "m2",
        user_message("a", &thread, "run echo second-turn", false),
    )
    .await;
    let seen = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("second-turn") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "--follow never printed the second turn");
    let _ = follow.kill().await;

    // Deleting the thread removes its transcript.
    send(
        &cp,
        "d",
        Request::DeleteThreadRequest(DeleteThreadRequest {
            agent_id: "a".into(),
            thread_id: thread.clone(),
        }),
    )
    .await;
    reply(&cp, "d").await;
    let file = runner
        .dirs
        .path()
        .join("state/transcripts")
        .join(format!("{thread}.jsonl"));
    let deadline = tokio::time::Instant::now() + WAIT;
    while file.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} still there",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = logs_cmd(&runner, &thread).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no transcript"));
}
