//! Settings of the SDK adapters: the external agent CLIs (codex,
//! claude-code) and the code-agent adapter.

use super::layer::settings;
use super::*;

settings! {
    /// Flags of the adapters that drive external agent CLIs. A CLI that is
    /// missing does not stop the runner: its SDK registers as UNCONFIGURED.
    #[derive(Debug, Clone, Default, Args)]
    pub struct ExternalSdkArgs {
        /// The codex executable for the codex SDK. Default: `codex` on PATH.
        #[arg(long, env = "AGENT_RUNNER_CODEX_BIN", value_name = "PATH", help_heading = "SDKs")]
        pub codex_bin: Option<PathBuf>,
        /// Codex approval policy for every thread: `untrusted`, `on-request` or
        /// `never` (approval requests are declined, except under `never`, where
        /// codex does not ask). Default: codex's own configuration.
        #[arg(
            long,
            env = "AGENT_RUNNER_CODEX_APPROVAL_POLICY",
            value_name = "POLICY",
            help_heading = "SDKs",
        )]
        pub codex_approval_policy: Option<String>,
        /// Codex sandbox for every thread (codex's own, inside the runner's):
        /// `read-only`, `workspace-write` or `danger-full-access`. Default:
        /// codex's own configuration.
        #[arg(long, env = "AGENT_RUNNER_CODEX_SANDBOX", value_name = "MODE", help_heading = "SDKs")]
        pub codex_sandbox: Option<String>,
        /// The Claude Code executable for the claude-code SDK. Default:
        /// `claude` on PATH.
        #[arg(long, env = "AGENT_RUNNER_CLAUDE_BIN", value_name = "PATH", help_heading = "SDKs")]
        pub claude_bin: Option<PathBuf>,
        /// Claude Code permission mode: `acceptEdits`, `auto`,
        /// `bypassPermissions`, `default`, `dontAsk` or `plan`. Permission
        /// prompts are allowed only under `bypassPermissions` (which the runner
        /// implements itself, so it also works as root) and denied otherwise.
        /// Default: Claude Code's own.
        #[arg(
            long,
            env = "AGENT_RUNNER_CLAUDE_PERMISSION_MODE",
            value_name = "MODE",
            help_heading = "SDKs",
        )]
        pub claude_permission_mode: Option<String>,
        /// The models the claude-code SDK advertises, comma-separated: `name` or
        /// `name:level/level` (levels are passed as --effort). Default:
        /// `sonnet:low/medium/high,opus:low/medium/high,haiku`.
        #[arg(long, env = "AGENT_RUNNER_CLAUDE_MODELS", value_name = "LIST", help_heading = "SDKs")]
        pub claude_models: Option<String>,
        /// The Anthropic API base URL the claude-code SDK's CLI talks to
        /// (`http://` or `https://`, no credentials in it): every thread's
        /// claude gets it as `ANTHROPIC_BASE_URL`, over the runner's own,
        /// without changing what the code-agent SDK uses. Default: the
        /// runner's `ANTHROPIC_BASE_URL` if set, else Claude Code's own.
        #[arg(
            long,
            env = "AGENT_RUNNER_CLAUDE_BASE_URL",
            value_name = "URL",
            help_heading = "SDKs",
        )]
        pub claude_base_url: Option<String>,
    }
}

impl ExternalSdkArgs {
    /// Checked adapter settings (defaults for what is not given).
    pub(super) fn resolve(self) -> Result<SdkOptions, ConfigError> {
        let mut options = SdkOptions::default();
        if let Some(bin) = self.codex_bin {
            options.codex.bin = bin;
        }
        if let Some(policy) = self.codex_approval_policy {
            sdk_codex::check_approval_policy(&policy)
                .map_err(|m| key_err("codex_approval_policy", m))?;
            options.codex.approval_policy = Some(policy);
        }
        if let Some(sandbox) = self.codex_sandbox {
            sdk_codex::check_sandbox(&sandbox).map_err(|m| key_err("codex_sandbox", m))?;
            options.codex.sandbox = Some(sandbox);
        }
        if let Some(bin) = self.claude_bin {
            options.claude.bin = bin;
        }
        if let Some(mode) = self.claude_permission_mode {
            sdk_claude_code::check_permission_mode(&mode)
                .map_err(|m| key_err("claude_permission_mode", m))?;
            options.claude.permission_mode = Some(mode);
        }
        if let Some(models) = self.claude_models {
            options.claude.models =
                sdk_claude_code::parse_models(&models).map_err(|m| key_err("claude_models", m))?;
        }
        if let Some(url) = self.claude_base_url {
            sdk_claude_code::check_base_url(&url).map_err(|m| key_err("claude_base_url", m))?;
            options
                .claude
                .env
                .push((sdk_claude_code::BASE_URL_ENV.to_owned(), url));
        }
        Ok(options)
    }
}

