//! The agent sandbox end to end (the trust boundary): the real
//! runner, run as this machine's user (root here and in CI), against the
//! mock control plane. A thread's agent — scripted `run` steps, and the
//! embedded engine's `bash` driven by the mock model — tries to read the
//! runner's secret file, the GitHub App key, `<state-dir>/state.db`,
//! another thread's workspace, `/proc/<runner>/environ` and the environ of
//! another thread's process; to write outside its workspace; to signal the
//! runner; and to escape with `setsid`. Every attempt fails, the runner
//! keeps serving, and the same kind of command works in the thread's own
//! space. With `--sandbox off` the same attempts succeed: the suite can
//! fail.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use code_agent_engine::testing::{MockLlm, MockReply};
use mock_control_plane::MockControlPlane;
use serde_json::json;

use crate::support::*;

/// In the runner's environment only: an agent that can read the runner's
/// environ finds it.
const RUNNER_MARKER: &str = "E2E_RUNNER_ENV_MARKER";
/// The victim thread's long command (found by its command line).
const VICTIM_SLEEP: &str = "4242";

/// A runner's files an agent must never see, made before it starts.
struct Secrets {
    dirs: Arc<RunnerDirs>,
    secret_file: PathBuf,
    app_key: PathBuf,
}

impl Secrets {
    fn new() -> Self {
        let dirs = RunnerDirs::new();
        let secret_file = dirs.path().join("bearer-secret");
        std::fs::write(&secret_file, "e2e-bearer-secret\n").unwrap();
        std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let app_key = mock_control_plane::github_api::test_app_key()
            .write_private_key(dirs.path(), "app.pem")
            .unwrap();
        Self {
            dirs,
            secret_file,
            app_key,
        }
    }

    fn state_db(&self) -> PathBuf {
        self.dirs.path().join("state/state.db")
    }

    fn outside(&self) -> PathBuf {
        self.dirs.path().join("written-by-agent")
    }

    /// Options for a runner holding these secrets, in sandbox `mode`.
    fn opts(&self, cp: &MockControlPlane, mode: &str) -> RunnerOpts {
        // The secret file by env: its path must not reach agents either.
        RunnerOpts::new(cp.url())
            .arg("--sandbox")
            .arg(mode)
            .env(
                "AGENT_RUNNER_SECRET_FILE",
                self.secret_file.to_str().unwrap(),
            )
            .env("E2E_SERVICE_TOKEN", "tok-never-for-agents")
            .arg("--github-app-id")
            .arg("1")
            .arg("--github-app-private-key-file")
            .arg(self.app_key.to_str().unwrap())
            .arg("--github-api-url")
            .arg("http://127.0.0.1:9")
            .env(RUNNER_MARKER, "runner-only")
            .arg("--drain-timeout")
            .arg("1s")
    }

    fn start(&self, opts: RunnerOpts) -> RunnerProc {
        RunnerProc::start_in(opts, self.dirs.clone())
    }
}

