//! The admin socket: a Unix socket in the state dir
//! (`admin.sock`, mode 0600: only the runner's user) served by the running
//! runner for `agent-runner ps`, `threads`, `interrupt` and `kill`. Not
//! the health port: these answers name processes and can interrupt turns
//! and kill processes, so they are for the host's operator only.
//!
//! Protocol: the client writes one JSON line (`{"cmd":"ps"}`,
//! `{"cmd":"threads"}`, `{"cmd":"interrupt","thread":ID}`,
//! `{"cmd":"kill","thread":ID}`), the runner answers one JSON line and
//! closes. `threads` and `ps` say of each thread whether a turn runs or
//! waits for a turn slot (`--max-concurrent-turns`), and since when.
//! `interrupt` stops the thread's running turn, or cancels its messages
//! waiting for a slot, as the control plane's interrupt would. `kill`
//! interrupts the same way and kills every process of the thread (a
//! `"tree"` field, from clients that made that optional, is ignored). At most [`MAX_CLIENTS`]
//! connections are served at once; more wait in the kernel's backlog.
//!
//! Agents may not use it (they could list and stop other tenants' threads):
//! each client's `SO_PEERCRED` is checked first ([`super::admin_peer`]); a
//! refused one gets `{"error":"refused: …"}` and a WARN in the log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_runner_proto::runner::{InterruptTurnRequest, ServerMessage, server_message::Request};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::admin_peer::Guard;
use crate::tasks::context::{RunningTurn, Runtime, WaitingTurn};

/// Connections served at once.
pub const MAX_CLIENTS: usize = 8;
/// How long an admitted client may take to send its request (a silent one
/// would otherwise hold one of the [`MAX_CLIENTS`] slots).
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Longest request line accepted.
const MAX_REQUEST: usize = 4096;

/// The socket's path for a state dir.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("admin.sock")
}

/// Removes the socket file when the runner stops serving it.
#[derive(Debug)]
pub struct AdminSocket {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Bind `<state_dir>/admin.sock` (0600) and serve it until dropped,
/// refusing agents (`agent_uid`: the agents' uid, `--agent-uid`).
pub fn serve(
    rt: Arc<Runtime>,
    state_dir: &Path,
    agent_uid: Option<u32>,
) -> std::io::Result<AdminSocket> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = socket_path(state_dir);
    // A stale socket of a previous run (the state dir is this runner's).
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    let guard = Arc::new(Guard::current(agent_uid));
    let task = tokio::spawn(async move {
        loop {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let rt = rt.clone();
            let guard = guard.clone();
            tokio::spawn(async move {
                let _permit = permit;
                if let Err(why) = admit(&guard, &stream).await {
                    let (_, mut write) = stream.into_split();
                    let text = format!("{}\n", json!({"error": format!("refused: {why}")}));
                    let _ = write.write_all(text.as_bytes()).await;
                    return;
                }
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                let mut reader = BufReader::new(read).take(MAX_REQUEST as u64);
                let read = tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut line));
                let answer = match read.await {
                    Err(_) => json!({"error": "request: none within 5s"}),
                    Ok(Ok(_)) => match serde_json::from_str::<Value>(&line) {
                        Ok(req) => handle(&rt, &req).await,
                        Err(e) => json!({"error": format!("request: not JSON: {e}")}),
                    },
                    Ok(Err(e)) => json!({"error": format!("request: {e}")}),
                };
                let mut text = answer.to_string();
                text.push('\n');
                let _ = write.write_all(text.as_bytes()).await;
            });
        }
    });
    tracing::info!(path = %path.display(), "admin socket listening");
    Ok(AdminSocket { path, task })
}

/// Whether the client on `stream` may use the socket; a refusal is logged.
async fn admit(guard: &Arc<Guard>, stream: &UnixStream) -> Result<(), String> {
    let cred = match stream.peer_cred() {
        Ok(cred) => cred,
        Err(e) => {
            let why = format!("no peer credentials: {e}");
            tracing::warn!(reason = %why, "admin socket: client refused");
            return Err(why);
        }
    };
    let (uid, pid) = (cred.uid(), cred.pid());
    let check = guard.clone();
    let verdict = tokio::task::spawn_blocking(move || check.check(uid, pid))
        .await
        .unwrap_or_else(|e| Err(format!("checking the peer: {e}")));
    if let Err(why) = &verdict {
        tracing::warn!(uid, pid = ?pid, reason = %why, "admin socket: client refused (agents may not use it)");
    }
    verdict
}

