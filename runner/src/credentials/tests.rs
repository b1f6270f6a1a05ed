//! The credential socket over a real Unix socket, with an in-memory token
//! table standing in for the broker.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::ask;
use super::protocol::{Answer, Op, Request, USERNAME};
use super::*;

#[derive(Default)]
struct Table {
    host: String,
    /// owner/repo → (installation, token)
    repos: Mutex<HashMap<String, (i64, String)>>,
    invalidated: Mutex<Vec<i64>>,
}

#[async_trait]
impl Tokens for Table {
    fn git_host(&self) -> String {
        self.host.clone()
    }
    async fn token(&self, owner: &str, repo: &str) -> Result<IssuedToken, String> {
        let repos = self.repos.lock().unwrap();
        let key = format!("{owner}/{repo}");
        repos
            .get(&key)
            .map(|(id, token)| IssuedToken {
                installation_id: *id,
                token: token.clone(),
            })
            .ok_or_else(|| format!("no GitHub installation covers {key}"))
    }
    fn invalidate(&self, installation_id: i64) {
        self.invalidated.lock().unwrap().push(installation_id);
    }
}

const TOKEN: &str = "ghs_test_token_0123456789";

fn table(host: &str) -> Arc<Table> {
    let t = Table {
        host: host.into(),
        ..Table::default()
    };
    t.repos
        .lock()
        .unwrap()
        .insert("octo/hello".into(), (7, TOKEN.into()));
    Arc::new(t)
}

fn known_threads() -> ThreadCheck {
    Arc::new(|t: &str| t == "thr-known")
}

fn request(op: Op, thread: &str, protocol: &str, host: &str, path: &str) -> Request {
    Request {
        op,
        thread: thread.into(),
        protocol: protocol.into(),
        host: host.into(),
        path: path.into(),
        password: None,
    }
}

/// `ask` runs blocking I/O: off the runtime's worker.
async fn ask_async(socket: &Path, req: Request) -> Answer {
    let socket = socket.to_owned();
    tokio::task::spawn_blocking(move || ask(&socket, &req, Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn get_answers_the_covering_token_for_a_known_thread_only() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = table("github.com");
    let server = CredentialServer::start(dir.path(), tokens.clone(), known_threads()).unwrap();
    let sock = server.path().to_owned();

    let ok = ask_async(
        &sock,
        request(
            Op::Get,
            "thr-known",
            "https",
            "github.com",
            "octo/hello.git",
        ),
    )
    .await;
    assert_eq!(ok.username.as_deref(), Some(USERNAME));
    assert_eq!(ok.password.as_deref(), Some(TOKEN));

    for (req, why) in [
        (
            request(
                Op::Get,
                "thr-other",
                "https",
                "github.com",
                "octo/hello.git",
            ),
            "unknown thread",
        ),
        (
            request(Op::Get, "../x", "https", "github.com", "octo/hello.git"),
            "thread:",
        ),
        (
            request(
                Op::Get,
                "thr-known",
                "https",
                "evil.example",
                "octo/hello.git",
            ),
            "not the GitHub host",
        ),
        (
            request(Op::Get, "thr-known", "http", "github.com", "octo/hello.git"),
            "not https",
        ),
        (
            request(Op::Get, "thr-known", "https", "github.com", ""),
            "owner/repo",
        ),
        (
            request(Op::Get, "thr-known", "https", "github.com", "octo/other"),
            "no GitHub installation covers octo/other",
        ),
    ] {
        let answer = ask_async(&sock, req.clone()).await;
        assert_eq!(answer.password, None, "{req:?}");
        let note = answer.note.unwrap_or_default();
        assert!(note.contains(why), "{req:?}: {note}");
    }
    server.stop().await;
}

#[tokio::test]
async fn erase_invalidates_only_the_current_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = table("127.0.0.1:9");
    let server = CredentialServer::start(dir.path(), tokens.clone(), known_threads()).unwrap();
    let sock = server.path().to_owned();
    // http is fine for a loopback git host.
    let mut erase = request(Op::Erase, "thr-known", "http", "127.0.0.1:9", "octo/hello");
    erase.password = Some("ghs_an_older_token_000".into());
    assert_eq!(ask_async(&sock, erase.clone()).await, Answer::default());
    assert!(tokens.invalidated.lock().unwrap().is_empty());
    erase.password = Some(TOKEN.into());
    assert_eq!(ask_async(&sock, erase).await, Answer::default());
    assert_eq!(*tokens.invalidated.lock().unwrap(), vec![7]);
    server.stop().await;
}

#[tokio::test]
async fn socket_is_private_and_removed_on_stop() {
    let dir = tempfile::tempdir().unwrap();
    let server = CredentialServer::start(dir.path(), table("github.com"), known_threads()).unwrap();
    let sock = server.path().to_owned();
    assert_eq!(sock, socket_path(dir.path()));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sock), 0o600);
    assert_eq!(mode(sock.parent().unwrap()), 0o700);
    server.stop().await;
    assert!(!sock.exists());
    // A stale socket from a crashed runner is replaced.
    let first = CredentialServer::start(dir.path(), table("github.com"), known_threads()).unwrap();
    std::mem::forget(first);
    let second = CredentialServer::start(dir.path(), table("github.com"), known_threads()).unwrap();
    let answer = ask_async(
        second.path(),
        request(Op::Get, "thr-known", "https", "github.com", "octo/hello"),
    )
    .await;
    assert_eq!(answer.password.as_deref(), Some(TOKEN));
    drop(second);
    assert!(!sock.exists());
}

