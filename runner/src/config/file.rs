//! The optional TOML file named by `--config`: the same settings as the
//! flags, every key optional.

use super::*;

/// The optional TOML file: the same settings, every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) control_plane_url: Option<String>,
    pub(super) ca_cert: Option<PathBuf>,
    pub(super) secret_file: Option<PathBuf>,
    pub(super) state_dir: Option<PathBuf>,
    pub(super) workspace_root: Option<PathBuf>,
    pub(super) sdk: Option<Vec<String>>,
    pub(super) max_concurrent_turns: Option<usize>,
    pub(super) max_queued_requests: Option<usize>,
    pub(super) drain_timeout: Option<String>,
    pub(super) outbox_capacity: Option<usize>,
    pub(super) keepalive_interval: Option<String>,
    pub(super) keepalive_timeout: Option<String>,
    pub(super) reconnect_min_delay: Option<String>,
    pub(super) reconnect_max_delay: Option<String>,
    pub(super) skill_max_bytes: Option<u64>,
    pub(super) sdk_probe_interval: Option<String>,
    pub(super) log_format: Option<LogFormat>,
    pub(super) log_level: Option<String>,
    pub(super) health_addr: Option<String>,
    pub(super) proxy: Option<String>,
    pub(super) exit_when_idle: Option<String>,
    // The codex and claude-code adapters (see `ExternalSdkArgs`).
    pub(super) codex_bin: Option<PathBuf>,
    pub(super) codex_approval_policy: Option<String>,
    pub(super) codex_sandbox: Option<String>,
    pub(super) claude_bin: Option<PathBuf>,
    pub(super) claude_permission_mode: Option<String>,
    pub(super) claude_models: Option<String>,
    // GitHub installation tokens (see `GithubArgs`).
    pub(super) github_app_id: Option<u64>,
    pub(super) github_app_private_key_file: Option<PathBuf>,
    pub(super) github_api_url: Option<String>,
    pub(super) github_host: Option<String>,
    pub(super) github_token_permissions: Option<String>,
    // The code-agent adapter (see `CodeAgentArgs`).
    pub(super) code_agent_endpoint: Option<String>,
    pub(super) code_agent_state_dir: Option<PathBuf>,
    // The agent sandbox (see `SandboxArgs`).
    pub(super) sandbox: Option<String>,
    pub(super) agent_uid: Option<String>,
    pub(super) sandbox_read_only: Option<Vec<PathBuf>>,
    pub(super) sandbox_env: Option<Vec<String>>,
    pub(super) sandbox_nofile: Option<u64>,
    pub(super) sandbox_fsize: Option<u64>,
    pub(super) sandbox_memory_max: Option<u64>,
    pub(super) sandbox_pids_max: Option<u64>,
    pub(super) sandbox_cpu_max: Option<String>,
    pub(super) code_agent_auth_token_file: Option<PathBuf>,
    pub(super) code_agent_ca_cert: Option<PathBuf>,
}

pub(super) fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        // toml's message names the key and shows the line.
        message: with_suggestion(e.to_string()),
    })
}

/// toml's "unknown field `drain_timout`, expected one of `a`, `b`, …",
/// followed by the closest known key when one is close enough to be a typo.
fn with_suggestion(message: String) -> String {
    let Some((_, rest)) = message.split_once("unknown field `") else {
        return message;
    };
    let Some((unknown, rest)) = rest.split_once('`') else {
        return message;
    };
    let best = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|known| (strsim::damerau_levenshtein(unknown, known), known))
        .min();
    match best {
        // At most a third of the key's letters wrong.
        Some((distance, known)) if distance > 0 && distance * 3 <= unknown.len().max(3) => {
            format!("{}\ndid you mean `{known}`?", message.trim_end())
        }
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_error(text: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runner.toml");
        std::fs::write(&path, text).unwrap();
        match load_file(&path) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{text:?} parsed"),
        }
    }

    #[test]
    fn a_misspelt_key_gets_a_suggestion() {
        let err = parse_error("drain_timout = \"3s\"\n");
        assert!(err.contains("unknown field `drain_timout`"), "{err}");
        assert!(err.ends_with("did you mean `drain_timeout`?"), "{err}");
        let err = parse_error("statedir = \"/x\"\n");
        assert!(err.ends_with("did you mean `state_dir`?"), "{err}");
    }

    #[test]
    fn a_key_like_nothing_known_gets_no_guess() {
        let err = parse_error("colour = \"blue\"\n");
        assert!(err.contains("unknown field `colour`"), "{err}");
        assert!(!err.contains("did you mean"), "{err}");
    }
}
