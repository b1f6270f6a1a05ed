//! The `read` tool: a text file's lines with line numbers, optionally a
//! range (`offset` = first line, 1-based; `limit` = how many lines).
//!
//! Binary files are refused (a NUL byte in the first 8 KiB), long lines are
//! cut, and the output stops at the context's cap with a note saying which
//! lines were shown and how to read on.

use serde_json::{Value, json};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};

use super::args::{file_path_schema, object_schema, optional_u64, required_str};
use super::file_tool::{FileTool, Workspace};
use super::lines::{cut_chars, line_text};
use super::{Lane, ToolInfo, ToolOutput};

/// Lines returned when the call gives no `limit`.
const DEFAULT_LIMIT: u64 = 2000;
/// Characters kept of one line.
const MAX_LINE_CHARS: usize = 2000;
/// Bytes inspected for binary detection.
const SNIFF_BYTES: usize = 8 * 1024;

/// `read`: reads a file, or a range of its lines.
pub struct ReadTool;

impl FileTool for ReadTool {
    const INFO: &'static ToolInfo = &ToolInfo {
        name: "read",
        description: "Read a text file in the workspace. Output lines are numbered (`   N\\tline`). \
                      Use offset (first line, 1-based) and limit (number of lines, default 2000) \
                      to read part of a large file.",
        lane: Lane::Query,
        parameters,
    };

    fn call(args: &Value, workspace: &Workspace) -> Result<ToolOutput, String> {
        let requested = required_str(args, "path")?;
        let offset = optional_u64(args, "offset")?.unwrap_or(1).max(1);
        let limit = optional_u64(args, "limit")?.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 {
            return Err("argument `limit` must be at least 1".to_string());
        }
        let (root, target) = workspace.open(requested)?;
        let mut file = root
            .read_file(&target, "open")
            .map_err(|err| err.replace(" is a directory", " is a directory (use ls)"))?;
        let shown = target.shown;
        let mut sniff = vec![0u8; SNIFF_BYTES];
        let sniffed = read_up_to(&mut file, &mut sniff)
            .map_err(|err| format!("cannot read {shown}: {err}"))?;
        if sniff[..sniffed].contains(&0) {
            return Err(format!("{shown} looks like a binary file; not shown"));
        }
        let reader = BufReader::new(std::io::Cursor::new(sniff[..sniffed].to_vec()).chain(file));

        let mut output = String::new();
        let mut total: u64 = 0;
        let mut first_shown: Option<u64> = None;
        let mut last_shown: u64 = 0;
        let mut capped = false;
        for line in reader.split(b'\n') {
            let line = line.map_err(|err| format!("cannot read {shown}: {err}"))?;
            total += 1;
            if total < offset || total >= offset.saturating_add(limit) || capped {
                continue;
            }
            let text = cut_chars(&line_text(&line), MAX_LINE_CHARS, "… [line cut]");
            let numbered = format!("{total:>6}\t{text}\n");
            if output.len() + numbered.len() > workspace.cap {
                capped = true;
                continue;
            }
            output.push_str(&numbered);
            first_shown.get_or_insert(total);
            last_shown = total;
        }
        if total > 0 && offset > total {
            return Err(format!(
                "offset {offset} is past the end of {shown} ({total} lines)"
            ));
        }
        let first = first_shown.unwrap_or(offset);
        if capped || (last_shown < total && first_shown.is_some()) {
            let reason = if capped { "output cap reached; " } else { "" };
            output.push_str(&format!(
                "[{reason}showing lines {first}-{last_shown} of {total}; use offset/limit to read more]\n"
            ));
        }
        if total == 0 {
            output.push_str("[empty file]\n");
        }
        Ok(ToolOutput::ok(output)
            .with("path", shown)
            .with("total_lines", total.to_string())
            .with("start_line", first.to_string())
            .with("end_line", last_shown.to_string()))
    }
}

fn parameters() -> Value {
    object_schema(
        json!({
            "path": file_path_schema(),
            "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)."},
            "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to read."}
        }),
        &["path"],
    )
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Tool, ToolContext, temp_context};

    fn ctx() -> (tempfile::TempDir, ToolContext) {
        let (dir, ctx) = temp_context();
        std::fs::create_dir_all(ctx.workspace.join("src")).unwrap();
        std::fs::write(ctx.workspace.join("src/a.txt"), "one\ntwo\nthree\nfour\n").unwrap();
        (dir, ctx)
    }

    #[tokio::test]
    async fn reads_numbered_lines() {
        let (_dir, ctx) = ctx();
        let out = ReadTool.run(json!({"path": "src/a.txt"}), &ctx).await;
        assert!(out.success, "{out:?}");
        assert_eq!(
            out.output,
            "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n"
        );
        assert_eq!(out.metadata["path"], "src/a.txt");
        assert_eq!(out.metadata["total_lines"], "4");
    }

    #[tokio::test]
    async fn reads_a_line_range() {
        let (_dir, ctx) = ctx();
        let out = ReadTool
            .run(json!({"path": "src/a.txt", "offset": 2, "limit": 2}), &ctx)
            .await;
        assert!(out.success, "{out:?}");
        assert_eq!(
            out.output,
            "     2\ttwo\n     3\tthree\n[showing lines 2-3 of 4; use offset/limit to read more]\n"
        );
        let past = ReadTool
            .run(json!({"path": "src/a.txt", "offset": 9}), &ctx)
            .await;
        assert!(past.error.unwrap().contains("past the end"));
    }

    #[tokio::test]
    async fn caps_output_and_says_so() {
        let (_dir, mut ctx) = ctx();
        ctx.output_cap = 30;
        let out = ReadTool.run(json!({"path": "src/a.txt"}), &ctx).await;
        assert!(out.success);
        assert!(
            out.output.starts_with("     1\tone\n     2\ttwo\n"),
            "{}",
            out.output
        );
        assert!(
            out.output
                .contains("output cap reached; showing lines 1-2 of 4")
        );
    }

    #[tokio::test]
    async fn refuses_binary_directories_missing_and_escapes() {
        let (_dir, ctx) = ctx();
        std::fs::write(ctx.workspace.join("bin"), b"\x7fELF\0\0\x01").unwrap();
        let out = ReadTool.run(json!({"path": "bin"}), &ctx).await;
        assert!(out.error.unwrap().contains("binary"));
        let out = ReadTool.run(json!({"path": "src"}), &ctx).await;
        assert!(out.error.unwrap().contains("directory"));
        let out = ReadTool.run(json!({"path": "nope.txt"}), &ctx).await;
        assert!(out.error.unwrap().contains("cannot open"));
        let out = ReadTool.run(json!({"path": "../x"}), &ctx).await;
        assert!(!out.success);
        let out = ReadTool.run(json!({}), &ctx).await;
        assert!(out.error.unwrap().contains("`path`"));
    }
}
