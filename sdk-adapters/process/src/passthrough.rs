//! What of the runner's own environment an agent CLI is given on top of the
//! launcher's allowlist: the variables its SDK documents it needs (API keys,
//! endpoints, config dirs, proxies), named by each adapter.
//!
//! The launcher starts every child from an empty environment plus an
//! allowlist (PATH, locale, TERM, TZ) and refuses to inherit anything that
//! looks like a secret by itself; an adapter that needs one passes it
//! explicitly, by name, through this function. The runner's own variables
//! (`AGENT_RUNNER_*`, among them its secret file paths) match no adapter's
//! list and are never passed.

/// Proxy exceptions and CA settings every HTTP-speaking CLI honours. The
/// proxy variables themselves (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
/// either case) are not among them: the runner gives agents its proxy
/// through the launcher, without the operator's credentials, and a value
/// passed here would override that with the runner's own (credentials
/// included).
pub const NETWORK_ENV: &[&str] = &[
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// The runner's variables named in `names`, or starting with one of
/// `prefixes`, that are set (never one starting with `AGENT_RUNNER_`).
pub fn runner_env(names: &[&str], prefixes: &[&str]) -> Vec<(String, String)> {
    runner_env_from(std::env::vars(), names, prefixes)
}

fn runner_env_from(
    vars: impl IntoIterator<Item = (String, String)>,
    names: &[&str],
    prefixes: &[&str],
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| !k.starts_with("AGENT_RUNNER_"))
        .filter(|(k, _)| {
            names.contains(&k.as_str())
                || NETWORK_ENV.contains(&k.as_str())
                || prefixes.iter().any(|p| k.starts_with(p))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_named_and_prefixed_variables_only() {
        let vars = [
            ("ANTHROPIC_API_KEY", "k"),
            ("CODEX_HOME", "/c"),
            ("AGENT_RUNNER_SECRET_FILE", "/s"),
            ("AWS_SECRET_ACCESS_KEY", "a"),
            ("HTTPS_PROXY", "http://u:p@p"),
            ("NO_PROXY", "a.b"),
            ("HOME", "/root"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let got = runner_env_from(vars, &["CODEX_HOME"], &["ANTHROPIC_"]);
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["ANTHROPIC_API_KEY", "CODEX_HOME", "NO_PROXY"]);
        let got = runner_env_from(
            [("AGENT_RUNNER_X".to_string(), "1".to_string())],
            &[],
            &["AGENT_"],
        );
        assert!(got.is_empty());
    }
}