/// One shell line that tries every attack and every legitimate action and
/// prints `name=OPEN` or `name=DENIED` for each. `victim_ws` is another
/// thread's workspace (holding `victim.txt`).
fn probe_line(s: &Secrets, victim_ws: &Path) -> String {
    let t = "t(){ n=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$n=OPEN\"; else echo \"$n=DENIED\"; fi; }";
    let victim = format!("$(pgrep -f '^sleep {VICTIM_SLEEP}$' | head -n1)");
    // The other thread's git credential capability, in its private HOME:
    // `<agent>/private/<thread>/home` beside `<agent>/threads/<thread>`.
    let victim_thread = victim_ws.file_name().unwrap().to_string_lossy();
    let victim_home = victim_ws
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("private")
        .join(&*victim_thread)
        .join("home");
    [
        t.to_string(),
        format!("t secret_file cat {}", s.secret_file.display()),
        format!("t app_key cat {}", s.app_key.display()),
        format!("t state_db cat {}", s.state_db().display()),
        format!("t other_workspace cat {}/victim.txt", victim_ws.display()),
        format!(
            "t other_capability cat {}/.agent-runner-git-capability",
            victim_home.display()
        ),
        format!("t write_outside sh -c 'echo x > {}'", s.outside().display()),
        format!("t runner_environ grep -q {RUNNER_MARKER} /proc/$PPID/environ"),
        format!("t other_environ grep -q AGENT_LAUNCHER_TAG /proc/{victim}/environ"),
        "t signal_runner kill -0 $PPID".to_string(),
        // The environment allowlist holds in every mode, `off` included.
        format!(
            "t env_leak sh -c 'env | grep -q -e AGENT_RUNNER_ -e {RUNNER_MARKER} -e tok-never-for-agents -e bearer-secret'"
        ),
        "t own_write sh -c 'echo mine > mine.txt && cat mine.txt'".to_string(),
        "t own_home sh -c 'echo h > \"$HOME/h\" && cat \"$HOME/h\"'".to_string(),
        "t own_tmp sh -c 'echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"'".to_string(),
        "t own_environ grep -q AGENT_LAUNCHER_TAG /proc/self/environ".to_string(),
        "t own_capability cat \"$HOME/.agent-runner-git-capability\"".to_string(),
        "t system_read cat /etc/passwd".to_string(),
    ]
    .join("; ")
}

const ATTACKS: &[&str] = &[
    "secret_file",
    "app_key",
    "state_db",
    "other_workspace",
    "other_capability",
    "write_outside",
    "runner_environ",
    "other_environ",
    "signal_runner",
];
/// Denied in every mode: the environment allowlist is not a sandbox mode.
const ALWAYS_DENIED: &[&str] = &["env_leak"];
const OWN: &[&str] = &[
    "own_write",
    "own_home",
    "own_tmp",
    "own_environ",
    "own_capability",
    "system_read",
];

/// `name=OPEN|DENIED` lines of `output`, checked to cover every probe.
fn verdicts(output: &str) -> Vec<(String, bool)> {
    let out: Vec<(String, bool)> = output
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(_, v)| matches!(*v, "OPEN" | "DENIED"))
        .map(|(n, v)| (n.to_owned(), v == "OPEN"))
        .collect();
    for name in ATTACKS.iter().chain(ALWAYS_DENIED).chain(OWN) {
        assert!(
            out.iter().any(|(n, _)| n == name),
            "no verdict for {name} in {output}"
        );
    }
    out
}

fn assert_confined(output: &str) {
    for (name, open) in verdicts(output) {
        let attack = ATTACKS.contains(&name.as_str()) || ALWAYS_DENIED.contains(&name.as_str());
        assert_eq!(
            open,
            !attack,
            "{name}: {} (want {})\n{output}",
            if open { "OPEN" } else { "DENIED" },
            if attack { "DENIED" } else { "OPEN" }
        );
    }
}

/// A victim thread (scripted agent `v`) running `sleep 4242`, with
/// `victim.txt` in its workspace; its workspace and the pid of its command.
async fn victim(cp: &MockControlPlane, runner: &RunnerProc) -> (PathBuf, i32) {
    create_agent(cp, "v").await;
    let thread = create_thread(cp, "v", "vt").await;
    let ws = runner.thread_workspace("v", &thread);
    std::fs::write(ws.join("victim.txt"), "victim's data\n").unwrap();
    start_turn(cp, "vm", "v", &thread, &format!("run sleep {VICTIM_SLEEP}")).await;
    // Its command is running once its RUNNING item is out.
    let running = cp
        .wait_for(
            |m| {
                rid_is(m, "vm")
                    && matches!(payload(m), Some(client_message::Payload::ItemUpdate(i))
                        if i.status == ItemStatus::Running as i32
                            && i.command_execution_item.is_some())
            },
            WAIT,
        )
        .await
        .expect("the victim's command runs");
    let Some(client_message::Payload::ItemUpdate(item)) = running.payload else {
        unreachable!()
    };
    let pid = item
        .command_execution_item
        .and_then(|c| c.process_id.parse().ok())
        .expect("the command's pid");
    (ws, pid)
}

