//! Which skill package sources the runner fetches. A package name comes
//! from the control plane (untrusted input) and becomes a `git clone`
//! argument or a directory the runner reads, so it is admitted here first:
//!
//! - `https://…` (and the `owner/repo` GitHub shorthand): while `https` is
//!   in `--skill-sources` (the default);
//! - `ssh://…` and scp-like `user@host:path`: only with `ssh` in
//!   `--skill-sources`;
//! - `file://…` (or an absolute path): only inside a `--skill-local-dir`,
//!   judged on the real path (`..` and symlinks resolved), and fetched by
//!   that real path;
//! - `http://…`: only to a loopback GitHub host (`--github-host
//!   127.0.0.1:…`, local development; the same rule the git credential
//!   helper follows); `git://`, `ext::`, `fd::` and every other transport:
//!   never.
//!
//! Credentials in a URL are refused (git's command line is visible to every
//! local user) and masked in the error. The admitted transport is the only
//! one git is then allowed to use ([`Transport::git_name`]), so a redirect
//! cannot switch protocols.

use std::path::{Path, PathBuf};

use super::coordinate::{self, Source};

/// The transport an admitted source is fetched over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `https://`
    Https,
    /// `http://` (a loopback GitHub host only).
    Http,
    /// `ssh://` or scp-like.
    Ssh,
    /// A local directory or repository.
    File,
}

impl Transport {
    /// git's name for it (`GIT_ALLOW_PROTOCOL`, `protocol.<name>.allow`).
    pub fn git_name(self) -> &'static str {
        match self {
            Transport::Https => "https",
            Transport::Http => "http",
            Transport::Ssh => "ssh",
            Transport::File => "file",
        }
    }
}

/// A source the policy let through (file paths made real).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// Where to fetch it from.
    pub source: Source,
    /// How.
    pub transport: Transport,
}

/// Where packages may come from (built from the `--skill-*` settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePolicy {
    /// `https` in `--skill-sources`.
    pub https: bool,
    /// `ssh` in `--skill-sources`.
    pub ssh: bool,
    /// `--skill-local-dir`, canonical.
    pub local_dirs: Vec<PathBuf>,
    /// The GitHub host when it is a loopback address: plain http to it
    /// (and only it) is allowed.
    pub http_host: Option<String>,
}

impl Default for SourcePolicy {
    /// https only.
    fn default() -> Self {
        Self {
            https: true,
            ssh: false,
            local_dirs: Vec::new(),
            http_host: None,
        }
    }
}

const SOURCES: &str = "--skill-sources (AGENT_RUNNER_SKILL_SOURCES)";
const LOCAL_DIR: &str = "--skill-local-dir (AGENT_RUNNER_SKILL_LOCAL_DIR)";

impl SourcePolicy {
    /// Admits `text` (any form [`coordinate::parse`] reads, or an absolute
    /// path) or says why not, naming the setting that would allow it. Reads
    /// the file system (a local source's real path).
    pub fn admit(&self, text: &str) -> Result<Admitted, String> {
        let shown = redact_url(text.trim());
        let normalized = normalize(text.trim()).map_err(|m| format!("{shown:?}: {m}"))?;
        let source = coordinate::parse(&normalized).map_err(|m| redact_url(&m))?;
        self.admit_source(source)
            .map_err(|m| format!("{shown:?}: {m}"))
    }

    fn admit_source(&self, source: Source) -> Result<Admitted, String> {
        match source {
            Source::Dir { path } => Ok(Admitted {
                source: Source::Dir {
                    path: self.local(&path)?,
                },
                transport: Transport::File,
            }),
            Source::Git {
                url,
                git_ref,
                subpath,
            } => {
                let (url, transport) = self.url(&url)?;
                Ok(Admitted {
                    source: Source::Git {
                        url,
                        git_ref,
                        subpath,
                    },
                    transport,
                })
            }
        }
    }

