//! Where GitHub installation tokens come from: the control plane (default)
//! or the runner's own GitHub App.

use super::layer::settings;
use super::*;

settings! {
    /// Where installation tokens come from: the control plane (default), or the
    /// runner's own GitHub App when `--github-app-id` is set.
    #[derive(Debug, Clone, Default, Args)]
    pub struct GithubArgs {
        /// Mint installation tokens as this GitHub App instead of asking the
        /// control plane (needs --github-app-private-key-file). Default: none:
        /// tokens come from the control plane.
        #[arg(long, env = "AGENT_RUNNER_GITHUB_APP_ID", value_name = "ID", help_heading = "GitHub")]
        pub github_app_id: Option<u64>,
        /// The App's private key (PEM), read at start-up, never logged. Default:
        /// none (required with --github-app-id).
        #[arg(
            long,
            env = "AGENT_RUNNER_GITHUB_APP_PRIVATE_KEY_FILE",
            value_name = "PEM",
            help_heading = "GitHub",
        )]
        pub github_app_private_key_file: Option<PathBuf>,
        /// The GitHub API for the App (GitHub Enterprise Server:
        /// `https://HOST/api/v3`). Default: `https://api.github.com`.
        #[arg(
            long,
            env = "AGENT_RUNNER_GITHUB_API_URL",
            value_name = "URL",
            help_heading = "GitHub",
        )]
        pub github_api_url: Option<String>,
        /// The git host tokens are for (`host` or `host:port`). Default:
        /// `github.com`, or the host of --github-api-url without `api.`.
        #[arg(long, env = "AGENT_RUNNER_GITHUB_HOST", value_name = "HOST", help_heading = "GitHub")]
        pub github_host: Option<String>,
        /// App mode: the permissions of the tokens minted for agents (each for
        /// the one repository its git asked for), as `name:level,...` (levels
        /// `read`, `write`, `admin`). Default:
        /// `contents:write,pull_requests:write,metadata:read`.
        #[arg(
            long,
            env = "AGENT_RUNNER_GITHUB_TOKEN_PERMISSIONS",
            value_name = "LIST",
            help_heading = "GitHub",
        )]
        pub github_token_permissions: Option<String>,
    }
}

/// The permissions of the tokens the App mints for agents (GitHub's
/// `permissions` object of the access-token request), in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenPermissions(pub Vec<(String, String)>);

/// Agents' tokens by default: push and open pull requests, read metadata.
pub const DEFAULT_TOKEN_PERMISSIONS: &str = "contents:write,pull_requests:write,metadata:read";

impl Default for TokenPermissions {
    fn default() -> Self {
        Self(
            [
                ("contents", "write"),
                ("pull_requests", "write"),
                ("metadata", "read"),
            ]
            .into_iter()
            .map(|(n, l)| (n.to_owned(), l.to_owned()))
            .collect(),
        )
    }
}

impl TokenPermissions {
    /// `name:level,...`: names of `[a-z_]`, levels `read`, `write` or
    /// `admin`, each name once, at least one.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut out: Vec<(String, String)> = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, level)) = part.split_once(':') else {
                return Err(format!("{part:?} is not name:level"));
            };
            let (name, level) = (name.trim(), level.trim());
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                return Err(format!(
                    "{name:?} is not a permission name (lowercase letters and _)"
                ));
            }
            if !matches!(level, "read" | "write" | "admin") {
                return Err(format!(
                    "{name}: level {level:?} is not read, write or admin"
                ));
            }
            if out.iter().any(|(n, _)| n == name) {
                return Err(format!("{name} is given twice"));
            }
            out.push((name.to_owned(), level.to_owned()));
        }
        if out.is_empty() {
            return Err("no permissions given (e.g. contents:write,metadata:read)".to_owned());
        }
        Ok(Self(out))
    }
}

