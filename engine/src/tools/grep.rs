//! The `grep` tool: search file contents with a regular expression (the
//! `regex` crate), walking the workspace the `.gitignore`-aware way (see
//! `walk`). Results are `path:line:text`, capped in count and in bytes.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use globset::GlobMatcher;
use regex::{Regex, RegexBuilder};
use serde_json::{Value, json};

use super::args::{object_schema, optional_bool, optional_str, required_str};
use super::beneath::{Target, WorkspaceRoot};
use super::file_tool::{FileTool, Workspace};
use super::lines::{cut_chars, line_text};
use super::walk::{WalkedFile, files};
use super::{Lane, ToolInfo, ToolOutput};

/// Matching lines returned at most.
const MAX_MATCHES: usize = 500;
/// Characters kept of one matching line.
const MAX_LINE_CHARS: usize = 500;
/// Files larger than this are skipped.
const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Compiled regex size limit (guards against patterns that explode).
const REGEX_SIZE_LIMIT: usize = 10 * 1024 * 1024;

/// `grep`: searches file contents with a regular expression (respecting .gitignore).
pub struct GrepTool;

impl FileTool for GrepTool {
    const INFO: &'static ToolInfo = &ToolInfo {
        name: "grep",
        description: "Search file contents with a regular expression (Rust regex syntax). Respects \
                      .gitignore; binary files are skipped. Output lines are `path:line:text`. \
                      Narrow with path (a directory or file) and glob (e.g. `*.rs` or \
                      `src/**/*.ts`).",
        lane: Lane::Query,
        parameters,
    };

    fn call(args: &Value, workspace: &Workspace) -> Result<ToolOutput, String> {
        grep(args, workspace)
    }
}

fn parameters() -> Value {
    object_schema(
        json!({
            "pattern": {"type": "string", "description": "Regular expression to search for."},
            "path": {"type": "string", "description": "Directory or file to search (default: the workspace)."},
            "glob": {"type": "string", "description": "Only files matching this glob (a pattern without `/` matches file names)."},
            "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)."}
        }),
        &["pattern"],
    )
}

/// Which files the `glob` argument keeps.
enum FileFilter {
    All,
    Name(GlobMatcher),
    Path(GlobMatcher),
}

impl FileFilter {
    fn parse(glob: Option<&str>) -> Result<Self, String> {
        let Some(glob) = glob.filter(|glob| !glob.is_empty()) else {
            return Ok(Self::All);
        };
        let matcher = globset::GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .map_err(|err| format!("argument `glob` is not a valid glob: {err}"))?
            .compile_matcher();
        Ok(if glob.contains('/') {
            Self::Path(matcher)
        } else {
            Self::Name(matcher)
        })
    }

    fn keeps(&self, relative: &Path) -> bool {
        match self {
            Self::All => true,
            Self::Name(matcher) => relative
                .file_name()
                .is_some_and(|name| matcher.is_match(name)),
            Self::Path(matcher) => matcher.is_match(relative),
        }
    }
}

fn grep(args: &Value, workspace: &Workspace) -> Result<ToolOutput, String> {
    let pattern = required_str(args, "pattern")?;
    let requested = optional_str(args, "path")?.unwrap_or(".");
    let filter = FileFilter::parse(optional_str(args, "glob")?)?;
    let case_insensitive = optional_bool(args, "case_insensitive")?.unwrap_or(false);
    let regex = RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|err| format!("argument `pattern` is not a valid regex: {err}"))?;
    let (workspace_root, target) = workspace.open(requested)?;
    let (walk_root, _) = workspace_root.real_path(&target)?;

    let mut output = String::new();
    let mut matches = 0usize;
    let mut files_matched = 0usize;
    let mut truncated = false;
    'files: for file in files(&workspace_root, &walk_root) {
        if workspace.cancel.is_cancelled() {
            return Err("grep cancelled".to_string());
        }
        let relative = Path::new(&file.display);
        if !filter.keeps(relative) {
            continue;
        }
        let found = search_file(&workspace_root, &file, &regex);
        if !found.is_empty() {
            files_matched += 1;
        }
        for (line_number, text) in found {
            let entry = format!("{}:{line_number}:{text}\n", file.display);
            if matches >= MAX_MATCHES || output.len() + entry.len() > workspace.cap {
                truncated = true;
                break 'files;
            }
            output.push_str(&entry);
            matches += 1;
        }
    }
    if truncated {
        output.push_str(&format!(
            "[results truncated after {matches} matches; narrow the pattern, path or glob]\n"
        ));
    } else if matches == 0 {
        output.push_str("No matches found.\n");
    }
    Ok(ToolOutput::ok(output)
        .with("pattern", pattern)
        .with("path", target.shown)
        .with("matches", matches.to_string())
        .with("files", files_matched.to_string())
        .with("truncated", truncated.to_string()))
}

