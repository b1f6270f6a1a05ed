//! Serving the engine over gRPC on a listener until `shutdown` (or the
//! `Shutdown` RPC) fires; then generations are cancelled and every FILE
//! session is written before returning. Calls without the guard's token
//! are refused as `UNAUTHENTICATED`.

use futures::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic::{Request, Status};

use super::guard::ServeOptions;
use crate::engine::Engine;

/// Serves `engine` on `listener` until `shutdown` is cancelled or a client
/// calls `Shutdown`, with no authentication and no TLS (in-process and
/// test use; `code-agent serve` uses [`serve_with`]).
pub async fn serve(
    engine: Engine,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    serve_with(engine, listener, ServeOptions::default(), shutdown).await
}

/// [`serve`], guarded by `options` (bearer token, TLS).
pub async fn serve_with(
    engine: Engine,
    listener: tokio::net::TcpListener,
    options: ServeOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let incoming = TcpListenerStream::new(listener).map(|accepted| {
        accepted.inspect(|stream| {
            // Small chunks stream out: do not let Nagle hold them back.
            let _ = stream.set_nodelay(true);
        })
    });
    let engine_stop = engine.shutdown_token();
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &options.tls {
        builder = builder
            .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert, &tls.key)))
            .map_err(|e| anyhow::anyhow!("TLS certificate or key: {e}"))?;
    }
    tracing::info!(
        %addr,
        auth = options.token.is_some(),
        tls = options.tls.is_some(),
        "code-agent engine serving"
    );
    let token = options.token;
    let check = move |request: Request<()>| -> Result<Request<()>, Status> {
        match &token {
            None => Ok(request),
            Some(token) => {
                let header = request
                    .metadata()
                    .get("authorization")
                    .map(|v| v.as_bytes());
                if token.admits(header) {
                    Ok(request)
                } else {
                    tracing::warn!("code-agent call without the right bearer token refused");
                    Err(Status::unauthenticated(
                        "a bearer token is required (authorization: Bearer <token>)",
                    ))
                }
            }
        }
    };
    builder
        .layer(tonic::service::InterceptorLayer::new(check))
        .add_service(engine.grpc_service())
        .serve_with_incoming_shutdown(incoming, async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = engine_stop.cancelled() => {}
            }
        })
        .await?;
    engine.shutdown().await;
    tracing::info!("code-agent engine stopped");
    Ok(())
}
