//! The TLS configuration of MCP HTTP clients and of the engine's model
//! clients: rustls with the `ring` provider and the platform verifier (the
//! system trust store), built once per process and shared by both.

use std::sync::{Arc, OnceLock};

/// rustls for HTTPS (MCP servers, model APIs), or why it cannot be built.
pub fn config() -> Result<rustls::ClientConfig, String> {
    static CONFIG: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
                .map_err(|e| format!("loading the platform certificate verifier: {e}"))?;
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS protocol versions: {e}"))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Ok(config)
        })
        .clone()
}
