//! A thread's MCP servers as Claude Code takes them: `--mcp-config FILE
//! --strict-mcp-config` (only these servers, none from the user's or the
//! project's settings), FILE being `.agent-runner-mcp.json` in the thread's
//! private HOME, mode 0600, owned like that HOME.
//!
//! Claude Code reads MCP secrets (a bearer token as an `Authorization`
//! header, other header values, a stdio server's env) from that file and
//! from nowhere else we could use: a secret on argv is visible to every
//! process on the host, so the 0600 file in the thread's own HOME is where
//! the runner must put them (docs/protocol.md, "Behaviour the control plane
//! can rely on"). It is rewritten at each start of the thread's claude process and
//! goes with the thread's HOME when the thread is deleted.

use std::path::{Path, PathBuf};

use sdk_adapter::{McpServer, McpTransport};
use serde_json::{Map, Value, json};

/// The file's name in the thread's HOME.
pub(crate) const FILE_NAME: &str = ".agent-runner-mcp.json";

/// Claude Code's `--mcp-config` document for `servers`.
pub(crate) fn document(servers: &[McpServer]) -> Value {
    let mut all = Map::new();
    for server in servers {
        let entry = match &server.transport {
            McpTransport::Stdio { command, args, env } => {
                let env: Map<String, Value> = env
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v.expose())))
                    .collect();
                json!({"type": "stdio", "command": command, "args": args, "env": env})
            }
            McpTransport::StreamableHttp {
                url,
                bearer_token,
                headers,
            } => {
                let mut h: Map<String, Value> = headers
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v.expose())))
                    .collect();
                if let Some(token) = bearer_token {
                    h.insert(
                        "Authorization".into(),
                        json!(format!("Bearer {}", token.expose())),
                    );
                }
                json!({"type": "http", "url": url, "headers": h})
            }
        };
        all.insert(server.name.clone(), entry);
    }
    json!({ "mcpServers": all })
}

/// Writes the thread's file into `home` (0600, owned like `home`) and
/// returns its path; with no servers, removes a stale one and returns
/// `None`. The agent can write `home`: the file is written beneath a
/// directory fd to a fresh name renamed over [`FILE_NAME`] and chowned by
/// fd ([`sdk_adapter::beneath`]), so a link planted there is replaced.
pub(crate) fn write(home: &Path, servers: &[McpServer]) -> std::io::Result<Option<PathBuf>> {
    use sdk_adapter::beneath;
    let path = home.join(FILE_NAME);
    std::fs::create_dir_all(home)?;
    let root = beneath::open_root(home)?;
    if servers.is_empty() {
        beneath::remove_file(&root, FILE_NAME)?;
        return Ok(None);
    }
    let text = document(servers).to_string();
    let owner = beneath::owner_of(&root)?;
    beneath::write_file(&root, FILE_NAME, text.as_bytes(), 0o600, Some(owner))?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use sdk_adapter::Secret;

    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A link the agent planted at the file's name is replaced: the file it
    /// pointed at keeps its bytes (and its owner), the MCP file is written.
    #[test]
    fn a_planted_link_is_replaced_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"precious").unwrap();
        std::os::unix::fs::symlink(&outside, home.join(FILE_NAME)).unwrap();
        let servers = [McpServer {
            server_id: "1".into(),
            name: "remote".into(),
            transport: McpTransport::StreamableHttp {
                url: "https://h/mcp".into(),
                bearer_token: None,
                headers: vec![],
            },
        }];
        let path = write(&home, &servers).unwrap().unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
        assert!(!path.is_symlink());
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("https://h/mcp")
        );
        assert_eq!(write(&home, &[]).unwrap(), None);
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
    }

    #[test]
    fn the_file_is_private_and_holds_claudes_schema() {
        let dir = tempfile::tempdir().unwrap();
        let servers = [McpServer {
            server_id: "1".into(),
            name: "remote".into(),
            transport: McpTransport::StreamableHttp {
                url: "https://h/mcp".into(),
                bearer_token: Some(Secret::new("tok")),
                headers: vec![("X-Key".into(), Secret::new("hv"))],
            },
        }];
        let path = write(dir.path(), &servers).unwrap().unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            doc,
            json!({"mcpServers": {"remote": {"type": "http", "url": "https://h/mcp",
                "headers": {"X-Key": "hv", "Authorization": "Bearer tok"}}}})
        );
        assert_eq!(write(dir.path(), &[]).unwrap(), None);
        assert!(!path.exists());
    }

    /// The agent races the write: it keeps swapping its HOME with a link to
    /// a directory outside while the runner writes the file over and over.
    /// Nothing is ever written or chowned outside.
    #[test]
    fn the_write_holds_while_the_agent_swaps_its_home_for_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("state.db"), b"precious").unwrap();
        let servers = [McpServer {
            server_id: "1".into(),
            name: "remote".into(),
            transport: McpTransport::StreamableHttp {
                url: "https://h/mcp".into(),
                bearer_token: Some(Secret::new("tok")),
                headers: vec![],
            },
        }];
        let outcome =
            sdk_adapter::testing::race::race(&home, &outside, || write(&home, &servers).map(drop));
        eprintln!("{outcome:?}");
    }
}