/// The runner's own GitHub App.
#[derive(Debug, Clone)]
pub struct GithubAppConfig {
    /// The App's id.
    pub app_id: u64,
    /// Checked at start-up; prints as `***`.
    pub key: crate::config::secret::AppKey,
    /// Without a trailing `/`.
    pub api_url: String,
    /// The permissions of agents' tokens.
    pub token_permissions: TokenPermissions,
}

/// Where installation tokens come from and what host they are for.
#[derive(Debug, Clone)]
pub struct GithubConfig {
    /// `None`: from the control plane.
    pub app: Option<GithubAppConfig>,
    /// The git host (`github.com`, `ghe.example.com`, `127.0.0.1:8080`).
    pub host: String,
}

/// The GitHub API used unless `--github-api-url` says otherwise.
pub const DEFAULT_GITHUB_API_URL: &str = "https://api.github.com";

/// The default git host.
pub const DEFAULT_GITHUB_HOST: &str = "github.com";

impl Default for GithubConfig {
    /// Tokens from the control plane, for github.com.
    fn default() -> Self {
        Self {
            app: None,
            host: DEFAULT_GITHUB_HOST.to_owned(),
        }
    }
}

impl GithubArgs {
    pub(super) fn resolve(self) -> Result<GithubConfig, ConfigError> {
        let api_url_given = self.github_api_url.is_some();
        let token_permissions = match &self.github_token_permissions {
            Some(text) => Some(
                TokenPermissions::parse(text)
                    .map_err(|m| key_err("github_token_permissions", m))?,
            ),
            None => None,
        };
        let app = match (self.github_app_id, self.github_app_private_key_file) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(key_err(
                    "github_app_private_key_file",
                    "required with github_app_id",
                ));
            }
            (None, Some(_)) => {
                return Err(key_err(
                    "github_app_id",
                    "required with github_app_private_key_file",
                ));
            }
            (Some(0), Some(_)) => return Err(key_err("github_app_id", "must be at least 1")),
            (Some(app_id), Some(path)) => {
                let pem = std::fs::read(&path).map_err(|e| {
                    key_err(
                        "github_app_private_key_file",
                        format!("{}: {e}", path.display()),
                    )
                })?;
                // The message never quotes the file.
                let key = crate::config::secret::AppKey::from_pem(&pem).map_err(|m| {
                    key_err(
                        "github_app_private_key_file",
                        format!("{}: {m}", path.display()),
                    )
                })?;
                let api_url = match self.github_api_url {
                    Some(url) => check_api_url(&url).map_err(|m| key_err("github_api_url", m))?,
                    None => DEFAULT_GITHUB_API_URL.to_owned(),
                };
                Some(GithubAppConfig {
                    app_id,
                    key,
                    api_url,
                    token_permissions: token_permissions.clone().unwrap_or_default(),
                })
            }
        };
        if app.is_none() && token_permissions.is_some() {
            return Err(key_err(
                "github_token_permissions",
                "only applies with github_app_id (the control plane's tokens are passed as they come)",
            ));
        }
        if app.is_none() && api_url_given {
            return Err(key_err(
                "github_api_url",
                "only applies with github_app_id (the control plane mints tokens otherwise)",
            ));
        }
        let host = match self.github_host {
            Some(host) => check_git_host(&host).map_err(|m| key_err("github_host", m))?,
            None => match &app {
                Some(app) => git_host_of_api(&app.api_url),
                None => DEFAULT_GITHUB_HOST.to_owned(),
            },
        };
        Ok(GithubConfig { app, host })
    }
}

/// An `http(s)://host[:port][/path]` URL, without a trailing `/`.
pub(super) fn check_api_url(text: &str) -> Result<String, String> {
    let text = text.trim().trim_end_matches('/');
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!("{text:?} must start with http:// or https://"));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{text:?} has no host"));
    }
    if uri.query().is_some() {
        return Err(format!("{text:?} must not have a query"));
    }
    Ok(text.to_owned())
}

