//! A one-request HTTP/1.1 client for the health endpoints, used by
//! `agent-runner status` (and by the image's HEALTHCHECK through it), so no
//! `curl` is needed to ask a runner how it is.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The address to dial for a listen address: a wildcard (`0.0.0.0`, `[::]`)
/// means "this host", so dial loopback.
pub fn dial_addr(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), listen.port())
        }
        _ => listen,
    }
}

/// `GET path` from the runner at `addr`: the status code and the body.
pub async fn get(addr: SocketAddr, path: &str, timeout: Duration) -> anyhow::Result<(u16, String)> {
    let addr = dial_addr(addr);
    tokio::time::timeout(timeout, fetch(addr, path))
        .await
        .with_context(|| format!("no answer from http://{addr}{path} within {timeout:?}"))?
}

async fn fetch(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let stream = TcpStream::connect(addr).await.with_context(|| {
        format!("cannot reach the runner's health endpoints at {addr} (is it running, with this --health-addr?)")
    })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP handshake")?;
    let driver = tokio::spawn(connection);
    let request = Request::get(path)
        .header(header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .context("building the request")?;
    let response = sender
        .send_request(request)
        .await
        .with_context(|| format!("GET http://{addr}{path}"))?;
    let code = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .with_context(|| format!("reading http://{addr}{path}"))?
        .to_bytes();
    driver.abort();
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_dial_loopback() {
        let a: SocketAddr = "0.0.0.0:9464".parse().unwrap();
        assert_eq!(dial_addr(a).to_string(), "127.0.0.1:9464");
        let a: SocketAddr = "[::]:9464".parse().unwrap();
        assert_eq!(dial_addr(a).to_string(), "[::1]:9464");
        let a: SocketAddr = "10.1.2.3:80".parse().unwrap();
        assert_eq!(dial_addr(a), a);
    }
}
