//! The `write` tool: create or replace a file in the workspace with the
//! given content. Missing parent directories are created (inside the
//! workspace only: each is made with `mkdirat` in a directory resolved beneath
//! the workspace fd, and the file is written through its own fd). Metadata says whether the
//! file was added or updated and carries a unified diff.

use serde_json::{Value, json};

use super::args::{file_path_schema, object_schema, required_str};
use super::diff::file_changed;
use std::io::Read;

use super::beneath::replace_content;
use super::file_tool::{FileTool, Workspace};
use super::{Lane, ToolInfo, ToolOutput};

/// `write`: writes a whole file (creating directories).
pub struct WriteTool;

impl FileTool for WriteTool {
    const INFO: &'static ToolInfo = &ToolInfo {
        name: "write",
        description: "Create a file in the workspace, or replace its whole content. Parent \
                      directories are created. Prefer edit for changing part of an existing file.",
        lane: Lane::Execute,
        parameters,
    };

    fn call(args: &Value, workspace: &Workspace) -> Result<ToolOutput, String> {
        let requested = required_str(args, "path")?;
        let content = required_str(args, "content")?;
        let (root, target) = workspace.open(requested)?;
        let shown = target.shown.clone();
        // One fd, resolved beneath the workspace, for the old content and
        // the new: nothing is reopened by name.
        let (mut file, existed) = root.rw_file(&target, true)?;
        let old = if existed {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)
                .map_err(|err| format!("cannot read {shown}: {err}"))?;
            Some(String::from_utf8_lossy(&bytes).into_owned())
        } else {
            None
        };
        replace_content(&mut file, content.as_bytes())
            .map_err(|err| format!("cannot write {shown}: {err}"))?;
        let verb = if old.is_some() { "Updated" } else { "Created" };
        let summary = format!("{verb} {shown} ({} bytes)", content.len());
        Ok(file_changed(
            summary,
            shown,
            old.as_deref(),
            content,
            workspace.cap,
        ))
    }
}

fn parameters() -> Value {
    object_schema(
        json!({
            "path": file_path_schema(),
            "content": {"type": "string", "description": "The complete new content of the file."}
        }),
        &["path", "content"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Tool, temp_context as ctx};
    use std::os::unix::fs::symlink;

    #[tokio::test]
    async fn creates_then_updates_with_diffs() {
        let (_dir, ctx) = ctx();
        let out = WriteTool
            .run(json!({"path": "new/dir/f.txt", "content": "a\nb\n"}), &ctx)
            .await;
        assert!(out.success, "{out:?}");
        assert_eq!(out.metadata["kind"], "add");
        assert_eq!(out.metadata["path"], "new/dir/f.txt");
        assert!(out.metadata["diff"].contains("+a\n+b\n"));
        assert_eq!(
            std::fs::read_to_string(ctx.workspace.join("new/dir/f.txt")).unwrap(),
            "a\nb\n"
        );
        let out = WriteTool
            .run(json!({"path": "new/dir/f.txt", "content": "a\nc\n"}), &ctx)
            .await;
        assert_eq!(out.metadata["kind"], "update");
        assert!(
            out.metadata["diff"].contains("-b\n+c\n"),
            "{}",
            out.metadata["diff"]
        );
    }

    #[tokio::test]
    async fn refuses_escapes_and_bad_arguments() {
        let (_dir, ctx) = ctx();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), ctx.workspace.join("out")).unwrap();
        symlink("/etc", ctx.workspace.join("etc")).unwrap();
        for path in [
            "../escape.txt".to_string(),
            outside.path().join("abs.txt").display().to_string(),
            "out/x.txt".to_string(),
            "out/deeper/x.txt".to_string(),
            "etc/x.conf".to_string(),
        ] {
            let out = WriteTool
                .run(json!({"path": path, "content": "x"}), &ctx)
                .await;
            assert!(!out.success, "{path} was written");
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let out = WriteTool.run(json!({"path": "a.txt"}), &ctx).await;
        assert!(out.error.unwrap().contains("`content`"));
        std::fs::create_dir(ctx.workspace.join("d")).unwrap();
        let out = WriteTool
            .run(json!({"path": "d", "content": ""}), &ctx)
            .await;
        assert!(out.error.unwrap().contains("directory"));
    }
}
