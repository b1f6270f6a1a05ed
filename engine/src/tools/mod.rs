//! Tools the model can call, confined to the session workspace.
//!
//! Each tool lives in its own module and implements [`Tool`] (the file
//! tools through `file_tool::FileTool`, which holds what they share); the
//! [`ToolRegistry`] holds the built-in set (`bash`, `read`, `write`, `edit`,
//! `grep`, `glob`, `ls`, `todo`) and turns it into the specs sent to the
//! model. Every path a file tool touches is opened beneath the workspace's
//! directory fd with `openat2(RESOLVE_BENEATH)` (`beneath`); [`confine`]
//! remains for checks that only need a name (permissions, LSP requests). A tool never
//! panics on bad input: it answers a [`ToolOutput`] with `success = false`
//! and an error the model can read.

pub(crate) mod args;
mod bash;
pub(crate) mod beneath;
pub(crate) mod cap;
mod child_env;
mod confine;
mod diff;
mod edit;
mod ext;
mod file_tool;
mod glob;
mod grep;
mod lines;
mod ls;
pub(crate) mod process_group;
mod read;
mod todo;
mod walk;
mod write;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use code_agent_proto::{SessionLane, Todo};
use tokio_util::sync::CancellationToken;

pub use bash::BashTool;
pub use cap::cap_head_tail;
pub use child_env::{child_env, is_secret_env};
pub use confine::{confine, relative_display};
pub use edit::EditTool;
pub use ext::Extensions;
pub use glob::GlobTool;
pub use grep::GrepTool;
pub use ls::LsTool;
pub use read::ReadTool;
pub use todo::{TodoTool, validate_todos};
pub use write::WriteTool;

/// Default timeout of one `bash` call.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
/// Default bytes kept of one tool's output.
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;

/// The proto's session lanes a tool call is scheduled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Reads that change nothing (read, glob, ls, grep, todo).
    Query,
    /// Actions with side effects on the workspace or processes (bash, write, edit).
    Execute,
    /// Model calls.
    Generate,
}

impl From<Lane> for SessionLane {
    fn from(lane: Lane) -> Self {
        match lane {
            Lane::Query => SessionLane::Query,
            Lane::Execute => SessionLane::Execute,
            Lane::Generate => SessionLane::Generate,
        }
    }
}

/// What a tool call runs against. Not `Debug`: `env` may carry credentials
/// meant for child processes only.
pub struct ToolContext {
    /// Canonical session workspace.
    pub workspace: PathBuf,
    /// Cancels the call (kills a running `bash` process group).
    pub cancel: CancellationToken,
    /// Extra env for child processes.
    pub env: Vec<(String, String)>,
    /// Default `bash` timeout; a call may pass `timeout_ms`.
    pub bash_timeout: Duration,
    /// Bytes kept of one tool's output.
    pub output_cap: usize,
    /// The session's todo list (the `todo` tool replaces it).
    pub todos: Arc<Mutex<Vec<Todo>>>,
    /// The sandbox processes are launched in, or why none may start.
    pub sandbox: Result<Arc<agent_launcher::ThreadSandbox>, String>,
    /// Handles of the areas whose tools live outside this module (the
    /// session's memory and plans, the cron scheduler).
    pub extensions: Extensions,
}

impl ToolContext {
    /// A context with the default timeout and cap, no extra env, an empty
    /// todo list and no sandbox (so no process may start; see
    /// [`ToolContext::with_sandbox`]).
    pub fn new(workspace: PathBuf) -> Self {
        Self {
            workspace,
            cancel: CancellationToken::new(),
            env: Vec::new(),
            bash_timeout: DEFAULT_BASH_TIMEOUT,
            output_cap: DEFAULT_OUTPUT_CAP,
            todos: Arc::new(Mutex::new(Vec::new())),
            sandbox: Err("this tool context has no sandbox".to_string()),
            extensions: Extensions::default(),
        }
    }

    /// The same context, launching processes in `sandbox`.
    pub fn with_sandbox(mut self, sandbox: Arc<agent_launcher::ThreadSandbox>) -> Self {
        self.sandbox = Ok(sandbox);
        self
    }
}

