//! What a package name may say, parsed into where to fetch it from.
//!
//! | form | meaning |
//! |---|---|
//! | `owner/repo[/path/to/skill][@ref]` | GitHub repository (`https://github.com/owner/repo.git`) |
//! | `https://github.com/owner/repo[/tree/REF[/path]]` | the same, as a browser URL |
//! | `file:///abs/dir` | a local directory (a git work tree is read at its HEAD) |
//! | `<git URL>[#ref]` (`https://…`, `http://…`, `ssh://…`, `user@host:…`, `file:///….git`) | any git repository; `#ref` picks a branch, tag or commit |
//!
//! This is only the syntax: which of these the runner fetches is
//! [`super::policy`]'s decision.

/// Where a package comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A git repository, at `git_ref` (default branch when `None`), with the
    /// package at `subpath` inside it.
    Git {
        /// The repository's URL.
        url: String,
        /// The branch, tag or commit (`None`: the default branch).
        git_ref: Option<String>,
        /// The package's directory inside the repository.
        subpath: String,
    },
    /// A local directory.
    Dir {
        /// The directory.
        path: String,
    },
}

/// Parses a package coordinate; the error says what is wrong.
pub fn parse(text: &str) -> Result<Source, String> {
    let source = parse_source(text)?;
    if let Source::Git {
        git_ref: Some(r), ..
    } = &source
        && r.starts_with('-')
    {
        // It would reach git's command line as an option.
        return Err(format!("{text:?}: ref {r:?} may not start with '-'"));
    }
    Ok(source)
}

fn parse_source(text: &str) -> Result<Source, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty".into());
    }
    if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("{text:?} has whitespace or control characters"));
    }
    if let Some(rest) = text.strip_prefix("https://github.com/") {
        return github_url(rest);
    }
    if let Some(path) = text.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(format!("{text:?}: file:// needs an absolute path"));
        }
        let (path, git_ref) = split_ref(path, '#');
        if path.ends_with(".git") || git_ref.is_some() {
            return Ok(Source::Git {
                url: format!("file://{path}"),
                git_ref,
                subpath: String::new(),
            });
        }
        return Ok(Source::Dir {
            path: path.to_owned(),
        });
    }
    if ["https://", "http://", "ssh://"]
        .iter()
        .any(|p| text.starts_with(p))
        || is_scp_like(text)
    {
        let (url, git_ref) = split_ref(text, '#');
        return Ok(Source::Git {
            url: url.to_owned(),
            git_ref,
            subpath: String::new(),
        });
    }
    if text.contains("://") {
        return Err(format!("{text:?}: unsupported scheme"));
    }
    shorthand(text)
}

/// git's scp-like syntax `[user@]host:path`: not a URL, and a ':' before
/// any '/'.
pub fn is_scp_like(text: &str) -> bool {
    !text.contains("://")
        && text
            .split_once(':')
            .is_some_and(|(head, _)| !head.is_empty() && !head.contains('/'))
}

fn split_ref(text: &str, sep: char) -> (&str, Option<String>) {
    match text.rsplit_once(sep) {
        Some((head, r)) if !r.is_empty() => (head, Some(r.to_owned())),
        _ => (text, None),
    }
}

/// `owner/repo[/path][@ref]`
fn shorthand(text: &str) -> Result<Source, String> {
    let (path, git_ref) = split_ref(text, '@');
    let mut parts = path.split('/');
    let (Some(owner), Some(repo)) = (parts.next(), parts.next()) else {
        return Err(format!(
            "{text:?}: expected owner/repo[/path][@ref], a github.com URL, file:// or a git URL"
        ));
    };
    let subpath: Vec<&str> = parts.collect();
    github(owner, repo, git_ref, &subpath, text)
}

/// `owner/repo[/tree/REF[/path]]` after `https://github.com/`.
fn github_url(rest: &str) -> Result<Source, String> {
    let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    match parts.as_slice() {
        [owner, repo] => github(owner, repo, None, &[], rest),
        [owner, repo, "tree", git_ref, path @ ..] => {
            github(owner, repo, Some((*git_ref).to_owned()), path, rest)
        }
        _ => Err(format!(
            "https://github.com/{rest}: expected https://github.com/owner/repo[/tree/REF[/path]]"
        )),
    }
}

fn github(
    owner: &str,
    repo: &str,
    git_ref: Option<String>,
    subpath: &[&str],
    text: &str,
) -> Result<Source, String> {
    let repo = repo.trim_end_matches(".git");
    let ok_name = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if !ok_name(owner) || !ok_name(repo) {
        return Err(format!("{text:?}: invalid GitHub owner or repository name"));
    }
    if subpath
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return Err(format!(
            "{text:?}: the path inside the repository may not contain '', '.' or '..'"
        ));
    }
    if let Some(r) = &git_ref
        && (r.starts_with('-') || r.contains(".."))
    {
        return Err(format!("{text:?}: invalid ref {r:?}"));
    }
    Ok(Source::Git {
        url: format!("https://github.com/{owner}/{repo}.git"),
        git_ref,
        subpath: subpath.join("/"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(url: &str, git_ref: Option<&str>, subpath: &str) -> Source {
        Source::Git {
            url: url.into(),
            git_ref: git_ref.map(Into::into),
            subpath: subpath.into(),
        }
    }

    #[test]
    fn forms() {
        let gh = "https://github.com/o/r.git";
        assert_eq!(parse("o/r").unwrap(), git(gh, None, ""));
        assert_eq!(parse("o/r@v1").unwrap(), git(gh, Some("v1"), ""));
        assert_eq!(
            parse("o/r/skills/x@main").unwrap(),
            git(gh, Some("main"), "skills/x")
        );
        assert_eq!(parse("https://github.com/o/r").unwrap(), git(gh, None, ""));
        assert_eq!(
            parse("https://github.com/o/r/tree/v2/a/b").unwrap(),
            git(gh, Some("v2"), "a/b")
        );
        assert_eq!(
            parse("file:///srv/pkg").unwrap(),
            Source::Dir {
                path: "/srv/pkg".into()
            }
        );
        assert_eq!(
            parse("file:///srv/pkg.git#v3").unwrap(),
            git("file:///srv/pkg.git", Some("v3"), "")
        );
        assert_eq!(
            parse("https://git.example.com/s.git#main").unwrap(),
            git("https://git.example.com/s.git", Some("main"), "")
        );
    }

    #[test]
    fn rejects() {
        for bad in [
            "",
            "justone",
            "o/r/../x",
            "../r",
            "o/r@--upload-pack=x",
            "https://git.example.com/s.git#--orphan=x",
            "ftp://x/y",
            "file://relative",
            "o /r",
            "https://github.com/o",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
