//! One tool call as the rules see it (a bash command and its parts, or the
//! path and pattern arguments in the forms they are matched in), and how a
//! list of rules matches it.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::rule::{Matcher, Rule};
use crate::tools::confine;

/// Whether a rule decides against the call (deny/ask: any form may match)
/// or for it (allow: every form must match).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Strictness {
    Any,
    Every,
}

/// What the rules of one tool are matched against.
pub(super) enum Call {
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
    pub(super) fn new(tool: &str, args: &Value, workspace: Option<&Path>) -> Self {
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
    pub(super) fn matching(&self, rules: &[&Rule], strictness: Strictness) -> Vec<String> {
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
