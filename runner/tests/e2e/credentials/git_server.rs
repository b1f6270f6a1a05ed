//! A smart-HTTP git server on loopback for the credential tests: git's own
//! `git-http-backend` (found under `git --exec-path`) run as CGI behind a
//! small hyper server that demands HTTP Basic auth with one token (the
//! installation token the test says is current), or any token a callback
//! accepts (e.g. every live token a mock GitHub API issued).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

/// Decides whether a token (the password of user x-access-token) opens the
/// repository the request's path names (`/owner/repo.git/...`).
type Accept = Box<dyn Fn(&str, &str) -> bool + Send + Sync>;

struct State {
    root: PathBuf,
    backend: PathBuf,
    /// The only token accepted (as the password of user x-access-token),
    /// unless `accept` is set.
    token: Mutex<String>,
    /// When set, decides instead of `token`.
    accept: Option<Accept>,
    /// Requests that carried credentials and were refused.
    refused: AtomicUsize,
    /// Requests that carried the right credentials.
    accepted: AtomicUsize,
}

pub struct GitServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GitServer {
    /// Serve the bare repositories under `root`, accepting only `token`.
    pub async fn start(root: &Path, token: &str) -> Self {
        Self::serve(root, token, None).await
    }

    /// Serve the bare repositories under `root`, accepting the tokens
    /// `accept` says yes to (asked on every request with the token and the
    /// request's path).
    pub async fn start_accepting(
        root: &Path,
        accept: impl Fn(&str, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self::serve(root, "", Some(Box::new(accept))).await
    }

    async fn serve(root: &Path, token: &str, accept: Option<Accept>) -> Self {
        let exec_path = std::process::Command::new("git")
            .arg("--exec-path")
            .output()
            .expect("git --exec-path");
        let exec_path = String::from_utf8(exec_path.stdout).unwrap();
        let backend = Path::new(exec_path.trim()).join("git-http-backend");
        assert!(backend.is_file(), "no {}", backend.display());
        let state = Arc::new(State {
            root: root.to_owned(),
            backend,
            token: Mutex::new(token.to_owned()),
            accept,
            refused: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(req, st.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { addr, state, task }
    }

    /// `127.0.0.1:PORT`: the git host the runner is told about.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    pub fn url(&self, repo: &str) -> String {
        format!("http://{}/{repo}", self.addr)
    }

    /// Accept only `token` from now on.
    pub fn set_token(&self, token: &str) {
        *self.state.token.lock().unwrap() = token.to_owned();
    }

    pub fn refused(&self) -> usize {
        self.state.refused.load(Ordering::SeqCst)
    }

    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_owned())));
    *r.status_mut() = status;
    r
}

async fn handle(
    req: Request<Incoming>,
    st: Arc<State>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let auth = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let path = req.uri().path().to_owned();
    let allowed = |a: &str| {
        basic_password(a).is_some_and(|token| match &st.accept {
            Some(accept) => accept(&token, &path),
            None => token == *st.token.lock().unwrap(),
        })
    };
    match auth {
        Some(a) if allowed(&a) => {
            st.accepted.fetch_add(1, Ordering::SeqCst);
        }
        other => {
            if other.is_some() {
                st.refused.fetch_add(1, Ordering::SeqCst);
            }
            let mut r = text(StatusCode::UNAUTHORIZED, "authentication required\n");
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                "Basic realm=\"test\"".parse().unwrap(),
            );
            return Ok(r);
        }
    }
    Ok(cgi(req, &st)
        .await
        .unwrap_or_else(|e| text(StatusCode::INTERNAL_SERVER_ERROR, &e)))
}

/// The password of an `x-access-token` HTTP Basic `Authorization` value.
fn basic_password(auth: &str) -> Option<String> {
    use base64::Engine as _;
    let encoded = auth.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    (user == "x-access-token").then(|| password.to_owned())
}

/// Run git-http-backend for `req` (CGI/1.1) and turn its output into a
/// response.
async fn cgi(req: Request<Incoming>, st: &State) -> Result<Response<Full<Bytes>>, String> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let mut cmd = tokio::process::Command::new(&st.backend);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", &st.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", &st.root)
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_USER", "x-access-token")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let feed = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let out = child.wait_with_output().await.map_err(|e| e.to_string())?;
    let _ = feed.await;
    let raw = out.stdout;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)))
        .ok_or_else(|| {
            format!(
                "git-http-backend gave no headers: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let head = String::from_utf8_lossy(&raw[..split.0]).into_owned();
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(&raw[split.0 + split.1..])));
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code: u16 = value
                .split_whitespace()
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(500);
            *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
        } else if let (Ok(n), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            value.parse(),
        ) {
            response.headers_mut().append(n, v);
        }
    }
    Ok(response)
}

#[test]
fn basic_password_reads_only_x_access_token() {
    use base64::Engine as _;
    let header = |creds: &str| {
        let encoded = base64::engine::general_purpose::STANDARD.encode(creds);
        format!("Basic {encoded}")
    };
    assert_eq!(
        basic_password(&header("x-access-token:ghs_abc:d")).as_deref(),
        Some("ghs_abc:d")
    );
    assert_eq!(basic_password(&header("someone:ghs_abc")), None);
    assert_eq!(basic_password("Bearer ghs_abc"), None);
    assert_eq!(basic_password("Basic !!!"), None);
}