async fn handle(rt: &Arc<Runtime>, req: &Value) -> Value {
    let cmd = req["cmd"].as_str();
    let thread = || match req["thread"].as_str() {
        Some(thread) => Ok(thread),
        None => Err(json!({"error": format!("{}: \"thread\" is required", cmd.unwrap_or("?"))})),
    };
    match cmd {
        Some("ps") => ps(rt),
        Some("threads") => threads(rt),
        Some("interrupt") => match thread() {
            Ok(thread) => stop(rt, thread, false).await,
            Err(e) => e,
        },
        Some("kill") => match thread() {
            Ok(thread) => stop(rt, thread, true).await,
            Err(e) => e,
        },
        other => {
            json!({"error": format!("cmd: unknown {other:?} (known: ps, threads, interrupt, kill)")})
        }
    }
}

/// The running and the waiting turns, by thread id.
type Turns = (HashMap<String, RunningTurn>, HashMap<String, WaitingTurn>);

fn turns(rt: &Runtime) -> Turns {
    let running = rt.running_turn_list().into_iter();
    let waiting = rt.waiting_turn_list().into_iter();
    (
        running.map(|t| (t.thread_id.clone(), t)).collect(),
        waiting.map(|t| (t.thread_id.clone(), t)).collect(),
    )
}

/// A turn waiting for a slot, as `threads` and `ps` show it.
fn waiting_json(turn: Option<&WaitingTurn>) -> Value {
    turn.map_or(Value::Null, |w| {
        json!({
            "messages": w.messages,
            "waiting_for_ms": w.since.elapsed().as_millis() as u64,
        })
    })
}

/// The approval requests waiting for the control plane, by thread id, as
/// `threads` and `ps` show them (oldest first).
fn approvals(rt: &Runtime) -> HashMap<String, Vec<Value>> {
    let mut by_thread: HashMap<String, Vec<Value>> = HashMap::new();
    for (id, w) in rt.approvals.waiting() {
        by_thread
            .entry(w.thread_id.clone())
            .or_default()
            .push(json!({
                "approval_id": id,
                "kind": crate::tasks::approvals::kind_label(w.kind),
                "waiting_for_ms": w.since.elapsed().as_millis() as u64,
            }));
    }
    by_thread
}

/// Agents and threads with their state.
fn threads(rt: &Runtime) -> Value {
    let (running, waiting) = turns(rt);
    let asking = approvals(rt);
    let agents = rt.store.agents().unwrap_or_default();
    let threads = rt.store.threads().unwrap_or_default();
    let list: Vec<Value> = agents
        .iter()
        .map(|a| {
            let of_agent: Vec<Value> = threads
                .iter()
                .filter(|t| t.agent_id == a.agent_id)
                .map(|t| {
                    let turn = running.get(&t.thread_id);
                    let waits = waiting.get(&t.thread_id);
                    let state = match (turn, waits) {
                        (Some(_), _) => "running",
                        (None, Some(_)) => "waiting",
                        (None, None) => "idle",
                    };
                    json!({
                        "thread_id": t.thread_id,
                        "model": t.model,
                        "state": state,
                        "turn_id": turn.map(|t| t.turn_id.clone()),
                        "running_for_s": turn.map(|t| t.started.elapsed().as_secs()),
                        "running_for_ms": turn.map(|t| t.started.elapsed().as_millis() as u64),
                        "waiting": waiting_json(waits),
                        "approvals": asking.get(&t.thread_id).cloned().unwrap_or_default(),
                    })
                })
                .collect();
            json!({"agent_id": a.agent_id, "sdk": a.sdk, "threads": of_agent})
        })
        .collect();
    json!({"agents": list})
}

