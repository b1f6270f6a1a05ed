//! `lsp-types` values turned into the CodeAgentService proto messages and into the
//! text the model reads (1-based lines and columns there, as `read` shows).

use code_agent_proto::{LspDiagnostic, LspLocation, LspPosition, LspRange, LspSymbol};
use lsp_types::{
    Diagnostic, DiagnosticSeverity, Hover, HoverContents, Location, MarkedString, NumberOrString,
    Range, SymbolInformation, SymbolKind,
};

/// The proto's severity names: `error`, `warning`, `info`, `hint`
/// (`error` when the server gave none, as the LSP spec suggests clients assume).
pub fn severity_name(severity: Option<DiagnosticSeverity>) -> &'static str {
    match severity {
        Some(DiagnosticSeverity::WARNING) => "warning",
        Some(DiagnosticSeverity::INFORMATION) => "info",
        Some(DiagnosticSeverity::HINT) => "hint",
        _ => "error",
    }
}

/// A symbol kind as a lower-case word (`function`, `class`, `variable`, …).
pub fn symbol_kind_name(kind: SymbolKind) -> &'static str {
    const NAMES: [&str; 26] = [
        "file",
        "module",
        "namespace",
        "package",
        "class",
        "method",
        "property",
        "field",
        "constructor",
        "enum",
        "interface",
        "function",
        "variable",
        "constant",
        "string",
        "number",
        "boolean",
        "array",
        "object",
        "key",
        "null",
        "enum_member",
        "struct",
        "event",
        "operator",
        "type_parameter",
    ];
    // SymbolKind is 1-based in the spec.
    let raw: i32 = serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_i64())
        .and_then(|v| i32::try_from(v).ok())
        .unwrap_or(0);
    usize::try_from(raw - 1)
        .ok()
        .and_then(|i| NAMES.get(i).copied())
        .unwrap_or("unknown")
}

pub(crate) fn range(range: Range) -> LspRange {
    LspRange {
        start: Some(LspPosition {
            line: range.start.line,
            character: range.start.character,
        }),
        end: Some(LspPosition {
            line: range.end.line,
            character: range.end.character,
        }),
    }
}

pub(crate) fn location(location: Location) -> LspLocation {
    LspLocation {
        uri: location.uri.to_string(),
        range: Some(range(location.range)),
    }
}

pub(crate) fn symbol(symbol: SymbolInformation) -> LspSymbol {
    LspSymbol {
        name: symbol.name,
        kind: symbol_kind_name(symbol.kind).to_string(),
        location: Some(location(symbol.location)),
        container_name: symbol.container_name,
    }
}

pub(crate) fn diagnostic(uri: &lsp_types::Url, d: Diagnostic) -> LspDiagnostic {
    LspDiagnostic {
        uri: uri.to_string(),
        range: Some(range(d.range)),
        severity: severity_name(d.severity).to_string(),
        message: d.message,
        code: d.code.map(|code| match code {
            NumberOrString::Number(n) => n.to_string(),
            NumberOrString::String(s) => s,
        }),
        source: d.source,
    }
}

/// Hover contents as markdown.
pub(crate) fn hover_text(hover: &Hover) -> String {
    fn marked(m: &MarkedString) -> String {
        match m {
            MarkedString::String(s) => s.clone(),
            MarkedString::LanguageString(ls) => format!("```{}\n{}\n```", ls.language, ls.value),
        }
    }
    match &hover.contents {
        HoverContents::Scalar(m) => marked(m),
        HoverContents::Array(list) => list.iter().map(marked).collect::<Vec<_>>().join("\n\n"),
        HoverContents::Markup(m) => m.value.clone(),
    }
}

/// `path:line:col` (1-based) of a location, relative to `root` when under it.
pub(crate) fn location_line(location: &Location, root: &std::path::Path) -> String {
    let path = location
        .uri
        .to_file_path()
        .map(|p| {
            p.strip_prefix(root)
                .map(|r| r.display().to_string())
                .unwrap_or_else(|_| p.display().to_string())
        })
        .unwrap_or_else(|()| location.uri.to_string());
    format!(
        "{path}:{}:{}",
        location.range.start.line + 1,
        location.range.start.character + 1
    )
}

/// The diagnostics appended to a `write`/`edit` result.
pub(crate) fn render_diagnostics(server: &str, shown: &str, list: &[Diagnostic]) -> String {
    if list.is_empty() {
        return format!("\n\n[{server}: no diagnostics in {shown}]");
    }
    let mut text = format!("\n\n[{server}: {} diagnostic(s) in {shown}]", list.len());
    for d in list.iter().take(50) {
        text.push_str(&format!("\n{}", diagnostic_line(shown, d)));
    }
    if list.len() > 50 {
        text.push_str(&format!("\n… and {} more", list.len() - 50));
    }
    text
}

/// One diagnostic as `path:line:col: severity: message [source code]`.
pub(crate) fn diagnostic_line(shown: &str, d: &Diagnostic) -> String {
    let mut tag = d.source.clone().unwrap_or_default();
    if let Some(code) = &d.code {
        let code = match code {
            NumberOrString::Number(n) => n.to_string(),
            NumberOrString::String(s) => s.clone(),
        };
        tag = if tag.is_empty() {
            code
        } else {
            format!("{tag} {code}")
        };
    }
    let tag = if tag.is_empty() {
        String::new()
    } else {
        format!(" [{tag}]")
    };
    format!(
        "{shown}:{}:{}: {}: {}{tag}",
        d.range.start.line + 1,
        d.range.start.character + 1,
        severity_name(d.severity),
        d.message
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_lines() {
        assert_eq!(symbol_kind_name(SymbolKind::FUNCTION), "function");
        assert_eq!(symbol_kind_name(SymbolKind::CLASS), "class");
        assert_eq!(
            symbol_kind_name(SymbolKind::TYPE_PARAMETER),
            "type_parameter"
        );
        assert_eq!(severity_name(Some(DiagnosticSeverity::WARNING)), "warning");
        assert_eq!(severity_name(None), "error");
        let d = Diagnostic {
            range: Range::new(
                lsp_types::Position::new(2, 4),
                lsp_types::Position::new(2, 7),
            ),
            severity: Some(DiagnosticSeverity::ERROR),
            message: "undefined name 'x'".into(),
            source: Some("pyflakes".into()),
            ..Diagnostic::default()
        };
        assert_eq!(
            diagnostic_line("a.py", &d),
            "a.py:3:5: error: undefined name 'x' [pyflakes]"
        );
        assert!(render_diagnostics("pylsp", "a.py", &[]).contains("no diagnostics"));
    }
}
