//! Allow/deny/ask permission rules (`Bash(cargo:*)`, `Read(src/**/*.rs)`).
//!
//! A rule is `Tool` (every call of the tool) or `Tool(pattern)`. Tool names
//! match case-insensitively (`Bash` is `bash`, `LS` is `ls`). What the
//! pattern is matched against depends on the tool:
//! - `bash`: the command. `cargo:*` (Claude Code's prefix form) matches
//!   `cargo` and `cargo …`; any other pattern is a glob over the whole
//!   command where `*` matches anything. A compound command (`a && b`,
//!   `a; b`, `a | b`) is split: a deny or ask rule matches when it matches
//!   the whole command or any part, an allow rule only when it matches every
//!   part and the command has no `$(…)` or backquote substitution.
//! - `read`, `write`, `edit`, `ls`: a glob (`**` crosses directories, `*`
//!   does not) over the workspace-relative `path` argument. With
//!   [`Permissions::check_in`] the path is also resolved through symlinks;
//!   deny/ask rules then match either form, allow rules need both.
//! - `grep`, `glob`: the same kind of glob over the `path` argument or the
//!   `pattern` argument (either matches).
//! - `todo`: no pattern.
//! - MCP tools: a rule is the tool's name itself, `mcp__<server>__<tool>`,
//!   where `*` matches anything (`mcp__docs__*`: every tool of server
//!   `docs`; `mcp__*`: every MCP tool); no `(pattern)`.
//!
//! Decision order: deny, then ask, then allow, then the policy's default
//! (UNKNOWN means ALLOW); a disabled policy allows everything.

use std::path::{Component, Path, PathBuf};

use code_agent_proto::{PermissionDecision, PermissionPolicy, PermissionRule};
use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;

use crate::tools::confine;

/// The tools rules can name.
const TOOLS: [&str; 8] = [
    "bash", "read", "write", "edit", "grep", "glob", "ls", "todo",
];

/// The `tool` of every MCP rule (its matcher is a glob over the tool name).
const MCP: &str = "mcp";

/// A policy ready to check tool calls.
#[derive(Debug, Clone)]
pub struct Permissions {
    enabled: bool,
    default_decision: PermissionDecision,
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    allow: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct Rule {
    text: String,
    tool: &'static str,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Matcher {
    /// Every call of the tool.
    Any,
    /// `cmd:*`: the command is `cmd` or starts with `cmd `.
    Prefix(String),
    Glob(GlobMatcher),
}

/// Whether a rule decides against the call (deny/ask: any form may match)
/// or for it (allow: every form must match).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strictness {
    Any,
    Every,
}

impl Permissions {
    /// Parses every rule of `policy`; the error names the first bad rule.
    pub fn from_policy(policy: &PermissionPolicy) -> Result<Self, String> {
        let parse_all = |rules: &[PermissionRule], kind: &str| -> Result<Vec<Rule>, String> {
            rules
                .iter()
                .map(|rule| parse_rule(&rule.rule).map_err(|err| format!("{kind} rule {err}")))
                .collect()
        };
        Ok(Self {
            enabled: policy.enabled,
            default_decision: PermissionDecision::try_from(policy.default_decision)
                .unwrap_or(PermissionDecision::Unknown),
            deny: parse_all(&policy.deny, "deny")?,
            ask: parse_all(&policy.ask, "ask")?,
            allow: parse_all(&policy.allow, "allow")?,
        })
    }

    /// The policy as the wire carries it (rule texts as given).
    pub fn to_policy(&self) -> PermissionPolicy {
        let texts = |rules: &[Rule]| {
            rules
                .iter()
                .map(|rule| PermissionRule {
                    rule: rule.text.clone(),
                })
                .collect()
        };
        PermissionPolicy {
            deny: texts(&self.deny),
            allow: texts(&self.allow),
            ask: texts(&self.ask),
            default_decision: self.default_decision as i32,
            enabled: self.enabled,
        }
    }

