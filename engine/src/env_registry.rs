//! Extra environment for tool processes, registered by `Initialize
//! { workspace, env }` for every session whose workspace is at or under
//! that directory (the longest registered prefix wins). The runner uses it
//! to hand its `GIT_CONFIG_*` credentials to `bash`. Values are secrets as
//! far as this module knows: they are never logged or shown in Debug.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// At most this many workspaces are registered. A workspace's entry goes
/// when its last session is destroyed ([`EnvRegistry::unregister`]); past
/// the bound the oldest goes first, with a warning (its sessions' tools
/// would lose the env, e.g. their git credentials).
const MAX_ENTRIES: usize = 8192;

/// Environment variables, name and value.
type Env = Vec<(String, String)>;

#[derive(Default)]
pub struct EnvRegistry {
    entries: RwLock<Vec<(PathBuf, Env)>>,
}

impl std::fmt::Debug for EnvRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("EnvRegistry")
            .field(
                "workspaces",
                &entries.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl EnvRegistry {
    /// Registers (or replaces) the env of `workspace` (canonical).
    pub fn register(&self, workspace: PathBuf, mut env: Env) {
        env.sort();
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(p, _)| p != &workspace);
        if entries.len() >= MAX_ENTRIES {
            let (evicted, _) = entries.remove(0);
            tracing::warn!(
                workspace = %evicted.display(),
                limit = MAX_ENTRIES,
                "Initialize registry full: the oldest workspace's env was forgotten"
            );
        }
        entries.push((workspace, env));
    }

    /// Forgets the env registered for exactly `workspace`.
    pub fn unregister(&self, workspace: &Path) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(p, _)| p != workspace);
    }

    /// The env for a session working in `workspace`.
    pub fn env_for(&self, workspace: &Path) -> Env {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .filter(|(prefix, _)| workspace.starts_with(prefix))
            .max_by_key(|(prefix, _)| prefix.components().count())
            .map(|(_, env)| env.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let reg = EnvRegistry::default();
        reg.register("/w".into(), vec![("A".into(), "outer".into())]);
        reg.register("/w/t1".into(), vec![("A".into(), "inner".into())]);
        assert_eq!(reg.env_for(Path::new("/w/t1/sub"))[0].1, "inner");
        assert_eq!(reg.env_for(Path::new("/w/t2"))[0].1, "outer");
        assert!(reg.env_for(Path::new("/w2")).is_empty());
        assert!(!format!("{reg:?}").contains("inner"));
        reg.unregister(Path::new("/w/t1"));
        assert_eq!(reg.env_for(Path::new("/w/t1/sub"))[0].1, "outer");
    }
}