/// `host` or `host:port`, nothing else.
pub(super) fn check_git_host(text: &str) -> Result<String, String> {
    let text = text.trim();
    let authority: http::uri::Authority = text
        .parse()
        .map_err(|_| format!("{text:?} is not a host or host:port"))?;
    if text.is_empty() || text.contains('@') || authority.host().is_empty() {
        return Err(format!("{text:?} is not a host or host:port"));
    }
    Ok(text.to_owned())
}

/// The git host of an API URL: `api.github.com` → `github.com`,
/// `https://ghe.example.com/api/v3` → `ghe.example.com`, else its
/// `host:port`.
pub(super) fn git_host_of_api(api_url: &str) -> String {
    let Ok(uri) = api_url.parse::<http::Uri>() else {
        return DEFAULT_GITHUB_HOST.to_owned();
    };
    let Some(authority) = uri.authority() else {
        return DEFAULT_GITHUB_HOST.to_owned();
    };
    let text = authority.as_str();
    text.strip_prefix("api.").unwrap_or(text).to_owned()
}

#[cfg(test)]
mod github_tests {
    use super::*;

    fn with(github: GithubArgs) -> Result<RunConfig, ConfigError> {
        RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                github,
                ..Default::default()
            },
            None,
        )
    }

    fn key_file(dir: &Path) -> PathBuf {
        mock_control_plane::github_api::test_app_key()
            .write_private_key(dir, "app.pem")
            .unwrap()
    }

    #[test]
    fn control_plane_by_default() {
        let c = with(GithubArgs::default()).unwrap();
        assert!(c.github.app.is_none());
        assert_eq!(c.github.host, "github.com");
        let c = with(GithubArgs {
            github_host: Some("127.0.0.1:8080".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.github.host, "127.0.0.1:8080");
    }

    #[test]
    fn app_mode_hosts_from_the_api_url() {
        let dir = tempfile::tempdir().unwrap();
        let key = key_file(dir.path());
        for (api, host) in [
            (None, "github.com"),
            (Some("https://ghe.example.com/api/v3/"), "ghe.example.com"),
            (Some("https://api.acme.ghe.com"), "acme.ghe.com"),
            (Some("http://127.0.0.1:9999"), "127.0.0.1:9999"),
        ] {
            let c = with(GithubArgs {
                github_app_id: Some(42),
                github_app_private_key_file: Some(key.clone()),
                github_api_url: api.map(str::to_owned),
                ..Default::default()
            })
            .unwrap();
            let app = c.github.app.as_ref().unwrap();
            assert_eq!(app.app_id, 42);
            assert_eq!(c.github.host, host, "{api:?}");
            assert!(!app.api_url.ends_with('/'));
            let printed = format!("{c:?}");
            assert!(!printed.contains("PRIVATE KEY"), "{printed}");
        }
    }

    #[test]
    fn token_permissions_flag_env_file_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let key = key_file(dir.path());
        let app = |perms: Option<&str>| GithubArgs {
            github_app_id: Some(42),
            github_app_private_key_file: Some(key.clone()),
            github_token_permissions: perms.map(str::to_owned),
            ..Default::default()
        };
        let c = with(app(None)).unwrap();
        assert_eq!(
            c.github.app.unwrap().token_permissions,
            TokenPermissions::parse(DEFAULT_TOKEN_PERMISSIONS).unwrap()
        );
        let c = with(app(Some("contents:read, issues:write"))).unwrap();
        assert_eq!(
            c.github.app.unwrap().token_permissions.0,
            vec![
                ("contents".to_owned(), "read".to_owned()),
                ("issues".to_owned(), "write".to_owned())
            ]
        );
        for (bad, why) in [
            ("contents", "not name:level"),
            ("contents:all", "not read, write or admin"),
            ("Contents:read", "not a permission name"),
            ("contents:read,contents:write", "twice"),
            ("", "no permissions"),
        ] {
            let err = with(app(Some(bad))).unwrap_err().to_string();
            assert!(
                err.contains("github_token_permissions") && err.contains(why),
                "{bad:?}: {err}"
            );
        }
        let err = with(GithubArgs {
            github_token_permissions: Some("contents:read".into()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("github_token_permissions") && err.contains("github_app_id"),
            "{err}"
        );
        // The file's key, under the flag.
        let file = dir.path().join("perms.toml");
        std::fs::write(&file, "github_token_permissions = \"metadata:read\"\n").unwrap();
        let resolve = |github: GithubArgs| {
            RunConfig::resolve(
                RunArgs {
                    control_plane_url: Some("http://x:1".into()),
                    config: Some(file.clone()),
                    github,
                    ..Default::default()
                },
                None,
            )
            .unwrap()
        };
        let from_file = resolve(app(None)).github.app.unwrap().token_permissions;
        assert_eq!(
            from_file.0,
            vec![("metadata".to_owned(), "read".to_owned())]
        );
        let from_flag = resolve(app(Some("contents:write")))
            .github
            .app
            .unwrap()
            .token_permissions;
        assert_eq!(
            from_flag.0,
            vec![("contents".to_owned(), "write".to_owned())]
        );
    }

    #[test]
    fn file_keys_and_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let key = key_file(dir.path());
        let file = dir.path().join("runner.toml");
        std::fs::write(
            &file,
            format!(
                "github_app_id = 7\ngithub_app_private_key_file = {:?}\ngithub_api_url = \"http://file:1\"\ngithub_host = \"file-host\"\n",
                key.display().to_string()
            ),
        )
        .unwrap();
        let c = RunConfig::resolve(
            RunArgs {
                control_plane_url: Some("http://x:1".into()),
                config: Some(file.clone()),
                github: GithubArgs {
                    github_app_id: Some(8),
                    ..Default::default()
                },
                ..Default::default()
            },
            None,
        )
        .unwrap();
        let app = c.github.app.as_ref().unwrap();
        assert_eq!(app.app_id, 8, "the flag wins over the file");
        assert_eq!(app.api_url, "http://file:1");
        assert_eq!(c.github.host, "file-host");
        // `agent-runner github` in App mode needs no control plane URL.
        let g = resolve_github(&RunArgs {
            config: Some(file),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(g.app.unwrap().app_id, 7);
    }

    #[test]
    fn bad_settings_name_their_key_and_never_quote_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let good = key_file(dir.path());
        let bad = dir.path().join("bad.pem");
        std::fs::write(
            &bad,
            "-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap();
        let cases = [
            (
                GithubArgs {
                    github_app_id: Some(1),
                    ..Default::default()
                },
                "github_app_private_key_file:",
            ),
            (
                GithubArgs {
                    github_app_private_key_file: Some(good.clone()),
                    ..Default::default()
                },
                "github_app_id:",
            ),
            (
                GithubArgs {
                    github_app_id: Some(0),
                    github_app_private_key_file: Some(good.clone()),
                    ..Default::default()
                },
                "github_app_id:",
            ),
            (
                GithubArgs {
                    github_app_id: Some(1),
                    github_app_private_key_file: Some(dir.path().join("missing.pem")),
                    ..Default::default()
                },
                "github_app_private_key_file:",
            ),
            (
                GithubArgs {
                    github_app_id: Some(1),
                    github_app_private_key_file: Some(bad),
                    ..Default::default()
                },
                "github_app_private_key_file:",
            ),
            (
                GithubArgs {
                    github_app_id: Some(1),
                    github_app_private_key_file: Some(good),
                    github_api_url: Some("ftp://x".into()),
                    ..Default::default()
                },
                "github_api_url:",
            ),
            (
                GithubArgs {
                    github_api_url: Some("https://ghe.example.com/api/v3".into()),
                    ..Default::default()
                },
                "github_api_url:",
            ),
            (
                GithubArgs {
                    github_host: Some("https://github.com/".into()),
                    ..Default::default()
                },
                "github_host:",
            ),
        ];
        for (github, key) in cases {
            let err = with(github).unwrap_err().to_string();
            assert!(err.starts_with(key), "{err}");
            assert!(!err.contains("c2VjcmV0"), "{err}");
        }
    }
}
