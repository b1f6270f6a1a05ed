//! What travels between `agent-runner git-credential` and the runner's
//! credential socket, and what git hands the helper.
//!
//! - Git → helper: git's credential format, `key=value` lines ended by a
//!   blank line or EOF ([`parse_git_input`]); only `protocol`, `host`,
//!   `path` and `password` matter here, everything else is ignored.
//! - Helper ↔ runner: one JSON object per line each way ([`Request`],
//!   [`Answer`]), each at most [`MAX_REQUEST_BYTES`] / [`MAX_ANSWER_BYTES`].
//! - Runner → git (printed by the helper): [`git_output`].
//!
//! [`Target::parse`] decides which requests deserve a token at all: the
//! broker's git host only, over https (or http when that host is loopback,
//! for tests), with a path naming `owner/repo`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::host::github::is_repo_name;

/// The username GitHub expects with an installation token.
pub const USERNAME: &str = "x-access-token";

/// Largest request line the runner reads.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Largest answer line the helper reads.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;
/// Most of git's input the helper reads.
pub const MAX_GIT_INPUT_BYTES: usize = 64 * 1024;

/// What the helper was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Git wants credentials.
    Get,
    /// Git saw them rejected (HTTP 401).
    Erase,
}

/// One request from the helper to the runner.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// What git asks.
    pub op: Op,
    /// The thread's capability (the content of its capability file, see
    /// [`super::capability`]): what the runner answers for. Never logged.
    #[serde(default)]
    pub capability: String,
    /// The thread the helper was configured for (informative; checked like
    /// every wire id, and against the thread the capability belongs to).
    #[serde(default)]
    pub thread: String,
    /// `https` (or `http` for a loopback host).
    #[serde(default)]
    pub protocol: String,
    /// The host (`github.com`).
    #[serde(default)]
    pub host: String,
    /// The repository path (`owner/repo.git`).
    #[serde(default)]
    pub path: String,
    /// On `erase`: the password git is rejecting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("op", &self.op)
            .field("capability", &"***")
            .field("thread", &self.thread)
            .field("protocol", &self.protocol)
            .field("host", &self.host)
            .field("path", &self.path)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// The runner's answer: credentials, or nothing (with a reason git's user
/// may see; never a secret).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The user name git sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The password (the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Why nothing was given (shown to git's user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answer")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("note", &self.note)
            .finish()
    }
}

impl Answer {
    /// An answer carrying `token`.
    pub fn credentials(token: String) -> Self {
        Self {
            username: Some(USERNAME.to_owned()),
            password: Some(token),
            note: None,
        }
    }

    /// An answer with no credentials, saying why.
    pub fn nothing(note: impl Into<String>) -> Self {
        Self {
            note: Some(note.into()),
            ..Self::default()
        }
    }
}

/// The fields of git's credential input this helper uses.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct GitInput {
    /// The protocol git asked about.
    pub protocol: String,
    /// The host.
    pub host: String,
    /// The repository path.
    pub path: String,
    /// The password git rejected, if it said.
    pub password: Option<String>,
}

impl fmt::Debug for GitInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitInput")
            .field("protocol", &self.protocol)
            .field("host", &self.host)
            .field("path", &self.path)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Parse git's `key=value` lines (up to a blank line). Unknown keys and
/// lines without `=` are ignored, as git's own helpers do; a repeated key
/// keeps its last value.
pub fn parse_git_input(text: &str) -> GitInput {
    let mut input = GitInput::default();
    for line in text.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key {
            "protocol" => input.protocol = value.to_owned(),
            "host" => input.host = value.to_owned(),
            "path" => input.path = value.to_owned(),
            "password" => input.password = Some(value.to_owned()),
            _ => {}
        }
    }
    input
}

/// What the helper prints for git after a `get` with credentials. `None`
/// when a value could break git's line format (never expected from a real
/// token).
pub fn git_output(username: &str, password: &str) -> Option<String> {
    let clean = |v: &str| !v.is_empty() && !v.contains(['\n', '\r', '\0']);
    (clean(username) && clean(password))
        .then(|| format!("username={username}\npassword={password}\n"))
}

/// A repository a request may get a token for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The repository's owner.
    pub owner: String,
    /// The repository's name.
    pub repo: String,
}

