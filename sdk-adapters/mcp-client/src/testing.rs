//! Test support for every suite that needs a real MCP server (this crate's,
//! the scripted adapter's, the engine's, the runner's end-to-end): the
//! official Python SDK (`mcp` from PyPI, pinned) installed with pip into
//! `<target>/mcp-py/<version>`, and `testdata/server.py` run over stdio or
//! streamable HTTP with a bearer token it checks. Not part of the client;
//! behind the `testing` feature.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use sdk_adapter::testing::cached_install;
use sdk_adapter::{McpServer, McpTransport, Secret};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The `mcp` release the tests pin.
pub const MCP_PY_VERSION: &str = "2.3.0";

/// The test server's script.
pub fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/server.py")
}

/// The directory to put on `PYTHONPATH` (`<target>/mcp-py/<version>`),
/// installing the pinned `mcp` with pip first if needed
/// ([`cached_install`]). `Err` says why it cannot be had (no python3/pip,
/// PyPI unreachable); callers skip with that reason.
pub fn install_python_mcp() -> Result<PathBuf, String> {
    cached_install::pip_install(
        "mcp-py",
        MCP_PY_VERSION,
        &format!("mcp=={MCP_PY_VERSION}"),
        |dir| dir.join("mcp").join("__init__.py").exists(),
    )
}

/// The real Python interpreter (not a version-manager shim, which would
/// need more than a sandbox gives) and its installation prefix (for a
/// sandbox's read-only list).
pub fn python() -> (PathBuf, PathBuf) {
    cached_install::python().unwrap_or_else(|_| (PathBuf::from("python3"), PathBuf::from("/usr")))
}

/// The test server over stdio, as thread MCP server `name`, with extra
/// environment `env`.
pub fn stdio_server(site: &Path, name: &str, env: &[(&str, &str)]) -> McpServer {
    let mut vars = vec![(
        "PYTHONPATH".to_owned(),
        Secret::new(site.to_string_lossy().into_owned()),
    )];
    vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), Secret::new(*v))));
    McpServer {
        server_id: format!("id-{name}"),
        name: name.to_owned(),
        transport: McpTransport::Stdio {
            command: python().0.to_string_lossy().into_owned(),
            args: vec![
                "-u".into(),
                server_script().to_string_lossy().into_owned(),
                "stdio".into(),
            ],
            env: vars,
        },
    }
}

/// The test server running over streamable HTTP on loopback.
pub struct HttpServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    _child: tokio::process::Child,
}

impl HttpServer {
    /// Starts it (inside a tokio runtime): requests must carry `Bearer
    /// token` and, when `header` is set, `X-Test-Header: <header>`.
    pub async fn start(site: &Path, token: &str, header: Option<&str>) -> Result<Self, String> {
        let mut cmd = tokio::process::Command::new("python3");
        cmd.arg("-u")
            .arg(server_script())
            .arg("http")
            .env("MCP_TEST_TOKEN", token)
            .env("PYTHONPATH", site)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(h) = header {
            cmd.env("MCP_TEST_HEADER", h);
        }
        let mut child = cmd.spawn().map_err(|e| format!("python3: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(std::time::Duration::from_secs(60), lines.next_line())
            .await
            .map_err(|_| "the HTTP test server did not start".to_owned())?
            .map_err(|e| e.to_string())?
            .ok_or("the HTTP test server exited")?;
        let port = first
            .strip_prefix("PORT ")
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| format!("unexpected first line {first:?}"))?;
        Ok(Self {
            port,
            _child: child,
        })
    }

    /// Thread MCP server `name` pointing at it with `token` and `headers`.
    pub fn server(&self, name: &str, token: Option<&str>, headers: &[(&str, &str)]) -> McpServer {
        McpServer {
            server_id: format!("id-{name}"),
            name: name.to_owned(),
            transport: McpTransport::StreamableHttp {
                url: format!("http://127.0.0.1:{}/mcp", self.port),
                bearer_token: token.map(Secret::new),
                headers: headers
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Secret::new(*v)))
                    .collect(),
            },
        }
    }
}
