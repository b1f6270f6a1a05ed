//! The runner's local endpoints against its own agents (trust boundary,
//! second pass): a thread's scripted `run` step that dials the admin
//! socket is refused (no thread list, no kill), with `--sandbox off` too
//! (the refusal rests on peer credentials, not the sandbox), while
//! `agent-runner threads` and the same dial run from outside every thread
//! get their answer (so the probe can fail); `/status` on the health port
//! names no thread; idle clients holding connections to the health port
//! do not keep `/livez` from answering.

use std::time::Duration;

use mock_control_plane::MockControlPlane;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::*;

/// The bound health address, from the runner's log.
pub(crate) async fn health_addr(r: &RunnerProc) -> String {
    let marker = "listening on http://";
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let logs = r.logs();
        if let Some(at) = logs.find(marker) {
            let rest = &logs[at + marker.len()..];
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            return rest[..end].to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no health address:\n{logs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One `GET` over HTTP/1.0: the whole raw answer.
pub(crate) async fn raw_get(addr: &str, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    String::from_utf8_lossy(&raw).into_owned()
}

async fn admin_cli(runner: &RunnerProc, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(runner_bin())
        .args(args)
        .arg("--state-dir")
        .arg(runner.dirs.path().join("state"))
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A `run` step's command: send `request` on the admin socket, print the
/// answer (or the error) between markers. The Python source travels in
/// base64: no shell quoting to get wrong. `prefix` goes before `python3`.
fn dial(socket: &std::path::Path, request: &str, prefix: &str) -> String {
    let py = format!(
        r#"import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({path:?})
    try:
        s.sendall({request:?}.encode() + b"\n")
    except BrokenPipeError:
        pass  # refused before the request was read: the answer is there
    print("ANSWER<" + s.makefile().readline().strip() + ">")
except Exception as e:
    print("FAILED<" + repr(e) + ">")
"#,
        path = socket.display().to_string(),
    );
    format!(
        "{prefix}{python} -c \"import base64;exec(base64.b64decode('{}'))\"",
        b64(&py),
        python = system_python(),
    )
}

/// A python3 the sandbox lets agents run (system directories, not a
/// user's pyenv shim).
fn system_python() -> &'static str {
    ["/usr/bin/python3", "/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("a system python3")
}

fn b64(text: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in text.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test]
async fn a_thread_is_refused_by_the_admin_socket_the_operator_is_not() {
    let (cp, runner) = agent_with(|o| o.arg("--health-addr").arg("127.0.0.1:0")).await;
    admin_socket_refuses_threads(&cp, &runner, Refusal::ByPeer).await;
}

/// How a thread is kept from the admin socket.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It connects, and the runner refuses it by its peer credentials.
    ByPeer,
    /// It cannot connect: the socket's mode (0600, the runner's uid) keeps
    /// another uid (an `--agent-uid` agent) out before any peer check.
    ByMode,
}

/// On a runner with agent `a` and a health port: a thread's dials of the
/// admin socket (`threads`, `ps`, `kill` of another thread, and the same
/// detached with a scrubbed environment) are refused and name no other
/// thread; the operator's dial is answered; `/status` names no thread.
pub(crate) async fn admin_socket_refuses_threads(
    cp: &MockControlPlane,
    runner: &RunnerProc,
    refusal: Refusal,
) {
    let victim = create_thread(cp, "a", "victim").await;
    start_turn(cp, "v", "a", &victim, "run sleep 300").await;
    let thread = create_thread(cp, "a", "t").await;
    let socket = runner.dirs.path().join("state/admin.sock");
    let kill = format!(r#"{{"cmd":"kill","thread":"{victim}"}}"#);
    let script = [
        dial(&socket, r#"{"cmd":"threads"}"#, ""),
        dial(&socket, r#"{"cmd":"ps"}"#, ""),
        dial(&socket, &kill, ""),
        // Detached, with a scrubbed environment (no thread tag): still
        // refused.
        dial(&socket, r#"{"cmd":"ps"}"#, "setsid -w env -i "),
    ]
    .map(|c| format!("run {c}"))
    .join("\n");
    start_turn(cp, "m", "a", &thread, &script).await;
    turn_completed(cp, "m").await;
    let outputs = command_outputs(&replies(cp, "m"));
    assert_eq!(outputs.len(), 4, "{outputs:#?}");
    for out in &outputs {
        assert!(
            !out.contains(&victim),
            "a thread learnt another's id: {out}"
        );
        let refused = match refusal {
            Refusal::ByPeer => out.contains("ANSWER<{\"error\":\"refused: "),
            Refusal::ByMode => out.contains("PermissionError") && !out.contains("ANSWER<"),
        };
        assert!(refused, "not refused: {out}");
    }
    if refusal == Refusal::ByPeer {
        runner.wait_log("admin socket: client refused").await;
    }

    // The same dial from outside every thread gets its answer: the probe
    // above can fail. (The refusal does not rest on the sandbox: it holds
    // with `--sandbox off` too, by peer credentials.)
    let outside = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(dial(&socket, r#"{"cmd":"threads"}"#, ""))
        .output()
        .await
        .unwrap();
    let outside = String::from_utf8_lossy(&outside.stdout);
    assert!(
        outside.contains("ANSWER<") && outside.contains(&victim),
        "the operator's dial: {outside}"
    );

    // The victim's turn still runs; the operator sees it and may stop it.
    let (ok, text) = admin_cli(runner, &["threads", "--json"]).await;
    assert!(ok && text.contains(&victim), "{text}");
    assert!(text.contains("\"running\""), "{text}");

    // /status: counts only, no id of any thread or turn.
    let addr = health_addr(runner).await;
    let status = raw_get(&addr, "/status").await;
    assert!(status.contains("\"running_turns\": 1"), "{status}");
    for id in [&victim, &thread] {
        assert!(
            !status.contains(id.as_str()),
            "/status names {id}:\n{status}"
        );
    }
    assert!(!status.contains("sleep 300"), "{status}");
    assert!(
        !status.contains("thread_id") && !status.contains("turn_id"),
        "{status}"
    );
    let (ok, text) = admin_cli(runner, &["kill", &victim]).await;
    assert!(ok, "{text}");
}

/// The admin socket's refusal rests on peer credentials, not on the
/// sandbox: with `--sandbox off`, where the thread reads the state dir, it
/// is still refused.
#[tokio::test]
async fn the_admin_socket_refuses_a_thread_with_sandbox_off_too() {
    let (cp, runner) = agent_with(|o| o.arg("--sandbox").arg("off")).await;
    let thread = create_thread(&cp, "a", "t").await;
    let socket = runner.dirs.path().join("state/admin.sock");
    let script = format!(
        "run {}\nrun test -r {}/state.db && echo state-readable",
        dial(&socket, r#"{"cmd":"threads"}"#, ""),
        socket.parent().unwrap().display()
    );
    start_turn(&cp, "m", "a", &thread, &script).await;
    turn_completed(&cp, "m").await;
    let outputs = command_outputs(&replies(&cp, "m"));
    assert_eq!(outputs.len(), 2, "{outputs:#?}");
    assert!(
        outputs[0].contains("ANSWER<{\"error\":\"refused: ") && !outputs[0].contains(&thread),
        "not refused: {}",
        outputs[0]
    );
    assert!(outputs[1].contains("state-readable"), "{}", outputs[1]);
}

#[tokio::test]
async fn idle_clients_do_not_starve_livez() {
    let (_cp, runner) = connected_with(|o| o.arg("--health-addr").arg("127.0.0.1:0")).await;
    let addr = health_addr(&runner).await;
    // Many more connections than the server keeps, each silent or stuck
    // half-way through its headers.
    let mut idle = Vec::new();
    for i in 0..200 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        if i % 2 == 0 {
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
                .await
                .unwrap();
        }
        idle.push(s);
    }
    for _ in 0..5 {
        let answer = tokio::time::timeout(Duration::from_secs(2), raw_get(&addr, "/livez"))
            .await
            .expect("/livez answers while idle clients hold connections");
        assert!(
            answer.starts_with("HTTP/1.0 200") && answer.ends_with("ok\n"),
            "{answer}"
        );
        let ready = tokio::time::timeout(Duration::from_secs(2), raw_get(&addr, "/readyz"))
            .await
            .expect("/readyz answers too");
        assert!(ready.starts_with("HTTP/1.0 200"), "{ready}");
    }
    drop(idle);
}