    /// A git URL, checked: its transport allowed, no credentials in it, a
    /// local one made real.
    fn url(&self, url: &str) -> Result<(String, Transport), String> {
        if let Some(path) = url.strip_prefix("file://") {
            return Ok((format!("file://{}", self.local(path)?), Transport::File));
        }
        let (transport, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (Transport::Https, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (Transport::Http, rest)
        } else if let Some(rest) = url.strip_prefix("ssh://") {
            (Transport::Ssh, rest)
        } else if coordinate::is_scp_like(url) {
            (Transport::Ssh, url)
        } else {
            return Err("not a transport skill packages may use".into());
        };
        let authority = match transport {
            Transport::Ssh if !url.contains("://") => url.split(':').next().unwrap_or(""),
            _ => rest.split('/').next().unwrap_or(""),
        };
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        if host.is_empty() || host.starts_with('-') {
            return Err(format!("{host:?} is not a host"));
        }
        match transport {
            Transport::Https if !self.https => {
                return Err(format!(
                    "scheme https is not allowed: add https to {SOURCES}"
                ));
            }
            Transport::Http
                if !self
                    .http_host
                    .as_deref()
                    .is_some_and(|h| h.eq_ignore_ascii_case(host)) =>
            {
                return Err(
                    "scheme http is never allowed (unencrypted; only a loopback --github-host is fetched over http): use https"
                        .into(),
                );
            }
            Transport::Ssh if !self.ssh => {
                return Err(format!("scheme ssh is not allowed: add ssh to {SOURCES}"));
            }
            _ => {}
        }
        let secret = match transport {
            Transport::Ssh => userinfo.is_some_and(|u| u.contains(':')),
            _ => userinfo.is_some(),
        };
        if secret {
            return Err(
                "credentials in a package URL are not accepted (every local user can read git's command line); the runner sends GitHub installation tokens itself"
                    .into(),
            );
        }
        Ok((url.to_owned(), transport))
    }

    /// The real path of local directory `path`, which must be inside a
    /// listed directory.
    fn local(&self, path: &str) -> Result<String, String> {
        if self.local_dirs.is_empty() {
            return Err(format!(
                "scheme file is not allowed: list the directory in {LOCAL_DIR}"
            ));
        }
        if path.contains('%') {
            // git would percent-decode it into another path.
            return Err("a local path may not contain '%'".into());
        }
        let real = Path::new(path)
            .canonicalize()
            .map_err(|e| format!("{path}: {e}"))?;
        if !self.local_dirs.iter().any(|dir| real.starts_with(dir)) {
            return Err(format!("{} is outside every {LOCAL_DIR}", real.display()));
        }
        real.to_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{} is not UTF-8", real.display()))
    }
}

/// `text` with a lowercase scheme and an absolute path as `file://`;
/// refuses, naming it, a scheme or git transport no setting allows.
fn normalize(text: &str) -> Result<String, String> {
    if let Some((scheme, rest)) = text.split_once("://") {
        let lower = scheme.to_ascii_lowercase();
        return match lower.as_str() {
            "https" | "http" | "ssh" | "file" => Ok(format!("{lower}://{rest}")),
            "git+ssh" | "ssh+git" => Ok(format!("ssh://{rest}")),
            _ => Err(format!(
                "scheme {lower} is not allowed: skill packages come over https (ssh with {SOURCES}, file:// from {LOCAL_DIR})"
            )),
        };
    }
    // git's `<transport>::<address>` (ext::, fd::, …) runs helpers.
    if let Some((transport, _)) = text.split_once("::")
        && !transport.contains('/')
    {
        return Err(format!("git transport {transport}:: is never allowed"));
    }
    if text.starts_with('/') {
        return Ok(format!("file://{text}"));
    }
    if text.starts_with('.') || text.starts_with('~') {
        return Err(
            "a relative local path is not a package source (use file:// with an absolute path)"
                .into(),
        );
    }
    Ok(text.to_owned())
}

/// `text` with any `user:password@` of a URL in it replaced by `***@`.
pub fn redact_url(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c == '"' || c.is_whitespace())
            .unwrap_or(tail.len());
        match tail[..authority_end].rfind('@') {
            Some(user_end) => {
                out.push_str("***");
                rest = &tail[user_end..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(policy: &SourcePolicy, text: &str) -> String {
        match policy.admit(text) {
            Ok(admitted) => panic!("{text} admitted: {admitted:?}"),
            Err(e) => e,
        }
    }

    fn transport(policy: &SourcePolicy, text: &str) -> Transport {
        match policy.admit(text) {
            Ok(admitted) => admitted.transport,
            Err(e) => panic!("{text} refused: {e}"),
        }
    }

    #[test]
    fn https_only_by_default() {
        let policy = SourcePolicy::default();
        for ok in [
            "acme/skills",
            "acme/skills/lint@v1",
            "https://github.com/acme/skills",
            "https://git.example.com/s.git#main",
            "HTTPS://git.example.com/s.git",
            "Https://github.com/acme/skills/tree/main/lint",
        ] {
            assert_eq!(transport(&policy, ok), Transport::Https, "{ok}");
        }
        for (bad, needle) in [
            (
                "http://git.example.com/s.git",
                "scheme http is never allowed",
            ),
            (
                "HTTP://git.example.com/s.git",
                "scheme http is never allowed",
            ),
            ("git://git.example.com/s.git", "scheme git is not allowed"),
            ("GIT://git.example.com/s.git", "scheme git is not allowed"),
            ("ftp://x/y", "scheme ftp is not allowed"),
            (
                "ssh://git@github.com/a/b.git",
                "scheme ssh is not allowed: add ssh to --skill-sources",
            ),
            ("git+ssh://github.com/a/b.git", "scheme ssh is not allowed"),
            ("git@github.com:a/b.git", "scheme ssh is not allowed"),
            ("github.com:a/b.git", "scheme ssh is not allowed"),
            (
                "ext::sh -c touch% /tmp/x",
                "git transport ext:: is never allowed",
            ),
            ("fd::3", "git transport fd:: is never allowed"),
            (
                "file:///tmp",
                "scheme file is not allowed: list the directory in --skill-local-dir",
            ),
            ("FILE:///tmp", "scheme file is not allowed"),
            ("/tmp", "scheme file is not allowed"),
            ("./pkg", "relative local path"),
            ("../pkg", "relative local path"),
        ] {
            let err = refused(&policy, bad);
            assert!(err.contains(needle), "{bad}: {err}");
        }
        let none = SourcePolicy {
            https: false,
            ..SourcePolicy::default()
        };
        let err = refused(&none, "acme/skills");
        assert!(err.contains("add https to --skill-sources"), "{err}");
    }

    #[test]
    fn ssh_when_enabled() {
        let policy = SourcePolicy {
            https: false,
            ssh: true,
            ..SourcePolicy::default()
        };
        for ok in [
            "ssh://git@github.com/a/b.git",
            "SSH://git@github.com/a/b.git#v1",
            "git+ssh://github.com/a/b.git",
            "git@github.com:a/b.git",
            "deploy@git.example.com:team/skills.git#main",
        ] {
            assert_eq!(transport(&policy, ok), Transport::Ssh, "{ok}");
        }
        let err = refused(&policy, "ssh://-oProxyCommand=x/y");
        assert!(err.contains("not a host"), "{err}");
        let err = refused(&policy, "ssh://me:hunter2@git.example.com/a.git");
        assert!(
            err.contains("credentials") && !err.contains("hunter2"),
            "{err}"
        );
        assert!(err.contains("***@git.example.com"), "{err}");
    }

    #[test]
    fn credentials_are_refused_and_masked() {
        let policy = SourcePolicy::default();
        for url in [
            "https://x-access-token:ghs_secret0123@github.com/a/b.git",
            "https://ghs_secret0123@git.example.com/a/b.git#main",
        ] {
            let err = refused(&policy, url);
            assert!(err.contains("credentials"), "{err}");
            assert!(!err.contains("ghs_secret0123"), "{err}");
            assert!(err.contains("https://***@"), "{err}");
        }
        assert_eq!(
            redact_url("fetching https://u:p@h/x and ssh://k@h2:22/y, not a@b"),
            "fetching https://***@h/x and ssh://***@h2:22/y, not a@b"
        );
    }

    #[test]
    fn http_only_to_a_loopback_github_host() {
        let policy = SourcePolicy {
            http_host: Some("127.0.0.1:9".into()),
            ..SourcePolicy::default()
        };
        assert_eq!(
            transport(&policy, "http://127.0.0.1:9/o/r.git#main"),
            Transport::Http
        );
        let err = refused(&policy, "http://127.0.0.2:9/o/r.git");
        assert!(err.contains("scheme http"), "{err}");
    }

    #[test]
    fn local_sources_stay_inside_a_listed_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let listed = root.join("listed");
        let outside = root.join("outside");
        for dir in [listed.join("pkg/sub"), outside.clone(), root.join("odd%2e")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::create_dir(listed.join("repo.git")).unwrap();
        std::os::unix::fs::symlink(&outside, listed.join("escape")).unwrap();
        let policy = SourcePolicy {
            local_dirs: vec![listed.clone()],
            ..SourcePolicy::default()
        };
        let pkg = listed.join("pkg").display().to_string();
        let dir = |text: &str| match policy.admit(text) {
            Ok(Admitted {
                source: Source::Dir { path },
                transport: Transport::File,
            }) => path,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(dir(&format!("file://{pkg}")), pkg);
        assert_eq!(dir(&format!("FILE://{pkg}/sub/..")), pkg);
        assert_eq!(dir(&pkg), pkg);
        let admitted = policy
            .admit(&format!("file://{}/./repo.git#v1", listed.display()))
            .unwrap();
        assert_eq!(
            admitted.source,
            Source::Git {
                url: format!("file://{}/repo.git", listed.display()),
                git_ref: Some("v1".into()),
                subpath: String::new(),
            }
        );
        for bad in [
            format!("file://{}/pkg/../../outside", listed.display()),
            format!("file://{}/escape", listed.display()),
            format!("{}/escape", listed.display()),
            format!("file://{}", outside.display()),
            format!("file://{}", root.display()),
        ] {
            let err = refused(&policy, &bad);
            assert!(
                err.contains("is outside every --skill-local-dir"),
                "{bad}: {err}"
            );
        }
        let err = refused(&policy, &format!("file://{}/odd%2e", root.display()));
        assert!(err.contains("'%'"), "{err}");
        let err = refused(&policy, &format!("file://{}/missing", listed.display()));
        assert!(err.contains("missing"), "{err}");
    }
}
