//! Which sandbox a session's processes (the `bash` tool) are launched in.
//!
//! Every process the engine starts goes through `agent-launcher`:
//! - Embedded in the runner, the runner registers each thread's own
//!   [`ThreadSandbox`] for the thread's workspace ([`Sandboxes::register`]),
//!   so `bash` runs in the thread's sandbox, with the thread's HOME and
//!   TMPDIR, and the runner's kill paths (interrupt, delete, shutdown) reach
//!   it. Such an engine is built with [`EngineLauncher::RegisteredOnly`]: a
//!   workspace nobody registered gets no shell at all.
//! - Standalone (`code-agent serve`), the engine owns a [`Launcher`] and
//!   makes one sandbox per workspace the first time a tool needs it, with a
//!   private HOME and TMPDIR of its own under `<state dir>/sandboxes/`
//!   (never a directory a client names: a client's `HOME` in `Initialize`
//!   is passed to the process, not created or chmod-ed).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use agent_launcher::{Launcher, LauncherConfig, Mode, ThreadSandbox, ThreadSpec};
use anyhow::Context as _;

/// Where the engine's sandboxes come from.
#[derive(Debug, Clone)]
pub enum EngineLauncher {
    /// The engine builds its own launcher at start in `mode`: the state
    /// dir and `protected` (the secret files the server read) hidden, the
    /// language servers' directories read-only, no cgroups (standalone
    /// `code-agent serve --sandbox MODE`).
    Own {
        /// How strictly.
        mode: Mode,
        /// Paths besides the state dir no sandbox shows.
        protected: Vec<PathBuf>,
        /// More directories every sandbox shows read-only
        /// (`--sandbox-read-only`).
        read_only: Vec<PathBuf>,
    },
    /// The engine makes its own sandboxes with this launcher.
    Given(Arc<Launcher>),
    /// Only workspaces the embedder registered get a sandbox; tools that
    /// start processes are refused anywhere else (the runner's embedded
    /// engine).
    RegisteredOnly,
}

impl Default for EngineLauncher {
    /// An own launcher in best-effort mode.
    fn default() -> Self {
        Self::Own {
            mode: Mode::BestEffort,
            protected: Vec::new(),
            read_only: Vec::new(),
        }
    }
}

/// The engine's sandboxes, by canonical workspace (a cheap handle).
#[derive(Debug, Clone)]
pub struct Sandboxes {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    launcher: Option<Arc<Launcher>>,
    /// Where own sandboxes get their HOME and TMPDIR.
    private_root: PathBuf,
    registered: RwLock<HashMap<PathBuf, Arc<ThreadSandbox>>>,
    own: RwLock<HashMap<PathBuf, Arc<ThreadSandbox>>>,
}

