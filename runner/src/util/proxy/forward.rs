//! The runner's own forwarding proxy on loopback, for agents, when the
//! operator's proxy wants credentials: agents are given
//! `http://127.0.0.1:<port>` (no credentials), and this forwards each
//! request to the operator's proxy with `Proxy-Authorization` added here.
//! The credentials never leave the runner process.
//!
//! It speaks what agents' git, curl and CLIs send a proxy: `CONNECT
//! host:port` (TLS inside the tunnel) and plain `http://` requests in
//! absolute form. Anything else (a request in origin form, a head over
//! [`MAX_HEAD`], a head not sent within [`HEAD_TIMEOUT`]) gets a 400 or
//! 408 and the connection is closed. Each client connection carries one
//! request (plain requests are sent upstream with `Connection: close`, so
//! a kept-alive second request cannot go out without the credentials);
//! the upstream proxy's answer is passed back as it is (a 407 from it means
//! the operator's credentials are wrong). At most [`MAX_CONNECTIONS`] at
//! once; past that a connection is answered 503 and closed.
//!
//! It listens on 127.0.0.1 only, on an ephemeral port, and serves only
//! processes of the uids it is given (the runner's, the agents', root:
//! [`super::peer`]); any other local user is answered 403. Every thread's
//! agents can use it; that grants only what the operator's proxy grants,
//! which agents were given before (the proxy URL with its credentials was
//! in their environment). One listener serves every thread.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::ProxyUrl;

/// Longest request head (request line and headers) accepted from a client.
const MAX_HEAD: usize = 32 * 1024;

/// Client connections served at once.
const MAX_CONNECTIONS: usize = 256;

/// How long a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the upstream proxy has to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Request headers not passed upstream: the client's own proxy
/// credentials (ours are added) and hop-by-hop connection management
/// (replaced by `Connection: close` on plain requests).
const DROPPED: [&str; 4] = [
    "proxy-authorization",
    "proxy-connection",
    "connection",
    "keep-alive",
];

/// A running forwarder; stops listening (and ends its connections) when
/// dropped.
#[derive(Debug)]
pub struct Forwarder {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    /// Listens on `127.0.0.1:0` and forwards to `upstream` for processes
    /// of the `allowed` uids. Needs a tokio runtime (the current one serves
    /// it).
    pub fn start(upstream: ProxyUrl, allowed: Vec<u32>) -> std::io::Result<Self> {
        let handle = tokio::runtime::Handle::try_current().map_err(|e| {
            std::io::Error::other(format!("the agents' proxy needs a tokio runtime: {e}"))
        })?;
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let _guard = handle.enter();
        let listener = TcpListener::from_std(std_listener)?;
        let task = handle.spawn(serve(listener, Arc::new(upstream), Arc::new(allowed)));
        Ok(Self { addr, task })
    }

    /// `http://127.0.0.1:<port>`: what agents are given.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts until aborted; each connection on a task of its own, which ends
/// with the accept loop (a `JoinSet` owned here).
async fn serve(listener: TcpListener, upstream: Arc<ProxyUrl>, allowed: Arc<Vec<u32>>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((mut client, peer)) = accepted else {
                    // Out of descriptors and the like: do not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    connections.spawn(async move {
                        let _ = answer(&mut client, "503 Service Unavailable").await;
                    });
                    continue;
                };
                let (upstream, allowed) = (upstream.clone(), allowed.clone());
                connections.spawn(async move {
                    let _slot = slot;
                    if !permitted(&client, peer, &allowed).await {
                        let _ = answer(&mut client, "403 Forbidden").await;
                        return;
                    }
                    if let Err(e) = forward(client, &upstream).await {
                        tracing::debug!(error = %e, "agents' proxy: connection ended");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Whether the process at `peer` is of an allowed uid.
async fn permitted(client: &TcpStream, peer: SocketAddr, allowed: &[u32]) -> bool {
    let Ok(local) = client.local_addr() else {
        return false;
    };
    let owner = tokio::task::spawn_blocking(move || super::peer::owner(peer, local))
        .await
        .ok()
        .flatten();
    let ok = owner.is_some_and(|uid| allowed.contains(&uid));
    if !ok {
        tracing::warn!(%peer, uid = ?owner, "agents' proxy: refused a connection from a process of another user");
    }
    ok
}

/// One client connection: its head, rewritten, to the upstream proxy, then
/// bytes both ways until either side closes.
async fn forward(mut client: TcpStream, upstream: &ProxyUrl) -> std::io::Result<()> {
    client.set_nodelay(true).ok();
    let (head, rest) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(Some(read))) => read,
        Ok(Ok(None)) => return answer(&mut client, "400 Bad Request").await,
        Ok(Err(e)) => return Err(e),
        Err(_) => return answer(&mut client, "408 Request Timeout").await,
    };
    let Some(head) = rewrite(&head, upstream.authorization()) else {
        return answer(&mut client, "400 Bad Request").await;
    };
    let connect = TcpStream::connect(upstream.authority());
    let mut server = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(proxy = %upstream, error = %e, "agents' proxy: cannot reach the upstream proxy");
            return answer(&mut client, "502 Bad Gateway").await;
        }
        Err(_) => return answer(&mut client, "504 Gateway Timeout").await,
    };
    server.set_nodelay(true).ok();
    server.write_all(head.as_bytes()).await?;
    server.write_all(&rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
    Ok(())
}

