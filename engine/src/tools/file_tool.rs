//! What the file tools (`read`, `write`, `edit`, `grep`, `glob`, `ls`) have
//! in common, written once: a call is blocking file work run off the async
//! runtime, its arguments must be a JSON object, every path it takes is
//! resolved beneath the workspace's directory fd (see `beneath`) and shown
//! relative to it, and an error it
//! returns becomes the failed [`ToolOutput`] the model reads.

use std::path::PathBuf;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::args::object;
use super::beneath::{Target, WorkspaceRoot};
use super::{Tool, ToolContext, ToolInfo, ToolOutput};

/// A tool whose call is blocking work on the workspace's files; it is a
/// [`Tool`] through the blanket implementation below.
pub(crate) trait FileTool: Send + Sync + 'static {
    const INFO: &'static ToolInfo;

    /// The call; `args` is known to be a JSON object. An `Err` is the
    /// message the model sees.
    fn call(args: &Value, workspace: &Workspace) -> Result<ToolOutput, String>;
}

#[async_trait]
impl<T: FileTool> Tool for T {
    fn info(&self) -> &'static ToolInfo {
        T::INFO
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let workspace = Workspace {
            root: ctx.workspace.clone(),
            cap: ctx.output_cap,
            cancel: ctx.cancel.clone(),
        };
        let work = move || object(&args).and_then(|()| T::call(&args, &workspace));
        // A panic in the work becomes a tool error instead of taking the
        // session down.
        match tokio::task::spawn_blocking(work).await {
            Ok(Ok(output)) => output,
            Ok(Err(error)) => ToolOutput::err(error),
            Err(err) => ToolOutput::err(format!("tool failed internally: {err}")),
        }
    }
}

/// What a file tool's call works in.
pub(crate) struct Workspace {
    /// The canonical session workspace.
    pub(crate) root: PathBuf,
    /// Bytes kept of the call's output.
    pub(crate) cap: usize,
    /// Cancels the call (long walks check it).
    pub(crate) cancel: CancellationToken,
}

impl Workspace {
    /// The workspace root opened as a directory fd, and `requested`
    /// (relative to the workspace, or absolute inside it) as a path to
    /// resolve beneath it; every open goes through the root's fd.
    pub(crate) fn open(&self, requested: &str) -> Result<(WorkspaceRoot, Target), String> {
        let root = WorkspaceRoot::open(&self.root)?;
        let target = root.target(requested)?;
        Ok((root, target))
    }
}
