//! The LSP tools the model gets while a language server runs:
//! `lsp_hover`, `lsp_definition`, `lsp_references` (path, 1-based line and
//! column), `lsp_symbols` (query, limit) and `lsp_diagnostics` (path, or
//! every file reported on). Paths are confined to the session workspace
//! like every file tool; all run on the QUERY lane.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::LspManager;
use super::convert::{diagnostic_line, hover_text, location_line, symbol_kind_name};
use crate::tools::args::{
    file_path_schema, object, object_schema, optional_bool, optional_str, optional_u64,
    required_str,
};
use crate::tools::{Lane, Tool, ToolContext, ToolInfo, ToolOutput, cap_head_tail, confine};

/// Names of the LSP tools, in the order they are offered.
pub const LSP_TOOL_NAMES: [&str; 5] = [
    "lsp_hover",
    "lsp_definition",
    "lsp_references",
    "lsp_symbols",
    "lsp_diagnostics",
];

#[derive(Clone, Copy)]
enum Kind {
    Hover,
    Definition,
    References,
    Symbols,
    Diagnostics,
}

/// One LSP tool bound to the engine's servers.
pub(crate) struct LspTool {
    kind: Kind,
    lsp: LspManager,
}

/// Every LSP tool, bound to `lsp`.
pub(crate) fn lsp_tools(lsp: &LspManager) -> Vec<std::sync::Arc<dyn Tool>> {
    [
        Kind::Hover,
        Kind::Definition,
        Kind::References,
        Kind::Symbols,
        Kind::Diagnostics,
    ]
    .into_iter()
    .map(|kind| {
        std::sync::Arc::new(LspTool {
            kind,
            lsp: lsp.clone(),
        }) as std::sync::Arc<dyn Tool>
    })
    .collect()
}

fn position_schema() -> Value {
    object_schema(
        json!({
            "path": file_path_schema(),
            "line": {"type": "integer", "minimum": 1, "description": "1-based line (as `read` shows)."},
            "column": {"type": "integer", "minimum": 1, "description": "1-based column of a character of the symbol."}
        }),
        &["path", "line", "column"],
    )
}

fn references_schema() -> Value {
    let mut schema = position_schema();
    schema["properties"]["include_declaration"] =
        json!({"type": "boolean", "description": "Also list the declaration (default true)."});
    schema
}

fn symbols_schema() -> Value {
    object_schema(
        json!({
            "query": {"type": "string", "description": "Part of the symbol name (empty: all)."},
            "limit": {"type": "integer", "minimum": 1, "description": "Most results (default 20, at most 200)."}
        }),
        &["query"],
    )
}

fn diagnostics_schema() -> Value {
    object_schema(
        json!({"path": {"type": "string", "description": "One file (relative to the workspace); omit for every file the language server reported on."}}),
        &[],
    )
}

static HOVER: ToolInfo = ToolInfo {
    name: "lsp_hover",
    description: "Language server hover at a position: the type, signature and documentation of \
                  the symbol there.",
    lane: Lane::Query,
    parameters: position_schema,
};
static DEFINITION: ToolInfo = ToolInfo {
    name: "lsp_definition",
    description: "Language server go-to-definition: where the symbol at a position is defined \
                  (path:line:column).",
    lane: Lane::Query,
    parameters: position_schema,
};
static REFERENCES: ToolInfo = ToolInfo {
    name: "lsp_references",
    description: "Language server find-references: every use of the symbol at a position \
                  (path:line:column).",
    lane: Lane::Query,
    parameters: references_schema,
};
static SYMBOLS: ToolInfo = ToolInfo {
    name: "lsp_symbols",
    description: "Language server symbol search across the workspace: functions, classes, \
                  variables whose name contains the query, with their locations.",
    lane: Lane::Query,
    parameters: symbols_schema,
};
static DIAGNOSTICS: ToolInfo = ToolInfo {
    name: "lsp_diagnostics",
    description: "Language server diagnostics (errors, warnings) of one file, read fresh, or of \
                  every file the server reported on.",
    lane: Lane::Query,
    parameters: diagnostics_schema,
};

