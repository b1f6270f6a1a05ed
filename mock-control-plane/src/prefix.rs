//! Serving gRPC under a path prefix (`/grpc/companyhelm.runner.v1...`), as
//! control planes behind an HTTP router do: a tower layer in front of tonic's
//! router strips the prefix, and answers `UNIMPLEMENTED` for any path without
//! it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;
use tower::{Layer, Service};

/// `"/grpc"` for `"grpc"`, `"/grpc/"` or `"/grpc"`; `None` for no prefix.
pub(crate) fn normalize(prefix: Option<&str>) -> Option<String> {
    let trimmed = prefix?.trim().trim_matches('/');
    if trimmed.is_empty() {
        None
    } else {
        Some(format!("/{trimmed}"))
    }
}

/// The rest of `path` after `prefix`, when `path` is under it
/// (`/grpc/x` → `/x`; `/grpcx/y` and `/grpc` are not under `/grpc`).
fn strip<'a>(prefix: &str, path: &'a str) -> Option<&'a str> {
    path.strip_prefix(prefix)
        .filter(|rest| rest.starts_with('/'))
}

#[derive(Clone, Debug)]
pub(crate) struct PrefixLayer {
    prefix: Option<String>,
}

impl PrefixLayer {
    /// `prefix` as returned by [`normalize`]; `None` passes everything through.
    pub(crate) fn new(prefix: Option<String>) -> Self {
        PrefixLayer { prefix }
    }
}

impl<S> Layer<S> for PrefixLayer {
    type Service = PrefixService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PrefixService {
            inner,
            prefix: self.prefix.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct PrefixService<S> {
    inner: S,
    prefix: Option<String>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for PrefixService<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<ReqBody>) -> Self::Future {
        if let Some(prefix) = &self.prefix {
            let rewritten = strip(prefix, request.uri().path()).map(|rest| {
                let query = request
                    .uri()
                    .query()
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default();
                let mut parts = request.uri().clone().into_parts();
                parts.path_and_query = format!("{rest}{query}").parse().ok();
                http::Uri::from_parts(parts)
            });
            match rewritten {
                Some(Ok(uri)) => *request.uri_mut() = uri,
                Some(Err(_)) => {
                    let status = Status::internal("could not rewrite the request path");
                    return Box::pin(async move { Ok(status.into_http()) });
                }
                None => {
                    let status = Status::unimplemented(format!(
                        "no such method: {} (this server serves under {prefix})",
                        request.uri().path()
                    ));
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            }
        }
        // The clone is the fresh service; the one polled ready does the call.
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        Box::pin(ready.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_prefixes() {
        assert_eq!(normalize(None), None);
        assert_eq!(normalize(Some("")), None);
        assert_eq!(normalize(Some("/")), None);
        assert_eq!(normalize(Some("grpc")).as_deref(), Some("/grpc"));
        assert_eq!(normalize(Some("/grpc/")).as_deref(), Some("/grpc"));
        assert_eq!(normalize(Some("/a/b")).as_deref(), Some("/a/b"));
    }

    #[test]
    fn strips_only_whole_segments() {
        assert_eq!(strip("/grpc", "/grpc/svc/M"), Some("/svc/M"));
        assert_eq!(strip("/grpc", "/grpcx/svc/M"), None);
        assert_eq!(strip("/grpc", "/grpc"), None);
        assert_eq!(strip("/grpc", "/svc/M"), None);
    }
}