    /// Adds one rule; `rule_type` is `allow`, `deny` or `ask`
    /// (case-insensitive).
    pub fn add_rule(&mut self, rule_type: &str, rule: &str) -> Result<(), String> {
        let list = match rule_type.trim().to_ascii_lowercase().as_str() {
            "allow" => &mut self.allow,
            "deny" => &mut self.deny,
            "ask" => &mut self.ask,
            other => {
                return Err(format!(
                    "rule_type {other:?} is not one of allow, deny, ask"
                ));
            }
        };
        let parsed = parse_rule(rule)?;
        if !list.iter().any(|existing| existing.text == parsed.text) {
            list.push(parsed);
        }
        Ok(())
    }

    /// The decision for calling `tool` with `args`, and the rules of the
    /// deciding list that matched (empty when the default decided). Paths
    /// are matched as given (lexically normalized).
    pub fn check(&self, tool: &str, args: &Value) -> (PermissionDecision, Vec<String>) {
        self.decide(tool, args, None)
    }

    /// Like [`check`](Self::check), with paths also resolved inside
    /// `workspace` (absolute paths made relative, symlinks followed).
    pub fn check_in(
        &self,
        workspace: &Path,
        tool: &str,
        args: &Value,
    ) -> (PermissionDecision, Vec<String>) {
        self.decide(tool, args, Some(workspace))
    }

    /// [`check_in`](Self::check_in) on the blocking pool, for async callers:
    /// resolving paths stats the filesystem. A check that panicked denies.
    pub async fn check_in_off_worker(
        &self,
        workspace: &Path,
        tool: &str,
        args: &Value,
    ) -> (PermissionDecision, Vec<String>) {
        if !self.enabled {
            return (PermissionDecision::Allow, Vec::new());
        }
        let (this, workspace) = (self.clone(), workspace.to_path_buf());
        let (tool, args) = (tool.to_string(), args.clone());
        tokio::task::spawn_blocking(move || this.check_in(&workspace, &tool, &args))
            .await
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "the permission check failed; denying the call");
                (PermissionDecision::Deny, Vec::new())
            })
    }

    /// An MCP tool: rules whose name glob matches it.
    fn decide_mcp(&self, tool: &str) -> (PermissionDecision, Vec<String>) {
        let lists = [
            (&self.deny, PermissionDecision::Deny),
            (&self.ask, PermissionDecision::Ask),
            (&self.allow, PermissionDecision::Allow),
        ];
        for (rules, decision) in lists {
            let matched: Vec<String> = rules
                .iter()
                .filter(|rule| rule.tool == MCP)
                .filter(|rule| match &rule.matcher {
                    Matcher::Glob(glob) => glob.is_match(tool),
                    Matcher::Any | Matcher::Prefix(_) => false,
                })
                .map(|rule| rule.text.clone())
                .collect();
            if !matched.is_empty() {
                return (decision, matched);
            }
        }
        let default = match self.default_decision {
            PermissionDecision::Unknown => PermissionDecision::Allow,
            other => other,
        };
        (default, Vec::new())
    }

    fn decide(
        &self,
        tool: &str,
        args: &Value,
        workspace: Option<&Path>,
    ) -> (PermissionDecision, Vec<String>) {
        if !self.enabled {
            return (PermissionDecision::Allow, Vec::new());
        }
        let tool = tool.trim().to_ascii_lowercase();
        if tool.starts_with(crate::mcp::TOOL_PREFIX) {
            return self.decide_mcp(&tool);
        }
        let call = Call::new(&tool, args, workspace);
        let lists = [
            (&self.deny, PermissionDecision::Deny, Strictness::Any),
            (&self.ask, PermissionDecision::Ask, Strictness::Any),
            (&self.allow, PermissionDecision::Allow, Strictness::Every),
        ];
        for (rules, decision, strictness) in lists {
            let rules: Vec<&Rule> = rules.iter().filter(|rule| rule.tool == tool).collect();
            let matched = call.matching(&rules, strictness);
            if !matched.is_empty() {
                return (decision, matched);
            }
        }
        let default = match self.default_decision {
            PermissionDecision::Unknown => PermissionDecision::Allow,
            other => other,
        };
        (default, Vec::new())
    }
}

