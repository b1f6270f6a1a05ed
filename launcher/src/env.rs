//! The environment of an agent process: empty, plus an allowlist of the
//! runner's variables, plus what the spawn site and the operator set, plus
//! the thread's HOME/TMPDIR and tracking tag. Nothing else of the runner's
//! environment (API keys, `*_FILE` paths of its secrets) reaches a child.

use std::ffi::{OsStr, OsString};

use crate::error::LaunchError;

/// The PATH a child gets when the runner has none.
pub(crate) const FALLBACK_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Which variables a child gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Names copied from the runner's environment when set there. Names that
    /// look like the runner's secrets are refused (see [`EnvPolicy::validate`]).
    pub inherit: Vec<String>,
    /// Variables every child of the thread gets (operator extras, git
    /// settings). Explicit values: they may name anything.
    pub set: Vec<(String, String)>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        EnvPolicy {
            inherit: [
                "PATH",
                "LANG",
                "LANGUAGE",
                "LC_ALL",
                "LC_CTYPE",
                "TERM",
                "TZ",
                // The outbound proxy, so agents' git and CLIs go where the
                // runner goes.
                "HTTPS_PROXY",
                "https_proxy",
                "HTTP_PROXY",
                "http_proxy",
                "NO_PROXY",
                "no_proxy",
                "ALL_PROXY",
                "all_proxy",
            ]
            .into_iter()
            .map(str::to_string)
            .collect(),
            set: Vec::new(),
        }
    }
}

/// Variables the launcher itself sets; a caller cannot override them.
const FORCED: [&str; 3] = ["HOME", "TMPDIR", crate::tracking::TAG_VAR];

impl EnvPolicy {
    /// Refuses inherited names that would carry a runner secret or its path:
    /// `*_FILE`, `AGENT_RUNNER_*`, and names containing TOKEN, SECRET,
    /// PASSWORD, KEY or CREDENTIAL. Such values can only be given explicitly
    /// in [`EnvPolicy::set`] or by the spawn site.
    pub fn validate(&self) -> Result<(), LaunchError> {
        for name in &self.inherit {
            let upper = name.to_ascii_uppercase();
            let secretish = upper.ends_with("_FILE")
                || upper.starts_with("AGENT_RUNNER_")
                || ["TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL"]
                    .iter()
                    .any(|w| upper.contains(w));
            if secretish {
                return Err(LaunchError::Policy(format!(
                    "environment variable {name} may carry a runner secret and cannot be inherited; set an explicit value instead"
                )));
            }
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(LaunchError::Policy(format!(
                    "invalid variable name {name:?}"
                )));
            }
        }
        Ok(())
    }

    /// The full environment of a child, in order: inherited allowlist, the
    /// policy's `set`, the spawn site's `caller` variables (`None` removes),
    /// then HOME, TMPDIR and the tag.
    pub(crate) fn build(
        &self,
        lookup: impl Fn(&str) -> Option<OsString>,
        caller: &[(OsString, Option<OsString>)],
        home: &OsStr,
        tmp: &OsStr,
        tag: &str,
    ) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = Vec::new();
        let put = |env: &mut Vec<(OsString, OsString)>, k: OsString, v: Option<OsString>| {
            env.retain(|(name, _)| *name != k);
            if let Some(v) = v {
                env.push((k, v));
            }
        };
        for name in &self.inherit {
            if let Some(v) = lookup(name)
                && !proxy_with_credentials(name, &v)
            {
                put(&mut env, name.into(), Some(v));
            }
        }
        if !env.iter().any(|(k, _)| k == "PATH") {
            put(&mut env, "PATH".into(), Some(FALLBACK_PATH.into()));
        }
        for (k, v) in &self.set {
            put(&mut env, k.into(), Some(v.into()));
        }
        for (k, v) in caller {
            if FORCED.iter().any(|f| k == f) {
                continue;
            }
            put(&mut env, k.clone(), v.clone());
        }
        put(&mut env, "HOME".into(), Some(home.to_os_string()));
        put(&mut env, "TMPDIR".into(), Some(tmp.to_os_string()));
        put(&mut env, crate::tracking::TAG_VAR.into(), Some(tag.into()));
        env
    }
}

