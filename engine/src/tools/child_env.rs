//! The environment a tool's child process gets: the engine's own, minus
//! secrets, plus the session's extra variables.
//!
//! The engine holds model API keys and the runner's credentials; a command
//! the model runs must not be able to print them.

use std::ffi::OsString;

/// Whether an environment variable holds a secret the children must not see.
pub fn is_secret_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_API_KEY")
        // The bearer token of `code-agent serve` (CODE_AGENT_AUTH_TOKEN,
        // AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN).
        || upper.ends_with("_AUTH_TOKEN")
        || matches!(
            upper.as_str(),
            "OPENAI_API_KEY" | "AGENT_RUNNER_SECRET" | "GITHUB_TOKEN" | "GH_TOKEN"
        )
}

/// `base` without the secrets, then `extra` (which wins on equal names).
pub fn child_env(
    base: impl IntoIterator<Item = (OsString, OsString)>,
    extra: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = base
        .into_iter()
        .filter(|(name, _)| !is_secret_env(&name.to_string_lossy()))
        .filter(|(name, _)| !extra.iter().any(|(key, _)| name == key.as_str()))
        .collect();
    env.extend(
        extra
            .iter()
            .map(|(key, value)| (OsString::from(key), OsString::from(value))),
    );
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_removed_and_extra_added() {
        let base = [
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "sk-1"),
            ("ANTHROPIC_API_KEY", "sk-2"),
            ("AGENT_RUNNER_SECRET", "s"),
            ("GITHUB_TOKEN", "g"),
            ("GH_TOKEN", "g"),
            ("CODE_AGENT_AUTH_TOKEN", "t"),
            ("AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN", "t"),
            ("HOME", "/old"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let extra = vec![("HOME".to_string(), "/new".to_string())];
        let env = child_env(base, &extra);
        let names: Vec<String> = env
            .iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        assert_eq!(names, vec!["PATH=/bin", "HOME=/new"]);
    }
}
