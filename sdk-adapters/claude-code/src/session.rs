//! One long-lived `claude -p` process for a thread.
//!
//! Started as `claude -p --input-format stream-json --output-format
//! stream-json --verbose --model M [--effort E] [--permission-mode P]
//! --permission-prompt-tool stdio` plus `--session-id ID` for a new session
//! or `--resume ID` for one that has a transcript. The router task answers
//! Claude Code's control requests at once (permission prompts by policy,
//! anything else with an error) and hands every other line to the running
//! turn. Under `--claude-permission-mode default|acceptEdits|plan` a
//! permission prompt that arrives while a turn runs goes to that turn
//! instead, which asks the runner (module `permission`).

use std::sync::Arc;

use sdk_adapter::ThreadSpec;
use sdk_adapter::launcher::ThreadSandbox;
use sdk_process::{ChildError, ChildSpec, Inbound, JsonChild, TurnSink};

/// The runner's variables Claude Code documents it reads, passed on top of
/// the launcher's allowlist, and these prefixes (Anthropic API key, token
/// and endpoint; Claude Code switches; Bedrock and Vertex).
/// `CLAUDE_CONFIG_DIR` is not among them: [`Session::start`] always sets
/// it to the thread's own (module `config_dir`).
pub(crate) const PASS_ENV: &[&str] = &[
    "CLOUD_ML_REGION",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
    "DISABLE_ERROR_REPORTING",
];

/// Prefixes of further variables Claude Code reads.
pub(crate) const PASS_ENV_PREFIXES: &[&str] = &[
    "ANTHROPIC_",
    "CLAUDE_CODE_",
    "AWS_",
    "VERTEX_REGION_",
    "MCP_",
];
use serde_json::Value;
use tokio::task::JoinHandle;

/// How long a thread's claude waits for the thread's MCP servers to
/// connect before its first model call (`MCP_CONNECT_TIMEOUT_MS`): a
/// server that takes longer is still connected, in the background.
const MCP_CONNECT_WAIT_MS: &str = "30000";

use crate::ClaudeConfig;
use crate::protocol;

/// What the running turn's task hears.
#[derive(Debug)]
pub(crate) enum TurnMsg {
    /// A stream-json line from claude.
    Line(Value),
    /// A steering message was written (its tag and text).
    Steered { tag: u64, text: String },
    /// `interrupt` was called.
    Interrupting,
    /// The process went away (the reason).
    Exited(String),
    /// A permission prompt the runner decides: the control request's id,
    /// the request, and where the answer goes.
    Permission {
        id: Value,
        request: Value,
        handle: sdk_process::ChildHandle,
    },
}

pub(crate) type Sink = TurnSink<TurnMsg>;

/// Which model and effort a process runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flavor {
    pub model: String,
    pub effort: Option<String>,
}

/// A running claude process. Dropping it kills its process tree.
#[derive(Debug)]
pub(crate) struct Session {
    pub child: JsonChild,
    pub sink: Arc<Sink>,
    pub flavor: Flavor,
    router: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.router.abort();
    }
}

