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

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::HealthListen;
use crate::observe::link_state::{LinkReport, LinkState};
use crate::tasks::context::Runtime;
use crate::{host::procs, observe::metrics, ops::status};

/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 32;

/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

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
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => tokio::select! {
                    () = stop.cancelled() => return,
                    accepted = listener.accept() => accepted.map(|a| (a, permit)),
                },
                Err(_) => return,
            },
        };
        let ((stream, _peer), permit) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: pause instead of spinning.
                tracing::warn!(error = %e, "health endpoints: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(&shared, req).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "health endpoints: connection ended with an error");
            }
        });
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
