//! PID 1 in a container: the runner does not reap orphans itself (a
//! `waitpid(-1)` loop would steal exit statuses from tokio's own children),
//! so the image runs it under tini. Both halves are shown in a fresh pid
//! namespace (`unshare --pid --fork`, root only): as PID 1 the runner warns
//! and an orphan an agent leaves behind stays a zombie; under tini, the
//! orphan is reaped. The Dockerfile's ENTRYPOINT is checked in dockerfile.rs.

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::{MockConfig, MockControlPlane};
use tokio::process::Child;

use crate::support::*;

/// The orphan's `$0`, to find it among the namespace's processes.
const ORPHAN_TAG: &str = "agent-runner-orphan-test";

fn can_unshare_pid() -> bool {
    if !is_root() {
        skip("not root: cannot create a pid namespace");
        return false;
    }
    let ok = have("unshare")
        && std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "true"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if !ok {
        skip("unshare --pid --fork failed: no pid namespaces here");
    }
    ok
}

struct Namespaced {
    child: Child,
    logs: Logs,
    dirs: tempfile::TempDir,
}

impl Namespaced {
    /// `unshare --pid --fork [init…] agent-runner run …`: the runner (or
    /// `init`) is PID 1 of a new pid namespace. `--kill-child`: when
    /// `unshare` is killed (on drop), so is that PID 1, and with it every
    /// process in the namespace.
    fn start(url: &str, init: &[&str]) -> Self {
        let dirs = tempfile::tempdir().unwrap();
        let mut cmd = tokio::process::Command::new("unshare");
        cmd.args(["--pid", "--fork", "--kill-child", "--"])
            .args(init)
            .arg(runner_bin())
            .arg("run")
            .arg("--control-plane-url")
            .arg(url)
            .arg("--state-dir")
            .arg(dirs.path().join("state"))
            .arg("--workspace-root")
            .arg(dirs.path().join("ws"))
            .arg("--health-addr")
            .arg("")
            .arg("--log-level")
            .arg("info")
            .env_remove("AGENT_RUNNER_SECRET");
        let (child, logs) = spawn_logged(&mut cmd);
        Self { child, logs, dirs }
    }

    fn logs(&self) -> String {
        self.logs.text()
    }

    /// Host pid of `unshare` (every namespaced process descends from it).
    fn root(&self) -> u32 {
        self.child.id().expect("running")
    }
}

impl Drop for Namespaced {
    /// `kill_on_drop` SIGKILLs `unshare`, and `--kill-child` the namespace:
    /// the runner gets no chance to remove its agents' cgroups. Kill it
    /// here, wait, and sweep them as its next start would (there is none:
    /// the state directory goes with this).
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.start_kill();
            let deadline = std::time::Instant::now() + WAIT;
            while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        agent_runner::sandbox::sweep_state_dir(&self.dirs.path().join("state"));
    }
}

/// Make an agent leave an orphan behind: a `run` step whose command starts
/// a process in its own session (out of reach of the step's group kill) and
/// exits. Returns the orphan's host pid, found while it sleeps.
async fn leave_an_orphan(cp: &MockControlPlane, ns: &Namespaced) -> u32 {
    cp.send_request(
        "a",
        Request::CreateAgentRequest(CreateAgentRequest {
            agent_id: "a".into(),
            agent_sdk: "scripted".into(),
        }),
    )
    .await
    .unwrap();
    cp.send_request(
        "t",
        Request::CreateThreadRequest(CreateThreadRequest {
            agent_id: "a".into(),
            model: "scripted-fast".into(),
            reasoning_level: None,
            ..Default::default()
        }),
    )
    .await
    .unwrap();
    let created = cp
        .wait_for(|m| m.request_id.as_deref() == Some("t"), WAIT)
        .await
        .unwrap();
    let Some(Payload::ThreadUpdate(thread)) = created.payload else {
        panic!("no thread: {created:?}\n{}", ns.logs());
    };
    // The step waits until the orphan is in its own session: before that it
    // is still in the step's process group, which is killed when the step's
    // shell exits.
    let script = format!(
        "run setsid sh -c 'touch orphan-up; sleep 2; true' {ORPHAN_TAG} </dev/null >/dev/null 2>&1 & \
         while [ ! -e orphan-up ]; do sleep 0.05; done"
    );
    cp.send_request(
        "m",
        Request::CreateUserMessageRequest(CreateUserMessageRequest {
            agent_id: "a".into(),
            thread_id: thread.thread_id,
            text: script,
            allow_steer: false,
            model: None,
            model_reasoning_level: None,
        }),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let found = descendants(ns.root())
            .into_iter()
            // The orphan's own command line ends with its `$0`; the step's
            // shell mentions the tag too, but mid-line.
            .find(|(_, cmd, _)| cmd.trim_end().ends_with(ORPHAN_TAG));
        if let Some((pid, _, _)) = found {
            return pid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the orphan never showed up:\n{}\nprocesses: {:#?}",
            ns.logs(),
            descendants(ns.root())
        );
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn as_pid1_the_runner_warns_and_orphans_stay_zombies() {
    if !can_unshare_pid() {
        return;
    }
    let cp = MockControlPlane::start(MockConfig::default())
        .await
        .unwrap();
    let ns = Namespaced::start(&cp.url(), &[]);
    cp.wait_connected(WAIT).await.unwrap();
    assert!(ns.logs().contains("running as PID 1"), "{}", ns.logs());
    let orphan = leave_an_orphan(&cp, &ns).await;
    // Without an init nobody waits for it: it ends and stays a zombie.
    let deadline = tokio::time::Instant::now() + WAIT;
    while proc_state(orphan) != Some('Z') {
        assert!(
            tokio::time::Instant::now() < deadline,
            "orphan {orphan} state {:?}",
            proc_state(orphan)
        );
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn under_tini_orphans_are_reaped() {
    if !can_unshare_pid() {
        return;
    }
    if !have("tini") {
        skip("tini not found (apt-get install tini): the image's init cannot be exercised here");
        return;
    }
    let cp = MockControlPlane::start(MockConfig::default())
        .await
        .unwrap();
    let ns = Namespaced::start(&cp.url(), &["tini", "--"]);
    cp.wait_connected(WAIT).await.unwrap();
    assert!(!ns.logs().contains("running as PID 1"), "{}", ns.logs());
    let orphan = leave_an_orphan(&cp, &ns).await;
    // tini is PID 1 and waits for every orphan: it ends and is gone.
    let deadline = tokio::time::Instant::now() + WAIT;
    while let Some(state) = proc_state(orphan) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "orphan {orphan} still there, state {state}"
        );
        tokio::time::sleep(POLL).await;
    }
}
