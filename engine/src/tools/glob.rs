//! The `glob` tool: files whose path (relative to the search directory,
//! the workspace by default) matches a glob such as `src/**/*.rs`, found
//! with the `.gitignore`-aware walk and matched with `globset`. Sorted and
//! capped.

use std::path::{Component, Path};

use globset::GlobBuilder;
use serde_json::{Value, json};

use super::args::{object_schema, optional_str, required_str};
use super::file_tool::{FileTool, Workspace};
use super::lines::capped_lines;
use super::walk::files;
use super::{Lane, ToolInfo, ToolOutput};

/// Paths returned at most.
const MAX_RESULTS: usize = 1000;

/// `glob`: lists files matching a pattern (respecting .gitignore).
pub struct GlobTool;

impl FileTool for GlobTool {
    const INFO: &'static ToolInfo = &ToolInfo {
        name: "glob",
        description: "Find files by glob pattern (e.g. `**/*.rs`, `src/*.ts`; `*` stays within one \
                      directory, `**` crosses directories). Respects .gitignore. Returns sorted \
                      workspace-relative paths.",
        lane: Lane::Query,
        parameters,
    };

    fn call(args: &Value, workspace: &Workspace) -> Result<ToolOutput, String> {
        let pattern = required_str(args, "pattern")?;
        let requested = optional_str(args, "path")?.unwrap_or(".");
        let pattern_path = Path::new(pattern);
        if pattern.is_empty()
            || pattern_path.is_absolute()
            || pattern_path.components().any(|c| c == Component::ParentDir)
        {
            return Err(format!(
                "argument `pattern` must be a relative glob without `..` (got {pattern:?})"
            ));
        }
        let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
        let matcher = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|err| format!("argument `pattern` is not a valid glob: {err}"))?
            .compile_matcher();
        let (workspace_root, target) = workspace.open(requested)?;
        let (walk_root, is_dir) = workspace_root.real_path(&target)?;
        if !is_dir {
            return Err(format!("{} is not a directory", target.shown));
        }
        let mut found: Vec<String> = files(&workspace_root, &walk_root)
            .filter(|file| {
                file.walked
                    .strip_prefix(&walk_root)
                    .is_ok_and(|relative| matcher.is_match(relative))
            })
            .map(|file| file.display)
            .collect();
        found.sort();
        let total = found.len();
        let (mut output, shown) = capped_lines(&found, MAX_RESULTS, workspace.cap);
        if total == 0 {
            output.push_str("No files found.\n");
        } else if shown < total {
            output.push_str(&format!(
                "[showing {shown} of {total} files; narrow the pattern]\n"
            ));
        }
        Ok(ToolOutput::ok(output)
            .with("pattern", pattern)
            .with("path", target.shown)
            .with("count", total.to_string()))
    }
}

fn parameters() -> Value {
    object_schema(
        json!({
            "pattern": {"type": "string", "description": "Glob, relative to path."},
            "path": {"type": "string", "description": "Directory to search from (default: the workspace)."}
        }),
        &["pattern"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Tool, ToolContext, temp_context};
    use std::os::unix::fs::symlink;

    fn ctx() -> (tempfile::TempDir, ToolContext) {
        let (dir, ctx) = temp_context();
        let ws = &ctx.workspace;
        std::fs::create_dir_all(ws.join("src/deep")).unwrap();
        std::fs::create_dir_all(ws.join("target")).unwrap();
        std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
        for file in [
            "src/b.rs",
            "src/a.rs",
            "src/deep/c.rs",
            "src/x.md",
            "target/t.rs",
            "top.rs",
        ] {
            std::fs::write(ws.join(file), "").unwrap();
        }
        (dir, ctx)
    }

    #[tokio::test]
    async fn matches_sorted_and_respects_gitignore() {
        let (_dir, ctx) = ctx();
        let out = GlobTool.run(json!({"pattern": "**/*.rs"}), &ctx).await;
        assert!(out.success, "{out:?}");
        assert_eq!(out.output, "src/a.rs\nsrc/b.rs\nsrc/deep/c.rs\ntop.rs\n");
        let out = GlobTool.run(json!({"pattern": "src/*.rs"}), &ctx).await;
        assert_eq!(out.output, "src/a.rs\nsrc/b.rs\n");
        let out = GlobTool
            .run(json!({"pattern": "*.rs", "path": "src"}), &ctx)
            .await;
        assert_eq!(out.output, "src/a.rs\nsrc/b.rs\n");
        let out = GlobTool.run(json!({"pattern": "*.none"}), &ctx).await;
        assert_eq!(out.output, "No files found.\n");
    }

    #[tokio::test]
    async fn caps_results() {
        let (_dir, mut ctx) = ctx();
        ctx.output_cap = 12;
        let out = GlobTool.run(json!({"pattern": "**/*.rs"}), &ctx).await;
        assert_eq!(
            out.output,
            "src/a.rs\n[showing 1 of 4 files; narrow the pattern]\n"
        );
    }

    #[tokio::test]
    async fn refuses_escapes() {
        let (_dir, ctx) = ctx();
        symlink("/etc", ctx.workspace.join("etc")).unwrap();
        for args in [
            json!({"pattern": "../*"}),
            json!({"pattern": "/etc/*"}),
            json!({"pattern": "*", "path": "/etc"}),
            json!({"pattern": "*", "path": ".."}),
            json!({"pattern": "*", "path": "etc"}),
            json!({"pattern": "["}),
        ] {
            let out = GlobTool.run(args.clone(), &ctx).await;
            assert!(!out.success, "{args} succeeded: {}", out.output);
        }
        // The symlinked directory is not descended into by the walk.
        let out = GlobTool.run(json!({"pattern": "etc/**"}), &ctx).await;
        assert_eq!(out.output, "No files found.\n");
    }
}
