//! The runner's end of the credential socket: a Unix socket (0600, in a
//! 0700 directory under the state dir; 0666 in a 0711 directory when
//! agents run as another user) that answers `agent-runner git-credential`
//! with installation tokens.
//!
//! Each connection carries one [`Request`] line and gets one [`Answer`]
//! line. Connections run on their own tasks, at most [`MAX_CONNECTIONS`] at
//! once (the accept loop waits for a free slot), each within
//! [`CONNECTION_TIMEOUT`]. Only processes of the runner's own user (and of
//! [`ServerOptions::extra_peer_uid`]) may connect (`SO_PEERCRED`), but what
//! authenticates a request is the thread's capability
//! ([`super::capability`]): the socket answers only for the thread the
//! capability belongs to, never for a thread id alone. Requests that cost
//! GitHub API calls are rate-limited per thread ([`super::limit`]). Log
//! lines name the thread, the repository and the installation, never a
//! token or a capability.
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::capability::Capabilities;
use super::limit::{Limiter, RateLimit};
use super::protocol::{Answer, MAX_REQUEST_BYTES, Op, Request, Target};
use crate::host::workspace::check_id;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 32;
/// How long one connection may take, token minting included.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the helper may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest socket path (`sun_path` is 108 bytes with its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// The socket's directory under the state dir, and its file name: short,
/// to stay far from [`MAX_SOCKET_PATH`].
pub const SOCKET_DIR: &str = "cred";
/// The socket's file name in [`SOCKET_DIR`].
pub const SOCKET_FILE: &str = "git.sock";

/// How the socket is run.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// A user besides the runner's own whose processes may connect: the
    /// user agents run as (`--agent-uid`). The socket and its directory
    /// are then opened to others (0666 in a 0711 directory: connect, not
    /// list) and the peer check accepts that uid too; a request still
    /// needs its thread's capability. `None` (default): the runner's user
    /// only, 0600 in 0700.
    pub extra_peer_uid: Option<u32>,
    /// Per-thread limit on requests that cost GitHub API calls.
    pub rate_limit: RateLimit,
}

/// An installation token as the socket hands it out.
pub struct IssuedToken {
    /// The installation the token is for.
    pub installation_id: i64,
    /// The token.
    pub token: String,
}

/// What the server needs from the token broker (implemented for
/// [`crate::host::github::TokenBroker`]).
#[async_trait]
pub trait Tokens: Send + Sync + 'static {
    /// The host tokens are for (`github.com`, or `host:port`); asked once,
    /// when the server starts.
    fn git_host(&self) -> String;
    /// A token covering `owner/repo` for an agent (in App mode: minted for
    /// that one repository); the error text is shown to git's user.
    async fn token(&self, owner: &str, repo: &str) -> Result<IssuedToken, String>;
    /// Whether [`Tokens::token`] for `owner/repo` would be answered from
    /// the cache, with no call to GitHub or the control plane (requests
    /// that would not are rate-limited).
    fn is_cached(&self, owner: &str, repo: &str) -> bool;
    /// GitHub refused `token`: forget it if it is still cached (the next
    /// request gets a new one); the installation it was of, if it was.
    fn invalidate(&self, token: &str) -> Option<i64>;
}

/// Whether a thread id names a thread of this runner.
pub type ThreadCheck = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Why the socket could not be started.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The socket's path is too long for a Unix socket.
    #[error(
        "credential socket path {path} is {len} bytes, over the {MAX_SOCKET_PATH}-byte limit of Unix sockets; choose a shorter state_dir"
    )]
    PathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// Its directory could not be made safe (0700, ours, not a link).
    #[error("credential socket directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// Binding the socket failed.
    #[error("credential socket {path}: {source}")]
    Bind {
        /// The socket's path.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
}

/// A running credential socket; [`CredentialServer::stop`] (or dropping it)
/// closes it and removes the socket file.
pub struct CredentialServer {
    path: PathBuf,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

struct Ctx {
    tokens: Arc<dyn Tokens>,
    threads: ThreadCheck,
    capabilities: Arc<Capabilities>,
    limiter: Limiter,
    extra_peer_uid: Option<u32>,
    /// [`Tokens::git_host`], asked once: it does not change.
    git_host: String,
}

/// Where the socket of a runner with this state dir lives.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET_DIR).join(SOCKET_FILE)
}

