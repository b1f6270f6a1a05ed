//! The credential socket over a real Unix socket, with an in-memory token
//! table standing in for the broker: it answers the holder of a live
//! thread's capability, for that thread only, and rate-limits costly
//! requests per thread.

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
    /// Whether `is_cached` says yes (every request costs nothing).
    cached: bool,
    /// Calls of `token`.
    asked: Mutex<usize>,
}

#[async_trait]
impl Tokens for Table {
    fn git_host(&self) -> String {
        self.host.clone()
    }
    async fn token(&self, owner: &str, repo: &str) -> Result<IssuedToken, String> {
        *self.asked.lock().unwrap() += 1;
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
    fn is_cached(&self, _owner: &str, _repo: &str) -> bool {
        self.cached
    }
    fn invalidate(&self, token: &str) -> Option<i64> {
        let id = self
            .repos
            .lock()
            .unwrap()
            .values()
            .find(|(_, t)| t == token)
            .map(|(id, _)| *id)?;
        self.invalidated.lock().unwrap().push(id);
        Some(id)
    }
}

const TOKEN: &str = "ghs_test_token_0123456789";

fn table(host: &str) -> Arc<Table> {
    table_with(host, true)
}

fn table_with(host: &str, cached: bool) -> Arc<Table> {
    let t = Table {
        host: host.into(),
        cached,
        ..Table::default()
    };
    t.repos
        .lock()
        .unwrap()
        .insert("octo/hello".into(), (7, TOKEN.into()));
    Arc::new(t)
}

fn known_threads() -> ThreadCheck {
    Arc::new(|t: &str| t == "thr-known" || t == "thr-second")
}

/// A server in `dir` with capabilities issued for the two known threads
/// (and for `thr-gone`, which is not live).
struct Fixture {
    server: CredentialServer,
    caps: Arc<Capabilities>,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn start(tokens: Arc<Table>, options: ServerOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let caps = Arc::new(Capabilities::new(None));
        for t in ["thr-known", "thr-second", "thr-gone"] {
            caps.issue(t, &dir.path().join(t)).unwrap();
        }
        let server =
            CredentialServer::start(dir.path(), tokens, known_threads(), caps.clone(), options)
                .unwrap();
        Self { server, caps, dir }
    }

    /// `thread`'s capability, read from its file as the helper does.
    fn capability(&self, thread: &str) -> String {
        std::fs::read_to_string(capability_file(&self.dir.path().join(thread))).unwrap()
    }

