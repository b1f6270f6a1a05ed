//! A thread's MCP servers as adapters receive them (docs/protocol.md,
//! `CreateThreadRequest.mcp_servers`), without protobuf.
//!
//! The runner turns the wire messages into these values; each adapter
//! delivers them to its SDK (codex's `mcp_servers` config, Claude Code's
//! `--mcp-config`, the engine's session-scoped servers, the scripted `mcp`
//! step). Bearer tokens, header values and environment values are
//! [`Secret`]s: their `Debug` prints `<redacted>`, so a spec that reaches a
//! log by accident leaks nothing.

use std::fmt;

/// A value that must never reach logs, updates, `/status` or argv.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that must send it (an HTTP
    /// header, a child's environment, a 0600 config file).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One MCP server of a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    /// The control plane's id for the server.
    pub server_id: String,
    /// The name tools are known by (`mcp__<name>__<tool>`, the scripted
    /// step's `SERVER`): `[A-Za-z0-9_-]`, unique within the thread (the
    /// runner checked it).
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
}

/// How an MCP server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin/stdout; started through
    /// the thread's sandbox like every agent process.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment (values are secrets).
        env: Vec<(String, Secret)>,
    },
    /// A streamable HTTP endpoint.
    StreamableHttp {
        /// The endpoint's URL.
        url: String,
        /// Sent as `Authorization: Bearer …` when set.
        bearer_token: Option<Secret>,
        /// Extra request headers (values are secrets).
        headers: Vec<(String, Secret)>,
    },
}

/// Whether `name` may name an MCP server: non-empty, at most 64 characters
/// of `[A-Za-z0-9_-]` (it becomes part of tool names and config keys), and
/// without `__` (the separator of `mcp__<server>__<tool>`).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.contains("__")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_print() {
        let server = McpServer {
            server_id: "s1".into(),
            name: "docs".into(),
            transport: McpTransport::StreamableHttp {
                url: "http://127.0.0.1:1/mcp".into(),
                bearer_token: Some(Secret::new("tok-very-secret")),
                headers: vec![("X-Key".into(), Secret::new("hdr-very-secret"))],
            },
        };
        let printed = format!("{server:?}");
        assert!(!printed.contains("very-secret"), "{printed}");
        assert!(printed.contains("<redacted>"));
    }

    #[test]
    fn server_names_are_identifiers() {
        assert!(valid_server_name("docs-1_x"));
        for bad in ["", "a b", "a__b", "a/b", "é", &"x".repeat(65)] {
            assert!(!valid_server_name(bad), "{bad:?}");
        }
    }
}
