//! Bringing a package onto local disk: `git clone` + checkout for git
//! sources (recording the resolved commit), or reading a local directory in
//! place. The source was admitted by [`super::policy`] first.
//!
//! git runs locked down: prompts off, no system or global configuration
//! (nothing there can run a command), hooks and fsmonitor off, no
//! submodules, and only the admitted source's transport allowed
//! (`GIT_ALLOW_PROTOCOL`, which also bounds where a redirect may go). It
//! runs in a process group of its own under a time limit, and while it
//! fetches the directory it writes is measured: past the size limit
//! (`.git` counted) the whole group is killed, so a huge repository is
//! stopped mid-download instead of filling the disk first.

use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::SkillError;
use super::coordinate::Source;
use super::policy::{Admitted, Transport, redact_url};

/// How long one git command may take.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// How often a running fetch's directory is measured.
const MEASURE_EVERY: Duration = Duration::from_millis(100);

/// A package on disk.
pub struct Fetched {
    /// The package's root directory.
    pub root: PathBuf,
    /// The commit it was read at (git sources).
    pub commit: Option<String>,
}

/// How git may fetch one source.
pub struct GitFetch<'a> {
    /// The one transport git may use.
    pub transport: Transport,
    /// Extra environment (an installation token, [`super::auth::git_env`]).
    pub env: &'a [(String, String)],
    /// The most bytes the fetched directory may hold, `.git` included.
    pub max_bytes: u64,
}

/// Fetch an admitted source; git sources are cloned into `dest`.
pub fn fetch(
    admitted: &Admitted,
    dest: &Path,
    git_env: &[(String, String)],
    max_bytes: u64,
) -> Result<Fetched, SkillError> {
    let how = GitFetch {
        transport: admitted.transport,
        env: git_env,
        max_bytes,
    };
    match &admitted.source {
        Source::Dir { path } => {
            let dir = PathBuf::from(path);
            if dir.join(".git").exists() {
                // A work tree: read what is committed at HEAD.
                let url = format!("file://{path}");
                return fetch_git(&url, None, "", dest, &how);
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
        } => fetch_git(url, git_ref.as_deref(), subpath, dest, &how),
    }
}

fn fetch_err(source: &str, message: impl Into<String>) -> SkillError {
    SkillError::Fetch {
        from: redact_url(source),
        message: redact_url(&message.into()),
    }
}

/// Clone `url` into `dest` and check out `git_ref` (default: HEAD); the
/// package is `subpath` of it. On error `dest` may hold a partial fetch:
/// the caller removes it.
pub(crate) fn fetch_git(
    url: &str,
    git_ref: Option<&str>,
    subpath: &str,
    dest: &Path,
    how: &GitFetch<'_>,
) -> Result<Fetched, SkillError> {
    let dest_str = dest.to_string_lossy();
    let watched = Some((dest, how.max_bytes));
    git(
        &["clone", "--quiet", "--no-checkout", "--", url, &dest_str],
        None,
        how,
        watched,
    )
    .map_err(|m| fetch_err(url, m))?;
    let target = git_ref.unwrap_or("HEAD");
    let local = GitFetch { env: &[], ..*how };
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
        &local,
        watched,
    )
    .map_err(|m| fetch_err(url, format!("ref {target:?}: {m}")))?;
    // The last writes may have come after the last measurement.
    let size = dir_size(dest);
    if size > how.max_bytes {
        return Err(fetch_err(url, too_large(how.max_bytes)));
    }
    let commit =
        git(&["rev-parse", "HEAD"], Some(dest), &local, None).map_err(|m| fetch_err(url, m))?;
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

fn too_large(max: u64) -> String {
    format!(
        "the repository is larger than the limit of {max} bytes (--skill-max-bytes, .git included); the fetch was stopped"
    )
}

/// The configuration every git run gets on its command line (not secret):
/// nothing from the package or the host can run a command.
const LOCKED_DOWN: [&str; 8] = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "submodule.recurse=false",
    "-c",
    "core.sshCommand=ssh -o BatchMode=yes",
];

/// Run git; its stdout, or a message with its stderr. This is the runner's
/// own git (fetching skill packages, with the runner's token), not an agent
/// process: it runs outside any thread's sandbox, on the blocking pool.
/// With `watch`, the directory is measured while git runs and git is
/// killed once it holds more than the limit.
pub(crate) fn git(
    args: &[&str],
    cwd: Option<&Path>,
    how: &GitFetch<'_>,
    watch: Option<(&Path, u64)>,
) -> Result<String, String> {
    let protocol = how.transport.git_name();
    let mut cmd = Command::new("git");
    cmd.args(LOCKED_DOWN)
        .arg("-c")
        .arg("protocol.allow=never")
        .arg("-c")
        .arg(format!("protocol.{protocol}.allow=always"))
        .args(args)
        .envs(how.env.iter().map(|(k, v)| (k, v)))
        .env("GIT_ALLOW_PROTOCOL", protocol)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env("SSH_ASKPASS", "true")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: a kill reaches the helpers it starts
        // (git-remote-https, index-pack) too.
        .process_group(0);
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
    let mut measured = Instant::now();
    let what = args.first().copied().unwrap_or("");
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > GIT_TIMEOUT => {
                return stop(&mut child, format!("git {what} timed out"));
            }
            Ok(None) => {
                if let Some((dir, max)) = watch
                    && measured.elapsed() >= MEASURE_EVERY
                {
                    measured = Instant::now();
                    if dir_size(dir) > max {
                        return stop(&mut child, too_large(max));
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
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

/// Kills the process group `child` leads (git and every helper it
/// started), reaps it, and fails with `why`.
fn stop(child: &mut std::process::Child, why: String) -> Result<String, String> {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals that process group;
        // no memory is touched. The group is git's own (process_group(0)).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.wait();
    Err(why)
}

/// The bytes of every file under `dir` (symlinks not followed; entries
/// that vanish while it walks count nothing).
pub(crate) fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0u64;
    for entry in entries.flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        total = total.saturating_add(if meta.is_dir() {
            dir_size(&entry.path())
        } else {
            meta.len()
        });
    }
    total
}

fn read_all<R: Read>(pipe: Option<&mut R>) -> String {
    let mut text = String::new();
    if let Some(p) = pipe {
        let _ = p.read_to_string(&mut text);
    }
    text
}

#[cfg(test)]
mod tests;
