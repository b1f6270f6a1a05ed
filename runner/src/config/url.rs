//! The control-plane URL: scheme (TLS or not), origin and path prefix.

/// Where the control plane is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlaneUrl {
    /// `scheme://host:port`, what the transport connects to.
    pub origin: String,
    /// The path every RPC is prefixed with (`/grpc`), empty for none.
    pub path_prefix: String,
    /// Whether it is `https://`.
    pub tls: bool,
    /// The host name (for TLS).
    pub host: String,
}

impl ControlPlaneUrl {
    /// The TCP port dialled: the URL's, else 443 (`https`) or 80.
    pub fn port(&self) -> u16 {
        self.origin
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.port_u16())
            .unwrap_or(if self.tls { 443 } else { 80 })
    }

    /// Parses `http(s)://host[:port][/prefix]`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let uri: http::Uri = text
            .parse()
            .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("{text:?} must start with http:// or https://")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{text:?} has no host"))?;
        if uri.query().is_some() {
            return Err(format!("{text:?} must not have a query"));
        }
        let path_prefix = uri.path().trim_end_matches('/').to_owned();
        Ok(Self {
            origin: format!("{}://{}", if tls { "https" } else { "http" }, authority),
            path_prefix,
            tls,
            host: authority.host().to_owned(),
        })
    }
}
