//! How the runner configures the `claude-code` adapter.

use std::path::PathBuf;
use std::time::Duration;

use sdk_adapter::ModelInfo;

/// Values of `--permission-mode` (Claude Code 2.1).
pub const PERMISSION_MODES: &[&str] = &[
    "acceptEdits",
    "auto",
    "bypassPermissions",
    "default",
    "dontAsk",
    "plan",
];

/// The models advertised unless configured otherwise.
pub const DEFAULT_MODELS: &str = "sonnet:low/medium/high,opus:low/medium/high,haiku";

/// Settings of the `claude-code` adapter.
#[derive(Debug, Clone)]
pub struct ClaudeConfig {
    /// The `claude` executable (a name looked up on PATH, or a path).
    pub bin: PathBuf,
    /// `--permission-mode`; `None` keeps Claude Code's default. Whatever the
    /// mode, Claude Code's permission prompts come to the runner
    /// (`--permission-prompt-tool stdio`), which allows them under
    /// `bypassPermissions`; under `default`, `acceptEdits` and `plan` they
    /// are asked of a control plane that accepted `approvals/1`; otherwise
    /// (and without such a control plane) they are denied (nobody is there
    /// to ask). `bypassPermissions` itself is implemented that way — claude
    /// runs in `default` mode and every prompt is allowed — because Claude
    /// Code refuses its own bypass mode when running as root.
    pub permission_mode: Option<String>,
    /// What registration advertises (Claude Code has no model listing).
    pub models: Vec<ModelInfo>,
    /// Extra environment for every claude process.
    pub env: Vec<(String, String)>,
    /// Longest wait for the answer to a control request.
    pub request_timeout: Duration,
    /// After an interrupt, how long the turn may take to end before the
    /// process is killed (and resumed for the next turn).
    pub interrupt_grace: Duration,
}

impl Default for ClaudeConfig {
    fn default() -> Self {
        Self {
            bin: PathBuf::from("claude"),
            permission_mode: None,
            // The default list parses.
            models: parse_models(DEFAULT_MODELS).unwrap_or_default(),
            env: Vec::new(),
            request_timeout: Duration::from_secs(30),
            interrupt_grace: Duration::from_secs(15),
        }
    }
}

impl ClaudeConfig {
    /// Whether permission prompts are allowed.
    pub(crate) fn allows_tools(&self) -> bool {
        self.permission_mode.as_deref() == Some("bypassPermissions")
    }

    /// Whether permission prompts are asked through the runner (a person
    /// at a control plane that accepted the extension decides; without one
    /// the policy, as [`ClaudeConfig::allows_tools`] says, does): in the
    /// modes where Claude Code asks, `default`, `acceptEdits` and `plan`.
    pub(crate) fn asks_runner(&self) -> bool {
        matches!(
            self.permission_mode.as_deref(),
            Some("default" | "acceptEdits" | "plan")
        )
    }

    /// The `--permission-mode` claude is started with.
    pub(crate) fn cli_permission_mode(&self) -> Option<&str> {
        match self.permission_mode.as_deref() {
            Some("bypassPermissions") => Some("default"),
            other => other,
        }
    }
}

/// Check a permission mode (for the runner's config).
pub fn check_permission_mode(value: &str) -> Result<(), String> {
    if PERMISSION_MODES.contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not one of: {}",
            PERMISSION_MODES.join(", ")
        ))
    }
}

/// The variable that names the Anthropic API base URL for Claude Code.
pub const BASE_URL_ENV: &str = "ANTHROPIC_BASE_URL";

/// Check an Anthropic API base URL (for the runner's config): `http://` or
/// `https://`, a host, no whitespace, and no credentials in it (a URL's
/// user and password would sit in the environment of every process the
/// thread's claude starts; the key goes in `ANTHROPIC_API_KEY`).
pub fn check_base_url(value: &str) -> Result<(), String> {
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"))
        .ok_or_else(|| format!("{value:?} is not an http:// or https:// URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return Err(format!("{value:?} has no host"));
    }
    if authority.contains('@') {
        return Err(
            "the URL must not carry credentials (give the key as ANTHROPIC_API_KEY)".into(),
        );
    }
    if value.chars().any(char::is_whitespace) {
        return Err(format!("{value:?} contains whitespace"));
    }
    Ok(())
}

/// Parse a model list: comma-separated `name` or `name:level/level/…`
/// (the reasoning levels, passed to claude as `--effort`).
pub fn parse_models(text: &str) -> Result<Vec<ModelInfo>, String> {
    let mut models: Vec<ModelInfo> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, levels) = match entry.split_once(':') {
            Some((name, levels)) => (name.trim(), levels),
            None => (entry, ""),
        };
        if name.is_empty() {
            return Err(format!("{entry:?} has no model name"));
        }
        if models.iter().any(|m| m.name == name) {
            return Err(format!("model {name:?} is listed twice"));
        }
        let reasoning_levels = levels
            .split('/')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        models.push(ModelInfo {
            name: name.to_owned(),
            reasoning_levels,
        });
    }
    if models.is_empty() {
        return Err("no models listed".to_owned());
    }
    Ok(models)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_lists_parse() {
        let models = parse_models(DEFAULT_MODELS).unwrap();
        assert_eq!(
            models[0],
            ModelInfo::new("sonnet", &["low", "medium", "high"])
        );
        assert_eq!(models[2], ModelInfo::new("haiku", &[]));
        assert_eq!(parse_models(" a , b:x ").unwrap().len(), 2);
        assert!(parse_models("").is_err());
        assert!(parse_models("a,a").is_err());
        assert!(parse_models(":low").is_err());
    }

    #[test]
    fn bypass_is_implemented_by_the_runner() {
        let config = ClaudeConfig {
            permission_mode: Some("bypassPermissions".into()),
            ..ClaudeConfig::default()
        };
        assert!(config.allows_tools());
        assert_eq!(config.cli_permission_mode(), Some("default"));
        assert!(!ClaudeConfig::default().allows_tools());
        assert!(!config.asks_runner() && !ClaudeConfig::default().asks_runner());
        let plan = ClaudeConfig {
            permission_mode: Some("plan".into()),
            ..ClaudeConfig::default()
        };
        assert!(plan.asks_runner());
        assert!(check_permission_mode("plan").is_ok());
        assert!(check_permission_mode("yolo").is_err());
    }

    #[test]
    fn base_urls_are_plain_http_urls() {
        assert!(check_base_url("http://127.0.0.1:8080").is_ok());
        assert!(check_base_url("https://gateway.example/anthropic").is_ok());
        assert!(check_base_url("gateway.example").is_err());
        assert!(check_base_url("https://").is_err());
        assert!(check_base_url("https://k:s@gateway.example").is_err());
        assert!(check_base_url("https://gateway.example/a b").is_err());
    }
}