/// The result of one tool call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutput {
    /// Whether the tool did what was asked.
    pub success: bool,
    /// What the model reads back (capped).
    pub output: String,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Facts for clients (pid, exit code, path…), not for the model.
    pub metadata: BTreeMap<String, String>,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(output: impl Into<String>) -> Self {
        Self {
            success: true,
            output: output.into(),
            error: None,
            metadata: BTreeMap::new(),
        }
    }

    /// A failed result; the error is also the output so the model sees it.
    pub fn err(error: impl Into<String>) -> Self {
        let error = error.into();
        Self {
            success: false,
            output: error.clone(),
            error: Some(error),
            metadata: BTreeMap::new(),
        }
    }

    /// Adds a metadata entry.
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.metadata.insert(key.to_string(), value.into());
        self
    }
}

/// What the model is told about a tool, and the lane its calls run on.
pub struct ToolInfo {
    /// `bash`, `read`, `write`, `edit`, `grep`, `glob`, `ls` or `todo`.
    pub name: &'static str,
    /// What the tool does, for the model.
    pub description: &'static str,
    /// Where its calls run (internal, external or hybrid lane).
    pub lane: Lane,
    /// The JSON schema of the arguments.
    pub parameters: fn() -> serde_json::Value,
}

/// One tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The tool's static description.
    fn info(&self) -> &'static ToolInfo;

    /// Its name, as the model calls it.
    fn name(&self) -> &'static str {
        self.info().name
    }

    /// What it does, for the model.
    fn description(&self) -> &'static str {
        self.info().description
    }

    /// JSON schema of the arguments.
    fn parameters(&self) -> serde_json::Value {
        (self.info().parameters)()
    }

    /// Its lane.
    fn lane(&self) -> Lane {
        self.info().lane
    }

    /// Runs the call; never panics, errors come back as `success = false`.
    async fn run(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput;
}

/// The tools a session offers, in a stable order.
#[derive(Clone)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// The built-in tools.
    pub fn builtin() -> Self {
        Self {
            tools: vec![
                Arc::new(BashTool),
                Arc::new(ReadTool),
                Arc::new(WriteTool),
                Arc::new(EditTool),
                Arc::new(GrepTool),
                Arc::new(GlobTool),
                Arc::new(LsTool),
                Arc::new(TodoTool),
            ],
        }
    }

    /// Adds a tool defined outside this module (memory, planning, cron).
    pub fn push(&mut self, tool: Arc<dyn Tool>) {
        self.tools.push(tool);
    }

    /// The tool called `name` (exact, lower-case names).
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.iter().find(|tool| tool.name() == name).cloned()
    }

    /// Every registered tool.
    pub fn all(&self) -> Vec<Arc<dyn Tool>> {
        self.tools.clone()
    }

    /// The specs sent to the model.
    pub fn specs(&self) -> Vec<crate::llm::ToolSpec> {
        self.tools
            .iter()
            .map(|tool| crate::llm::ToolSpec {
                name: tool.name().to_string(),
                description: tool.description().to_string(),
                parameters: tool.parameters(),
            })
            .collect()
    }
}

/// A context on a fresh temporary workspace, for the tools' unit tests.
#[cfg(test)]
pub(crate) fn temp_context() -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path().canonicalize().unwrap());
    (dir, ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_lists_every_builtin_with_its_lane() {
        let registry = ToolRegistry::builtin();
        let lanes: Vec<(&str, Lane)> = registry
            .all()
            .iter()
            .map(|tool| (tool.name(), tool.lane()))
            .collect();
        assert_eq!(
            lanes,
            vec![
                ("bash", Lane::Execute),
                ("read", Lane::Query),
                ("write", Lane::Execute),
                ("edit", Lane::Execute),
                ("grep", Lane::Query),
                ("glob", Lane::Query),
                ("ls", Lane::Query),
                ("todo", Lane::Query),
            ]
        );
        assert!(registry.get("edit").is_some());
        assert!(registry.get("Edit").is_none());
        for spec in registry.specs() {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
            assert!(!spec.description.is_empty());
        }
        assert_eq!(SessionLane::from(Lane::Execute), SessionLane::Execute);
    }
}
