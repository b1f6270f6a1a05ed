//! One launch's Landlock ruleset: the thread's, opened to the installation
//! of the program the launch starts ([`crate::installs`]) when the
//! thread's rules do not cover it already, and the error that names what
//! the sandbox still refused.
//!
//! Landlock layers only narrow, so a grant cannot be added on top of the
//! thread's ruleset: a launch that needs one gets a ruleset of its own, the
//! thread's rules plus the installation roots (cached by root set). A root
//! is never granted when it is `/`, the runner's HOME or an ancestor of it,
//! holds a protected path, or lies inside one: the error of a launch that
//! then fails says so.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::LaunchError;
use crate::installs::{Installation, installation, lookup};
use crate::landlock_rules::{LandlockRequest, build};
use crate::policy::{DEVICE_FILES, NetRules, canonical};

/// Distinct root sets whose ruleset is kept per thread.
const CACHED_RULESETS: usize = 32;

/// What the thread's ruleset was built from.
#[derive(Debug, Clone)]
pub(crate) struct RulesetInputs {
    pub abi: i32,
    pub read_write: Vec<PathBuf>,
    pub read_only: Vec<(PathBuf, bool)>,
    pub net: Option<NetRules>,
    pub scope: bool,
}

/// A thread's per-launch grants.
#[derive(Debug)]
pub(crate) struct Grants {
    inputs: RulesetInputs,
    /// Canonical paths the thread's rules already open.
    covered: Vec<PathBuf>,
    /// Canonical protected paths.
    protected: Vec<PathBuf>,
    /// Canonical directories holding other threads' directories.
    shared: Vec<PathBuf>,
    /// The runner's HOME, canonical.
    home: Option<PathBuf>,
    rulesets: Mutex<HashMap<Vec<PathBuf>, Arc<OwnedFd>>>,
}

/// What one launch gets.
#[derive(Debug, Default)]
pub(crate) struct ForLaunch {
    /// A ruleset of its own (`None`: the thread's).
    pub ruleset: Option<Arc<OwnedFd>>,
    /// The program's installation.
    pub installation: Installation,
    /// The roots opened for this launch.
    pub granted: Vec<PathBuf>,
    /// Roots not opened, and why.
    pub refused: Vec<(PathBuf, String)>,
}

