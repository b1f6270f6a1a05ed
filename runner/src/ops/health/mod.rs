//! The operator's HTTP endpoints, on `--health-addr`:
//!
//! | path | answer |
//! |---|---|
//! | `/livez` | 200 while the async runtime answers requests at all |
//! | `/readyz` | 200 when registered, the ControlChannel is open and the runner is not draining; 503 otherwise, the body says why |
//! | `/metrics` | Prometheus metrics ([`crate::observe::metrics`]) |
//! | `/status` | [`crate::ops::status::Status`] as JSON |
//!
//! Served with hyper 1 (HTTP/1.1 only: what kubelet probes, Prometheus and
//! `curl` speak) on hyper-util's tokio glue, both already in the build via
//! tonic. axum would have been one more framework for four GET routes; a
//! `match` on the path is all the routing needed.

pub mod client;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::HealthListen;
use crate::observe::link_state::{LinkReport, LinkState};
use crate::tasks::context::Runtime;
use crate::{host::procs, observe::metrics, ops::status};

/// Connections open at once. The accept loop never waits for a free slot:
/// at the limit the oldest open connection is closed, so idle or slow
/// clients (agents can reach this port too) cannot keep `/livez` and
/// `/readyz` from being answered.
const MAX_CONNECTIONS: usize = 64;

/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long any one connection may stay open (one request each: no
/// keep-alive), whether or not hyper's header timer has started.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(15);

/// Listen on `listen`. A taken default address is only a warning (`None`:
/// the runner goes on without endpoints); a taken explicit one is an error.
pub async fn bind(listen: HealthListen) -> anyhow::Result<Option<TcpListener>> {
    match TcpListener::bind(listen.addr).await {
        Ok(listener) => Ok(Some(listener)),
        Err(e) if !listen.explicit => {
            tracing::warn!(
                addr = %listen.addr,
                error = %e,
                "health endpoints off: cannot listen on the default health_addr (set --health-addr to choose another, or empty to silence this)"
            );
            Ok(None)
        }
        Err(e) => Err(anyhow::anyhow!(
            "health_addr: listening on {}: {e}",
            listen.addr
        )),
    }
}

/// The running endpoints.
pub struct HealthServer {
    addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

struct Shared {
    rt: Arc<Runtime>,
    link: watch::Receiver<LinkState>,
    report: Arc<LinkReport>,
}

impl HealthServer {
    /// Serve on `listener` until [`HealthServer::stop`].
    pub fn start(
        listener: TcpListener,
        rt: Arc<Runtime>,
        link: watch::Receiver<LinkState>,
        report: Arc<LinkReport>,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared { rt, link, report });
        let task = tokio::spawn(accept_loop(listener, shared, stop.clone()));
        tracing::info!(%addr, "health endpoints listening on http://{addr} (/livez /readyz /metrics /status)");
        Ok(Self { addr, stop, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting; connections in flight finish on their own.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    let open = Arc::new(Open::default());
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, _peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: pause instead of spinning.
                tracing::warn!(error = %e, "health endpoints: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (id, closed) = open.admit(MAX_CONNECTIONS);
        let shared = shared.clone();
        let open = open.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(&shared, req).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = closed.cancelled() => {
                    tracing::debug!("health endpoints: oldest connection closed for a new one");
                }
                served = tokio::time::timeout(CONNECTION_DEADLINE, served) => match served {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(error = %e, "health endpoints: connection ended with an error"),
                    Err(_) => tracing::debug!("health endpoints: connection past its deadline closed"),
                },
            }
            open.leave(id);
        });
    }
}

/// The open connections, oldest first, each with the token that closes it.
#[derive(Default)]
struct Open {
    by_id: Mutex<(u64, BTreeMap<u64, CancellationToken>)>,
}

impl Open {
    /// Registers a new connection, closing the oldest ones beyond `max`.
    fn admit(&self, max: usize) -> (u64, CancellationToken) {
        let mut guard = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        let (next, open) = &mut *guard;
        while open.len() >= max.max(1) {
            match open.pop_first() {
                Some((_, oldest)) => oldest.cancel(),
                None => break,
            }
        }
        let id = *next;
        *next += 1;
        let token = CancellationToken::new();
        open.insert(id, token.clone());
        (id, token)
    }

    /// Forgets a connection that ended.
    fn leave(&self, id: u64) {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .remove(&id);
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    response
}

const TEXT: &str = "text/plain; charset=utf-8";

async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET\n");
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let rt = &shared.rt;
    match req.uri().path() {
        "/livez" => reply(StatusCode::OK, TEXT, "ok\n"),
        "/readyz" => {
            let link = *shared.link.borrow();
            match status::readiness(link, rt.is_draining()) {
                Ok(()) => reply(StatusCode::OK, TEXT, "ready\n"),
                Err(why) => reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{why}\n")),
            }
        }
        "/metrics" => {
            let outbox = rt.outbox.stats();
            let scraped = metrics::Scraped {
                outbox_depth: outbox.depth,
                delivery_unsettled: outbox.unsettled,
                child_processes: count_processes().await,
            };
            reply(
                StatusCode::OK,
                metrics::CONTENT_TYPE,
                metrics::render(scraped),
            )
        }
        "/status" => {
            let link = *shared.link.borrow();
            let problem = shared.report.snapshot();
            let report = status::collect(rt, link, &problem, count_processes().await);
            match serde_json::to_vec_pretty(&report) {
                Ok(json) => reply(StatusCode::OK, "application/json", json),
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    TEXT,
                    format!("encoding the status: {e}\n"),
                ),
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found; try /livez /readyz /metrics /status\n",
        ),
    }
}

/// Walking `/proc` reads many small files: off the async workers.
async fn count_processes() -> Option<usize> {
    tokio::task::spawn_blocking(procs::live_descendants)
        .await
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_closes_the_oldest_connection() {
        let open = Open::default();
        let (a, ta) = open.admit(2);
        let (_b, tb) = open.admit(2);
        assert!(!ta.is_cancelled());
        let (_c, tc) = open.admit(2);
        assert!(ta.is_cancelled() && !tb.is_cancelled() && !tc.is_cancelled());
        open.leave(a);
        let (_d, _) = open.admit(2);
        assert!(tb.is_cancelled() && !tc.is_cancelled());
    }

    #[tokio::test]
    async fn taken_default_port_is_a_warning_taken_explicit_port_an_error() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let default = HealthListen {
            addr,
            explicit: false,
        };
        assert!(bind(default).await.unwrap().is_none());
        let explicit = HealthListen {
            addr,
            explicit: true,
        };
        let err = bind(explicit).await.unwrap_err().to_string();
        assert!(err.starts_with("health_addr:"), "{err}");
    }
}
