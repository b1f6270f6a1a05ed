//! How the runner configures the `code-agent` adapter: which
//! `CodeAgentService` to drive (the embedded engine, or a remote one) and
//! the adapter's own timings.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The bearer token of a remote engine (`code-agent serve`). `Debug`
/// prints `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(String);

impl AuthToken {
    /// A token (trimmed); `None` when blank.
    pub fn new(token: &str) -> Option<Self> {
        let token = token.trim();
        (!token.is_empty()).then(|| Self(token.to_owned()))
    }

    /// The token itself (for the request header; never log it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthToken(***)")
    }
}

/// Settings of the `code-agent` adapter.
#[derive(Debug, Clone)]
pub struct CodeAgentConfig {
    /// A remote `CodeAgentService` (`http://host:port` or `https://…`).
    /// `None` embeds the engine in this process (no port is opened).
    pub endpoint: Option<String>,
    /// The remote engine's bearer token (sent with every call).
    pub auth_token: Option<AuthToken>,
    /// CA certificate (PEM) that signed an `https://` engine's certificate
    /// (`None`: the system roots).
    pub ca_cert_pem: Option<Vec<u8>>,
    /// The embedded engine's state directory (FILE sessions, providers).
    /// `None` keeps its state in memory. Unused with `endpoint`.
    pub state_dir: Option<PathBuf>,
    /// Longest wait for one unary call (session create, cancel…).
    pub request_timeout: Duration,
    /// Longest wait for the calls `describe()` makes.
    pub describe_timeout: Duration,
    /// After `Cancel`, how long the turn's stream may take to end before the
    /// adapter stops reading it and reports the turn interrupted.
    pub interrupt_grace: Duration,
    /// At most one RUNNING update per streamed item per this interval.
    pub coalesce: Duration,
    /// The embedded engine's model calls go through this proxy (the
    /// runner's `--proxy`). `None`: the environment's `HTTPS_PROXY` /
    /// `HTTP_PROXY` / `NO_PROXY`. Unused with `endpoint`.
    pub model_proxy: Option<code_agent_engine::llm::ModelProxy>,
    /// The engine tools whose calls wait for a person's approval (module
    /// `approvals`), matched without regard to case; empty: none.
    pub approve_tools: Vec<String>,
    /// How long the runner lets an approval wait (its `--approval-timeout`);
    /// the engine's own confirmation timeout is set past it.
    pub approval_timeout: Duration,
}

impl Default for CodeAgentConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            auth_token: None,
            ca_cert_pem: None,
            state_dir: None,
            request_timeout: Duration::from_secs(30),
            describe_timeout: Duration::from_secs(10),
            interrupt_grace: Duration::from_secs(10),
            coalesce: Duration::from_millis(100),
            model_proxy: None,
            approve_tools: Vec::new(),
            approval_timeout: Duration::from_secs(600),
        }
    }
}

/// Check a remote endpoint URL (for the runner's config): `http://` or
/// `https://` with a host.
pub fn check_endpoint(url: &str) -> Result<(), String> {
    let uri: tonic::transport::Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("{url:?} must start with http:// or https://")),
    }
    if uri.authority().is_none() {
        return Err(format!("{url:?} has no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_need_a_scheme_and_host() {
        assert!(check_endpoint("http://127.0.0.1:50051").is_ok());
        assert!(check_endpoint("https://engine.example.com").is_ok());
        assert!(check_endpoint("127.0.0.1:50051").is_err());
        assert!(check_endpoint("ftp://x").is_err());
        assert!(check_endpoint("not a url").is_err());
    }
}
