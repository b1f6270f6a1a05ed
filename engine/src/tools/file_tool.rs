//! What the file tools (`read`, `write`, `edit`, `grep`, `glob`, `ls`) have
//! in common, written once: a call is blocking file work run off the async
//! runtime, its arguments must be a JSON object, every path it takes is
//! confined to the workspace and shown relative to it, and an error it
//! returns becomes the failed [`ToolOutput`] the model reads.

use std::path::PathBuf;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::args::object;
use super::confine::{confine, relative_display};
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

/// A path a tool was asked for, inside the workspace.
pub(crate) struct Confined {
    /// Where it is (symlinks resolved).
    pub(crate) path: PathBuf,
    /// How the model sees it: relative to the workspace, `.` for the root.
    pub(crate) shown: String,
}

impl Workspace {
    /// `requested` (relative to the workspace, or absolute inside it)
    /// confined to the workspace, or why it is refused.
    pub(crate) fn confine(&self, requested: &str) -> Result<Confined, String> {
        let path = confine(&self.root, requested)?;
        let shown = relative_display(&self.root, &path);
        Ok(Confined { path, shown })
    }

    /// Like [`Workspace::confine`], for a path that must be a directory.
    pub(crate) fn confine_dir(&self, requested: &str) -> Result<Confined, String> {
        let confined = self.confine(requested)?;
        if !confined.path.is_dir() {
            return Err(format!("{} is not a directory", confined.shown));
        }
        Ok(confined)
    }
}