/// Reads up to the blank line ending the head: `(head, bytes after it)`;
/// `None` when the head is too long or the client closed first.
async fn read_head(client: &mut TcpStream) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = head_end(&buf) {
            let rest = buf.split_off(end);
            return Ok(String::from_utf8(buf).ok().map(|h| (h, rest)));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Where the head ends (after its blank line), `\r\n` or bare `\n` lines.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The head to send upstream, `None` when the request is not one a proxy
/// takes: `CONNECT host:port` or a method with an `http://` absolute URI.
/// The client's proxy credentials and connection headers are dropped;
/// `authorization` is added, and `Connection: close` on plain requests.
fn rewrite(head: &str, authorization: Option<&str>) -> Option<String> {
    let mut lines = head.lines().map(|l| l.trim_end_matches('\r'));
    let request = lines.next()?;
    let mut parts = request.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || method.is_empty() {
        return None;
    }
    let tunnel = method.eq_ignore_ascii_case("CONNECT");
    let valid = if tunnel {
        !target.is_empty() && !target.contains('/') && target.contains(':')
    } else {
        target
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    };
    if !valid || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let mut out = format!("{method} {target} {version}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        if DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    if let Some(auth) = authorization {
        out.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    if !tunnel {
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    Some(out)
}

/// A bodiless answer, then the connection ends.
async fn answer(client: &mut TcpStream, status: &str) -> std::io::Result<()> {
    let text = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    client.write_all(text.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }

    #[tokio::test]
    async fn another_users_process_is_refused() {
        let (port, mut seen) = fake_upstream("HTTP/1.1 200 OK\r\n\r\n").await;
        let upstream = ProxyUrl::parse(&format!("http://me:pw@127.0.0.1:{port}")).unwrap();
        let forwarder = Forwarder::start(upstream, vec![me().wrapping_add(1)]).unwrap();
        let want = "HTTP/1.1 403 Forbidden\r\n";
        let got = exchange(&forwarder, b"CONNECT a:1 HTTP/1.1\r\n\r\n", want.len()).await;
        assert_eq!(got, want);
        assert!(seen.try_recv().is_err());
    }

    /// An upstream proxy on loopback: answers each connection with
    /// `answer`, then echoes; sends what it received on the channel.
    async fn fake_upstream(
        answer: &'static str,
    ) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let (head, rest) = read_head(&mut s).await.unwrap().unwrap();
                    tx.send(head).unwrap();
                    s.write_all(answer.as_bytes()).await.unwrap();
                    s.write_all(&rest).await.unwrap();
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (port, rx)
    }

    async fn exchange(forwarder: &Forwarder, send: &[u8], want: usize) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", forwarder.port()))
            .await
            .unwrap();
        s.write_all(send).await.unwrap();
        let mut got = vec![0u8; want];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8(got).unwrap()
    }

    #[tokio::test]
    async fn connect_gets_the_credentials_and_then_carries_bytes() {
        let ok = "HTTP/1.1 200 Connection established\r\n\r\n";
        let (port, mut seen) = fake_upstream(ok).await;
        let upstream = ProxyUrl::parse(&format!("http://me:pw@127.0.0.1:{port}")).unwrap();
        let forwarder = Forwarder::start(upstream, vec![me()]).unwrap();
        assert_eq!(
            forwarder.url(),
            format!("http://127.0.0.1:{}", forwarder.port())
        );
        let sent = b"CONNECT cp.example:443 HTTP/1.1\r\nHost: cp.example:443\r\n\
                     Proxy-Authorization: Basic Zm9yZ2VkOng=\r\n\r\nhello";
        let got = exchange(&forwarder, sent, ok.len() + 5).await;
        assert_eq!(got, format!("{ok}hello"));
        let head = seen.recv().await.unwrap();
        assert_eq!(
            head,
            "CONNECT cp.example:443 HTTP/1.1\r\nHost: cp.example:443\r\n\
             Proxy-Authorization: Basic bWU6cHc=\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn plain_requests_go_one_per_connection_with_the_credentials() {
        let ok = "HTTP/1.1 204 No Content\r\n\r\n";
        let (port, mut seen) = fake_upstream(ok).await;
        let upstream = ProxyUrl::parse(&format!("http://me:pw@127.0.0.1:{port}")).unwrap();
        let forwarder = Forwarder::start(upstream, vec![me()]).unwrap();
        let sent = b"GET http://h.example/x HTTP/1.1\nHost: h.example\n\
                     Proxy-Connection: keep-alive\nConnection: keep-alive\n\n";
        assert_eq!(exchange(&forwarder, sent, ok.len()).await, ok);
        let head = seen.recv().await.unwrap();
        assert_eq!(
            head,
            "GET http://h.example/x HTTP/1.1\r\nHost: h.example\r\n\
             Proxy-Authorization: Basic bWU6cHc=\r\nConnection: close\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn what_a_proxy_does_not_take_is_refused_without_reaching_upstream() {
        let (port, mut seen) = fake_upstream("HTTP/1.1 200 OK\r\n\r\n").await;
        let upstream = ProxyUrl::parse(&format!("http://me:pw@127.0.0.1:{port}")).unwrap();
        let forwarder = Forwarder::start(upstream, vec![me()]).unwrap();
        let bad = "HTTP/1.1 400 Bad Request\r\n";
        for sent in [
            "GET /origin-form HTTP/1.1\r\nHost: x\r\n\r\n",
            "CONNECT /x HTTP/1.1\r\n\r\n",
            "GET http://h/ HTTP/2\r\n\r\n",
            "G=T http://h/ HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(
                exchange(&forwarder, sent.as_bytes(), bad.len()).await,
                bad,
                "{sent}"
            );
        }
        // Too long: refused (the answer may be lost to a reset, as the
        // client is still sending), never forwarded.
        let long = format!("GET http://h/{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD + 10));
        let mut s = TcpStream::connect(("127.0.0.1", forwarder.port()))
            .await
            .unwrap();
        let _ = s.write_all(long.as_bytes()).await;
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
        assert!(got.is_empty() || got.starts_with(bad.as_bytes()), "{got:?}");
        assert!(seen.try_recv().is_err(), "a refused request went upstream");
    }

    #[tokio::test]
    async fn an_unreachable_upstream_is_a_bad_gateway() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = dead.local_addr().unwrap().port();
        drop(dead);
        let upstream = ProxyUrl::parse(&format!("http://me:pw@127.0.0.1:{port}")).unwrap();
        let forwarder = Forwarder::start(upstream, vec![me()]).unwrap();
        let want = "HTTP/1.1 502 Bad Gateway\r\n";
        let got = exchange(&forwarder, b"CONNECT a:1 HTTP/1.1\r\n\r\n", want.len()).await;
        assert_eq!(got, want);
    }

    #[test]
    fn needs_a_runtime_and_says_so() {
        let upstream = ProxyUrl::parse("http://me:pw@127.0.0.1:1").unwrap();
        let err = Forwarder::start(upstream, vec![me()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("tokio runtime"), "{err}");
    }
}