/// SIGTERM: the runner drains (the victim's turn is interrupted after
/// `--drain-timeout 1s`), kills every thread's processes and exits 0.
async fn stop(mut runner: RunnerProc, victim_pid: i32) {
    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(WAIT).await, Some(0), "{}", runner.logs());
    wait_gone(victim_pid, "shutdown").await;
}

/// Runs `line` as one scripted `run` step on a new thread of agent `a`;
/// the command's output.
async fn scripted_probe(cp: &MockControlPlane, runner: &RunnerProc, line: &str) -> String {
    create_agent(cp, "a").await;
    let thread = create_thread(cp, "a", "at").await;
    send(
        cp,
        "am",
        user_message("a", &thread, &format!("run {line}"), false),
    )
    .await;
    turn_completed(cp, "am").await;
    let msgs = replies(cp, "am");
    let outputs = command_outputs(&msgs);
    assert_eq!(outputs.len(), 1, "{msgs:#?}\n{}", runner.logs());
    outputs[0].clone()
}

/// The runner still answers: a new thread's turn completes.
async fn still_serving(cp: &MockControlPlane, runner: &mut RunnerProc) {
    assert_eq!(
        runner.wait_exit(Duration::from_millis(1)).await,
        None,
        "the runner died"
    );
    let thread = create_thread(cp, "a", "alive-t").await;
    send(cp, "alive", user_message("a", &thread, "say alive", false)).await;
    turn_completed(cp, "alive").await;
    assert_eq!(said(&replies(cp, "alive")), ["alive"]);
}