/// Every thread with its running (or waiting) turn and live processes, as
/// trees.
fn ps(rt: &Runtime) -> Value {
    let (running, waiting) = turns(rt);
    let asking = approvals(rt);
    let sdk_of: HashMap<String, String> = rt
        .store
        .agents()
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.agent_id, a.sdk))
        .collect();
    let boot = crate::host::procs::boot_clock();
    let threads = rt.store.threads().unwrap_or_default();
    let list: Vec<Value> = threads
        .iter()
        .map(|t| {
            let pids = rt
                .sandboxes
                .thread_tag(&t.thread_id)
                .map(|tag| agent_launcher::tagged_pids(&tag))
                .unwrap_or_default();
            let procs: Vec<Value> = pids
                .iter()
                .filter_map(|pid| crate::host::procs::describe(*pid as u32, boot))
                .collect();
            let turn = running.get(&t.thread_id);
            json!({
                "agent_id": t.agent_id,
                "thread_id": t.thread_id,
                "sdk": sdk_of.get(&t.agent_id),
                "turn": turn.map(|r| json!({
                    "turn_id": r.turn_id,
                    "sdk": r.sdk,
                    "running_for_s": r.started.elapsed().as_secs(),
                    "running_for_ms": r.started.elapsed().as_millis() as u64,
                })),
                "waiting": waiting_json(waiting.get(&t.thread_id)),
                "approvals": asking.get(&t.thread_id).cloned().unwrap_or_default(),
                "processes": procs,
            })
        })
        .collect();
    json!({"threads": list})
}

/// The live processes of `thread_id` (those that left its process group
/// too: every one carries the thread's tag).
fn thread_pids(rt: &Runtime, thread_id: &str) -> Vec<i32> {
    rt.sandboxes
        .thread_tag(thread_id)
        .map(|tag| agent_launcher::tagged_pids(&tag))
        .unwrap_or_default()
}

/// How many of `pids` are gone (or zombies waiting to be reaped): the
/// processes a kill really ended, whichever way it reached them (a
/// cgroup's `cgroup.kill` reports no count of its own).
pub fn count_gone(pids: &[i32]) -> usize {
    pids.iter()
        .filter(|pid| {
            u32::try_from(**pid)
                .ok()
                .and_then(|pid| crate::host::procs::describe(pid, None))
                .is_none()
        })
        .count()
}

/// Interrupt the thread's running turn, or cancel its messages waiting for
/// a turn slot, as the control plane's interrupt would (the updates go to
/// the control plane); `kill` also kills every process of the thread and
/// says how many there were.
async fn stop(rt: &Arc<Runtime>, thread: &str, kill: bool) -> Value {
    let Some(row) = rt.store.thread(thread).ok().flatten() else {
        return json!({"error": format!("thread: no thread {thread:?}")});
    };
    let running = rt.running_turn_list().iter().any(|t| t.thread_id == thread);
    let waiting = rt.waiting_turn_list().iter().any(|t| t.thread_id == thread);
    if running || waiting {
        crate::tasks::dispatch::dispatch(
            rt,
            ServerMessage {
                request: Some(Request::InterruptTurnRequest(InterruptTurnRequest {
                    agent_id: row.agent_id.clone(),
                    thread_id: thread.to_owned(),
                })),
                ..Default::default()
            },
        );
    }
    if !kill {
        tracing::info!(
            thread_id = thread,
            interrupted = running,
            cancelled_waiting = waiting,
            "agent-runner interrupt"
        );
        return json!({"thread_id": thread, "interrupted": running, "cancelled_waiting": waiting});
    }
    // Counted by who is gone afterwards, not by the kill's own report: the
    // interrupt just dispatched kills the turn's processes too, racing it.
    let pids = thread_pids(rt, thread);
    rt.sandboxes.kill_thread(thread).await;
    let killed = count_gone(&pids);
    tracing::info!(
        thread_id = thread,
        interrupted = running,
        cancelled_waiting = waiting,
        killed,
        "agent-runner kill"
    );
    json!({"thread_id": thread, "interrupted": running, "cancelled_waiting": waiting, "killed": killed, "killed_tree": true})
}