    /// A request presenting `thread`'s capability (and naming `thread`).
    fn request(&self, op: Op, thread: &str, protocol: &str, host: &str, path: &str) -> Request {
        let mut r = request(op, thread, protocol, host, path);
        r.capability = self.capability(thread);
        r
    }
}

/// A request naming `thread` without any capability.
fn request(op: Op, thread: &str, protocol: &str, host: &str, path: &str) -> Request {
    Request {
        op,
        capability: String::new(),
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
async fn get_answers_the_covering_token_for_the_capability_holder_only() {
    let tokens = table("github.com");
    let f = Fixture::start(tokens.clone(), ServerOptions::default());
    let sock = f.server.path().to_owned();

    let ok = ask_async(
        &sock,
        f.request(
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
    // The thread name is optional: the capability says which thread asks.
    let mut anonymous = f.request(Op::Get, "thr-known", "https", "github.com", "octo/hello");
    anonymous.thread.clear();
    assert_eq!(
        ask_async(&sock, anonymous).await.password.as_deref(),
        Some(TOKEN)
    );

    let mut stolen_name = f.request(Op::Get, "thr-second", "https", "github.com", "octo/hello");
    stolen_name.thread = "thr-known".into();
    for (req, why) in [
        // A live thread's id, without its capability: nothing.
        (
            request(
                Op::Get,
                "thr-known",
                "https",
                "github.com",
                "octo/hello.git",
            ),
            "no valid thread capability",
        ),
        // A made-up capability.
        (
            Request {
                capability: "0".repeat(64),
                ..request(Op::Get, "thr-known", "https", "github.com", "octo/hello")
            },
            "no valid thread capability",
        ),
        // Another thread's capability naming this thread.
        (stolen_name, "not the named thread's"),
        // The capability of a thread that is no longer live.
        (
            f.request(Op::Get, "thr-gone", "https", "github.com", "octo/hello"),
            "unknown thread",
        ),
        (
            f.request(
                Op::Get,
                "thr-known",
                "https",
                "evil.example",
                "octo/hello.git",
            ),
            "not the GitHub host",
        ),
        (
            f.request(Op::Get, "thr-known", "http", "github.com", "octo/hello.git"),
            "not https",
        ),
        (
            f.request(Op::Get, "thr-known", "https", "github.com", ""),
            "owner/repo",
        ),
        (
            f.request(Op::Get, "thr-known", "https", "github.com", "octo/other"),
            "no GitHub installation covers octo/other",
        ),
    ] {
        let answer = ask_async(&sock, req.clone()).await;
        assert_eq!(answer.password, None, "{req:?}");
        let note = answer.note.unwrap_or_default();
        assert!(note.contains(why), "{req:?}: {note}");
    }
    // The dead thread's capability was revoked when it was presented.
    assert_eq!(f.caps.len(), 2);
    // A revoked capability (the thread was deleted) gets nothing.
    let old = f.capability("thr-second");
    f.caps.revoke("thr-second");
    let answer = ask_async(
        &sock,
        Request {
            capability: old,
            ..request(Op::Get, "thr-second", "https", "github.com", "octo/hello")
        },
    )
    .await;
    assert_eq!(answer.password, None);
    f.server.stop().await;
}

#[tokio::test]
async fn erase_invalidates_only_the_current_token() {
    let tokens = table("127.0.0.1:9");
    let f = Fixture::start(tokens.clone(), ServerOptions::default());
    let sock = f.server.path().to_owned();
    // http is fine for a loopback git host.
    let mut erase = f.request(Op::Erase, "thr-known", "http", "127.0.0.1:9", "octo/hello");
    erase.password = Some("ghs_an_older_token_000".into());
    assert_eq!(ask_async(&sock, erase.clone()).await, Answer::default());
    assert!(tokens.invalidated.lock().unwrap().is_empty());
    erase.password = Some(TOKEN.into());
    assert_eq!(ask_async(&sock, erase).await, Answer::default());
    assert_eq!(*tokens.invalidated.lock().unwrap(), vec![7]);
    // Without the capability, erase does nothing either.
    let mut bare = request(Op::Erase, "thr-known", "http", "127.0.0.1:9", "octo/hello");
    bare.password = Some(TOKEN.into());
    ask_async(&sock, bare).await;
    assert_eq!(tokens.invalidated.lock().unwrap().len(), 1);
    f.server.stop().await;
}

/// Requests that would mint (not cached) and erases are limited per
/// thread; a limited thread does not slow another, and cache hits are
/// never limited.
#[tokio::test]
async fn costly_requests_are_rate_limited_per_thread() {
    let before = crate::observe::metrics::render(crate::observe::metrics::Scraped::default());
    let count = |text: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix("agent_runner_git_credential_rate_limited_total ")?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    let limit = RateLimit {
        burst: 3,
        refill: Duration::from_secs(3600),
    };
    let tokens = table_with("github.com", false);
    let f = Fixture::start(
        tokens.clone(),
        ServerOptions {
            rate_limit: limit,
            ..ServerOptions::default()
        },
    );
    let sock = f.server.path().to_owned();
    let get = |t: &str| f.request(Op::Get, t, "https", "github.com", "octo/hello");
    for _ in 0..3 {
        assert_eq!(
            ask_async(&sock, get("thr-known")).await.password.as_deref(),
            Some(TOKEN)
        );
    }
    let limited = ask_async(&sock, get("thr-known")).await;
    assert_eq!(limited.password, None);
    let note = limited.note.unwrap_or_default();
    assert!(
        note.contains("rate limited") && note.contains("try again"),
        "{note}"
    );
    assert_eq!(
        *tokens.asked.lock().unwrap(),
        3,
        "the limited request never reached the broker"
    );
    // An erase is costly too.
    let mut erase = f.request(Op::Erase, "thr-known", "https", "github.com", "octo/hello");
    erase.password = Some(TOKEN.into());
    ask_async(&sock, erase).await;
    assert!(
        tokens.invalidated.lock().unwrap().is_empty(),
        "a limited erase does nothing"
    );
    // Another thread has its own bucket.
    assert_eq!(
        ask_async(&sock, get("thr-second"))
            .await
            .password
            .as_deref(),
        Some(TOKEN)
    );
    let after = crate::observe::metrics::render(crate::observe::metrics::Scraped::default());
    assert!(count(&after) >= count(&before) + 2.0, "{after}");
    f.server.stop().await;

    // Cache hits cost nothing: never limited.
    let f = Fixture::start(
        table("github.com"),
        ServerOptions {
            rate_limit: limit,
            ..ServerOptions::default()
        },
    );
    for _ in 0..10 {
        let answer = ask_async(
            f.server.path(),
            f.request(Op::Get, "thr-known", "https", "github.com", "octo/hello"),
        )
        .await;
        assert_eq!(answer.password.as_deref(), Some(TOKEN));
    }
}

#[tokio::test]
async fn socket_is_private_and_removed_on_stop() {
    let f = Fixture::start(table("github.com"), ServerOptions::default());
    let dir = f.dir.path().to_owned();
    let sock = f.server.path().to_owned();
    assert_eq!(sock, socket_path(&dir));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sock), 0o600);
    assert_eq!(mode(sock.parent().unwrap()), 0o700);
    let caps = f.caps.clone();
    let cap = f.capability("thr-known");
    f.server.stop().await;
    assert!(!sock.exists());
    // A stale socket from a crashed runner is replaced.
    let start = || {
        CredentialServer::start(
            &dir,
            table("github.com"),
            known_threads(),
            caps.clone(),
            ServerOptions::default(),
        )
        .unwrap()
    };
    std::mem::forget(start());
    let second = start();
    let answer = ask_async(
        second.path(),
        Request {
            capability: cap,
            ..request(Op::Get, "thr-known", "https", "github.com", "octo/hello")
        },
    )
    .await;
    assert_eq!(answer.password.as_deref(), Some(TOKEN));
    drop(second);
    assert!(!sock.exists());
}

/// With agents running as another user, that user can reach the socket
/// (0666 in 0711); the capability is still what authenticates.
#[tokio::test]
async fn an_extra_peer_uid_opens_the_socket_to_that_user() {
    let f = Fixture::start(
        table("github.com"),
        ServerOptions {
            extra_peer_uid: Some(65534),
            ..ServerOptions::default()
        },
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(f.server.path()), 0o666);
    assert_eq!(mode(f.server.path().parent().unwrap()), 0o711);
    let answer = ask_async(
        f.server.path(),
        request(Op::Get, "thr-known", "https", "github.com", "octo/hello"),
    )
    .await;
    assert_eq!(answer.password, None);
}

fn start_in(dir: &Path) -> Result<CredentialServer, CredentialError> {
    CredentialServer::start(
        dir,
        table("github.com"),
        known_threads(),
        Arc::new(Capabilities::new(None)),
        ServerOptions::default(),
    )
}

/// A `cred` that is a symlink (to a directory others may read) is refused,
/// not followed and chmod-ed.
#[tokio::test]
async fn a_symlinked_socket_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::set_permissions(elsewhere.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("cred")).unwrap();
    let err = start_in(dir.path())
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
    let err = start_in(&deep).err().expect("too long");
    let text = err.to_string();
    assert!(
        text.contains("107-byte limit") && text.contains("state_dir"),
        "{text}"
    );
}

#[tokio::test]
async fn oversized_and_malformed_requests_get_nothing() {
    let f = Fixture::start(table("github.com"), ServerOptions::default());
    for (body, answered) in [
        (vec![b'x'; protocol::MAX_REQUEST_BYTES + 10], false),
        (b"{not json}\n".to_vec(), true),
    ] {
        let mut stream = tokio::net::UnixStream::connect(f.server.path())
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
        f.server.path(),
        f.request(Op::Get, "thr-known", "https", "github.com", "octo/hello"),
    )
    .await;
    assert_eq!(answer.password.as_deref(), Some(TOKEN));
}
