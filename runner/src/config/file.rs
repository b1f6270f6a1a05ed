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
    pub(super) log_format: Option<LogFormat>,
    pub(super) log_level: Option<String>,
    pub(super) health_addr: Option<String>,
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
        message: e.to_string(),
    })
}
