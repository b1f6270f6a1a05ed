//! What a thread may touch: its writable directories, the read-only system
//! and toolchain paths, optional TCP rules, and the uid agents run as.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::LaunchError;

/// System paths every agent process may read and execute (when present).
pub const DEFAULT_SYSTEM_READ_ONLY: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/proc",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
    "/run/systemd/resolve",
];

/// Device files agent processes may read and write.
pub(crate) const DEVICE_FILES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// The directories of one thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadSpec {
    /// The thread's workspace (read-write; the default working directory).
    pub workspace: PathBuf,
    /// The thread's TMPDIR (read-write; created 0700 if missing).
    pub tmp_dir: PathBuf,
    /// The thread's HOME (read-write; created 0700 if missing).
    pub home_dir: PathBuf,
    /// More read-write directories (caches the operator allows).
    pub read_write: Vec<PathBuf>,
    /// The thread's skills (read-only).
    pub skills: Vec<PathBuf>,
    /// More read-only directories for this thread only.
    pub read_only: Vec<PathBuf>,
}

/// A uid (and gid) agent processes run as, `--agent-uid UID[:GID]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentUser {
    /// The uid.
    pub uid: u32,
    /// The gid (defaults to the uid).
    pub gid: u32,
}

impl FromStr for AgentUser {
    type Err = LaunchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || LaunchError::Policy(format!("--agent-uid {s:?}: expected UID[:GID]"));
        let (u, g) = match s.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (s, None),
        };
        let uid: u32 = u.parse().map_err(|_| bad())?;
        let gid: u32 = match g {
            Some(g) => g.parse().map_err(|_| bad())?,
            None => uid,
        };
        if uid == 0 {
            return Err(LaunchError::Policy(
                "--agent-uid 0 would run agents as root".to_string(),
            ));
        }
        Ok(AgentUser { uid, gid })
    }
}

/// TCP ports agent processes may bind and connect to (Landlock ABI >= 4).
/// When configured, every other port is denied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetRules {
    /// Ports that may be bound.
    pub bind: Vec<u16>,
    /// Ports that may be connected to.
    pub connect: Vec<u16>,
}

/// Canonical form of `p` when it exists, else `p` itself.
pub(crate) fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `dir` as read-only rules that leave out every protected path inside it:
/// `dir` itself when none lies inside, else its entries (recursively split
/// the same way) minus the protected ones. So a system directory such as
/// `/etc` stays readable while `/etc/agent-runner/secret` does not.
pub(crate) fn split_around_protected(dir: &Path, protected: &[PathBuf]) -> Vec<PathBuf> {
    let canon = canonical(dir);
    let inside: Vec<PathBuf> = protected
        .iter()
        .map(|p| canonical(p))
        .filter(|p| p.starts_with(&canon))
        .collect();
    if inside.is_empty() {
        return vec![dir.to_path_buf()];
    }
    if inside.contains(&canon) {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(&canon) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        out.extend(split_around_protected(&entry.path(), &inside));
    }
    out.sort();
    out
}

/// Refuses a policy that would expose a protected path: one equal to or
/// beneath a directory the sandbox opens.
pub(crate) fn check_protected(
    allowed: &[PathBuf],
    protected: &[PathBuf],
) -> Result<(), LaunchError> {
    for p in protected {
        let p = canonical(p);
        for a in allowed {
            let a = canonical(a);
            if p.starts_with(&a) {
                return Err(LaunchError::Policy(format!(
                    "protected path {} lies inside sandbox-visible {}",
                    p.display(),
                    a.display()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_agent_uid() {
        assert_eq!(
            "1000".parse::<AgentUser>().unwrap(),
            AgentUser {
                uid: 1000,
                gid: 1000
            }
        );
        assert_eq!(
            "1000:100".parse::<AgentUser>().unwrap(),
            AgentUser {
                uid: 1000,
                gid: 100
            }
        );
        assert!("0".parse::<AgentUser>().is_err());
        assert!("x:1".parse::<AgentUser>().is_err());
    }

    #[test]
    fn system_dirs_are_split_around_protected_paths() {
        let d = tempfile::tempdir().unwrap();
        let etc = d.path().canonicalize().unwrap().join("etc");
        std::fs::create_dir_all(etc.join("agent-runner")).unwrap();
        std::fs::create_dir_all(etc.join("ssl")).unwrap();
        std::fs::write(etc.join("hosts"), "").unwrap();
        std::fs::write(etc.join("agent-runner/secret"), "s").unwrap();
        std::fs::write(etc.join("agent-runner/other"), "").unwrap();
        let secret = etc.join("agent-runner/secret");
        let split = split_around_protected(&etc, std::slice::from_ref(&secret));
        assert_eq!(
            split,
            vec![
                etc.join("agent-runner/other"),
                etc.join("hosts"),
                etc.join("ssl")
            ]
        );
        check_protected(&split, &[secret]).unwrap();
        // Nothing protected inside: the directory itself.
        assert_eq!(split_around_protected(&etc, &[]), vec![etc.clone()]);
    }

    #[test]
    fn protected_paths_inside_allowed_dirs_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let ws = d.path().join("state/threads/a/ws");
        std::fs::create_dir_all(&ws).unwrap();
        // Workspace under the state dir is fine: only the workspace is open.
        check_protected(std::slice::from_ref(&ws), std::slice::from_ref(&state)).unwrap();
        // The state dir inside an open dir is not.
        assert!(check_protected(&[d.path().to_path_buf()], &[state]).is_err());
    }
}