/// Parses `Tool` or `Tool(pattern)`; the error names the rule.
fn parse_rule(text: &str) -> Result<Rule, String> {
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

/// What the rules of one tool are matched against.
enum Call {
    /// A bash command: the whole text, its parts, and whether it
    /// substitutes commands.
    Command {
        whole: String,
        parts: Vec<String>,
        substitutes: bool,
    },
    /// Values of which any may match; each with the forms it takes.
    Subjects(Vec<Vec<String>>),
    /// A tool whose rules take no pattern.
    Plain,
}

impl Call {
    fn new(tool: &str, args: &Value, workspace: Option<&Path>) -> Self {
        let text = |key: &str| args.get(key).and_then(Value::as_str);
        match tool {
            "bash" => {
                let whole = text("command").unwrap_or("").trim().to_string();
                Self::Command {
                    parts: split_compound(&whole),
                    substitutes: whole.contains("$(") || whole.contains('`'),
                    whole,
                }
            }
            "read" | "write" | "edit" | "ls" => {
                let path = text("path").unwrap_or(".");
                Self::Subjects(vec![path_forms(path, workspace)])
            }
            "grep" | "glob" => {
                let mut subjects = vec![path_forms(text("path").unwrap_or("."), workspace)];
                if let Some(pattern) = text("pattern") {
                    subjects.push(vec![pattern.to_string()]);
                }
                Self::Subjects(subjects)
            }
            _ => Self::Plain,
        }
    }

    /// The texts of the `rules` (all of the call's tool) that match. For
    /// allow rules on a compound command, every part must be matched by
    /// some rule; the rules that did are returned.
    fn matching(&self, rules: &[&Rule], strictness: Strictness) -> Vec<String> {
        if let (
            Self::Command {
                parts, substitutes, ..
            },
            Strictness::Every,
        ) = (self, strictness)
        {
            let unconditional: Vec<String> = rules
                .iter()
                .filter(|rule| matches!(rule.matcher, Matcher::Any))
                .map(|rule| rule.text.clone())
                .collect();
            if !unconditional.is_empty() {
                return unconditional;
            }
            if *substitutes || parts.is_empty() {
                return Vec::new();
            }
            let mut used: Vec<&Rule> = Vec::new();
            for part in parts {
                let covering: Vec<&Rule> = rules
                    .iter()
                    .copied()
                    .filter(|rule| command_matches(&rule.matcher, part))
                    .collect();
                if covering.is_empty() {
                    return Vec::new();
                }
                for rule in covering {
                    if !used.iter().any(|seen| std::ptr::eq(*seen, rule)) {
                        used.push(rule);
                    }
                }
            }
            return used.iter().map(|rule| rule.text.clone()).collect();
        }
        rules
            .iter()
            .filter(|rule| self.matches(&rule.matcher, strictness))
            .map(|rule| rule.text.clone())
            .collect()
    }

    fn matches(&self, matcher: &Matcher, strictness: Strictness) -> bool {
        if let Matcher::Any = matcher {
            return true;
        }
        match self {
            // Allow rules on commands go through `matching` (every part).
            Self::Command { whole, parts, .. } => {
                command_matches(matcher, whole)
                    || parts.iter().any(|part| command_matches(matcher, part))
            }
            Self::Subjects(subjects) => subjects.iter().any(|forms| {
                let one = |form: &String| match matcher {
                    Matcher::Glob(glob) => glob.is_match(form),
                    Matcher::Prefix(_) | Matcher::Any => false,
                };
                match strictness {
                    Strictness::Any => forms.iter().any(one),
                    Strictness::Every => !forms.is_empty() && forms.iter().all(one),
                }
            }),
            Self::Plain => false,
        }
    }
}

fn command_matches(matcher: &Matcher, command: &str) -> bool {
    let command = command.trim();
    match matcher {
        Matcher::Any => true,
        Matcher::Prefix(prefix) => {
            command == prefix
                || command
                    .strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.starts_with(char::is_whitespace))
        }
        Matcher::Glob(glob) => glob.is_match(command),
    }
}