impl Grants {
    pub(crate) fn new(inputs: RulesetInputs, protected: &[PathBuf], shared: &[PathBuf]) -> Self {
        let covered = inputs
            .read_write
            .iter()
            .chain(inputs.read_only.iter().map(|(p, _)| p))
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        Grants {
            inputs,
            covered,
            protected: protected.iter().map(|p| canonical(p)).collect(),
            shared: shared.iter().map(|p| canonical(p)).collect(),
            home: std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|p| canonical(&p)),
            rulesets: Mutex::new(HashMap::new()),
        }
    }

    fn covered(&self, path: &Path, granted: &[PathBuf]) -> bool {
        self.covered
            .iter()
            .chain(granted)
            .any(|c| path.starts_with(c))
    }

    /// Why `root` may not be opened, if it may not.
    fn refusal(&self, root: &Path) -> Option<String> {
        if root.parent().is_none() {
            return Some("it is the root directory".to_owned());
        }
        if self.home.as_deref().is_some_and(|h| h.starts_with(root)) {
            return Some("it holds the runner's HOME".to_owned());
        }
        let protected = self.protected.iter().find_map(|p| {
            if p.starts_with(root) {
                Some(format!("it holds the protected path {}", p.display()))
            } else if root.starts_with(p) {
                Some(format!("it lies inside the protected path {}", p.display()))
            } else {
                None
            }
        });
        // The thread's own directories are covered before this is asked.
        protected.or_else(|| {
            self.shared.iter().find_map(|s| {
                (s.starts_with(root) || root.starts_with(s)).then(|| {
                    format!(
                        "it is in or holds {}, other threads' directories",
                        s.display()
                    )
                })
            })
        })
    }

    /// The ruleset for a launch of `program` with the child's `PATH`.
    pub(crate) fn for_launch(
        &self,
        program: &Path,
        path_var: Option<&OsStr>,
        cwd: &Path,
    ) -> ForLaunch {
        let Some(found) = lookup(program, path_var, cwd) else {
            return ForLaunch::default();
        };
        let installation = installation(&found, path_var, cwd);
        let mut out = ForLaunch {
            installation,
            ..ForLaunch::default()
        };
        for root in &out.installation.roots {
            if self.covered(root, &out.granted) {
                continue;
            }
            match self.refusal(root) {
                Some(why) => out.refused.push((root.clone(), why)),
                None => out.granted.push(root.clone()),
            }
        }
        if !out.refused.is_empty() {
            tracing::warn!(program = %program.display(), refused = ?out.refused, "the sandbox does not open part of a program's installation");
        }
        if !out.granted.is_empty() {
            out.ruleset = self.ruleset(&out.granted);
        }
        out
    }

    /// The thread's rules plus `roots` (cached); `None` (the thread's own
    /// ruleset) when it cannot be built.
    fn ruleset(&self, roots: &[PathBuf]) -> Option<Arc<OwnedFd>> {
        let mut cache = self.rulesets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fd) = cache.get(roots) {
            return Some(fd.clone());
        }
        let read_only: Vec<(PathBuf, bool)> = self
            .inputs
            .read_only
            .iter()
            .cloned()
            .chain(roots.iter().map(|r| (r.clone(), true)))
            .collect();
        let req = LandlockRequest {
            abi: self.inputs.abi,
            read_write: &self.inputs.read_write,
            read_only: &read_only,
            devices: DEVICE_FILES,
            net: self.inputs.net.as_ref(),
            scope: self.inputs.scope,
        };
        match build(&req, &mut Vec::new()) {
            Ok(plan) => {
                if cache.len() >= CACHED_RULESETS {
                    cache.clear();
                }
                cache.insert(roots.to_vec(), plan.fd.clone());
                Some(plan.fd)
            }
            Err(e) => {
                tracing::warn!(error = %e, roots = ?roots, "a launch's ruleset could not be built; it gets the thread's");
                None
            }
        }
    }

    /// The error of a spawn of `program` that failed with `e`: for a
    /// refused exec (EACCES, EPERM) it names the path the sandbox does not
    /// open and the setting that opens it.
    pub(crate) fn spawn_error(
        &self,
        program: &str,
        launch: &ForLaunch,
        e: io::Error,
    ) -> LaunchError {
        let refused =
            e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::EPERM);
        // A step before exec that failed (the direct launch's child says
        // which) is no refused exec.
        let text = e.to_string();
        let before_exec = ["standard streams:", "working directory:", "sandbox:"]
            .iter()
            .any(|step| text.starts_with(step));
        if !refused || before_exec {
            return LaunchError::io(format!("spawn {program}"), e);
        }
        let chain = &launch.installation.chain;
        let Some(path) = chain
            .iter()
            .find(|p| !self.covered(p, &launch.granted))
            .or(chain.first())
            .cloned()
        else {
            return LaunchError::io(format!("spawn {program}"), e);
        };
        let root = launch
            .installation
            .roots
            .iter()
            .filter(|r| path.starts_with(r))
            .min_by_key(|r| r.components().count())
            .cloned()
            .unwrap_or_else(|| path.clone());
        let advice = if self.covered(&path, &launch.granted) {
            format!(
                "the agent sandbox opens {}; its own permissions refuse it, or what it loads (an ELF interpreter, libraries) lies outside what the sandbox opens, which `--sandbox-read-only DIR` opens",
                path.display()
            )
        } else if let Some((_, why)) = launch.refused.iter().find(|(r, _)| *r == root) {
            format!(
                "the agent sandbox does not open {} ({} is not granted: {why}; neither is it with `--sandbox-read-only`); install it elsewhere",
                path.display(),
                root.display()
            )
        } else {
            let dir = if root.is_dir() {
                root.as_path()
            } else {
                root.parent().unwrap_or(&root)
            };
            format!(
                "the agent sandbox does not open {}; `--sandbox-read-only {}` allows it",
                path.display(),
                dir.display()
            )
        };
        LaunchError::Denied {
            program: program.to_owned(),
            advice,
            source: e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(read_only: &[&Path], protected: &[PathBuf]) -> Grants {
        grants_sharing(read_only, protected, &[])
    }

    fn grants_sharing(read_only: &[&Path], protected: &[PathBuf], shared: &[PathBuf]) -> Grants {
        let inputs = RulesetInputs {
            abi: 1,
            read_write: Vec::new(),
            read_only: read_only.iter().map(|p| (p.to_path_buf(), true)).collect(),
            net: None,
            scope: false,
        };
        Grants::new(inputs, protected, shared)
    }

    #[test]
    fn nothing_of_other_threads_directories_is_opened() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let workspaces = root.join("workspaces");
        let g = grants_sharing(&[Path::new("/usr")], &[], std::slice::from_ref(&workspaces));
        let other = workspaces.join("agent/threads/other/.venv");
        assert!(g.refusal(&other).unwrap().contains("other threads"));
        assert!(g.refusal(&root).unwrap().contains("other threads"));
        assert_eq!(g.refusal(&root.join("tools")), None);
    }

    #[test]
    fn roots_holding_or_inside_protected_paths_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let g = grants(&[Path::new("/usr")], &[root.join("state")]);
        assert!(g.refusal(Path::new("/")).is_some());
        assert!(
            g.refusal(&root)
                .unwrap()
                .contains("holds the protected path")
        );
        assert!(g.refusal(&root.join("state/x")).unwrap().contains("inside"));
        assert_eq!(g.refusal(&root.join("tools")), None);
        if let Some(home) = &g.home {
            assert!(g.refusal(home).is_some());
        }
        assert!(g.covered(Path::new("/usr/bin/env"), &[]));
    }

    #[test]
    fn a_refused_exec_names_the_path_and_the_setting() {
        let d = tempfile::tempdir().unwrap();
        let tool = d.path().canonicalize().unwrap().join("opt/tool");
        let g = grants(&[Path::new("/usr")], &[]);
        let launch = ForLaunch {
            installation: Installation {
                chain: vec![tool.clone()],
                roots: vec![tool.clone()],
            },
            ..ForLaunch::default()
        };
        let e = io::Error::from_raw_os_error(libc::EACCES);
        let msg = g.spawn_error("tool", &launch, e).to_string();
        assert!(msg.contains(&tool.display().to_string()), "{msg}");
        assert!(msg.contains("--sandbox-read-only"), "{msg}");
        let e = io::Error::from_raw_os_error(libc::ENOENT);
        assert!(
            !g.spawn_error("tool", &launch, e)
                .to_string()
                .contains("--sandbox")
        );
    }
}