settings! {
    /// Flags of the code-agent adapter.
    #[derive(Debug, Clone, Default, Args)]
    pub struct CodeAgentArgs {
        /// A remote a3s CodeAgentService for the code-agent SDK (`http://host:port`
        /// or `https://…`, e.g. `agent-runner code-agent serve` elsewhere); it
        /// must see the same workspace paths. Default: none: the engine runs
        /// inside the runner, no port opened.
        #[arg(
            long,
            env = "AGENT_RUNNER_CODE_AGENT_ENDPOINT",
            value_name = "URL",
            help_heading = "SDKs",
        )]
        pub code_agent_endpoint: Option<String>,
        /// The embedded engine's state (sessions, providers). Default:
        /// STATE_DIR/code-agent.
        #[arg(
            long,
            env = "AGENT_RUNNER_CODE_AGENT_STATE_DIR",
            value_name = "DIR",
            help_heading = "SDKs",
        )]
        pub code_agent_state_dir: Option<PathBuf>,
        /// The file holding the remote engine's bearer token (only with
        /// --code-agent-endpoint); never a flag value: the token itself may be
        /// in AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN, used only when no token file
        /// is set by flag, variable or config file. Default: none.
        #[arg(
            long,
            env = "AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN_FILE",
            value_name = "FILE",
            help_heading = "SDKs",
        )]
        pub code_agent_auth_token_file: Option<PathBuf>,
        /// The CA certificate (PEM) of an `https://` engine (only with
        /// --code-agent-endpoint). Default: system roots.
        #[arg(
            long,
            env = "AGENT_RUNNER_CODE_AGENT_CA_CERT",
            value_name = "PEM",
            help_heading = "SDKs",
        )]
        pub code_agent_ca_cert: Option<PathBuf>,
        /// Engine tools whose every call waits for a person's approval
        /// (`bash`, `write`, `edit`, an MCP tool's `mcp__SERVER__TOOL`…):
        /// asked at the control plane under `approvals/1`, else decided by
        /// --approval-policy; comma-separated in the variable. Default: none.
        #[arg(
            long,
            env = "AGENT_RUNNER_CODE_AGENT_APPROVE_TOOLS",
            value_name = "TOOL",
            value_delimiter = ',',
            help_heading = "SDKs",
        )]
        pub code_agent_approve_tools: Vec<String>,
    }
}

/// The environment variable that may hold the remote engine's bearer
/// token itself (when no token file is set).
pub const CODE_AGENT_AUTH_TOKEN_ENV: &str = "AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN";

impl CodeAgentArgs {
    /// Checked settings; the state dir default comes later
    /// ([`default_code_agent_state_dir`]), once the runner's is known.
    pub(super) fn resolve(self) -> Result<sdk_code_agent::CodeAgentConfig, ConfigError> {
        let mut config = sdk_code_agent::CodeAgentConfig::default();
        if let Some(url) = self
            .code_agent_endpoint
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty())
        {
            sdk_code_agent::check_endpoint(&url).map_err(|m| key_err("code_agent_endpoint", m))?;
            config.endpoint = Some(url);
        }
        config.state_dir = self.code_agent_state_dir;
        let tools = self
            .code_agent_approve_tools
            .iter()
            .flat_map(|t| t.split(','))
            .map(str::trim);
        for tool in tools {
            let named = tool
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
            if !named {
                return Err(key_err(
                    "code_agent_approve_tools",
                    format!("{tool:?} is not a tool name (letters, digits, `_`, `-`, `.`)"),
                ));
            }
            if !tool.is_empty() {
                config.approve_tools.push(tool.to_owned());
            }
        }
        config.auth_token = match &self.code_agent_auth_token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    key_err(
                        "code_agent_auth_token_file",
                        format!("{}: {e}", path.display()),
                    )
                })?;
                Some(sdk_code_agent::AuthToken::new(&text).ok_or_else(|| {
                    key_err(
                        "code_agent_auth_token_file",
                        format!("{} is empty", path.display()),
                    )
                })?)
            }
            None => std::env::var(CODE_AGENT_AUTH_TOKEN_ENV)
                .ok()
                .and_then(|t| sdk_code_agent::AuthToken::new(&t)),
        };
        if let Some(token) = &config.auth_token {
            crate::util::redact::Redactor::process().add(token.expose());
        }
        if let Some(path) = &self.code_agent_ca_cert {
            let pem = std::fs::read(path)
                .map_err(|e| key_err("code_agent_ca_cert", format!("{}: {e}", path.display())))?;
            config.ca_cert_pem = Some(pem);
        }
        if config.endpoint.is_none() {
            for (key, given) in [
                (
                    "code_agent_auth_token_file",
                    self.code_agent_auth_token_file.is_some(),
                ),
                ("code_agent_ca_cert", self.code_agent_ca_cert.is_some()),
            ] {
                if given {
                    return Err(key_err(
                        key,
                        "only applies with code_agent_endpoint (the embedded engine opens no port)",
                    ));
                }
            }
            // A token in the environment means nothing to the embedded engine.
            config.auth_token = None;
        }
        Ok(config)
    }
}