/// A 1-based position argument as 0-based.
fn position(args: &Value) -> Result<(u32, u32), String> {
    let get = |key: &str| -> Result<u32, String> {
        let value =
            optional_u64(args, key)?.ok_or_else(|| format!("missing required argument `{key}`"))?;
        if value == 0 {
            return Err(format!("argument `{key}` is 1-based: at least 1"));
        }
        u32::try_from(value - 1).map_err(|_| format!("argument `{key}` is too large"))
    };
    Ok((get("line")?, get("column")?))
}

#[async_trait]
impl Tool for LspTool {
    fn info(&self) -> &'static ToolInfo {
        match self.kind {
            Kind::Hover => &HOVER,
            Kind::Definition => &DEFINITION,
            Kind::References => &REFERENCES,
            Kind::Symbols => &SYMBOLS,
            Kind::Diagnostics => &DIAGNOSTICS,
        }
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        match self.call(&args, ctx).await {
            Ok(text) => ToolOutput::ok(cap_head_tail(&text, ctx.output_cap)),
            Err(error) => ToolOutput::err(error),
        }
    }
}

impl LspTool {
    async fn call(&self, args: &Value, ctx: &ToolContext) -> Result<String, String> {
        object(args)?;
        let root = &ctx.workspace;
        let path_arg = |required: bool| -> Result<Option<std::path::PathBuf>, String> {
            let requested = if required {
                Some(required_str(args, "path")?)
            } else {
                optional_str(args, "path")?
            };
            requested.map(|p| confine(root, p)).transpose()
        };
        match self.kind {
            Kind::Hover => {
                let path = path_arg(true)?.ok_or("missing required argument `path`")?;
                let (line, column) = position(args)?;
                Ok(match self.lsp.hover(&path, line, column).await? {
                    Some(hover) if !hover_text(&hover).trim().is_empty() => hover_text(&hover),
                    _ => "No hover information at that position.".to_string(),
                })
            }
            Kind::Definition | Kind::References => {
                let path = path_arg(true)?.ok_or("missing required argument `path`")?;
                let (line, column) = position(args)?;
                let locations = if matches!(self.kind, Kind::Definition) {
                    self.lsp.definition(&path, line, column).await?
                } else {
                    let include = optional_bool(args, "include_declaration")?.unwrap_or(true);
                    self.lsp.references(&path, line, column, include).await?
                };
                if locations.is_empty() {
                    return Ok("No locations found.".to_string());
                }
                Ok(locations
                    .iter()
                    .map(|l| location_line(l, root))
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
            Kind::Symbols => {
                let query = required_str(args, "query")?;
                let limit = optional_u64(args, "limit")?.unwrap_or(20).clamp(1, 200) as usize;
                // Only what is defined in this session's workspace.
                let symbols = self.lsp.symbols(query, limit, Some(root)).await?;
                if symbols.is_empty() {
                    return Ok(format!("No symbols match {query:?}."));
                }
                Ok(symbols
                    .iter()
                    .map(|s| {
                        let container = s
                            .container_name
                            .as_deref()
                            .map(|c| format!(" in {c}"))
                            .unwrap_or_default();
                        format!(
                            "{} {}{container} — {}",
                            symbol_kind_name(s.kind),
                            s.name,
                            location_line(&s.location, root)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
            Kind::Diagnostics => {
                let all = match path_arg(false)? {
                    Some(path) => {
                        let list = self
                            .lsp
                            .fresh_diagnostics(&path, super::DIAGNOSTICS_WAIT)
                            .await?
                            .unwrap_or_default();
                        let uri = super::server::LspServer::uri(&path)?;
                        vec![(uri, list)]
                    }
                    None => self.lsp.diagnostics_within(root),
                };
                let mut lines = Vec::new();
                for (uri, list) in &all {
                    let shown = uri
                        .to_file_path()
                        .ok()
                        .and_then(|p| p.strip_prefix(root).ok().map(|r| r.display().to_string()))
                        .unwrap_or_else(|| uri.to_string());
                    lines.extend(list.iter().map(|d| diagnostic_line(&shown, d)));
                }
                if lines.is_empty() {
                    return Ok("No diagnostics.".to_string());
                }
                Ok(lines.join("\n"))
            }
        }
    }
}