impl CredentialServer {
    /// Listen on [`socket_path`]`(state_dir)`, replacing a stale socket left
    /// by an earlier runner, answering the holders of `capabilities` for
    /// live threads (`threads`). Must be called inside a tokio runtime.
    pub fn start(
        state_dir: &Path,
        tokens: Arc<dyn Tokens>,
        threads: ThreadCheck,
        capabilities: Arc<Capabilities>,
        options: ServerOptions,
    ) -> Result<Self, CredentialError> {
        let (dir_mode, socket_mode) = match options.extra_peer_uid {
            None => (0o700, 0o600),
            Some(_) => (0o711, 0o666),
        };
        let path = socket_path(state_dir);
        let len = path.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(CredentialError::PathTooLong { path, len });
        }
        let dir = state_dir.join(SOCKET_DIR);
        let dir_err = |source| CredentialError::Dir {
            path: dir.clone(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(dir_err)?;
        // An existing directory keeps its owner and mode: it must be a real
        // directory of this user's (not a symlink to somewhere else), then
        // made ours alone.
        let meta = std::fs::symlink_metadata(&dir).map_err(dir_err)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if !meta.file_type().is_dir() || meta.uid() != euid {
            return Err(dir_err(io::Error::other(
                "is not a directory owned by this user (a symlink or another user's); remove it",
            )));
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode))
            .map_err(dir_err)?;
        if let Some(uid) = options.extra_peer_uid {
            warn_untraversable(&dir, uid);
        }
        let bind_err = |source| CredentialError::Bind {
            path: path.clone(),
            source,
        };
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_socket() => {
                std::fs::remove_file(&path).map_err(bind_err)?
            }
            Ok(_) => {
                return Err(bind_err(io::Error::other(
                    "exists and is not a socket; remove it",
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(bind_err(e)),
        }
        let listener = UnixListener::bind(&path).map_err(bind_err)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(socket_mode))
            .map_err(bind_err)?;
        let stop = CancellationToken::new();
        let ctx = Arc::new(Ctx {
            git_host: tokens.git_host(),
            tokens,
            threads,
            capabilities,
            limiter: Limiter::new(options.rate_limit),
            extra_peer_uid: options.extra_peer_uid,
        });
        let task = tokio::spawn(accept_loop(listener, ctx, stop.clone()));
        tracing::info!(socket = %path.display(), "git credential socket listening");
        Ok(Self {
            path,
            stop,
            task: Some(task),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop accepting and remove the socket file. Connections in progress
    /// finish on their own (within [`CONNECTION_TIMEOUT`]).
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let removed = tokio::fs::remove_file(&self.path).await;
        self.removed(removed);
    }

    /// For `Drop`, where nothing can be awaited.
    fn remove_file(&self) {
        self.removed(std::fs::remove_file(&self.path));
    }

    fn removed(&self, result: io::Result<()>) {
        match result {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(socket = %self.path.display(), error = %e, "removing the credential socket failed")
            }
        }
    }
}

impl Drop for CredentialServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            self.stop.cancel();
            task.abort();
            self.remove_file();
        }
    }
}

/// The agents' user must be able to walk to the socket: say which
/// directory above it keeps them out (others' execute bit missing).
fn warn_untraversable(dir: &Path, uid: u32) {
    for ancestor in dir.ancestors().skip(1) {
        match std::fs::metadata(ancestor) {
            Ok(meta) if meta.uid() != uid && meta.mode() & 0o001 == 0 => {
                tracing::warn!(
                    directory = %ancestor.display(),
                    agent_uid = uid,
                    "agents running as another user cannot reach the credential socket: this directory is not traversable by others (chmod o+x)"
                );
                return;
            }
            _ => {}
        }
    }
}