/// Whether `name` is a proxy variable (`HTTPS_PROXY`, `all_proxy`, …)
/// whose URL carries credentials (`http://user:pass@proxy:3128`): never
/// inherited, since the launcher's user (the runner, `code-agent serve`)
/// holds them and agents must not. The runner gives agents a forwarder's
/// URL instead; elsewhere they get no proxy.
fn proxy_with_credentials(name: &str, value: &OsStr) -> bool {
    let lower = name.to_ascii_lowercase();
    if !lower.ends_with("_proxy") || lower == "no_proxy" {
        return false;
    }
    let value = value.to_string_lossy();
    let rest = value.split_once("://").map_or(&*value, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.contains('@')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_with_credentials_is_not_inherited() {
        let lookup = |n: &str| match n {
            "HTTPS_PROXY" => Some(OsString::from("http://op:pw-123@proxy:3128")),
            "HTTP_PROXY" => Some(OsString::from("proxy:3128")),
            "ALL_PROXY" => Some(OsString::from("socks5://u@proxy:1080/x")),
            "NO_PROXY" => Some(OsString::from("user@host")),
            _ => None,
        };
        let env = EnvPolicy::default().build(lookup, &[], "/h".as_ref(), "/t".as_ref(), "x");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HTTPS_PROXY"), None);
        assert_eq!(get("ALL_PROXY"), None);
        assert_eq!(get("HTTP_PROXY"), Some("proxy:3128".into()));
        assert_eq!(get("NO_PROXY"), Some("user@host".into()));
        assert!(!proxy_with_credentials(
            "HTTPS_PROXY",
            "http://proxy:3128/a@b".as_ref()
        ));
    }

    fn runner_env(name: &str) -> Option<OsString> {
        match name {
            "PATH" => Some("/usr/bin".into()),
            "LANG" => Some("C.UTF-8".into()),
            "AGENT_RUNNER_SECRET_FILE" => Some("/etc/secret".into()),
            _ => None,
        }
    }

    #[test]
    fn builds_allowlist_plus_extras_and_forces_home_tmp_tag() {
        let policy = EnvPolicy {
            set: vec![("GIT_CONFIG_GLOBAL".into(), "/t/gitconfig".into())],
            ..EnvPolicy::default()
        };
        policy.validate().unwrap();
        let caller = vec![
            ("OPENAI_API_KEY".into(), Some("sk-given".into())),
            ("HOME".into(), Some("/root".into())),
            ("LANG".into(), None),
        ];
        let env = policy.build(
            runner_env,
            &caller,
            "/t/home".as_ref(),
            "/t/tmp".as_ref(),
            "s.tag",
        );
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(
            names,
            vec![
                "PATH",
                "GIT_CONFIG_GLOBAL",
                "OPENAI_API_KEY",
                "HOME",
                "TMPDIR",
                "AGENT_LAUNCHER_TAG"
            ]
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HOME").unwrap(), "/t/home");
        assert_eq!(get("PATH").unwrap(), "/usr/bin");
    }

    #[test]
    fn the_runners_proxy_variables_reach_agents() {
        let lookup = |n: &str| {
            matches!(n, "HTTPS_PROXY" | "no_proxy").then(|| OsString::from(format!("v-{n}")))
        };
        let env = EnvPolicy::default().build(lookup, &[], "/h".as_ref(), "/t".as_ref(), "x");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HTTPS_PROXY").unwrap(), "v-HTTPS_PROXY");
        assert_eq!(get("no_proxy").unwrap(), "v-no_proxy");
    }

    #[test]
    fn missing_path_gets_the_fallback() {
        let env = EnvPolicy::default().build(|_| None, &[], "/h".as_ref(), "/t".as_ref(), "x");
        assert_eq!(env[0], ("PATH".into(), FALLBACK_PATH.into()));
    }

    #[test]
    fn secret_looking_names_cannot_be_inherited() {
        for bad in [
            "AGENT_RUNNER_SECRET_FILE",
            "GITHUB_APP_KEY_FILE",
            "OPENAI_API_KEY",
            "X=Y",
        ] {
            let p = EnvPolicy {
                inherit: vec![bad.to_string()],
                set: vec![],
            };
            assert!(p.validate().is_err(), "{bad}");
        }
    }
}
