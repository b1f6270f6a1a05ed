//! Lifecycle RPCs: health, capabilities (the real tool list, models and
//! limits), `Initialize` (workspace + env registration) and `Shutdown`.

use std::collections::HashMap;

use code_agent_proto::health_check_response::Status as Health;
use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::session::canonical_dir_off_worker;

/// Context size advertised when no model states its own.
const DEFAULT_CONTEXT_TOKENS: u64 = 128_000;

/// What this engine really does (GetCapabilities.features).
const FEATURES: [&str; 19] = [
    "streaming",
    "tool_calls",
    "structured_output",
    "sessions",
    "file_storage",
    "permissions",
    "hitl",
    "external_tasks",
    "context_compaction",
    "events",
    "skills",
    "todos",
    "providers",
    "lsp",
    "steering",
    "mcp",
    "memory",
    "planning",
    "cron",
];

pub(super) fn agent_info() -> AgentInfo {
    AgentInfo {
        name: "code-agent".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        description: env!("CARGO_PKG_DESCRIPTION").into(),
        author: String::new(),
        license: env!("CARGO_PKG_LICENSE").into(),
        homepage: String::new(),
    }
}

/// Top-level property names of a tool's JSON schema.
fn parameter_names(schema: &serde_json::Value) -> Vec<String> {
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

impl Service {
    pub(super) async fn health_check(
        &self,
        _request: HealthCheckRequest,
    ) -> Result<HealthCheckResponse, Status> {
        let models = self.engine.providers.models();
        let sessions = self.engine.session_list().len();
        let (status, message) = if self.engine.shutdown.is_cancelled() {
            (Health::Unhealthy, "shutting down".to_string())
        } else if models.is_empty() {
            (
                Health::Degraded,
                "no model provider configured: set OPENAI_API_KEY / OPENAI_BASE_URL or AddProvider"
                    .to_string(),
            )
        } else {
            (Health::Healthy, "ok".to_string())
        };
        Ok(HealthCheckResponse {
            status: status as i32,
            message,
            details: HashMap::from([
                ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
                ("sessions".to_string(), sessions.to_string()),
                ("models".to_string(), models.len().to_string()),
                (
                    "state_dir".to_string(),
                    self.engine.store.is_some().to_string(),
                ),
            ]),
        })
    }

    pub(super) async fn get_capabilities(
        &self,
        _request: GetCapabilitiesRequest,
    ) -> Result<GetCapabilitiesResponse, Status> {
        // The LSP tools are listed always: the model gets them while a
        // language server runs (StartLspServer).
        let mut all = self.engine.tools.all();
        all.extend(crate::lsp::lsp_tools(&self.engine.lsp));
        let mut tools: Vec<ToolCapability> = all
            .iter()
            .map(|t| ToolCapability {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: parameter_names(&t.parameters()),
                r#async: false,
            })
            .collect();
        // The tools of connected global MCP servers (every session has
        // them; a session's own servers are its alone).
        tools.extend(
            self.engine
                .mcp
                .tools(&None, None)
                .into_iter()
                .map(|t| ToolCapability {
                    name: t.full_name(),
                    description: t.tool.description.clone().unwrap_or_default(),
                    parameters: parameter_names(&t.tool.input_schema),
                    r#async: false,
                }),
        );
        let models = self.engine.providers.models();
        let max_context = models
            .iter()
            .filter_map(|(_, m)| m.limit.as_ref().map(|l| u64::from(l.context)))
            .filter(|c| *c > 0)
            .max()
            .unwrap_or(DEFAULT_CONTEXT_TOKENS);
        let models = models
            .into_iter()
            .map(|(provider, m)| {
                let mut features = vec!["streaming".to_string()];
                if m.tool_call {
                    features.push("tool_call".into());
                }
                if m.reasoning {
                    features.push("reasoning".into());
                }
                ModelCapability {
                    provider,
                    model: m.id,
                    features,
                }
            })
            .collect();
        let config = &self.engine.config;
        Ok(GetCapabilitiesResponse {
            info: Some(agent_info()),
            features: FEATURES.iter().map(|f| f.to_string()).collect(),
            limits: Some(ResourceLimits {
                max_context_tokens: max_context,
                max_concurrent_sessions: u32::try_from(config.max_sessions).unwrap_or(u32::MAX),
                max_tools_per_request: u32::try_from(tools.len()).unwrap_or(u32::MAX),
            }),
            tools,
            models,
            metadata: HashMap::from([
                ("max_steps".to_string(), config.max_steps.to_string()),
                (
                    "bash_timeout_ms".to_string(),
                    config.bash_timeout.as_millis().to_string(),
                ),
                (
                    "output_cap_bytes".to_string(),
                    config.output_cap.to_string(),
                ),
            ]),
        })
    }

    /// Registers `env` for sessions at or under `workspace`; the first
    /// workspace given also becomes the default one when the engine has none.
    pub(super) async fn initialize(
        &self,
        request: InitializeRequest,
    ) -> Result<InitializeResponse, Status> {
        if request.workspace.is_empty() {
            if !request.env.is_empty() {
                return Err(Status::invalid_argument(
                    "workspace: required when env is given (env applies to that workspace)",
                ));
            }
            return Ok(InitializeResponse {
                success: true,
                message: "initialized".into(),
                info: Some(agent_info()),
            });
        }
        let workspace = canonical_dir_off_worker("workspace", request.workspace)
            .await
            .map_err(Status::invalid_argument)?;
        self.engine.confine("workspace", &workspace)?;
        for key in request.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(Status::invalid_argument(format!(
                    "env: invalid variable name {key:?}"
                )));
            }
        }
        let count = request.env.len();
        self.engine
            .env
            .register(workspace.clone(), request.env.into_iter().collect());
        {
            let mut default = self
                .engine
                .default_workspace
                .write()
                .unwrap_or_else(|e| e.into_inner());
            if default.is_none() {
                *default = Some(workspace.clone());
            }
        }
        Ok(InitializeResponse {
            success: true,
            message: format!(
                "workspace {} registered with {count} environment variables",
                workspace.display()
            ),
            info: Some(agent_info()),
        })
    }

    pub(super) async fn shutdown(
        &self,
        _request: ShutdownRequest,
    ) -> Result<ShutdownResponse, Status> {
        self.engine.shutdown_all().await;
        Ok(ShutdownResponse {
            success: true,
            message: "generations cancelled, sessions saved; the server stops".into(),
        })
    }
}