impl Sandboxes {
    /// The sandboxes of an engine with `state_dir` (its own sandboxes keep
    /// their private dirs under `<state_dir>/sandboxes/`, or a per-user
    /// directory under the system temp dir without one).
    /// `read_only`: extra directories the engine's own sandboxes show
    /// read-only (language servers' install dirs).
    pub(crate) fn new(
        launcher: &EngineLauncher,
        state_dir: Option<&Path>,
        read_only: &[PathBuf],
    ) -> anyhow::Result<Self> {
        let private_root = match state_dir {
            Some(dir) => dir.join("sandboxes"),
            // SAFETY: getuid has no preconditions.
            None => std::env::temp_dir().join(format!("code-agent-sandboxes-{}", unsafe {
                libc::getuid()
            })),
        };
        let launcher = match launcher {
            EngineLauncher::Own {
                mode,
                protected,
                read_only: operator_read_only,
            } => {
                let mut config = LauncherConfig::new(*mode, "code-agent");
                config.cgroups = false;
                config.protected = state_dir
                    .map(Path::to_path_buf)
                    .into_iter()
                    .chain(protected.iter().cloned())
                    .collect();
                config.read_only.extend(read_only.iter().cloned());
                config.read_only.extend(operator_read_only.iter().cloned());
                let launcher =
                    Launcher::new(config).with_context(|| format!("the {mode} bash sandbox"))?;
                let status = launcher.status();
                if !status.missing.is_empty() {
                    tracing::warn!(%mode, missing = %status.missing.join("; "), "bash sandbox: not everything could be applied on this host");
                }
                Some(Arc::new(launcher))
            }
            EngineLauncher::Given(launcher) => Some(launcher.clone()),
            EngineLauncher::RegisteredOnly => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                launcher,
                private_root,
                registered: RwLock::default(),
                own: RwLock::default(),
            }),
        })
    }

    /// Processes of sessions working in `workspace` (or below it) are
    /// launched in `sandbox` (the embedder's, e.g. the runner's thread).
    pub fn register(&self, workspace: &Path, sandbox: Arc<ThreadSandbox>) {
        let key = canonical(workspace);
        self.inner
            .registered
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, sandbox);
    }

    /// Forgets the sandbox registered for `workspace` (the embedder kills
    /// its processes itself).
    pub fn forget(&self, workspace: &Path) {
        let key = canonical(workspace);
        self.inner
            .registered
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }

    /// The sandbox for a session working in `workspace` (canonical): the
    /// registered one whose workspace contains it, else the engine's own
    /// (made on first use). The error says why no process may start.
    pub fn for_workspace(&self, workspace: &Path) -> Result<Arc<ThreadSandbox>, String> {
        {
            let registered = self
                .inner
                .registered
                .read()
                .unwrap_or_else(|e| e.into_inner());
            let found = registered
                .iter()
                .filter(|(prefix, _)| workspace.starts_with(prefix))
                .max_by_key(|(prefix, _)| prefix.components().count());
            if let Some((_, sandbox)) = found {
                return Ok(sandbox.clone());
            }
        }
        let Some(launcher) = &self.inner.launcher else {
            return Err(format!(
                "no sandbox is registered for workspace {}: this engine starts processes only in the sandboxes its embedder gives it",
                workspace.display()
            ));
        };
        // Every tool call asks: most find their sandbox under the read lock.
        if let Some(sandbox) = self
            .inner
            .own
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(workspace)
        {
            return Ok(sandbox.clone());
        }
        let mut own = self.inner.own.write().unwrap_or_else(|e| e.into_inner());
        if let Some(sandbox) = own.get(workspace) {
            return Ok(sandbox.clone());
        }
        let private = self.inner.private_root.join(key_of(workspace));
        let spec = ThreadSpec {
            workspace: workspace.to_path_buf(),
            home_dir: private.join("home"),
            tmp_dir: private.join("tmp"),
            ..ThreadSpec::default()
        };
        let sandbox = launcher
            .thread(spec)
            .map(Arc::new)
            .map_err(|e| format!("cannot sandbox workspace {}: {e}", workspace.display()))?;
        tracing::info!(workspace = %workspace.display(), applied = %sandbox.applied(), "bash sandbox prepared");
        own.insert(workspace.to_path_buf(), sandbox.clone());
        Ok(sandbox)
    }

    /// Kills every process of the engine's own sandboxes (shutdown).
    pub fn close_own(&self) {
        let own: Vec<Arc<ThreadSandbox>> = self
            .inner
            .own
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, s)| s)
            .collect();
        for sandbox in own {
            sandbox.close();
        }
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// A directory name for `workspace`: its last component plus a hash of the
/// whole path (distinct workspaces never share a HOME).
fn key_of(workspace: &Path) -> String {
    // SHA-256, not std's DefaultHasher: a rebuilt engine must find the same
    // HOME for the same workspace.
    use std::os::unix::ffi::OsStrExt;
    let digest = ring::digest::digest(&ring::digest::SHA256, workspace.as_os_str().as_bytes());
    let hash: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let name: String = workspace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .take(32)
        .collect();
    format!("{name}-{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_only_refuses_unknown_workspaces_and_finds_registered_ones() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let sandboxes = Sandboxes::new(&EngineLauncher::RegisteredOnly, None, &[]).unwrap();
        let err = sandboxes.for_workspace(&ws).unwrap_err();
        assert!(err.contains("no sandbox is registered"), "{err}");

        let config = LauncherConfig {
            cgroups: false,
            ..LauncherConfig::new(Mode::Off, "engine-test")
        };
        let launcher = Launcher::new(config).unwrap();
        let sandbox = Arc::new(
            launcher
                .thread(ThreadSpec {
                    workspace: ws.clone(),
                    home_dir: dir.path().join("home"),
                    tmp_dir: dir.path().join("tmp"),
                    ..ThreadSpec::default()
                })
                .unwrap(),
        );
        sandboxes.register(&ws, sandbox.clone());
        let found = sandboxes.for_workspace(&ws.join("sub")).unwrap();
        assert_eq!(found.tag(), sandbox.tag());
        sandboxes.forget(&ws);
        assert!(sandboxes.for_workspace(&ws).is_err());
    }
}