/// The simple commands of a compound one, split on `&&`, `||`, `;`, `|`,
/// a background `&` and newlines; the `&` of a redirection (`2>&1`, `&>f`)
/// does not split. Quotes are not interpreted: a split inside quotes only
/// makes allow rules stricter.
fn split_compound(command: &str) -> Vec<String> {
    let chars: Vec<char> = command.chars().collect();
    let mut parts = Vec::new();
    let mut current = String::new();
    for (index, &c) in chars.iter().enumerate() {
        let previous = index.checked_sub(1).map(|at| chars[at]);
        let next = chars.get(index + 1).copied();
        let splits = match c {
            '\n' | ';' | '|' => true,
            '&' => !matches!(previous, Some('>' | '<')) && next != Some('>'),
            _ => false,
        };
        if splits {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|part| part.trim().to_string())
        .filter(|part| !part.is_empty())
        .collect()
}

/// The forms a path argument is matched in: lexically normalized as given
/// (relative to the workspace when it is inside it), and with a workspace,
/// resolved through symlinks.
fn path_forms(path: &str, workspace: Option<&Path>) -> Vec<String> {
    let mut forms = Vec::new();
    let given = Path::new(path);
    let relative_given = match workspace {
        Some(workspace) if given.is_absolute() => given
            .strip_prefix(workspace)
            .map(Path::to_path_buf)
            .or_else(|_| {
                workspace.canonicalize().map_err(|_| ()).and_then(|root| {
                    given
                        .strip_prefix(root)
                        .map(Path::to_path_buf)
                        .map_err(|_| ())
                })
            })
            .unwrap_or_else(|_| given.to_path_buf()),
        _ => given.to_path_buf(),
    };
    forms.push(normalize(&relative_given));
    if let Some(workspace) = workspace
        && let Ok(resolved) = confine(workspace, path)
        && let Ok(root) = workspace.canonicalize()
        && let Ok(relative) = resolved.strip_prefix(&root)
    {
        let form = normalize(relative);
        if !forms.contains(&form) {
            forms.push(form);
        }
    }
    forms
}

/// `./a/../b/c` → `b/c`; the empty path → `.`.
fn normalize(path: &Path) -> String {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    if out.as_os_str().is_empty() {
        ".".to_string()
    } else {
        out.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(
        deny: &[&str],
        ask: &[&str],
        allow: &[&str],
        default: PermissionDecision,
    ) -> Permissions {
        let rules = |list: &[&str]| {
            list.iter()
                .map(|rule| PermissionRule {
                    rule: rule.to_string(),
                })
                .collect()
        };
        Permissions::from_policy(&PermissionPolicy {
            deny: rules(deny),
            allow: rules(allow),
            ask: rules(ask),
            default_decision: default as i32,
            enabled: true,
        })
        .unwrap()
    }

    fn bash(command: &str) -> Value {
        json!({ "command": command })
    }

    #[test]
    fn deny_beats_allow_and_ask() {
        let p = policy(
            &["Bash(rm:*)"],
            &["Bash"],
            &["Bash(rm:*)"],
            PermissionDecision::Allow,
        );
        assert_eq!(
            p.check("bash", &bash("rm -rf target")),
            (PermissionDecision::Deny, vec!["Bash(rm:*)".to_string()])
        );
        assert_eq!(p.check("Bash", &bash("ls")).0, PermissionDecision::Ask);
    }

    #[test]
    fn ask_beats_allow_and_allow_beats_default() {
        let p = policy(
            &[],
            &["Write(src/**)"],
            &["Write", "Read"],
            PermissionDecision::Deny,
        );
        let (decision, rules) = p.check("write", &json!({"path": "src/a/b.rs"}));
        assert_eq!(decision, PermissionDecision::Ask);
        assert_eq!(rules, vec!["Write(src/**)"]);
        assert_eq!(
            p.check("write", &json!({"path": "README.md"})).0,
            PermissionDecision::Allow
        );
        assert_eq!(
            p.check("read", &json!({"path": "x"})).0,
            PermissionDecision::Allow
        );
        let (decision, rules) = p.check("edit", &json!({"path": "x"}));
        assert_eq!((decision, rules.len()), (PermissionDecision::Deny, 0));
    }

    #[test]
    fn default_unknown_and_disabled_allow() {
        let p = policy(&[], &[], &[], PermissionDecision::Unknown);
        assert_eq!(
            p.check("bash", &bash("anything")).0,
            PermissionDecision::Allow
        );
        let p = policy(&[], &[], &[], PermissionDecision::Ask);
        assert_eq!(
            p.check("bash", &bash("anything")).0,
            PermissionDecision::Ask
        );
        let mut disabled = p.to_policy();
        disabled.enabled = false;
        disabled.deny.push(PermissionRule {
            rule: "Bash".into(),
        });
        let p = Permissions::from_policy(&disabled).unwrap();
        assert_eq!(
            p.check("bash", &bash("rm -rf /")).0,
            PermissionDecision::Allow
        );
    }

    #[test]
    fn bash_prefix_and_glob_rules() {
        let p = policy(
            &[],
            &[],
            &["Bash(cargo:*)", "Bash(git log*)"],
            PermissionDecision::Deny,
        );
        let decide = |command: &str| p.check("bash", &bash(command)).0;
        assert_eq!(decide("cargo"), PermissionDecision::Allow);
        assert_eq!(decide("cargo test -p x"), PermissionDecision::Allow);
        assert_eq!(decide("cargofoo"), PermissionDecision::Deny);
        assert_eq!(
            decide("git log --oneline -- src/x"),
            PermissionDecision::Allow
        );
        assert_eq!(decide("git status"), PermissionDecision::Deny);
        // Every part of a compound command must be allowed.
        let (decision, rules) = p.check("bash", &bash("cargo build && git log"));
        assert_eq!(decision, PermissionDecision::Allow);
        assert_eq!(rules, vec!["Bash(cargo:*)", "Bash(git log*)"]);
        assert_eq!(decide("cargo build && rm -rf /"), PermissionDecision::Deny);
        assert_eq!(decide("cargo build $(rm -rf /)"), PermissionDecision::Deny);
        assert_eq!(decide("cargo build `rm x`"), PermissionDecision::Deny);
        assert_eq!(
            decide("cargo test 2>&1 | cargo fmt"),
            PermissionDecision::Allow
        );
        assert_eq!(decide("cargo test &> log & rm x"), PermissionDecision::Deny);
        // A deny rule matches any part.
        let p = policy(&["Bash(rm:*)"], &[], &[], PermissionDecision::Allow);
        assert_eq!(
            p.check("bash", &bash("ls; rm -rf /")).0,
            PermissionDecision::Deny
        );
    }

    #[test]
    fn mcp_rules_match_tool_names() {
        let p = Permissions::from_policy(&PermissionPolicy {
            deny: vec![PermissionRule {
                rule: "mcp__docs__delete*".into(),
            }],
            ask: vec![PermissionRule {
                rule: "mcp__docs__*".into(),
            }],
            allow: vec![PermissionRule {
                rule: "mcp__*".into(),
            }],
            default_decision: PermissionDecision::Deny as i32,
            enabled: true,
        })
        .unwrap();
        assert_eq!(
            p.check("mcp__docs__delete_all", &json!({})).0,
            PermissionDecision::Deny
        );
        assert_eq!(
            p.check("mcp__docs__search", &json!({})).0,
            PermissionDecision::Ask
        );
        assert_eq!(
            p.check("mcp__other__x", &json!({})).0,
            PermissionDecision::Allow
        );
        assert_eq!(
            p.check("bash", &json!({"command": "ls"})).0,
            PermissionDecision::Deny
        );
        assert!(parse_rule("mcp__docs__x(y)").is_err());
    }

    #[test]
    fn path_globs() {
        let p = policy(
            &["Read(secrets/**)"],
            &[],
            &["Read(src/**/*.rs)"],
            PermissionDecision::Ask,
        );
        let decide = |path: &str| p.check("read", &json!({ "path": path })).0;
        assert_eq!(decide("src/lib.rs"), PermissionDecision::Allow);
        assert_eq!(decide("./src/a/b/c.rs"), PermissionDecision::Allow);
        assert_eq!(decide("src/lib.md"), PermissionDecision::Ask);
        assert_eq!(decide("secrets/key"), PermissionDecision::Deny);
        assert_eq!(decide("src/../secrets/key"), PermissionDecision::Deny);
        let p = policy(&[], &[], &["Read(*.md)"], PermissionDecision::Deny);
        assert_eq!(
            p.check("read", &json!({"path": "README.md"})).0,
            PermissionDecision::Allow
        );
        assert_eq!(
            p.check("read", &json!({"path": "docs/a.md"})).0,
            PermissionDecision::Deny
        );
    }

    #[test]
    fn check_in_resolves_absolute_paths_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join("secrets")).unwrap();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("secrets/key"), "k").unwrap();
        std::os::unix::fs::symlink(ws.join("secrets"), ws.join("src/link")).unwrap();
        let p = policy(
            &["Read(secrets/**)"],
            &[],
            &["Read(src/**)"],
            PermissionDecision::Ask,
        );
        let abs = ws.join("secrets/key").display().to_string();
        assert_eq!(
            p.check_in(&ws, "read", &json!({ "path": abs })).0,
            PermissionDecision::Deny
        );
        assert_eq!(
            p.check_in(&ws, "read", &json!({"path": "src/link/key"})).0,
            PermissionDecision::Deny
        );
        let p = policy(&[], &[], &["Read(src/**)"], PermissionDecision::Ask);
        // Allowed as given, but resolves outside src/: allow needs both forms.
        assert_eq!(
            p.check_in(&ws, "read", &json!({"path": "src/link/key"})).0,
            PermissionDecision::Ask
        );
        assert_eq!(
            p.check("read", &json!({"path": "src/link/key"})).0,
            PermissionDecision::Allow
        );
    }

    #[test]
    fn grep_and_glob_match_path_or_pattern() {
        let p = policy(
            &["Grep(secrets/**)", "Glob(**/*.pem)"],
            &[],
            &[],
            PermissionDecision::Allow,
        );
        assert_eq!(
            p.check("grep", &json!({"pattern": "key", "path": "secrets/x"}))
                .0,
            PermissionDecision::Deny
        );
        assert_eq!(
            p.check("grep", &json!({"pattern": "key"})).0,
            PermissionDecision::Allow
        );
        assert_eq!(
            p.check("glob", &json!({"pattern": "certs/a.pem"})).0,
            PermissionDecision::Deny
        );
    }

    #[test]
    fn invalid_rules_are_rejected_naming_the_rule() {
        for rule in [
            "Bash(",
            "Frobnicate",
            "Bash()",
            "Todo(x)",
            "Read([)",
            "Bash(:*)",
        ] {
            let err = parse_rule(rule).unwrap_err();
            assert!(err.contains(&format!("{rule:?}")), "{rule}: {err}");
        }
        let bad = PermissionPolicy {
            allow: vec![PermissionRule {
                rule: "Nope(x)".into(),
            }],
            enabled: true,
            ..Default::default()
        };
        let err = Permissions::from_policy(&bad).unwrap_err();
        assert!(err.contains("allow rule \"Nope(x)\""), "{err}");
        let mut p = policy(&[], &[], &[], PermissionDecision::Allow);
        assert!(
            p.add_rule("maybe", "Bash")
                .unwrap_err()
                .contains("rule_type")
        );
        assert!(p.add_rule("deny", "Bash(").is_err());
    }

    #[test]
    fn add_rule_and_round_trip() {
        let mut p = policy(&[], &[], &[], PermissionDecision::Ask);
        p.add_rule("Deny", "Bash(rm:*)").unwrap();
        p.add_rule("allow", "LS").unwrap();
        p.add_rule("allow", "LS").unwrap();
        assert_eq!(p.check("bash", &bash("rm x")).0, PermissionDecision::Deny);
        assert_eq!(p.check("ls", &json!({})).0, PermissionDecision::Allow);
        let wire = p.to_policy();
        assert_eq!(
            wire.deny,
            vec![PermissionRule {
                rule: "Bash(rm:*)".into()
            }]
        );
        assert_eq!(wire.allow.len(), 1);
        assert_eq!(wire.default_decision, PermissionDecision::Ask as i32);
        assert!(wire.enabled);
        let again = Permissions::from_policy(&wire).unwrap();
        assert_eq!(again.to_policy(), wire);
    }
}
