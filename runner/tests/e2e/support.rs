//! Starting runner processes and talking to them through the mock.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::{MockConfig, MockControlPlane};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Generous: machines are shared and noisy; tests never assert timings.
pub const WAIT: Duration = Duration::from_secs(30);

pub struct RunnerProc {
    pub child: Child,
    pub dirs: Arc<RunnerDirs>,
    pub logs: Arc<Mutex<String>>,
    /// Copies stderr into `logs` until it closes.
    reader: Option<tokio::task::JoinHandle<()>>,
}

/// A runner's temporary state and workspace directories, shared by the
/// runners started on them one after another.
pub struct RunnerDirs(tempfile::TempDir);

impl RunnerDirs {
    pub fn new() -> Arc<Self> {
        Arc::new(Self(tempfile::tempdir().expect("tempdir")))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for RunnerDirs {
    /// A SIGKILLed runner leaves its agents' cgroups (and processes that
    /// escaped their group) for the next start on its state directory to
    /// sweep, and there is none once the directory goes: sweep them now, as
    /// that start would. Nothing runs on these directories any more: every
    /// runner started on them holds them.
    fn drop(&mut self) {
        let state = self.path().join("state");
        if state.exists() {
            agent_runner::sandbox::sweep_state_dir(&state);
        }
    }
}

pub struct RunnerOpts {
    pub url: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl RunnerOpts {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            args: vec![],
            env: vec![],
        }
    }
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_owned());
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_owned(), v.to_owned()));
        self
    }
    /// The same options pointed at `cp`.
    pub fn clone_for(&self, cp: &MockControlPlane) -> Self {
        Self {
            url: cp.url(),
            args: self.args.clone(),
            env: self.env.clone(),
        }
    }
}

pub fn runner_bin() -> &'static str {
    env!("CARGO_BIN_EXE_agent-runner")
}

impl RunnerProc {
    pub fn start(opts: RunnerOpts) -> Self {
        Self::start_in(opts, RunnerDirs::new())
    }

    /// Start with the state and workspaces of an earlier process.
    pub fn start_in(opts: RunnerOpts, dirs: Arc<RunnerDirs>) -> Self {
        let mut cmd = Command::new(runner_bin());
        cmd.arg("run")
            .arg("--control-plane-url")
            .arg(&opts.url)
            .arg("--state-dir")
            .arg(dirs.path().join("state"))
            .arg("--workspace-root")
            .arg(dirs.path().join("ws"))
            .arg("--log-level")
            .arg("debug")
            .arg("--reconnect-min-delay")
            .arg("50ms")
            .arg("--reconnect-max-delay")
            .arg("500ms")
            .args(&opts.args)
            .env_remove("AGENT_RUNNER_SECRET")
            // Health endpoints off unless a test asks (`--health-addr` wins
            // over this), so parallel runners never contend for one port.
            .env("AGENT_RUNNER_HEALTH_ADDR", "")
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn agent-runner");
        let logs = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr piped");
        let sink = logs.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Self {
            child,
            dirs,
            logs,
            reader: Some(reader),
        }
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// Wait until the log shows `needle` (evidence that something was tried).
    pub async fn wait_log(&self, needle: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !self.logs().contains(needle) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {needle:?} in the log:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn workspace_root(&self) -> PathBuf {
        self.dirs.path().join("ws")
    }

    /// The workspace of `thread` of `agent`.
    pub fn thread_workspace(&self, agent: &str, thread: &str) -> PathBuf {
        self.workspace_root()
            .join(agent)
            .join("threads")
            .join(thread)
    }

    pub fn signal(&self, sig: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(pid, sig) };
    }

    /// Waits for the process to exit: its exit code once it exited (-1: by a signal), with everything it
    /// wrote to stderr in [`RunnerProc::logs`]; `None` if it did not exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let code = match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(Ok(status)) => status.code().or(Some(-1)),
            _ => return None,
        };
        // Its last lines may still be in the pipe: read to the end (a
        // process it started may hold the pipe open; not for ever).
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(WAIT, reader).await;
        }
        code
    }
}

/// How long a dropped runner gets to exit after its second SIGTERM before
/// `kill_on_drop`'s SIGKILL.
const STOP_PATIENCE: Duration = Duration::from_secs(10);

