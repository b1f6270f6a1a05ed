//! A thread's MCP servers as codex takes them: `config` overrides of
//! `thread/start` / `thread/resume` (`mcp_servers.<name>` = the server's
//! table, codex's `config.toml` schema), so they apply to that thread only
//! and are given again on every resume; nothing is written to a file.
//!
//! Secrets stay off codex's config: a streamable HTTP server's bearer token
//! and header values go into the app-server's environment under names this
//! module chooses (`AGENT_RUNNER_MCP_TOKEN_<i>`, `…_<i>_H<j>`), which the
//! config names (`bearer_token_env_var`, `env_http_headers`). Names contain
//! `TOKEN`, which codex's default shell environment policy keeps out of the
//! commands it runs. A stdio server's environment values travel in the
//! config (`env`), over the app-server's stdin pipe, never on argv.

use sdk_adapter::{McpServer, McpTransport};
use serde_json::{Map, Value, json};

/// The `config` overrides and the extra app-server environment for
/// `servers`.
pub(crate) fn overrides(servers: &[McpServer]) -> (Map<String, Value>, Vec<(String, String)>) {
    let mut config = Map::new();
    let mut env = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let table = match &server.transport {
            McpTransport::Stdio {
                command,
                args,
                env: vars,
            } => {
                let vars: Map<String, Value> = vars
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v.expose())))
                    .collect();
                json!({"command": command, "args": args, "env": vars})
            }
            McpTransport::StreamableHttp {
                url,
                bearer_token,
                headers,
            } => {
                let mut table = json!({"url": url});
                if let Some(token) = bearer_token {
                    let var = format!("AGENT_RUNNER_MCP_TOKEN_{i}");
                    env.push((var.clone(), token.expose().to_owned()));
                    table["bearer_token_env_var"] = json!(var);
                }
                if !headers.is_empty() {
                    let mut named = Map::new();
                    for (j, (key, value)) in headers.iter().enumerate() {
                        let var = format!("AGENT_RUNNER_MCP_TOKEN_{i}_H{j}");
                        env.push((var.clone(), value.expose().to_owned()));
                        named.insert(key.clone(), json!(var));
                    }
                    table["env_http_headers"] = Value::Object(named);
                }
                table
            }
        };
        config.insert(format!("mcp_servers.{}", server.name), table);
    }
    (config, env)
}

#[cfg(test)]
mod tests {
    use sdk_adapter::Secret;

    use super::*;

    #[test]
    fn http_secrets_go_to_env_vars_the_config_names() {
        let servers = [
            McpServer {
                server_id: "1".into(),
                name: "local".into(),
                transport: McpTransport::Stdio {
                    command: "srv".into(),
                    args: vec!["-x".into()],
                    env: vec![("K".into(), Secret::new("v"))],
                },
            },
            McpServer {
                server_id: "2".into(),
                name: "remote".into(),
                transport: McpTransport::StreamableHttp {
                    url: "https://h/mcp".into(),
                    bearer_token: Some(Secret::new("tok")),
                    headers: vec![("X-Key".into(), Secret::new("hv"))],
                },
            },
        ];
        let (config, env) = overrides(&servers);
        assert_eq!(
            config["mcp_servers.local"],
            json!({"command": "srv", "args": ["-x"], "env": {"K": "v"}})
        );
        assert_eq!(
            config["mcp_servers.remote"],
            json!({"url": "https://h/mcp", "bearer_token_env_var": "AGENT_RUNNER_MCP_TOKEN_1",
                   "env_http_headers": {"X-Key": "AGENT_RUNNER_MCP_TOKEN_1_H0"}})
        );
        assert!(!config["mcp_servers.remote"].to_string().contains("tok\""));
        assert_eq!(
            env,
            [
                ("AGENT_RUNNER_MCP_TOKEN_1".to_owned(), "tok".to_owned()),
                ("AGENT_RUNNER_MCP_TOKEN_1_H0".to_owned(), "hv".to_owned())
            ]
        );
    }
}
