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
//!
//! This file holds the policy and its decision; `rule` parses rules, `call`
//! matches them against one call.

mod call;
mod rule;
#[cfg(test)]
mod tests;

use std::path::Path;

use code_agent_proto::{PermissionDecision, PermissionPolicy, PermissionRule};
use serde_json::Value;

use call::{Call, Strictness};
use rule::{MCP, Matcher, Rule, parse_rule};

/// A policy ready to check tool calls.
#[derive(Debug, Clone)]
pub struct Permissions {
    enabled: bool,
    default_decision: PermissionDecision,
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    allow: Vec<Rule>,
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
