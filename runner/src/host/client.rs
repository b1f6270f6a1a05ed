//! The control-plane client, below everything that talks to the control
//! plane (the link's ControlChannel, the GitHub token source's RPCs).
//!
//! How the runner reaches the control plane: one HTTP/2 channel (TLS when
//! the URL is `https://`, keepalive pings so a dead peer is noticed), every
//! RPC path prefixed with the URL's path, every call carrying
//! `authorization: Bearer <secret>` when a secret is configured, through
//! the outbound proxy when one is configured for it (`crate::util::proxy`).

use std::task::{Context, Poll};

use agent_runner_proto::runner::agent_runner_control_service_client::AgentRunnerControlServiceClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::config::RunConfig;

/// The authenticated control-plane client (path prefix and bearer secret applied to every call).
pub type Client = AgentRunnerControlServiceClient<Service>;

/// The channel under [`Client`], for calls made with a codec of their own
/// (`link::wire`'s ControlChannel): same connection, prefix and secret.
pub type Service = InterceptedService<PathPrefix<Channel>, Auth>;

/// The largest message accepted from the control plane.
pub const MAX_DECODING_MESSAGE_SIZE: usize = 64 * 1024 * 1024;

/// Why a client could not be built from the settings.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The control-plane URL was refused.
    #[error("control_plane_url: {0}")]
    Url(String),
    /// The TLS settings (CA certificate) were refused.
    #[error("tls: {0}")]
    Tls(String),
    /// The secret cannot be sent as a header value.
    #[error("secret: not a valid header value")]
    Secret,
}

/// Build a client; the connection itself is made lazily, on first use, and
/// re-made by the channel after it breaks.
pub fn client(config: &RunConfig) -> Result<Client, TransportError> {
    service(config).map(rpc)
}

/// The generated client over `service` (a clone shares its connection).
/// A setting added here (compression, limits) belongs in `link::wire`'s
/// ControlChannel call too.
pub fn rpc(service: Service) -> Client {
    AgentRunnerControlServiceClient::new(service)
        .max_decoding_message_size(MAX_DECODING_MESSAGE_SIZE)
}

/// Build the client's channel; it connects lazily, on first use, and
/// reconnects after it breaks.
pub fn service(config: &RunConfig) -> Result<Service, TransportError> {
    let url = &config.control_plane;
    let mut endpoint = Endpoint::from_shared(url.origin.clone())
        .map_err(|e| TransportError::Url(e.to_string()))?
        .connect_timeout(std::time::Duration::from_secs(10))
        .http2_keep_alive_interval(config.keepalive_interval)
        .keep_alive_timeout(config.keepalive_timeout)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    if url.tls {
        let mut tls = ClientTlsConfig::new()
            .with_native_roots()
            .domain_name(url.host.clone());
        if let Some(pem) = &config.ca_cert_pem {
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| TransportError::Tls(e.to_string()))?;
    }
    // Through the outbound proxy when one applies to the control plane
    // (CONNECT tunnel; tonic adds TLS on top), else hyper's own connector.
    let channel = if config
        .proxy
        .for_destination(url.tls, &url.host, url.port())
        .is_some()
    {
        endpoint.connect_with_connector_lazy(crate::util::proxy::connect::ProxyConnector::new(
            config.proxy.clone(),
            std::time::Duration::from_secs(10),
        ))
    } else {
        endpoint.connect_lazy()
    };
    let auth = match &config.secret {
        Some(secret) => {
            let mut value: MetadataValue<Ascii> = format!("Bearer {}", secret.expose())
                .parse()
                .map_err(|_| TransportError::Secret)?;
            value.set_sensitive(true);
            Auth(Some(value))
        }
        None => Auth(None),
    };
    let svc = PathPrefix {
        inner: channel,
        prefix: url.path_prefix.clone(),
    };
    Ok(InterceptedService::new(svc, auth))
}

/// Adds the bearer secret to every call.
#[derive(Clone)]
pub struct Auth(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
}

/// Prefixes the path of every request (`/grpc` + `/pkg.Service/Method`).
#[derive(Clone)]
pub struct PathPrefix<S> {
    inner: S,
    prefix: String,
}

impl<S, B> tower::Service<http::Request<B>> for PathPrefix<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if !self.prefix.is_empty() {
            let mut parts = req.uri().clone().into_parts();
            let path = parts
                .path_and_query
                .as_ref()
                .map(|p| p.as_str())
                .unwrap_or("/");
            if let Ok(pq) = format!("{}{}", self.prefix, path).parse() {
                parts.path_and_query = Some(pq);
                if let Ok(uri) = http::Uri::from_parts(parts) {
                    *req.uri_mut() = uri;
                }
            }
        }
        self.inner.call(req)
    }
}
