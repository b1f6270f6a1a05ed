//! Connecting to one MCP server: a stdio child started through the
//! thread's sandbox, or a streamable HTTP endpoint; then the MCP handshake,
//! all within one timeout.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use sdk_adapter::launcher::ThreadSandbox;
use sdk_adapter::{McpServer, McpTransport};
use tokio::io::AsyncReadExt;

use crate::{McpClient, McpError};

/// How much of a stdio server's stderr is kept to explain a failed start.
const STDERR_TAIL: usize = 1024;

/// Connects to `server` within `timeout`. A stdio server is started
/// through `sandbox` (required for stdio: no sandbox, no process).
pub async fn connect(
    server: &McpServer,
    sandbox: Option<&ThreadSandbox>,
    timeout: Duration,
) -> Result<McpClient, McpError> {
    let fail = |reason: String| McpError::Connect {
        server: server.name.clone(),
        reason,
    };
    match &server.transport {
        McpTransport::Stdio { command, args, env } => {
            let sandbox = sandbox.ok_or_else(|| {
                fail("a stdio server needs the thread's sandbox, and there is none".into())
            })?;
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args)
                .envs(env.iter().map(|(k, v)| (k, v.expose())))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            let (mut child, _applied) = sandbox
                .spawn(&mut cmd)
                .map_err(|e| fail(format!("starting {command:?}: {e}")))?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(fail("the child has no stdin/stdout pipe".into()));
            };
            let tail = Arc::new(Mutex::new(Vec::new()));
            if let Some(mut stderr) = child.stderr.take() {
                let tail = tail.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 512];
                    while let Ok(n) = stderr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                        t.extend_from_slice(&buf[..n]);
                        let excess = t.len().saturating_sub(STDERR_TAIL);
                        t.drain(..excess);
                    }
                });
            }
            let started = tokio::time::timeout(timeout, ().serve((stdout, stdin))).await;
            let why = match started {
                Ok(Ok(service)) => {
                    return Ok(McpClient {
                        name: server.name.clone(),
                        service,
                        child: std::sync::Mutex::new(Some(child)),
                        transport_closed: Default::default(),
                    });
                }
                Ok(Err(e)) => format!("MCP handshake: {e}"),
                Err(_) => format!("no MCP handshake within {timeout:?}"),
            };
            let _ = child.start_kill();
            let _ = child.wait().await;
            // Let the stderr reader take the last bytes.
            tokio::task::yield_now().await;
            let stderr = String::from_utf8_lossy(&tail.lock().unwrap_or_else(|e| e.into_inner()))
                .trim()
                .to_owned();
            Err(fail(if stderr.is_empty() {
                why
            } else {
                format!("{why}; its stderr ends: {stderr}")
            }))
        }
        McpTransport::StreamableHttp {
            url,
            bearer_token,
            headers,
        } => {
            let mut custom = HashMap::new();
            for (key, value) in headers {
                let name = HeaderName::try_from(key.as_str())
                    .map_err(|_| fail(format!("header {key:?} is not a valid header name")))?;
                let mut value = HeaderValue::from_str(value.expose()).map_err(|_| {
                    fail(format!(
                        "the value of header {key:?} has characters a header cannot carry"
                    ))
                })?;
                value.set_sensitive(true);
                custom.insert(name, value);
            }
            let mut config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            if let Some(token) = bearer_token {
                config = config.auth_header(token.expose());
            }
            let http = reqwest::Client::builder()
                .tls_backend_preconfigured(crate::tls::config().map_err(fail)?)
                .connect_timeout(timeout)
                .build()
                .map_err(|e| fail(format!("building the HTTP client: {e}")))?;
            let transport = StreamableHttpClientTransport::with_client(http, config);
            match tokio::time::timeout(timeout, ().serve(transport)).await {
                Ok(Ok(service)) => Ok(McpClient {
                    name: server.name.clone(),
                    service,
                    child: std::sync::Mutex::new(None),
                    transport_closed: Default::default(),
                }),
                Ok(Err(e)) => Err(fail(format!("MCP handshake with {url}: {e}"))),
                Err(_) => Err(fail(format!(
                    "no MCP handshake with {url} within {timeout:?}"
                ))),
            }
        }
    }
}
