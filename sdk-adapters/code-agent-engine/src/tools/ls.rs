//! The `ls` tool: one directory's entries, sorted, directories marked with a
//! trailing `/` and symlinks shown with their target. Capped.

use std::path::Path;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::args::{object, optional_str};
use super::confine::{confine, relative_display};
use super::{Lane, Tool, ToolContext, ToolOutput, blocking};

/// Entries listed at most.
const MAX_ENTRIES: usize = 1000;

pub struct LsTool;

#[async_trait]
impl Tool for LsTool {
    fn name(&self) -> &'static str {
        "ls"
    }

    fn description(&self) -> &'static str {
        "List a directory of the workspace (default: the workspace root). Directories \
         end with `/`, symlinks show `-> target`."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory, relative to the workspace or absolute inside it."}
            },
            "additionalProperties": false
        })
    }

    fn lane(&self) -> Lane {
        Lane::Query
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let workspace = ctx.workspace.clone();
        let cap = ctx.output_cap;
        blocking(move || match ls(&args, &workspace, cap) {
            Ok(output) => output,
            Err(err) => ToolOutput::err(err),
        })
        .await
    }
}

fn ls(args: &Value, workspace: &Path, cap: usize) -> Result<ToolOutput, String> {
    object(args)?;
    let requested = optional_str(args, "path")?.unwrap_or(".");
    let dir = confine(workspace, requested)?;
    let shown = relative_display(workspace, &dir);
    if !dir.is_dir() {
        return Err(format!("{shown} is not a directory"));
    }
    let reading = std::fs::read_dir(&dir).map_err(|err| format!("cannot list {shown}: {err}"))?;
    let mut entries: Vec<String> = Vec::new();
    for entry in reading {
        let entry = entry.map_err(|err| format!("cannot list {shown}: {err}"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let line = match entry.file_type() {
            Ok(kind) if kind.is_dir() => format!("{name}/"),
            Ok(kind) if kind.is_symlink() => match std::fs::read_link(entry.path()) {
                Ok(target) => format!("{name} -> {}", target.display()),
                Err(_) => format!("{name} -> ?"),
            },
            _ => name,
        };
        entries.push(line);
    }
    entries.sort();
    let total = entries.len();
    let mut output = String::new();
    let mut listed = 0;
    for line in &entries {
        if listed >= MAX_ENTRIES || output.len() + line.len() + 1 > cap {
            break;
        }
        output.push_str(line);
        output.push('\n');
        listed += 1;
    }
    if total == 0 {
        output.push_str("[empty directory]\n");
    } else if listed < total {
        output.push_str(&format!("[showing {listed} of {total} entries]\n"));
    }
    Ok(ToolOutput::ok(output)
        .with("path", shown)
        .with("count", total.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[tokio::test]
    async fn lists_sorted_with_dirs_marked() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::new(dir.path().canonicalize().unwrap());
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
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::new(dir.path().canonicalize().unwrap());
        let outside = tempfile::tempdir().unwrap();
        symlink("/etc", ctx.workspace.join("etc")).unwrap();
        symlink(outside.path(), ctx.workspace.join("out")).unwrap();
        for path in ["..", "/etc", "etc", "out", "out/..", "./../.."] {
            let out = LsTool.run(json!({"path": path}), &ctx).await;
            assert!(!out.success, "{path} was listed: {}", out.output);
        }
    }
}
