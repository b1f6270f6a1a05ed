//! Bringing a package onto local disk: `git clone` + checkout for git
//! sources (recording the resolved commit), or reading a local directory in
//! place. git runs with prompts disabled and a time limit, so a bad URL
//! fails instead of hanging.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::SkillError;
use super::coordinate::Source;

/// How long one git command may take.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// A package on disk.
pub struct Fetched {
    /// The package's root directory.
    pub root: PathBuf,
    /// The commit it was read at (git sources).
    pub commit: Option<String>,
}

/// Fetch `source`; git sources are cloned into `dest`.
pub fn fetch(
    source: &Source,
    dest: &Path,
    git_env: &[(String, String)],
) -> Result<Fetched, SkillError> {
    match source {
        Source::Dir { path } => {
            let dir = PathBuf::from(path);
            if dir.join(".git").exists() {
                // A work tree: read what is committed at HEAD.
                let url = format!("file://{path}");
                return fetch_git(&url, None, "", dest, git_env);
            }
            if !dir.is_dir() {
                return Err(fetch_err(path, "not a directory"));
            }
            Ok(Fetched {
                root: dir,
                commit: None,
            })
        }
        Source::Git {
            url,
            git_ref,
            subpath,
        } => fetch_git(url, git_ref.as_deref(), subpath, dest, git_env),
    }
}

fn fetch_err(source: &str, message: impl Into<String>) -> SkillError {
    SkillError::Fetch {
        from: source.to_owned(),
        message: message.into(),
    }
}

pub(crate) fn fetch_git(
    url: &str,
    git_ref: Option<&str>,
    subpath: &str,
    dest: &Path,
    git_env: &[(String, String)],
) -> Result<Fetched, SkillError> {
    let dest_str = dest.to_string_lossy();
    git(
        &["clone", "--quiet", "--no-checkout", "--", url, &dest_str],
        None,
        git_env,
    )
    .map_err(|m| fetch_err(url, m))?;
    let target = git_ref.unwrap_or("HEAD");
    git(
        &[
            "-c",
            "advice.detachedHead=false",
            "checkout",
            "--quiet",
            "--detach",
            target,
            "--",
        ],
        Some(dest),
        &[],
    )
    .map_err(|m| fetch_err(url, format!("ref {target:?}: {m}")))?;
    let commit = git(&["rev-parse", "HEAD"], Some(dest), &[]).map_err(|m| fetch_err(url, m))?;
    let root = if subpath.is_empty() {
        dest.to_owned()
    } else {
        dest.join(subpath)
    };
    if !root.is_dir() {
        return Err(fetch_err(
            url,
            format!("no directory {subpath:?} in the repository"),
        ));
    }
    Ok(Fetched {
        root,
        commit: Some(commit.trim().to_owned()),
    })
}

/// Run git; its stdout, or a message with its stderr. This is the runner's
/// own git (fetching skill packages, with the runner's token), not an agent
/// process: it runs outside any thread's sandbox, on the blocking pool.
pub(crate) fn git(
    args: &[&str],
    cwd: Option<&Path>,
    env: &[(String, String)],
) -> Result<String, String> {
    let mut cmd = Command::new("git");
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().map_err(|e| format!("running git: {e}"))?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    // Drain both pipes on threads so a chatty git never blocks on them.
    let out = std::thread::spawn(move || read_all(stdout.as_mut()));
    let err = std::thread::spawn(move || read_all(stderr.as_mut()));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > GIT_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("git {} timed out", args.first().unwrap_or(&"")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("waiting for git: {e}")),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if status.success() {
        Ok(out)
    } else {
        let msg = err.trim();
        Err(if msg.is_empty() {
            format!("git exited with {status}")
        } else {
            msg.lines().last().unwrap_or(msg).to_owned()
        })
    }
}

fn read_all<R: Read>(pipe: Option<&mut R>) -> String {
    let mut text = String::new();
    if let Some(p) = pipe {
        let _ = p.read_to_string(&mut text);
    }
    text
}
