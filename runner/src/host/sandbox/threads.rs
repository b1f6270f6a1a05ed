//! Handing out sandboxes: each thread's (and the SDK probe's), made once
//! after the start-up sweep, with its directories prepared and owned by
//! the agent uid when one is set.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};

use agent_launcher::{ThreadSandbox, ThreadSpec};
use sdk_adapter::Sandbox;

use crate::host::workspace::Workspaces;

use super::AgentSandboxes;
use super::access::thread_package_skills;

/// The id under which the SDK probe sandbox (codex `describe`) is kept; not
/// a valid thread id, so never confused with one.
const PROBE: &str = ".sdk-probe";

impl AgentSandboxes {
    /// The sandbox of `thread_id` of `agent_id`, made on first use: its
    /// workspace (must exist), HOME and TMPDIR under the thread's private
    /// dir (0700, owned by the agent uid when one is set), the agent's
    /// skills read-only. Blocking (file system, cgroupfs).
    pub fn thread(&self, workspaces: &Workspaces, agent_id: &str, thread_id: &str) -> Sandbox {
        self.made_once(
            thread_id,
            "thread",
            workspaces.thread_dir(agent_id, thread_id),
            &workspaces.thread_private(agent_id, thread_id),
            |workspace| {
                let mut skills = vec![workspaces.agent_skills(agent_id)];
                skills.extend(thread_package_skills(workspaces, &workspace));
                ThreadSpec {
                    workspace,
                    home_dir: workspaces.thread_home(agent_id, thread_id),
                    tmp_dir: workspaces.thread_tmp(agent_id, thread_id),
                    skills,
                    read_write: self.sdk_homes.clone(),
                    ..ThreadSpec::default()
                }
            },
        )
    }

    /// A sandbox for processes that belong to no thread (the codex
    /// `describe` probe), under `<workspace root>/.sdk-probe/`.
    pub fn probe(&self, workspaces: &Workspaces) -> Sandbox {
        let root = workspaces.root().join(PROBE);
        self.made_once(
            PROBE,
            "probe",
            root.join("workspace"),
            &root.join("private"),
            |workspace| ThreadSpec {
                workspace,
                home_dir: root.join("private/home"),
                tmp_dir: root.join("private/tmp"),
                read_write: self.probe_homes.clone(),
                ..ThreadSpec::default()
            },
        )
    }

    /// The sandbox kept under `key`, made on first use (after the sweep):
    /// `workspace` and `private` prepared ([`Self::own_dirs`]), then the
    /// launcher's sandbox for `spec(workspace)`. `what` names it in errors.
    fn made_once(
        &self,
        key: &str,
        what: &str,
        workspace: PathBuf,
        private: &Path,
        spec: impl FnOnce(PathBuf) -> ThreadSpec,
    ) -> Sandbox {
        self.swept();
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sandbox) = threads.by_id.get(key) {
            return Sandbox::ready(sandbox.clone());
        }
        if threads.closed {
            return Sandbox::refused(format!(
                "the runner is shutting down: no new {what} sandbox"
            ));
        }
        let launcher = match &self.launcher {
            Ok(launcher) => launcher,
            Err(why) => return Sandbox::refused(why.clone()),
        };
        if let Err(e) = self.own_dirs(&workspace, private) {
            return Sandbox::refused(format!("preparing the {what}'s directories: {e}"));
        }
        match launcher.thread(spec(workspace)) {
            Ok(sandbox) => {
                tracing::debug!(thread_id = %key, applied = %sandbox.applied(), "{what} sandbox ready");
                let sandbox = Arc::new(sandbox);
                threads.by_id.insert(key.to_owned(), sandbox.clone());
                Sandbox::ready(sandbox)
            }
            Err(e) => {
                tracing::error!(thread_id = %key, error = %e, "{what} sandbox refused");
                Sandbox::refused(e.to_string())
            }
        }
    }

    /// Creates `workspace` and `private` (0700); with an agent uid both
    /// become the agent's.
    fn own_dirs(&self, workspace: &Path, private: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(workspace)?;
        std::fs::create_dir_all(private)?;
        std::fs::set_permissions(private, std::fs::Permissions::from_mode(0o700))?;
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::fs::MetadataExt;
            for dir in [workspace, private] {
                // Handed over once, when the runner made it: a thread
                // re-opened after a restart is the agent's already, and
                // walking every file of every workspace at start-up is not
                // needed.
                if std::fs::symlink_metadata(dir)?.uid() != uid {
                    chown_tree(dir, uid, gid)?;
                }
            }
        }
        Ok(())
    }

    /// The process tag of `thread_id`'s sandbox, if it has one now.
    pub fn thread_tag(&self, thread_id: &str) -> Option<String> {
        self.get(thread_id).map(|s| s.tag().to_owned())
    }

    /// The sandbox of `thread_id`, if it has one now.
    pub(super) fn get(&self, thread_id: &str) -> Option<Arc<ThreadSandbox>> {
        self.threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_id
            .get(thread_id)
            .cloned()
    }
}

/// `chown -R uid:gid dir` without following symlinks.
fn chown_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(dir)?.is_dir() {
        for entry in std::fs::read_dir(dir)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}