async fn accept_loop(listener: UnixListener, ctx: Arc<Ctx>, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
            () = stop.cancelled() => return,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => return,
        };
        match accepted {
            Ok((stream, _)) => {
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    if tokio::time::timeout(CONNECTION_TIMEOUT, serve(stream, &ctx))
                        .await
                        .is_err()
                    {
                        tracing::warn!("git credential request timed out");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting on the credential socket failed");
                // Out of file descriptors, typically: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn serve(stream: UnixStream, ctx: &Ctx) {
    match stream.peer_cred() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        Ok(peer)
            if peer.uid() == unsafe { libc::geteuid() }
                || Some(peer.uid()) == ctx.extra_peer_uid => {}
        Ok(peer) => {
            tracing::warn!(
                uid = peer.uid(),
                "credential request from another user refused"
            );
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "credential request without peer credentials refused");
            return;
        }
    }
    let (read, mut write) = stream.into_split();
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_REQUEST_BYTES + 1).unwrap_or(u64::MAX);
    let mut reader = BufReader::new(read.take(limit));
    match tokio::time::timeout(READ_TIMEOUT, reader.read_until(b'\n', &mut line)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "reading a credential request failed");
            return;
        }
        Err(_) => {
            tracing::debug!("credential request not sent in time");
            return;
        }
    }
    if line.len() > MAX_REQUEST_BYTES {
        // Unread bytes make closing reset the connection: the helper sees
        // an error, which is all it deserves.
        tracing::warn!(
            limit = MAX_REQUEST_BYTES,
            "credential request over the size limit refused"
        );
        return;
    }
    let answer = match serde_json::from_slice::<Request>(&line) {
        Ok(request) => answer(ctx, request).await,
        Err(e) => {
            tracing::warn!(error = %e, "malformed credential request");
            Answer::nothing(format!("malformed request: {e}"))
        }
    };
    let mut out = match serde_json::to_vec(&answer) {
        Ok(out) => out,
        Err(e) => {
            tracing::error!(error = %e, "encoding a credential answer failed");
            return;
        }
    };
    out.push(b'\n');
    if let Err(e) = write.write_all(&out).await {
        tracing::debug!(error = %e, "sending a credential answer failed");
    }
}

/// The answer to one well-formed request.
async fn answer(ctx: &Ctx, request: Request) -> Answer {
    let Some(thread) = ctx.capabilities.thread_of(&request.capability) else {
        let claimed = check_id("thread", &request.thread)
            .map(|()| request.thread.as_str())
            .unwrap_or("(invalid)");
        tracing::warn!(claimed_thread = %claimed, "credential request without a valid capability refused");
        return Answer::nothing(
            "no valid thread capability was presented (the thread was deleted, the runner restarted, or the capability file is not this thread's); no credentials",
        );
    };
    if !request.thread.is_empty() && request.thread != thread {
        tracing::warn!(thread_id = %thread, "credential request naming another thread than its capability's refused");
        return Answer::nothing("the capability presented is not the named thread's");
    }
    if !(ctx.threads)(&thread) {
        tracing::info!(thread_id = %thread, "credential request for a thread no longer live; capability revoked");
        ctx.capabilities.revoke(&thread);
        ctx.limiter.forget(&thread);
        return Answer::nothing(format!("unknown thread {thread}"));
    }
    let thread = thread.as_str();
    let target = match Target::parse(
        &request.protocol,
        &request.host,
        &request.path,
        &ctx.git_host,
    ) {
        Ok(target) => target,
        Err(why) => {
            tracing::debug!(thread_id = %thread, %why, "no credentials for this URL");
            return Answer::nothing(why);
        }
    };
    let repo = format!("{}/{}", target.owner, target.repo);
    let costly = match request.op {
        Op::Get => !ctx.tokens.is_cached(&target.owner, &target.repo),
        Op::Erase => request.password.is_some(),
    };
    if costly && let Err(wait) = ctx.limiter.take(thread) {
        crate::observe::metrics::git_credential_rate_limited();
        tracing::warn!(thread_id = %thread, %repo, op = ?request.op, "git credential request rate-limited");
        return Answer::nothing(format!(
            "rate limited: this thread asked for too many new tokens (or erased too many); try again in {}s",
            wait.as_secs().max(1)
        ));
    }
    match request.op {
        Op::Get => match ctx.tokens.token(&target.owner, &target.repo).await {
            Ok(issued) => {
                tracing::info!(thread_id = %thread, %repo, installation_id = issued.installation_id, "git credentials issued");
                Answer::credentials(issued.token)
            }
            Err(why) => {
                tracing::warn!(thread_id = %thread, %repo, error = %why, "no git credentials");
                Answer::nothing(why)
            }
        },
        Op::Erase => {
            let Some(refused) = request.password else {
                return Answer::default();
            };
            // Only a token still cached is worth forgetting; an older one
            // was already replaced.
            match ctx.tokens.invalidate(&refused) {
                Some(installation_id) => {
                    tracing::info!(thread_id = %thread, %repo, installation_id, "git refused an installation token; it will be refreshed");
                }
                None => {
                    tracing::debug!(thread_id = %thread, %repo, "git refused a token that is no longer cached");
                }
            }
            Answer::default()
        }
    }
}