impl Target {
    /// The repository `protocol://host/path` names, if the runner answers
    /// for it: `host` must be `git_host` (case-insensitive), `protocol`
    /// https, or http when `git_host` is a loopback address, and `path`
    /// `owner/repo` (an optional `.git`, anything after the repository
    /// ignored, e.g. `/info/lfs`). The error says why not, without secrets.
    pub fn parse(protocol: &str, host: &str, path: &str, git_host: &str) -> Result<Self, String> {
        if !host.eq_ignore_ascii_case(git_host) {
            return Err(format!("host {host:?} is not the GitHub host {git_host:?}"));
        }
        match protocol {
            "https" => {}
            "http" if is_loopback(git_host) => {}
            _ => {
                return Err(format!(
                    "protocol {protocol:?} is not https (http is answered only for a loopback git host)"
                ));
            }
        }
        let mut parts = path.trim_start_matches('/').split('/');
        let owner = parts.next().unwrap_or("");
        let repo = parts.next().unwrap_or("");
        let repo = repo.strip_suffix(".git").unwrap_or(repo);
        if !is_repo_name(owner) || !is_repo_name(repo) {
            return Err(format!(
                "path {path:?} does not name owner/repo (is credential.useHttpPath set?)"
            ));
        }
        Ok(Self {
            owner: owner.to_owned(),
            repo: repo.to_owned(),
        })
    }
}

/// Whether `host` (`name`, `name:port`, `[v6]:port`) is a loopback address.
pub fn is_loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_input_takes_the_fields_it_needs_and_stops_at_a_blank_line() {
        let input = parse_git_input(
            "protocol=https\nhost=github.com\npath=o/r.git\nusername=x\npassword=p=q\r\ncapability[]=authtype\nnoequals\n\nhost=evil.example\n",
        );
        assert_eq!(input.protocol, "https");
        assert_eq!(input.host, "github.com");
        assert_eq!(input.path, "o/r.git");
        assert_eq!(input.password.as_deref(), Some("p=q"));
        assert_eq!(parse_git_input(""), GitInput::default());
    }

    #[test]
    fn targets_only_for_the_git_host_over_https() {
        let ok = Target::parse("https", "GitHub.com", "octo/hello.git", "github.com").unwrap();
        assert_eq!(
            ok,
            Target {
                owner: "octo".into(),
                repo: "hello".into()
            }
        );
        let lfs = Target::parse(
            "https",
            "github.com",
            "/octo/hello.git/info/lfs",
            "github.com",
        );
        assert_eq!(lfs.unwrap().repo, "hello");
        let bare = Target::parse("https", "github.com", "octo/hello", "github.com").unwrap();
        assert_eq!(bare.repo, "hello");
        let err = Target::parse("https", "gitlab.com", "o/r", "github.com").unwrap_err();
        assert!(err.contains("not the GitHub host"), "{err}");
        let err = Target::parse("http", "github.com", "o/r", "github.com").unwrap_err();
        assert!(err.contains("not https"), "{err}");
        for bad in ["", "o", "o/", "/r", "../r", "o/..", "o/r r", "o%2f/r"] {
            let err = Target::parse("https", "github.com", bad, "github.com").unwrap_err();
            assert!(err.contains("owner/repo"), "{bad}: {err}");
        }
    }

    #[test]
    fn http_only_for_a_loopback_git_host() {
        for host in ["127.0.0.1:8080", "localhost:1", "[::1]:9000", "127.0.0.1"] {
            Target::parse("http", host, "o/r.git", host).unwrap();
        }
        for host in ["10.0.0.1:8080", "example.com", "[2001:db8::1]:80"] {
            assert!(
                Target::parse("http", host, "o/r.git", host).is_err(),
                "{host}"
            );
            Target::parse("https", host, "o/r.git", host).unwrap();
        }
    }

    #[test]
    fn requests_round_trip_and_never_print_passwords() {
        let req = Request {
            op: Op::Erase,
            capability: "cap_secret_value_456".into(),
            thread: "thr-1".into(),
            protocol: "https".into(),
            host: "github.com".into(),
            path: "o/r".into(),
            password: Some("ghs_secret_value_123".into()),
        };
        let line = serde_json::to_string(&req).unwrap();
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), req);
        assert!(!format!("{req:?}").contains("ghs_secret"));
        assert!(!format!("{req:?}").contains("cap_secret"));
        let answer = Answer::credentials("ghs_secret_value_123".into());
        assert!(!format!("{answer:?}").contains("ghs_secret"));
        let err = serde_json::from_str::<Request>(r#"{"op":"fill","thread":"t"}"#);
        assert!(err.is_err());
    }

    #[test]
    fn output_refuses_values_that_would_break_the_format() {
        assert_eq!(
            git_output(USERNAME, "tok").as_deref(),
            Some("username=x-access-token\npassword=tok\n")
        );
        assert_eq!(git_output(USERNAME, "a\nhost=evil"), None);
        assert_eq!(git_output(USERNAME, ""), None);
    }
}
