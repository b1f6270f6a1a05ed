//! [`MockLlm`]: an OpenAI-compatible Chat Completions server on loopback
//! (hyper 1, HTTP/1.1) that answers with scripted replies, records what it
//! was asked, and checks the bearer key when told one.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::script::{MockReply, Piece, render};

type Body = UnsyncBoxBody<Bytes, std::io::Error>;

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<MockReply>>,
    requests: Mutex<Vec<Value>>,
    expected_key: Mutex<Option<String>>,
    dropped_streams: AtomicUsize,
}

/// Locks, ignoring poisoning (a panicking test thread must not hide the data).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A mock OpenAI-compatible server on `127.0.0.1:<random port>`.
///
/// `POST {base_url}/chat/completions` takes the next scripted [`MockReply`];
/// with none left it answers `500` with a body saying `mock: no scripted
/// reply`. With an expected API key set, a request without
/// `Authorization: Bearer <key>` gets `401` (and consumes no reply). Every
/// request body is recorded. Dropping the `MockLlm` stops the server.
///
/// ```no_run
/// # async fn demo() {
/// use code_agent_engine::testing::{MockLlm, MockReply};
/// let mock = MockLlm::start(vec![MockReply::text("hello")]).await;
/// let base_url = mock.base_url(); // http://127.0.0.1:PORT/v1
/// # let _ = base_url;
/// # }
/// ```
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm").field("addr", &self.addr).finish()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl MockLlm {
    /// Starts the server with these replies queued.
    ///
    /// # Panics
    /// When no loopback port can be bound (test setup failure).
    pub async fn start(responses: Vec<MockReply>) -> MockLlm {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("mock LLM: binding 127.0.0.1:0 failed: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("mock LLM: local_addr failed: {e}"));
        let shared = Arc::new(Shared::default());
        lock(&shared.replies).extend(responses);
        let shutdown = CancellationToken::new();
        tokio::spawn(accept_loop(listener, shared.clone(), shutdown.clone()));
        MockLlm {
            addr,
            shared,
            shutdown,
        }
    }

    /// Starts the server requiring `Authorization: Bearer <api_key>`.
    pub async fn start_with_api_key(responses: Vec<MockReply>, api_key: &str) -> MockLlm {
        let mock = MockLlm::start(responses).await;
        mock.expect_api_key(Some(api_key));
        mock
    }

    /// Requires this bearer key from now on (`None`: accept any or none).
    pub fn expect_api_key(&self, api_key: Option<&str>) {
        *lock(&self.shared.expected_key) = api_key.map(str::to_owned);
    }

    /// The base URL to configure a client with: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues one more reply.
    pub fn push(&self, reply: MockReply) {
        lock(&self.shared.replies).push_back(reply);
    }

    /// The bodies of the completion requests received so far, in order
    /// (including ones refused with 401; a body that is not JSON is recorded
    /// as a JSON string).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.requests).clone()
    }

    /// How many completion requests arrived.
    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    /// How many scripted replies are still queued.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.replies).len()
    }

    /// How many streamed replies were dropped before their end was sent
    /// (the client went away, e.g. on cancellation).
    pub fn dropped_streams(&self) -> usize {
        self.shared.dropped_streams.load(Ordering::SeqCst)
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "mock LLM: accept failed");
                    continue;
                }
            },
        };
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let for_requests = shutdown.clone();
            let service = service_fn(move |req| handle(req, shared.clone(), for_requests.clone()));
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = shutdown.cancelled() => {}
                _ = conn => {}
            }
        });
    }
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) -> Result<Response<Body>, Infallible> {
    if req.method() != Method::POST || !req.uri().path().ends_with("/chat/completions") {
        return Ok(json_response(
            StatusCode::NOT_FOUND,
            &json!({ "error": { "message": format!("mock: no route {} {}", req.method(), req.uri().path()) } }),
        ));
    }
    let authorization = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                &json!({ "error": { "message": format!("mock: reading the body: {e}") } }),
            ));
        }
    };
    let parsed = serde_json::from_slice::<Value>(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let model = parsed
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_owned();
    lock(&shared.requests).push(parsed);

    let expected = lock(&shared.expected_key).clone();
    if let Some(key) = expected
        && authorization.as_deref() != Some(format!("Bearer {key}").as_str())
    {
        return Ok(json_response(
            StatusCode::UNAUTHORIZED,
            &json!({ "error": {
                "message": "mock: missing or incorrect API key",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }}),
        ));
    }

    let reply = lock(&shared.replies).pop_front();
    let response = match reply {
        None => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({ "error": { "message": "mock: no scripted reply" } }),
        ),
        Some(MockReply::Json(value)) => json_response(StatusCode::OK, &value),
        Some(MockReply::Error {
            status,
            body,
            retry_after,
        }) => error_response(status, body, retry_after),
        Some(MockReply::Hang) => {
            shutdown.cancelled().await;
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({ "error": { "message": "mock: shutting down" } }),
            )
        }
        Some(MockReply::Stream(chunks)) => sse_response(render(&chunks, &model), shared.clone()),
    };
    Ok(response)
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn error_response(status: u16, body: String, retry_after: Option<u64>) -> Response<Body> {
    let is_json = serde_json::from_str::<Value>(&body).is_ok();
    let mut response = Response::new(full(body));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if is_json {
        "application/json"
    } else {
        "text/plain"
    };
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(secs) = retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// Counts the stream as dropped unless it was sent to the end.
struct DropGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl DropGuard {
    fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.dropped_streams.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn sse_response(pieces: Vec<Piece>, shared: Arc<Shared>) -> Response<Body> {
    let state = (
        VecDeque::from(pieces),
        DropGuard {
            shared,
            finished: false,
        },
    );
    let frames = futures::stream::unfold(state, |(mut pieces, mut guard)| async move {
        loop {
            match pieces.pop_front() {
                None => {
                    guard.finish();
                    return None;
                }
                Some(Piece::Sleep(d)) => tokio::time::sleep(d).await,
                Some(Piece::Bytes(b)) => {
                    return Some((Ok(Frame::data(Bytes::from(b))), (pieces, guard)));
                }
                Some(Piece::Abort) => {
                    // Pending once so hyper flushes what was sent so far;
                    // then the error makes it close the connection.
                    tokio::task::yield_now().await;
                    // Not a client drop: the script broke the stream off.
                    guard.finish();
                    pieces.clear();
                    let err = std::io::Error::other("mock: stream aborted by the script");
                    return Some((Err(err), (pieces, guard)));
                }
            }
        }
    });
    let mut response = Response::new(StreamBody::new(frames.boxed()).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}
