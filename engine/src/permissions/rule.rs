//! One permission rule parsed from its text (`Bash(cargo:*)`,
//! `Read(src/**/*.rs)`, `mcp__docs__*`): the tool it names and what its
//! pattern matches.

use globset::{GlobBuilder, GlobMatcher};

/// The tools rules can name.
const TOOLS: [&str; 8] = [
    "bash", "read", "write", "edit", "grep", "glob", "ls", "todo",
];

/// The `tool` of every MCP rule (its matcher is a glob over the tool name).
pub(super) const MCP: &str = "mcp";

/// One parsed rule.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    /// The rule as written (trimmed).
    pub(super) text: String,
    /// The tool it names (`mcp` for MCP tools).
    pub(super) tool: &'static str,
    pub(super) matcher: Matcher,
}

/// What a rule's pattern matches.
#[derive(Debug, Clone)]
pub(super) enum Matcher {
    /// Every call of the tool.
    Any,
    /// `cmd:*`: the command is `cmd` or starts with `cmd `.
    Prefix(String),
    /// A glob over the command, a path argument or an MCP tool's name.
    Glob(GlobMatcher),
}

/// Parses `Tool` or `Tool(pattern)`; the error names the rule.
pub(super) fn parse_rule(text: &str) -> Result<Rule, String> {
    let bad = |why: String| format!("{text:?} is invalid: {why}");
    let trimmed = text.trim();
    let (name, pattern) = match trimmed.find('(') {
        None => (trimmed, None),
        Some(open) => {
            let Some(inner) = trimmed[open + 1..].strip_suffix(')') else {
                return Err(bad("expected `Tool(pattern)` with a closing `)`".into()));
            };
            (trimmed[..open].trim(), Some(inner.trim()))
        }
    };
    let lower = name.to_ascii_lowercase();
    if lower.starts_with(crate::mcp::TOOL_PREFIX) {
        if pattern.is_some() {
            return Err(bad(
                "an MCP tool rule takes no (pattern); use * in the name".into(),
            ));
        }
        return Ok(Rule {
            text: trimmed.to_string(),
            tool: MCP,
            matcher: Matcher::Glob(compile_glob(&lower, false).map_err(bad)?),
        });
    }
    let Some(tool) = TOOLS.iter().copied().find(|known| *known == lower) else {
        return Err(bad(format!(
            "unknown tool {name:?} (known: Bash, Read, Write, Edit, Grep, Glob, LS, Todo)"
        )));
    };
    let matcher = match pattern {
        None => Matcher::Any,
        Some("") => return Err(bad("empty pattern".into())),
        Some(_) if tool == "todo" => return Err(bad("Todo takes no pattern".into())),
        Some("*") | Some("**") => Matcher::Any,
        Some(pattern) if tool == "bash" => match pattern.strip_suffix(":*") {
            Some(prefix) if !prefix.trim().is_empty() => Matcher::Prefix(prefix.trim().to_string()),
            Some(_) => return Err(bad("empty command prefix before `:*`".into())),
            None => Matcher::Glob(compile_glob(pattern, false).map_err(bad)?),
        },
        Some(pattern) => {
            let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
            Matcher::Glob(compile_glob(pattern, true).map_err(bad)?)
        }
    };
    Ok(Rule {
        text: trimmed.to_string(),
        tool,
        matcher,
    })
}

fn compile_glob(pattern: &str, path_like: bool) -> Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(path_like)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|err| format!("bad pattern: {err}"))
}