/// Matching lines of one file (empty for unreadable, binary or huge files,
/// and for one that no longer resolves inside the workspace).
fn search_file(root: &WorkspaceRoot, walked: &WalkedFile, regex: &Regex) -> Vec<(u64, String)> {
    let target = Target {
        rel: walked.rel.clone(),
        shown: walked.display.clone(),
    };
    let Ok(file) = root.read_file(&target, "read") else {
        return Vec::new();
    };
    if file.metadata().map(|meta| meta.len()).unwrap_or(0) > MAX_FILE_BYTES {
        return Vec::new();
    }
    let mut reader = BufReader::new(file);
    let Ok(start) = reader.fill_buf() else {
        return Vec::new();
    };
    if start[..start.len().min(8 * 1024)].contains(&0) {
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut number = 0u64;
    for line in reader.take(MAX_FILE_BYTES).split(b'\n') {
        let Ok(line) = line else { break };
        number += 1;
        let text = line_text(&line);
        if regex.is_match(&text) {
            found.push((number, cut_chars(&text, MAX_LINE_CHARS, "…")));
            if found.len() >= MAX_MATCHES {
                break;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Tool, ToolContext, temp_context};
    use std::os::unix::fs::symlink;

    fn ctx() -> (tempfile::TempDir, ToolContext) {
        let (dir, ctx) = temp_context();
        let ws = &ctx.workspace;
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::create_dir_all(ws.join("target")).unwrap();
        std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(ws.join("src/lib.rs"), "fn alpha() {}\nfn beta() {}\n").unwrap();
        std::fs::write(ws.join("src/notes.md"), "alpha notes\n").unwrap();
        std::fs::write(ws.join("target/gen.rs"), "fn alpha_generated() {}\n").unwrap();
        (dir, ctx)
    }

    #[tokio::test]
    async fn finds_matches_and_respects_gitignore() {
        let (_dir, ctx) = ctx();
        let out = GrepTool.run(json!({"pattern": "alpha"}), &ctx).await;
        assert!(out.success, "{out:?}");
        let mut lines: Vec<&str> = out.output.lines().collect();
        lines.sort();
        assert_eq!(
            lines,
            vec!["src/lib.rs:1:fn alpha() {}", "src/notes.md:1:alpha notes"]
        );
        assert_eq!(out.metadata["matches"], "2");
    }

    #[tokio::test]
    async fn glob_path_and_case_filters() {
        let (_dir, ctx) = ctx();
        let out = GrepTool
            .run(
                json!({"pattern": "ALPHA", "glob": "*.rs", "case_insensitive": true}),
                &ctx,
            )
            .await;
        assert_eq!(out.output, "src/lib.rs:1:fn alpha() {}\n");
        let out = GrepTool
            .run(json!({"pattern": "fn \\w+", "path": "src/lib.rs"}), &ctx)
            .await;
        assert_eq!(
            out.output,
            "src/lib.rs:1:fn alpha() {}\nsrc/lib.rs:2:fn beta() {}\n"
        );
        let out = GrepTool.run(json!({"pattern": "zzz"}), &ctx).await;
        assert!(out.success);
        assert_eq!(out.output, "No matches found.\n");
    }

    #[tokio::test]
    async fn caps_results() {
        let (_dir, mut ctx) = ctx();
        ctx.output_cap = 40;
        let out = GrepTool.run(json!({"pattern": "."}), &ctx).await;
        assert!(out.success);
        assert_eq!(out.metadata["matches"], "1", "{}", out.output);
        assert!(out.output.contains("results truncated"), "{}", out.output);
        assert_eq!(out.metadata["truncated"], "true");
    }

    #[tokio::test]
    async fn errors_and_escapes() {
        let (_dir, ctx) = ctx();
        let out = GrepTool.run(json!({"pattern": "("}), &ctx).await;
        assert!(out.error.unwrap().contains("`pattern`"));
        let out = GrepTool
            .run(json!({"pattern": "root", "path": "/etc"}), &ctx)
            .await;
        assert!(!out.success);
        let out = GrepTool
            .run(json!({"pattern": "root", "path": "../"}), &ctx)
            .await;
        assert!(!out.success);
        symlink("/etc", ctx.workspace.join("etc")).unwrap();
        let out = GrepTool
            .run(json!({"pattern": "root", "path": "etc"}), &ctx)
            .await;
        assert!(!out.success);
        // A symlink to a file outside is skipped by the walk.
        symlink("/etc/passwd", ctx.workspace.join("src/passwd")).unwrap();
        let out = GrepTool.run(json!({"pattern": "root"}), &ctx).await;
        assert_eq!(out.output, "No matches found.\n");
    }
}
