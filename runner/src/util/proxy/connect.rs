//! The HTTP CONNECT tunnel: a TCP connection to the proxy, `CONNECT
//! host:port`, and once the proxy answers 2xx, the same connection carries
//! whatever the caller speaks next (TLS and HTTP/2 for the ControlChannel).
//! A proxy that refuses (403, 407, 502…) or is not there is an error naming
//! the proxy (never its credentials) and its answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::{ProxyConfig, ProxyUrl, authority};

/// Longest proxy answer head read before giving up on it.
const MAX_RESPONSE_HEAD: usize = 16 * 1024;

/// Why a connection through (or around) the proxy failed.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The proxy could not be reached.
    #[error("proxy {proxy}: cannot connect: {source}")]
    Connect {
        /// The proxy, credentials left out.
        proxy: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The proxy answered CONNECT with something other than 2xx.
    #[error("proxy {proxy} refused CONNECT {target}: {answer}")]
    Refused {
        /// The proxy, credentials left out.
        proxy: String,
        /// Where the tunnel was to go.
        target: String,
        /// The proxy's status line.
        answer: String,
    },
    /// The proxy's answer was cut short or not HTTP.
    #[error("proxy {proxy}: bad answer to CONNECT {target}: {why}")]
    BadAnswer {
        /// The proxy, credentials left out.
        proxy: String,
        /// Where the tunnel was to go.
        target: String,
        /// What was wrong.
        why: String,
    },
    /// A direct connection (no proxy, or a `NO_PROXY` match) failed.
    #[error("{target}: {source}")]
    Direct {
        /// Where it dialled.
        target: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The URI had no host.
    #[error("no host in {0}")]
    NoHost(String),
}

/// Open a tunnel to `host:port` through `proxy`.
pub async fn tunnel(proxy: &ProxyUrl, host: &str, port: u16) -> Result<TcpStream, TunnelError> {
    let target = authority(host, port);
    let mut stream = TcpStream::connect(proxy.authority())
        .await
        .map_err(|source| TunnelError::Connect {
            proxy: proxy.to_string(),
            source,
        })?;
    stream.set_nodelay(true).ok();
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = proxy.authorization() {
        request.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    request.push_str("\r\n");
    let bad = |why: String| TunnelError::BadAnswer {
        proxy: proxy.to_string(),
        target: target.clone(),
        why,
    };
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| bad(format!("sending CONNECT: {e}")))?;
    // Read byte by byte up to the blank line: nothing after the head may be
    // consumed, it belongs to the tunnel.
    let mut head = Vec::with_capacity(256);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_RESPONSE_HEAD {
            return Err(bad(format!("answer head over {MAX_RESPONSE_HEAD} bytes")));
        }
        let mut byte = [0u8; 1];
        match stream.read(&mut byte).await {
            Ok(0) => {
                return Err(bad(format!(
                    "connection closed after {} bytes of answer",
                    head.len()
                )));
            }
            Ok(_) => head.push(byte[0]),
            Err(e) => return Err(bad(format!("reading the answer: {e}"))),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let status_line = text.lines().next().unwrap_or_default().trim().to_owned();
    let code = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| bad(format!("not an HTTP status line: {status_line:?}")))?;
    if !(200..300).contains(&code) {
        return Err(TunnelError::Refused {
            proxy: proxy.to_string(),
            target,
            answer: status_line,
        });
    }
    Ok(stream)
}

/// A connector for tonic's `Endpoint::connect_with_connector`: each URI
/// goes through the proxy [`ProxyConfig`] picks for it, or direct. TLS, when
/// the endpoint has it, is added by tonic on top of what this returns.
#[derive(Clone)]
pub struct ProxyConnector {
    proxies: Arc<ProxyConfig>,
    nodelay: bool,
    timeout: Duration,
}

impl ProxyConnector {
    /// A connector using `proxies`.
    pub fn new(proxies: ProxyConfig, timeout: Duration) -> Self {
        Self {
            proxies: Arc::new(proxies),
            nodelay: true,
            timeout,
        }
    }
}

impl tower::Service<http::Uri> for ProxyConnector {
    type Response = TokioIo<TcpStream>;
    type Error = TunnelError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let proxies = self.proxies.clone();
        let nodelay = self.nodelay;
        let timeout = self.timeout;
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| TunnelError::NoHost(uri.to_string()))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let tls = uri.scheme_str() == Some("https");
            let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
            let connect = async {
                match proxies.for_destination(tls, &host, port) {
                    Some((proxy, _)) => tunnel(proxy, &host, port).await,
                    None => {
                        let target = authority(&host, port);
                        let stream = TcpStream::connect(&target)
                            .await
                            .map_err(|source| TunnelError::Direct { target, source })?;
                        stream.set_nodelay(nodelay).ok();
                        Ok(stream)
                    }
                }
            };
            let stream = tokio::time::timeout(timeout, connect).await.map_err(|_| {
                TunnelError::Direct {
                    target: authority(&host, port),
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("connection timed out after {timeout:?}"),
                    ),
                }
            })??;
            Ok(TokioIo::new(stream))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A one-shot proxy on loopback answering CONNECT with `answer`, then
    /// echoing; returns what it received.
    async fn fake_proxy(answer: &'static str) -> (u16, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut b = [0u8; 1];
                if s.read(&mut b).await.unwrap() == 0 {
                    break;
                }
                head.push(b[0]);
            }
            s.write_all(answer.as_bytes()).await.unwrap();
            let mut rest = [0u8; 5];
            if s.read_exact(&mut rest).await.is_ok() {
                s.write_all(&rest).await.unwrap();
            }
            String::from_utf8_lossy(&head).into_owned()
        });
        (port, task)
    }

    #[tokio::test]
    async fn connect_sends_credentials_and_then_carries_bytes() {
        let (port, seen) = fake_proxy("HTTP/1.1 200 Connection established\r\n\r\n").await;
        let proxy = ProxyUrl::parse(&format!("http://me:pw@127.0.0.1:{port}")).unwrap();
        let mut s = tunnel(&proxy, "cp.example", 443).await.unwrap();
        s.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello");
        let head = seen.await.unwrap();
        assert!(
            head.starts_with("CONNECT cp.example:443 HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.contains("Proxy-Authorization: Basic bWU6cHc=\r\n"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn a_refusal_names_the_proxy_but_not_its_credentials() {
        let (port, _seen) = fake_proxy("HTTP/1.1 403 Forbidden\r\n\r\n").await;
        let proxy = ProxyUrl::parse(&format!("http://me:pw@127.0.0.1:{port}")).unwrap();
        let err = tunnel(&proxy, "cp.example", 443)
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "proxy http://<credentials>@127.0.0.1:{port} refused CONNECT cp.example:443: HTTP/1.1 403 Forbidden"
            )
        );
    }
}