/// The embedded engine's state dir defaults to `<state dir>/code-agent`.
pub(super) fn default_code_agent_state_dir(
    config: &mut sdk_code_agent::CodeAgentConfig,
    runner_state_dir: &Path,
) {
    if config.endpoint.is_none() && config.state_dir.is_none() {
        config.state_dir = Some(runner_state_dir.join("code-agent"));
    }
}

/// Settings of the adapters that drive external CLIs (from `RunConfig`).
/// An adapter whose CLI is missing is still built: it advertises itself
/// UNCONFIGURED with the reason.
#[derive(Debug, Clone, Default)]
pub struct SdkOptions {
    /// The codex adapter's settings.
    pub codex: sdk_codex::CodexConfig,
    /// The claude-code adapter's settings.
    pub claude: sdk_claude_code::ClaudeConfig,
    /// The `code-agent` adapter: embedded engine (default) or remote.
    pub code_agent: sdk_code_agent::CodeAgentConfig,
}

#[cfg(test)]
mod code_agent_tests {
    use super::*;

    fn with(code_agent: CodeAgentArgs, config: Option<PathBuf>) -> Result<RunConfig, ConfigError> {
        RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                state_dir: Some("/var/lib/ar".into()),
                config,
                code_agent,
                ..Default::default()
            },
            None,
        )
    }

    #[test]
    fn embedded_by_default_with_state_under_the_runners() {
        let c = with(CodeAgentArgs::default(), None).unwrap();
        let o = &c.sdk_options.code_agent;
        assert_eq!(o.endpoint, None);
        assert_eq!(o.state_dir, Some(PathBuf::from("/var/lib/ar/code-agent")));
    }

    #[test]
    fn flag_over_file_and_bad_endpoints_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(
            &file,
            "code_agent_endpoint = \"http://file:1\"\ncode_agent_state_dir = \"/srv/ca\"\n",
        )
        .unwrap();
        let c = with(CodeAgentArgs::default(), Some(file.clone())).unwrap();
        let o = &c.sdk_options.code_agent;
        assert_eq!(o.endpoint.as_deref(), Some("http://file:1"));
        assert_eq!(o.state_dir, Some(PathBuf::from("/srv/ca")));

        let flag = CodeAgentArgs {
            code_agent_endpoint: Some("https://engine:443".into()),
            ..Default::default()
        };
        let c = with(flag, Some(file)).unwrap();
        assert_eq!(
            c.sdk_options.code_agent.endpoint.as_deref(),
            Some("https://engine:443")
        );

        let blank = CodeAgentArgs {
            code_agent_endpoint: Some(" ".into()),
            ..Default::default()
        };
        assert_eq!(
            with(blank, None).unwrap().sdk_options.code_agent.endpoint,
            None
        );

        let bad = CodeAgentArgs {
            code_agent_endpoint: Some("engine:50051".into()),
            ..Default::default()
        };
        let err = with(bad, None).unwrap_err().to_string();
        assert!(err.starts_with("code_agent_endpoint:"), "{err}");
    }

    #[test]
    fn a_remote_engines_token_and_ca_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "engine-token-123\n").unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let remote = |token_file: Option<PathBuf>, ca_cert: Option<PathBuf>| CodeAgentArgs {
            code_agent_endpoint: Some("https://engine:443".into()),
            code_agent_auth_token_file: token_file,
            code_agent_ca_cert: ca_cert,
            ..Default::default()
        };
        let c = with(remote(Some(token.clone()), Some(ca.clone())), None).unwrap();
        let o = &c.sdk_options.code_agent;
        assert_eq!(o.auth_token.as_ref().unwrap().expose(), "engine-token-123");
        assert!(o.ca_cert_pem.is_some());
        assert!(!format!("{c:?}").contains("engine-token-123"));
        let missing = dir.path().join("missing");
        let err = with(remote(Some(missing.clone()), None), None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("code_agent_auth_token_file:"), "{err}");
        let err = with(remote(None, Some(missing)), None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("code_agent_ca_cert:"), "{err}");
        std::fs::write(&token, " \n").unwrap();
        let err = with(remote(Some(token.clone()), None), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is empty"), "{err}");
        // The file's keys.
        std::fs::write(&token, "from-file\n").unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(
            &file,
            format!(
                "code_agent_endpoint = \"http://file:1\"\ncode_agent_auth_token_file = {:?}\n",
                token.display().to_string()
            ),
        )
        .unwrap();
        let c = with(CodeAgentArgs::default(), Some(file)).unwrap();
        assert_eq!(
            c.sdk_options.code_agent.auth_token.unwrap().expose(),
            "from-file"
        );
    }
}