impl Drop for RunnerProc {
    /// Stops a runner still running as an operator would: SIGTERM, and a
    /// second one 100 ms later (the runner then kills every agent, removes
    /// every thread's cgroup and its scope, and exits). A SIGKILLed runner
    /// leaves its cgroups behind for a next start on the same state
    /// directory, which a test's temporary directory never sees. Blocking:
    /// a drop cannot wait on the runtime.
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        let Some(pid) = self.child.id() else {
            return;
        };
        // SAFETY (both): signalling our own child, not yet reaped (its pid
        // cannot have been reused).
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        std::thread::sleep(Duration::from_millis(100));
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + STOP_PATIENCE;
        while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

pub async fn mock() -> MockControlPlane {
    MockControlPlane::start(MockConfig::default())
        .await
        .expect("mock starts")
}

/// A mock and a connected runner.
pub async fn connected() -> (MockControlPlane, RunnerProc) {
    connected_with(|opts| opts).await
}

/// A mock and a runner started with the options `configure` makes, connected.
pub async fn connected_with(
    configure: impl FnOnce(RunnerOpts) -> RunnerOpts,
) -> (MockControlPlane, RunnerProc) {
    let cp = mock().await;
    let runner = RunnerProc::start(configure(RunnerOpts::new(cp.url())));
    cp.wait_connected(WAIT).await.expect("runner connects");
    (cp, runner)
}

/// [`connected_with`], and agent `a` (scripted) created.
pub async fn agent_with(
    configure: impl FnOnce(RunnerOpts) -> RunnerOpts,
) -> (MockControlPlane, RunnerProc) {
    let (cp, runner) = connected_with(configure).await;
    create_agent(&cp, "a").await;
    (cp, runner)
}

/// A mock, a connected runner, agent `a` and its thread; the thread's id.
pub async fn thread_ready() -> (MockControlPlane, RunnerProc, String) {
    let (cp, runner) = agent_with(|opts| opts).await;
    let thread = create_thread(&cp, "a", "t").await;
    (cp, runner, thread)
}

pub fn payload(m: &ClientMessage) -> Option<&Payload> {
    m.payload.as_ref()
}

pub fn rid_is(m: &ClientMessage, rid: &str) -> bool {
    m.request_id.as_deref() == Some(rid)
}

/// The first message answering `rid`.
pub async fn reply(cp: &MockControlPlane, rid: &str) -> ClientMessage {
    let rid = rid.to_owned();
    cp.wait_for(move |m| rid_is(m, &rid), WAIT)
        .await
        .expect("a reply")
}

pub fn error_text(m: &ClientMessage) -> Option<&str> {
    match payload(m) {
        Some(Payload::RequestError(e)) => Some(&e.error_message),
        _ => None,
    }
}

pub async fn expect_error(cp: &MockControlPlane, rid: &str) -> String {
    let m = reply(cp, rid).await;
    error_text(&m)
        .unwrap_or_else(|| panic!("expected a RequestError for {rid}, got {m:?}"))
        .to_owned()
}

pub async fn send(cp: &MockControlPlane, rid: &str, request: Request) {
    cp.send_request(rid, request).await.expect("send");
}

/// Create agent `agent` on the scripted SDK; checks it is READY.
pub async fn create_agent(cp: &MockControlPlane, agent: &str) {
    create_sdk_agent(cp, agent, "scripted").await;
}

/// Create agent `agent` on `sdk`; checks it is READY.
pub async fn create_sdk_agent(cp: &MockControlPlane, agent: &str, sdk: &str) {
    let rid = format!("ca-{agent}");
    send(
        cp,
        &rid,
        Request::CreateAgentRequest(CreateAgentRequest {
            agent_id: agent.into(),
            agent_sdk: sdk.into(),
        }),
    )
    .await;
    let m = reply(cp, &rid).await;
    assert!(
        matches!(payload(&m), Some(Payload::AgentUpdate(u)) if u.status == AgentStatus::Ready as i32),
        "{m:?}"
    );
}

/// Create a thread (model scripted-fast) and return its id.
pub async fn create_thread(cp: &MockControlPlane, agent: &str, rid: &str) -> String {
    try_create_thread(cp, agent, rid, "scripted-fast", WAIT)
        .await
        .unwrap_or_else(|m| panic!("expected ThreadUpdate READY, got {m:?}"))
}

/// Create a thread of `agent` on `model`, its reply awaited at most `wait`;
/// its id, or the reply when that is not a ThreadUpdate READY.
pub async fn try_create_thread(
    cp: &MockControlPlane,
    agent: &str,
    rid: &str,
    model: &str,
    wait: Duration,
) -> Result<String, ClientMessage> {
    send(
        cp,
        rid,
        Request::CreateThreadRequest(CreateThreadRequest {
            agent_id: agent.into(),
            model: model.into(),
            reasoning_level: None,
            ..Default::default()
        }),
    )
    .await;
    let r = rid.to_owned();
    let m = cp
        .wait_for(move |m| rid_is(m, &r), wait)
        .await
        .expect("a reply");
    match payload(&m) {
        Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32 => {
            Ok(u.thread_id.clone())
        }
        _ => Err(m),
    }
}

pub fn user_message(agent: &str, thread: &str, text: &str, allow_steer: bool) -> Request {
    Request::CreateUserMessageRequest(CreateUserMessageRequest {
        agent_id: agent.into(),
        thread_id: thread.into(),
        text: text.into(),
        allow_steer,
        model: None,
        model_reasoning_level: None,
    })
}

pub fn is_turn(m: &ClientMessage, status: TurnStatus) -> bool {
    matches!(payload(m), Some(Payload::TurnUpdate(t)) if t.status == status as i32)
}

/// Wait for the TurnUpdate COMPLETED of `thread`'s turn started by `rid`.
pub async fn turn_completed(cp: &MockControlPlane, rid: &str) -> ClientMessage {
    let rid = rid.to_owned();
    cp.wait_for(
        move |m| rid_is(m, &rid) && is_turn(m, TurnStatus::Completed),
        WAIT,
    )
    .await
    .expect("turn completes")
}

/// Every message carrying `rid`, in arrival order.
pub fn replies(cp: &MockControlPlane, rid: &str) -> Vec<ClientMessage> {
    cp.received()
        .into_iter()
        .filter(|m| rid_is(m, rid))
        .collect()
}

/// The item updates among `msgs`, as (item type, status, text).
pub fn items(msgs: &[ClientMessage]) -> Vec<(ItemType, ItemStatus, Option<String>)> {
    msgs.iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ItemUpdate(i)) => Some((
                ItemType::try_from(i.item_type).unwrap_or(ItemType::Unknown),
                ItemStatus::try_from(i.status).unwrap_or(ItemStatus::Unknown),
                i.text.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// A script that sleeps `ms` and then says `s0`, `s1`, … (`count` items).
pub fn sleep_then_says(ms: u64, count: usize) -> String {
    std::iter::once(format!("sleep {ms}\n"))
        .chain((0..count).map(|i| format!("say s{i}\n")))
        .collect()
}

/// No item among `msgs` has the text `text`.
pub fn assert_no_item_says(msgs: &[ClientMessage], text: &str) {
    let items = items(msgs);
    assert!(
        !items.iter().any(|(_, _, t)| t.as_deref() == Some(text)),
        "{items:#?}"
    );
}

/// Send a user message and wait until its turn runs; the TurnUpdate.
pub async fn start_turn(
    cp: &MockControlPlane,
    rid: &str,
    agent: &str,
    thread: &str,
    script: &str,
) -> ClientMessage {
    send(cp, rid, user_message(agent, thread, script, false)).await;
    let r = rid.to_owned();
    cp.wait_for(
        move |m| rid_is(m, &r) && is_turn(m, TurnStatus::Running),
        WAIT,
    )
    .await
    .expect("turn starts")
}

/// The texts of the COMPLETED agent messages among `msgs`, in order.
pub fn said(msgs: &[ClientMessage]) -> Vec<String> {
    items(msgs)
        .into_iter()
        .filter(|(k, s, _)| *k == ItemType::AgentMessage && *s == ItemStatus::Completed)
        .filter_map(|(_, _, t)| t)
        .collect()
}

/// Every item text among `msgs` (any kind, any status).
pub fn texts(msgs: &[ClientMessage]) -> Vec<String> {
    items(msgs).into_iter().filter_map(|(_, _, t)| t).collect()
}

/// The COMPLETED command executions among `msgs`, in order.
pub fn completed_commands(msgs: &[ClientMessage]) -> Vec<CommandExecutionItem> {
    msgs.iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ItemUpdate(i))
                if i.status == ItemStatus::Completed as i32
                    && i.item_type == ItemType::CommandExecution as i32 =>
            {
                i.command_execution_item.clone()
            }
            _ => None,
        })
        .collect()
}