async fn scripted_suite(mode: &str) {
    let s = Secrets::new();
    let cp = mock().await;
    let mut runner = s.start(s.opts(&cp, mode));
    cp.wait_connected(WAIT)
        .await
        .unwrap_or_else(|e| panic!("connects: {e:?}\n{}", runner.logs()));
    let (victim_ws, victim_pid) = victim(&cp, &runner).await;
    let output = scripted_probe(&cp, &runner, &probe_line(&s, &victim_ws)).await;
    assert_confined(&output);
    assert!(
        !s.outside().exists(),
        "the agent wrote outside its workspace"
    );
    still_serving(&cp, &mut runner).await;
    stop(runner, victim_pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_attacks_fail_in_best_effort() {
    scripted_suite("best-effort").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_attacks_fail_in_enforce() {
    scripted_suite("enforce").await;
}

/// Without the sandbox the same probes get through: the suite above can
/// fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_attacks_succeed_with_sandbox_off() {
    let s = Secrets::new();
    let cp = mock().await;
    let mut runner = s.start(s.opts(&cp, "off"));
    cp.wait_connected(WAIT).await.expect("connects");
    let (victim_ws, victim_pid) = victim(&cp, &runner).await;
    let output = scripted_probe(&cp, &runner, &probe_line(&s, &victim_ws)).await;
    for (name, open) in verdicts(&output) {
        let want = !ALWAYS_DENIED.contains(&name.as_str());
        assert_eq!(open, want, "{name} with --sandbox off\n{output}");
    }
    assert!(s.outside().exists());
    still_serving(&cp, &mut runner).await;
    stop(runner, victim_pid).await;
}

/// The embedded engine's `bash`, asked by the mock model, is confined the
/// same way (it runs in the thread's sandbox).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_agent_bash_attacks_fail() {
    code_agent_bash_suite(&[]).await;
}

/// The engine's `bash` runs every attack of the probe, on a runner given
/// `extra` arguments (`--agent-uid`: the runner's directories are opened
/// for that user to walk to its workspace); every attack fails, the
/// thread's own work succeeds, and the runner keeps serving.
pub(crate) async fn code_agent_bash_suite(extra: &[&str]) {
    let s = Secrets::new();
    if !extra.is_empty() {
        std::fs::set_permissions(s.dirs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The victim's workspace path is only known once its thread exists, so
    // the probe looks for it: any other thread's workspace with victim.txt.
    let victim_glob = s.dirs.path().join("ws/v/threads");
    let line = probe_line(&s, &victim_glob.join("*"));
    let llm = MockLlm::start(vec![
        MockReply::tool_call("call_1", "bash", json!({ "command": line })),
        MockReply::text("probed"),
    ])
    .await;
    let cp = mock().await;
    let opts = extra
        .iter()
        .fold(s.opts(&cp, "best-effort"), |o, a| o.arg(a))
        .arg("--sdk")
        .arg("scripted")
        .arg("--sdk")
        .arg("code-agent")
        .env("OPENAI_API_KEY", "sk-e2e-sandbox")
        .env("OPENAI_BASE_URL", &llm.base_url())
        .env("CODE_AGENT_MODELS", "mock-model");
    let mut runner = s.start(opts);
    cp.wait_connected(WAIT).await.expect("connects");
    let (_, victim_pid) = victim(&cp, &runner).await;
    create_sdk_agent(&cp, "c", "code-agent").await;
    let thread = try_create_thread(&cp, "c", "ct", "mock-model", WAIT)
        .await
        .unwrap_or_else(|m| panic!("thread: {m:?}\n{}", runner.logs()));
    send(&cp, "cm", user_message("c", &thread, "probe", false)).await;
    turn_completed(&cp, "cm").await;
    let outputs = command_outputs(&replies(&cp, "cm"));
    assert_eq!(outputs.len(), 1, "{}", runner.logs());
    assert_confined(&outputs[0]);
    assert!(!s.outside().exists());
    create_agent(&cp, "a").await;
    still_serving(&cp, &mut runner).await;
    stop(runner, victim_pid).await;
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
pub(crate) fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

pub(crate) async fn wait_gone(pid: i32, what: &str) {
    test_kit::wait::until(|| gone(pid), || format!("{what}: process {pid} survived")).await;
}

/// A pid the agent wrote into `file` of its workspace.
pub(crate) async fn pid_in(file: &Path) -> i32 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pid in {}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Leaves the process group and the session; the escaped process writes
/// its own pid (`setsid` may fork, so `$!` is not it) and becomes `sleep`;
/// the step waits for the pid so the escape is complete when it ends.
const ESCAPE: &str = "run setsid sh -c 'echo $$ > escaped.pid.new && mv escaped.pid.new escaped.pid; exec sleep 1000' </dev/null >/dev/null 2>&1 & while [ ! -s escaped.pid ]; do sleep 0.05; done";

/// `setsid` leaves the process group; interrupt and thread delete still
/// kill the escaped process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_escapes_neither_interrupt_nor_delete() {
    let (cp, runner, thread) = thread_ready().await;
    let pid_file = runner.thread_workspace("a", &thread).join("escaped.pid");

    // Interrupt: the turn is still running (sleep step) when interrupted.
    start_turn(
        &cp,
        "m1",
        "a",
        &thread,
        &format!("{ESCAPE}\nsleep 60000\nsay never"),
    )
    .await;
    let pid = pid_in(&pid_file).await;
    assert!(
        !gone(pid),
        "the escaped process runs: {:?}\n{:#?}\n{}",
        std::fs::read_to_string(format!("/proc/{pid}/stat")),
        replies(&cp, "m1"),
        runner.logs()
    );
    send(
        &cp,
        "i1",
        Request::InterruptTurnRequest(InterruptTurnRequest {
            agent_id: "a".into(),
            thread_id: thread.clone(),
        }),
    )
    .await;
    turn_completed(&cp, "i1").await;
    wait_gone(pid, "interrupt").await;

    // Delete: a turn that ended normally left it running; deleting the
    // thread kills it.
    outlives_its_turn_then_dies_on_delete(&cp, &thread, &pid_file, ESCAPE, "escaped").await;
}

/// A turn of `script` (which writes its process's pid to `pid_file`) ends
/// and leaves that (`what`) process running; deleting the thread (agent
/// `a`) kills it.
pub(crate) async fn outlives_its_turn_then_dies_on_delete(
    cp: &MockControlPlane,
    thread: &str,
    pid_file: &Path,
    script: &str,
    what: &str,
) {
    std::fs::remove_file(pid_file).unwrap();
    send(cp, "m2", user_message("a", thread, script, false)).await;
    turn_completed(cp, "m2").await;
    let pid = pid_in(pid_file).await;
    assert!(!gone(pid), "a finished turn leaves its {what} process");
    send(
        cp,
        "d1",
        Request::DeleteThreadRequest(DeleteThreadRequest {
            agent_id: "a".into(),
            thread_id: thread.to_owned(),
        }),
    )
    .await;
    reply(cp, "d1").await;
    wait_gone(pid, "thread delete").await;
}

/// On the second signal every thread's processes are
/// killed before the runner exits 130; a runner SIGKILLed mid-turn leaves
/// processes behind, and the next start on the same state sweeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_signal_and_restart_leave_no_agent_process() {
    let (cp, mut runner, thread) = thread_ready().await;
    let pid_file = runner.thread_workspace("a", &thread).join("escaped.pid");
    start_turn(&cp, "m1", "a", &thread, &format!("{ESCAPE}\nsleep 60000")).await;
    let pid = pid_in(&pid_file).await;
    runner.signal(libc::SIGTERM);
    runner.wait_log("draining").await;
    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(WAIT).await, Some(130), "{}", runner.logs());
    wait_gone(pid, "second signal").await;

    // SIGKILL: nothing runs to clean up; the next start does.
    let cp = mock().await;
    let dirs = runner.dirs.clone();
    let runner = RunnerProc::start_in(RunnerOpts::new(cp.url()), dirs.clone());
    cp.wait_connected(WAIT).await.expect("connects");
    std::fs::remove_file(&pid_file).unwrap();
    send(
        &cp,
        "m2",
        user_message("a", &thread, &format!("{ESCAPE}\nsleep 60000"), false),
    )
    .await;
    let pid = pid_in(&pid_file).await;
    runner.signal(libc::SIGKILL);
    let mut runner = runner;
    assert!(runner.wait_exit(WAIT).await.is_some());
    assert!(!gone(pid), "SIGKILL leaves the escaped process running");
    let cp = mock().await;
    let runner = RunnerProc::start_in(RunnerOpts::new(cp.url()), dirs);
    wait_gone(pid, "start-up sweep").await;
    drop(runner);
}

/// With `--agent-uid 65534` agent processes run as that user, confined the
/// same way, and still work in their own space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_run_as_the_agent_uid() {
    let s = Secrets::new();
    // The agent user must be able to walk to its workspace.
    std::fs::set_permissions(s.dirs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cp = mock().await;
    let mut runner = s.start(s.opts(&cp, "best-effort").arg("--agent-uid").arg("65534"));
    cp.wait_connected(WAIT)
        .await
        .unwrap_or_else(|e| panic!("connects: {e:?}\n{}", runner.logs()));
    let (victim_ws, victim_pid) = victim(&cp, &runner).await;
    let line = format!("{}; echo uid=$(id -u)", probe_line(&s, &victim_ws));
    let output = scripted_probe(&cp, &runner, &line).await;
    assert!(output.contains("uid=65534"), "{output}");
    assert_confined(&output);
    still_serving(&cp, &mut runner).await;
    stop(runner, victim_pid).await;
}
