//! A `CreateThreadRequest`'s MCP servers (its `mcp_servers` field), turned
//! from protobuf into the SDK-neutral [`sdk_adapter::McpServer`] values
//! adapters receive, with the checks the wire rules cannot express: names
//! usable in tool names and config keys, unique within the thread, a bearer
//! token exactly when the auth type asks for one.
//!
//! Their secrets (bearer tokens, header values, environment values) are
//! kept in memory only (see [`crate::tasks::context::Runtime::thread_mcp_servers`])
//! and registered with the process-wide [`crate::util::redact::Redactor`], so an
//! SDK that echoes one into its output is masked before it reaches an
//! update or a log line.

use std::collections::HashSet;
use std::sync::Arc;

use agent_runner_proto::runner::{
    ThreadMcpAuthType, ThreadMcpHeader, ThreadMcpServer, thread_mcp_server::TransportConfig,
};
use sdk_adapter::{McpServer, McpTransport, Secret, valid_server_name};

use crate::util::redact::Redactor;

/// The thread's servers, or a `RequestError` text naming the bad field.
pub fn from_proto(servers: Vec<ThreadMcpServer>) -> Result<Vec<McpServer>, String> {
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(servers.len());
    for (i, server) in servers.into_iter().enumerate() {
        let at = format!("create_thread_request.mcp_servers[{i}]");
        if !valid_server_name(&server.name) {
            return Err(format!(
                "{at}.name: {:?} is not a usable MCP server name (1 to 64 of A-Z a-z 0-9 _ -, no \"__\")",
                server.name
            ));
        }
        if !names.insert(server.name.clone()) {
            return Err(format!(
                "{at}.name: a second MCP server named {:?} in this thread",
                server.name
            ));
        }
        let transport = match server.transport_config {
            None => {
                return Err(format!(
                    "{at}.transport_config: neither stdio nor streamable_http is set"
                ));
            }
            Some(TransportConfig::Stdio(s)) => McpTransport::Stdio {
                command: s.command,
                args: s.args,
                env: pairs(s.env_vars),
            },
            Some(TransportConfig::StreamableHttp(h)) => {
                let auth = ThreadMcpAuthType::try_from(h.auth_type)
                    .unwrap_or(ThreadMcpAuthType::Unspecified);
                let token = h.bearer_token.filter(|t| !t.is_empty());
                let bearer_token = match (auth, token) {
                    (ThreadMcpAuthType::BearerToken, None) => {
                        return Err(format!(
                            "{at}.streamable_http.bearer_token: auth_type is BEARER_TOKEN but no token is set"
                        ));
                    }
                    (ThreadMcpAuthType::None, Some(_)) => {
                        return Err(format!(
                            "{at}.streamable_http.bearer_token: set although auth_type is NONE"
                        ));
                    }
                    (_, token) => token.map(Secret::new),
                };
                if !(h.url.starts_with("http://") || h.url.starts_with("https://")) {
                    return Err(format!(
                        "{at}.streamable_http.url: must be an http:// or https:// URL"
                    ));
                }
                McpTransport::StreamableHttp {
                    url: h.url,
                    bearer_token,
                    headers: pairs(h.headers),
                }
            }
        };
        out.push(McpServer {
            server_id: server.server_id,
            name: server.name,
            transport,
        });
    }
    Ok(out)
}

/// Masks every secret of `servers` in updates and logs from now on.
pub fn register_secrets(redactor: &Redactor, servers: &[McpServer]) {
    for server in servers {
        match &server.transport {
            McpTransport::Stdio { env, .. } => {
                env.iter().for_each(|(_, v)| redactor.add(v.expose()));
            }
            McpTransport::StreamableHttp {
                bearer_token,
                headers,
                ..
            } => {
                if let Some(t) = bearer_token {
                    redactor.add(t.expose());
                }
                headers.iter().for_each(|(_, v)| redactor.add(v.expose()));
            }
        }
    }
}

/// The servers as the spec carries them.
pub fn shared(servers: Vec<McpServer>) -> Arc<[McpServer]> {
    Arc::from(servers)
}

fn pairs(headers: Vec<ThreadMcpHeader>) -> Vec<(String, Secret)> {
    headers
        .into_iter()
        .map(|h| (h.key, Secret::new(h.value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use agent_runner_proto::runner::{ThreadMcpStdioConfig, ThreadMcpStreamableHttpConfig};

    use super::*;

    fn http(name: &str, auth: ThreadMcpAuthType, token: Option<&str>) -> ThreadMcpServer {
        ThreadMcpServer {
            server_id: format!("id-{name}"),
            name: name.into(),
            transport_config: Some(TransportConfig::StreamableHttp(
                ThreadMcpStreamableHttpConfig {
                    url: "http://127.0.0.1:9/mcp".into(),
                    auth_type: auth as i32,
                    bearer_token: token.map(str::to_owned),
                    headers: vec![ThreadMcpHeader {
                        key: "X-Api-Key".into(),
                        value: "hdr-secret".into(),
                    }],
                },
            )),
        }
    }

    #[test]
    fn converts_both_transports() {
        let stdio = ThreadMcpServer {
            server_id: "s".into(),
            name: "local".into(),
            transport_config: Some(TransportConfig::Stdio(ThreadMcpStdioConfig {
                command: "python3".into(),
                args: vec!["srv.py".into()],
                env_vars: vec![ThreadMcpHeader {
                    key: "K".into(),
                    value: "v".into(),
                }],
            })),
        };
        let got = from_proto(vec![
            stdio,
            http("remote", ThreadMcpAuthType::BearerToken, Some("tok")),
        ])
        .unwrap();
        assert_eq!(
            got[0].transport,
            McpTransport::Stdio {
                command: "python3".into(),
                args: vec!["srv.py".into()],
                env: vec![("K".into(), Secret::new("v"))],
            }
        );
        let McpTransport::StreamableHttp { bearer_token, .. } = &got[1].transport else {
            panic!("http expected");
        };
        assert_eq!(bearer_token.as_ref().map(Secret::expose), Some("tok"));
    }

    #[test]
    fn bad_servers_are_refused_by_field() {
        let err = |servers| from_proto(servers).unwrap_err();
        assert!(
            err(vec![http("a b", ThreadMcpAuthType::None, None)])
                .starts_with("create_thread_request.mcp_servers[0].name:")
        );
        assert!(
            err(vec![
                http("x", ThreadMcpAuthType::None, None),
                http("x", ThreadMcpAuthType::None, None)
            ])
            .starts_with("create_thread_request.mcp_servers[1].name: a second")
        );
        let missing = err(vec![http("x", ThreadMcpAuthType::BearerToken, None)]);
        assert!(
            missing.contains("streamable_http.bearer_token"),
            "{missing}"
        );
        let mut none = http("x", ThreadMcpAuthType::None, None);
        none.transport_config = None;
        assert!(err(vec![none]).contains("transport_config"));
    }

    #[test]
    fn secrets_are_registered_for_masking() {
        let servers = from_proto(vec![http(
            "r",
            ThreadMcpAuthType::BearerToken,
            Some("bearer-secret-1"),
        )])
        .unwrap();
        let redactor = Redactor::new();
        register_secrets(&redactor, &servers);
        let masked = redactor.redact("saw bearer-secret-1 and hdr-secret");
        assert!(!masked.contains("bearer-secret-1"), "{masked}");
        assert!(!masked.contains("hdr-secret"), "{masked}");
    }
}