/// The outputs of the COMPLETED command executions among `msgs`, in order.
pub fn command_outputs(msgs: &[ClientMessage]) -> Vec<String> {
    completed_commands(msgs)
        .into_iter()
        .filter_map(|c| c.output)
        .collect()
}

/// Every token-usage update among `msgs`, in order.
pub fn token_usages(msgs: &[ClientMessage]) -> Vec<ThreadTokenUsageUpdate> {
    msgs.iter()
        .filter_map(|m| match payload(m) {
            Some(Payload::ThreadTokenUsageUpdate(u)) => Some(u.clone()),
            _ => None,
        })
        .collect()
}

/// Waits until the runner has told the control plane what `sdk` is: at
/// registration, or — when registration said it was still being probed
/// (registration does not wait for slow probes, such as codex's) — in the
/// probe's `agent_sdk_update`.
pub async fn sdk_probed(cp: &MockControlPlane, sdk: &str) {
    let registered = cp
        .registrations()
        .first()
        .and_then(|r| r.request.agent_sdks.iter().find(|s| s.name == sdk).cloned());
    let probing = registered
        .as_ref()
        .and_then(|s| s.error_message.as_deref())
        .is_some_and(|m| m.contains("being probed"));
    if !probing {
        return;
    }
    let name = sdk.to_owned();
    cp.wait_for(
        move |m| matches!(payload(m), Some(Payload::AgentSdkUpdate(s)) if s.name == name),
        WAIT,
    )
    .await
    .expect("the probe's agent_sdk_update");
}
