//! A thread's MCP servers delivered to the engine as servers scoped to the
//! thread's session: `RegisterMcpServer` then `ConnectMcpServer`, each with
//! the request metadata that names the session
//! ([`code_agent_engine::mcp::SESSION_METADATA`]), so no other thread's
//! session sees them. A bearer token becomes the `Authorization` header;
//! the values travel in the request only (in-process for the embedded
//! engine, the authenticated channel for a remote one) and are never
//! logged.

use code_agent_proto::{
    ConnectMcpServerRequest, McpHttpTransport, McpServerConfigProto, McpStdioTransport,
    McpTransport as ProtoTransport, RegisterMcpServerRequest, mcp_transport,
};
use sdk_adapter::{McpServer, McpTransport};

/// The engine's configuration of `server`.
pub(crate) fn config(server: &McpServer) -> McpServerConfigProto {
    let (transport, env) = match &server.transport {
        McpTransport::Stdio { command, args, env } => (
            mcp_transport::Transport::Stdio(McpStdioTransport {
                command: command.clone(),
                args: args.clone(),
            }),
            env.iter()
                .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                .collect(),
        ),
        McpTransport::StreamableHttp {
            url,
            bearer_token,
            headers,
        } => {
            let mut headers: std::collections::HashMap<String, String> = headers
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                .collect();
            if let Some(token) = bearer_token {
                headers.insert("Authorization".into(), format!("Bearer {}", token.expose()));
            }
            (
                mcp_transport::Transport::Http(McpHttpTransport {
                    url: url.clone(),
                    headers,
                }),
                Default::default(),
            )
        }
    };
    McpServerConfigProto {
        name: server.name.clone(),
        transport: Some(ProtoTransport {
            transport: Some(transport),
        }),
        enabled: true,
        env,
    }
}

/// `message` as a request scoped to `session`.
pub(crate) fn scoped<T>(message: T, session: &str) -> Result<tonic::Request<T>, String> {
    let mut request = tonic::Request::new(message);
    let value = session
        .parse()
        .map_err(|_| format!("session id {session:?} cannot be request metadata"))?;
    request
        .metadata_mut()
        .insert(code_agent_engine::mcp::SESSION_METADATA, value);
    Ok(request)
}

/// The register request for `server` in `session`.
pub(crate) fn register(
    server: &McpServer,
    session: &str,
) -> Result<tonic::Request<RegisterMcpServerRequest>, String> {
    scoped(
        RegisterMcpServerRequest {
            config: Some(config(server)),
        },
        session,
    )
}

/// The connect request for `server` in `session`.
pub(crate) fn connect(
    server: &McpServer,
    session: &str,
) -> Result<tonic::Request<ConnectMcpServerRequest>, String> {
    scoped(
        ConnectMcpServerRequest {
            name: server.name.clone(),
        },
        session,
    )
}