/// A `cred` that is a symlink (to a directory others may read) is refused,
/// not followed and chmod-ed.
#[tokio::test]
async fn a_symlinked_socket_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::set_permissions(elsewhere.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("cred")).unwrap();
    let err = CredentialServer::start(dir.path(), table("github.com"), known_threads())
        .err()
        .expect("a symlinked directory is refused");
    assert!(
        matches!(err, CredentialError::Dir { .. }) && err.to_string().contains("symlink"),
        "{err}"
    );
    let mode = std::fs::metadata(elsewhere.path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755, "the symlink's target is left alone");
    assert!(!elsewhere.path().join("git.sock").exists());
}

#[tokio::test]
async fn a_too_long_path_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("d".repeat(100));
    let err = CredentialServer::start(&deep, table("github.com"), known_threads())
        .err()
        .expect("too long");
    let text = err.to_string();
    assert!(
        text.contains("107-byte limit") && text.contains("state_dir"),
        "{text}"
    );
}

#[tokio::test]
async fn oversized_and_malformed_requests_get_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = CredentialServer::start(dir.path(), table("github.com"), known_threads()).unwrap();
    for (body, answered) in [
        (vec![b'x'; protocol::MAX_REQUEST_BYTES + 10], false),
        (b"{not json}\n".to_vec(), true),
    ] {
        let mut stream = tokio::net::UnixStream::connect(server.path())
            .await
            .unwrap();
        // The server may stop reading (and close) before all is written.
        let _ = stream.write_all(&body).await;
        let _ = stream.shutdown().await;
        let mut out = String::new();
        // An oversized request is dropped: closed (or reset) unanswered.
        let _ = stream.read_to_string(&mut out).await;
        if answered {
            let answer: Answer = serde_json::from_str(out.trim()).unwrap();
            assert_eq!(answer.password, None);
            assert!(answer.note.unwrap().contains("malformed"));
        } else {
            assert_eq!(out, "");
        }
    }
    // Still serving.
    let answer = ask_async(
        server.path(),
        request(Op::Get, "thr-known", "https", "github.com", "octo/hello"),
    )
    .await;
    assert_eq!(answer.password.as_deref(), Some(TOKEN));
}