impl Session {
    /// Start claude for a thread through its `sandbox`, in its workspace,
    /// with the sandbox's environment plus what Claude Code documents it
    /// reads ([`PASS_ENV`]) plus `config.env` plus the thread's
    /// `ThreadSpec::env` (which wins), so every tool command claude runs
    /// inherits them; then `CLAUDE_CONFIG_DIR`, the thread's own, seeded
    /// with the operator's login (module `config_dir`), over any of those.
    /// The thread's additional instructions go to
    /// `--append-system-prompt`, so they join Claude Code's own system
    /// prompt on every turn.
    pub(crate) fn start(
        config: &ClaudeConfig,
        thread: &ThreadSpec,
        sandbox: &ThreadSandbox,
        session_id: &str,
        resume: bool,
        flavor: Flavor,
    ) -> Result<Self, ChildError> {
        let thread_id = &thread.thread_id;
        let thread_env = &thread.env;
        let mut spec = ChildSpec::new(format!("claude (thread {thread_id})"), &config.bin)
            .cwd(&thread.workspace)
            .arg("-p")
            .arg("--input-format")
            .arg("stream-json")
            .arg("--output-format")
            .arg("stream-json")
            .arg("--verbose")
            .arg("--model")
            .arg(&flavor.model);
        if let Some(effort) = &flavor.effort {
            spec = spec.arg("--effort").arg(effort);
        }
        if let Some(instructions) = &thread.instructions {
            spec = spec.arg("--append-system-prompt").arg(instructions);
        }
        if let Some(mode) = config.cli_permission_mode() {
            spec = spec.arg("--permission-mode").arg(mode);
        }
        // The thread's MCP servers, and only those (module `mcp`): the
        // secrets are in the 0600 file, never on argv.
        let mcp_file =
            crate::mcp::write(&sandbox.spec().home_dir, &thread.mcp_servers).map_err(|e| {
                ChildError::Spawn {
                    program: config.bin.display().to_string(),
                    message: format!("writing the thread's MCP config: {e}"),
                }
            })?;
        if let Some(file) = mcp_file {
            spec = spec
                .arg("--mcp-config")
                .arg(file.to_string_lossy().into_owned())
                .arg("--strict-mcp-config");
        }
        spec = spec
            .arg("--permission-prompt-tool")
            .arg("stdio")
            .arg(if resume { "--resume" } else { "--session-id" })
            .arg(session_id);
        if !thread.mcp_servers.is_empty() {
            // Claude Code in print mode connects MCP servers in the
            // background and makes its first model call without the tools
            // of those still connecting (and waits at most 5 s when told to
            // block); the thread's servers are its tools, so claude waits
            // for them, up to MCP_CONNECT_WAIT_MS. The operator's or the
            // thread's own values, set below, win.
            spec = spec
                .env("MCP_CONNECTION_NONBLOCKING", "0")
                .env("MCP_CONNECT_TIMEOUT_MS", MCP_CONNECT_WAIT_MS);
        }
        let documented = sdk_process::runner_env(PASS_ENV, PASS_ENV_PREFIXES);
        for (key, value) in documented.iter().chain(&config.env).chain(thread_env) {
            spec = spec.env(key, value);
        }
        // Its own config dir, never the operator's nor another thread's:
        // settings (hooks) written there reach this thread's claude only.
        let config_dir =
            crate::config_dir::prepare(config, &sandbox.spec().home_dir).map_err(|e| {
                ChildError::Spawn {
                    program: config.bin.display().to_string(),
                    message: format!("preparing the thread's CLAUDE_CONFIG_DIR: {e}"),
                }
            })?;
        spec = spec.env("CLAUDE_CONFIG_DIR", config_dir);
        let (child, inbound) = JsonChild::spawn(spec, sandbox, protocol::response_key())?;
        let sink = Arc::new(Sink::default());
        let router = tokio::spawn(route(
            inbound,
            child.handle(),
            sink.clone(),
            config.allows_tools(),
            config.asks_runner(),
        ));
        Ok(Self {
            child,
            sink,
            flavor,
            router,
        })
    }

    pub(crate) fn is_alive(&self) -> bool {
        !self.child.is_gone()
    }
}

async fn route(
    mut inbound: Inbound,
    handle: sdk_process::ChildHandle,
    sink: Arc<Sink>,
    allow: bool,
    asks: bool,
) {
    let label = handle.label().to_owned();
    while let Some(line) = inbound.recv().await {
        match line.get("type").and_then(Value::as_str) {
            Some("control_request") => {
                let id = line.get("request_id").cloned().unwrap_or(Value::Null);
                let request = line.get("request").cloned().unwrap_or(Value::Null);
                let subtype = request.get("subtype").and_then(Value::as_str).unwrap_or("");
                if subtype == "can_use_tool"
                    && asks
                    && sink.send(TurnMsg::Permission {
                        id: id.clone(),
                        request: request.clone(),
                        handle: handle.clone(),
                    })
                {
                    continue;
                }
                let answer = if subtype == "can_use_tool" {
                    let tool = request
                        .get("tool_name")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    tracing::info!(
                        child = %label,
                        %tool,
                        allowed = allow,
                        "answered a permission prompt"
                    );
                    protocol::control_success(&id, protocol::permission(&request, allow))
                } else {
                    tracing::debug!(child = %label, %subtype, "refusing a control request");
                    protocol::control_error(&id, &format!("agent-runner does not handle {subtype}"))
                };
                if let Err(e) = handle.send(&answer).await {
                    tracing::debug!(child = %label, error = %e, "could not answer a control request");
                }
            }
            Some("control_cancel_request") => {
                tracing::debug!(child = %label, "claude withdrew a control request");
            }
            kind => {
                let kind = kind.unwrap_or("<no type>").to_owned();
                if !sink.send(TurnMsg::Line(line)) {
                    tracing::debug!(child = %label, %kind, "output outside a turn");
                }
            }
        }
    }
    let reason = handle
        .exit_reason()
        .unwrap_or_else(|| "it went away".to_owned());
    sink.send(TurnMsg::Exited(reason));
}
