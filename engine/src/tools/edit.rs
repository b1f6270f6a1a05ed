//! The `edit` tool: replace an exact string in a file. The string must
//! occur exactly once unless `replace_all` is set, so the model cannot
//! change a place it did not mean. Metadata carries a unified diff.

use serde_json::{Value, json};

use super::args::{file_path_schema, object_schema, optional_bool, required_str};
use super::diff::file_changed;
use std::io::Read;

use super::beneath::replace_content;
use super::file_tool::{FileTool, Workspace};
use super::{Lane, ToolInfo, ToolOutput};

/// `edit`: replaces one exact, unambiguous piece of a file.
pub struct EditTool;

impl FileTool for EditTool {
    const INFO: &'static ToolInfo = &ToolInfo {
        name: "edit",
        description: "Replace old_string with new_string in a file. old_string must match the file \
                      exactly (whitespace included) and occur exactly once, unless replace_all is \
                      true. Include enough surrounding lines to make it unique.",
        lane: Lane::Execute,
        parameters,
    };

    fn call(args: &Value, workspace: &Workspace) -> Result<ToolOutput, String> {
        let requested = required_str(args, "path")?;
        let old_string = required_str(args, "old_string")?;
        let new_string = required_str(args, "new_string")?;
        let replace_all = optional_bool(args, "replace_all")?.unwrap_or(false);
        if old_string.is_empty() {
            return Err("argument `old_string` is empty (use write to create a file)".to_string());
        }
        if old_string == new_string {
            return Err(
                "`old_string` and `new_string` are the same; nothing to change".to_string(),
            );
        }
        let (root, target) = workspace.open(requested)?;
        let shown = target.shown.clone();
        // Read and rewritten through one fd resolved beneath the workspace.
        let (mut file, _) = root
            .rw_file(&target, false)
            .map_err(|err| err.replace("cannot open", "cannot read"))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|err| format!("cannot read {shown}: {err}"))?;
        let old = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
        let count = old.matches(old_string).count();
        if count == 0 {
            return Err(format!("`old_string` not found in {shown}"));
        }
        if count > 1 && !replace_all {
            return Err(format!(
                "`old_string` occurs {count} times in {shown}; include more context to make it \
                 unique, or set replace_all"
            ));
        }
        let new = if replace_all {
            old.replace(old_string, new_string)
        } else {
            old.replacen(old_string, new_string, 1)
        };
        replace_content(&mut file, new.as_bytes())
            .map_err(|err| format!("cannot write {shown}: {err}"))?;
        let noun = if count == 1 {
            "occurrence"
        } else {
            "occurrences"
        };
        let summary = format!("Edited {shown}: replaced {count} {noun}");
        Ok(
            file_changed(summary, shown, Some(&old), &new, workspace.cap)
                .with("replacements", count.to_string()),
        )
    }
}

fn parameters() -> Value {
    object_schema(
        json!({
            "path": file_path_schema(),
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The replacement text."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."}
        }),
        &["path", "old_string", "new_string"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Tool, ToolContext, temp_context};
    use std::os::unix::fs::symlink;

    fn ctx() -> (tempfile::TempDir, ToolContext) {
        let (dir, ctx) = temp_context();
        std::fs::write(ctx.workspace.join("f.rs"), "let a = 1;\nlet b = 1;\n").unwrap();
        (dir, ctx)
    }

    fn content(ctx: &ToolContext) -> String {
        std::fs::read_to_string(ctx.workspace.join("f.rs")).unwrap()
    }

    #[tokio::test]
    async fn replaces_a_unique_match() {
        let (_dir, ctx) = ctx();
        let out = EditTool
            .run(
                json!({"path": "f.rs", "old_string": "let b = 1;", "new_string": "let b = 2;"}),
                &ctx,
            )
            .await;
        assert!(out.success, "{out:?}");
        assert_eq!(content(&ctx), "let a = 1;\nlet b = 2;\n");
        assert!(out.metadata["diff"].contains("-let b = 1;\n+let b = 2;\n"));
        assert_eq!(out.metadata["kind"], "update");
    }

    #[tokio::test]
    async fn ambiguous_match_is_an_error_unless_replace_all() {
        let (_dir, ctx) = ctx();
        let args = json!({"path": "f.rs", "old_string": "= 1;", "new_string": "= 3;"});
        let out = EditTool.run(args.clone(), &ctx).await;
        assert!(out.error.unwrap().contains("occurs 2 times"));
        assert_eq!(content(&ctx), "let a = 1;\nlet b = 1;\n");
        let mut all = args;
        all["replace_all"] = json!(true);
        let out = EditTool.run(all, &ctx).await;
        assert!(out.success, "{out:?}");
        assert_eq!(out.metadata["replacements"], "2");
        assert_eq!(content(&ctx), "let a = 3;\nlet b = 3;\n");
    }

    #[tokio::test]
    async fn errors_for_missing_text_files_and_escapes() {
        let (_dir, ctx) = ctx();
        let run = |path: &str, old: &str| {
            EditTool.run(
                json!({"path": path, "old_string": old, "new_string": "x"}),
                &ctx,
            )
        };
        assert!(
            run("f.rs", "nope")
                .await
                .error
                .unwrap()
                .contains("not found")
        );
        assert!(
            run("missing.rs", "a")
                .await
                .error
                .unwrap()
                .contains("cannot read")
        );
        assert!(run("f.rs", "").await.error.unwrap().contains("empty"));
        assert!(!run("../f.rs", "a").await.success);
        symlink("/etc/hostname", ctx.workspace.join("host")).unwrap();
        assert!(run("host", "a").await.error.unwrap().contains("outside"));
        assert!(!run("/etc/hostname", "a").await.success);
    }
}
