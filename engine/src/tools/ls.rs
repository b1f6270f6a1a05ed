//! The `ls` tool: one directory's entries, sorted, directories marked with a
//! trailing `/` and symlinks shown with their target. Capped.

use serde_json::{Value, json};

use super::args::{object_schema, optional_str};
use super::file_tool::{FileTool, Workspace};
use super::lines::capped_lines;
use super::{Lane, ToolInfo, ToolOutput};

/// Entries listed at most.
const MAX_ENTRIES: usize = 1000;

/// `ls`: lists a directory.
pub struct LsTool;

impl FileTool for LsTool {
    const INFO: &'static ToolInfo = &ToolInfo {
        name: "ls",
        description: "List a directory of the workspace (default: the workspace root). Directories \
                      end with `/`, symlinks show `-> target`.",
        lane: Lane::Query,
        parameters,
    };

    fn call(args: &Value, workspace: &Workspace) -> Result<ToolOutput, String> {
        let requested = optional_str(args, "path")?.unwrap_or(".");
        let (root, target) = workspace.open(requested)?;
        // Listed through the directory's own fd, resolved beneath the root.
        let mut entries: Vec<String> = root
            .list(&target)?
            .into_iter()
            .map(|entry| {
                let name = entry.name.to_string_lossy().into_owned();
                match entry.link {
                    Some(Some(link)) => format!("{name} -> {}", link.display()),
                    Some(None) => format!("{name} -> ?"),
                    None if entry.is_dir => format!("{name}/"),
                    None => name,
                }
            })
            .collect();
        let shown = target.shown;
        entries.sort();
        let total = entries.len();
        let (mut output, listed) = capped_lines(&entries, MAX_ENTRIES, workspace.cap);
        if total == 0 {
            output.push_str("[empty directory]\n");
        } else if listed < total {
            output.push_str(&format!("[showing {listed} of {total} entries]\n"));
        }
        Ok(ToolOutput::ok(output)
            .with("path", shown)
            .with("count", total.to_string()))
    }
}

fn parameters() -> Value {
    object_schema(
        json!({
            "path": {"type": "string", "description": "Directory, relative to the workspace or absolute inside it."}
        }),
        &[],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Tool, temp_context};
    use std::os::unix::fs::symlink;

    #[tokio::test]
    async fn lists_sorted_with_dirs_marked() {
        let (_dir, ctx) = temp_context();
        let ws = &ctx.workspace;
        std::fs::create_dir_all(ws.join("src/inner")).unwrap();
        std::fs::write(ws.join("b.txt"), "").unwrap();
        std::fs::write(ws.join("a.txt"), "").unwrap();
        symlink("b.txt", ws.join("c")).unwrap();
        let out = LsTool.run(json!({}), &ctx).await;
        assert!(out.success, "{out:?}");
        assert_eq!(out.output, "a.txt\nb.txt\nc -> b.txt\nsrc/\n");
        assert_eq!(out.metadata["path"], ".");
        let out = LsTool.run(json!({"path": "src"}), &ctx).await;
        assert_eq!(out.output, "inner/\n");
        let out = LsTool.run(json!({"path": "src/inner"}), &ctx).await;
        assert_eq!(out.output, "[empty directory]\n");
        let out = LsTool.run(json!({"path": "a.txt"}), &ctx).await;
        assert!(out.error.unwrap().contains("not a directory"));
    }

    #[tokio::test]
    async fn refuses_escapes() {
        let (_dir, ctx) = temp_context();
        let outside = tempfile::tempdir().unwrap();
        symlink("/etc", ctx.workspace.join("etc")).unwrap();
        symlink(outside.path(), ctx.workspace.join("out")).unwrap();
        for path in ["..", "/etc", "etc", "out", "out/..", "./../.."] {
            let out = LsTool.run(json!({"path": path}), &ctx).await;
            assert!(!out.success, "{path} was listed: {}", out.output);
        }
    }
}