#[cfg(test)]
mod external_sdk_tests {
    use super::*;

    fn with(external: ExternalSdkArgs) -> Result<RunConfig, ConfigError> {
        RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                external_sdks: external,
                ..Default::default()
            },
            None,
        )
    }

    #[test]
    fn defaults_flags_and_file_keys() {
        let c = with(ExternalSdkArgs::default()).unwrap();
        assert_eq!(c.sdk_options.codex.bin, PathBuf::from("codex"));
        assert_eq!(c.sdk_options.claude.bin, PathBuf::from("claude"));
        assert_eq!(c.sdk_options.claude.models.len(), 3);

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(
            &file,
            "codex_bin = \"/opt/codex\"\ncodex_approval_policy = \"never\"\ncodex_sandbox = \"read-only\"\nclaude_models = \"sonnet:low/high\"\nclaude_permission_mode = \"plan\"\nclaude_base_url = \"https://gateway.example/anthropic\"\n",
        )
        .unwrap();
        let c = RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                config: Some(file),
                external_sdks: ExternalSdkArgs {
                    codex_sandbox: Some("workspace-write".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            None,
        )
        .unwrap();
        let o = &c.sdk_options;
        assert_eq!(o.codex.bin, PathBuf::from("/opt/codex"));
        assert_eq!(o.codex.approval_policy.as_deref(), Some("never"));
        assert_eq!(o.codex.sandbox.as_deref(), Some("workspace-write"));
        assert_eq!(o.claude.permission_mode.as_deref(), Some("plan"));
        assert_eq!(o.claude.models.len(), 1);
        assert_eq!(o.claude.models[0].reasoning_levels, ["low", "high"]);
        assert_eq!(
            o.claude.env,
            [(
                "ANTHROPIC_BASE_URL".to_owned(),
                "https://gateway.example/anthropic".to_owned()
            )]
        );
        assert!(c.sdk_options.codex.env.is_empty());
    }

    #[test]
    fn bad_values_name_their_key() {
        for (external, key) in [
            (
                ExternalSdkArgs {
                    codex_approval_policy: Some("sometimes".into()),
                    ..Default::default()
                },
                "codex_approval_policy:",
            ),
            (
                ExternalSdkArgs {
                    codex_sandbox: Some("none".into()),
                    ..Default::default()
                },
                "codex_sandbox:",
            ),
            (
                ExternalSdkArgs {
                    claude_permission_mode: Some("yolo".into()),
                    ..Default::default()
                },
                "claude_permission_mode:",
            ),
            (
                ExternalSdkArgs {
                    claude_models: Some(" , ".into()),
                    ..Default::default()
                },
                "claude_models:",
            ),
            (
                ExternalSdkArgs {
                    claude_base_url: Some("https://user:pw@gateway.example".into()),
                    ..Default::default()
                },
                "claude_base_url:",
            ),
            (
                ExternalSdkArgs {
                    claude_base_url: Some("gateway.example".into()),
                    ..Default::default()
                },
                "claude_base_url:",
            ),
        ] {
            let err = with(external).unwrap_err().to_string();
            assert!(err.starts_with(key), "{err}");
        }
    }
}
