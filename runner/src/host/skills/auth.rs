//! Private skill packages on the GitHub host: when an installation covers
//! the package's repository, its git fetch sends the installation token.
//!
//! The token reaches git as an `http.<url>.extraHeader` set through
//! `GIT_CONFIG_*` environment entries: never in git's arguments (which any
//! local user can read in the process list), never in a file, and scoped to
//! that one repository URL so no other host or repository ever sees it.

use base64::Engine as _;

use super::coordinate::Source;
use crate::host::credentials::{
    self,
    protocol::{Target, USERNAME},
};

/// The repository a package's git source names on `git_host`, and the URL
/// a token for it may be sent to (and below).
pub fn github_repo(source: &Source, git_host: &str) -> Option<(Target, String)> {
    let Source::Git { url, .. } = source else {
        return None;
    };
    let (scheme, rest) = url.split_once("://")?;
    let (host, path) = rest.split_once('/')?;
    let target = Target::parse(scheme, host, path, git_host).ok()?;
    // Git matches `http.<url>.*` on whole path segments, so the key is the
    // clone URL itself: it covers `<url>/info/refs` and `<url>/git-upload-pack`.
    Some((target, url.trim_end_matches('/').to_owned()))
}

/// Environment for git that sends `token` (as GitHub's `x-access-token`
/// basic credentials) to URLs under `url_prefix` only, appended after any
/// `GIT_CONFIG_*` entries the runner itself was started with.
pub fn git_env(url_prefix: &str, token: &str) -> Vec<(String, String)> {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{USERNAME}:{token}"));
    credentials::config_entries(
        credentials::inherited_config_count(),
        [(
            &format!("http.{url_prefix}.extraHeader"),
            format!("Authorization: Basic {basic}"),
        )],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::skills::coordinate::parse;

    #[test]
    fn only_repositories_on_the_github_host_get_a_token() {
        let (t, prefix) =
            github_repo(&parse("acme/skills/lint@v2").unwrap(), "github.com").unwrap();
        assert_eq!((t.owner.as_str(), t.repo.as_str()), ("acme", "skills"));
        assert_eq!(prefix, "https://github.com/acme/skills.git");
        let (t, _) = github_repo(
            &parse("https://github.com/acme/skills/tree/main/lint").unwrap(),
            "github.com",
        )
        .unwrap();
        assert_eq!(t.repo, "skills");
        // Another host, a local directory, plain http to a non-loopback host.
        assert!(github_repo(&parse("acme/skills").unwrap(), "ghe.example.com").is_none());
        assert!(github_repo(&parse("file:///tmp/x").unwrap(), "github.com").is_none());
        assert!(
            github_repo(
                &parse("http://ghe.example.com/a/b.git").unwrap(),
                "ghe.example.com"
            )
            .is_none()
        );
        let (_, prefix) = github_repo(
            &parse("http://127.0.0.1:9/a/b.git#main").unwrap(),
            "127.0.0.1:9",
        )
        .unwrap();
        assert_eq!(prefix, "http://127.0.0.1:9/a/b.git");
    }

    #[test]
    fn the_token_travels_as_a_scoped_basic_header() {
        let env = git_env("https://github.com/a/b", "ghs_secret");
        let count: usize = env[0].1.parse().unwrap();
        assert!(count >= 1);
        assert_eq!(env[1].1, "http.https://github.com/a/b.extraHeader");
        // base64("x-access-token:ghs_secret")
        assert_eq!(
            env[2].1,
            "Authorization: Basic eC1hY2Nlc3MtdG9rZW46Z2hzX3NlY3JldA=="
        );
    }
}
