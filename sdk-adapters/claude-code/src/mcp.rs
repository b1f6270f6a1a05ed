//! A thread's MCP servers as Claude Code takes them: `--mcp-config FILE
//! --strict-mcp-config` (only these servers, none from the user's or the
//! project's settings), FILE being `.agent-runner-mcp.json` in the thread's
//! private HOME, mode 0600, owned like that HOME.
//!
//! Claude Code reads MCP secrets (a bearer token as an `Authorization`
//! header, other header values, a stdio server's env) from that file and
//! from nowhere else we could use: a secret on argv is visible to every
//! process on the host, so the 0600 file in the thread's own HOME is where
//! the runner must put them (README, "Behaviour the control plane can rely
//! on"). It is rewritten at each start of the thread's claude process and
//! goes with the thread's HOME when the thread is deleted.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
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
/// `None`.
pub(crate) fn write(home: &Path, servers: &[McpServer]) -> std::io::Result<Option<PathBuf>> {
    let path = home.join(FILE_NAME);
    if servers.is_empty() {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => return Ok(None),
        }
    }
    std::fs::create_dir_all(home)?;
    let text = document(servers).to_string();
    // A fresh file each time: created 0600 before any byte is written.
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    file.write_all(text.as_bytes())?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let owner = std::fs::metadata(home)?;
    std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid()))?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use sdk_adapter::Secret;

    use super::*;

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
}
