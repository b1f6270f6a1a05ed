//! Serving the engine over gRPC on a listener until `shutdown` (or the
//! `Shutdown` RPC) fires; then generations are cancelled and every FILE
//! session is written before returning.

use futures::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;

/// Serves `engine` on `listener` until `shutdown` is cancelled or a client
/// calls `Shutdown`.
pub async fn serve(
    engine: Engine,
    listener: tokio::net::TcpListener,
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
    tracing::info!(%addr, "code-agent engine serving");
    tonic::transport::Server::builder()
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
