//! What the launcher applied to a launch, and what it could not, in a form
//! status/doctor and logs can show.

use std::fmt;
use std::path::PathBuf;

use crate::mode::Mode;
use crate::policy::AgentUser;

/// What was applied to one launch (identical for every launch of a thread
/// except for the environment names and the installation granted). A launch either gets all of it or
/// fails: the child aborts before exec when a step fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The mode.
    pub mode: Mode,
    /// The Landlock ABI of the applied ruleset; `None`: no Landlock.
    pub landlock_abi: Option<i32>,
    /// Signals and abstract unix sockets scoped to the process's domain.
    pub scoped: bool,
    /// TCP bind/connect restricted to the configured ports.
    pub net_restricted: bool,
    /// `no_new_privs` set.
    pub no_new_privs: bool,
    /// Every capability dropped (bounding, permitted, effective,
    /// inheritable, ambient).
    pub capabilities_dropped: bool,
    /// The uid/gid the process runs as, when switched.
    pub run_as: Option<AgentUser>,
    /// (name, value) of the rlimits set.
    pub rlimits: Vec<(&'static str, u64)>,
    /// The thread's cgroup v2, when the process joins one.
    pub cgroup: Option<PathBuf>,
    /// The thread's cgroup in the v1 `pids` hierarchy, when the process
    /// joins one (where v2 offers no `pids` controller or no subtree).
    pub pids_cgroup: Option<PathBuf>,
    /// Cgroup limits written (`memory.max=…`, `pids.max=…`; v2 and v1).
    pub cgroup_limits: Vec<String>,
    /// Names of the environment variables the process starts with.
    pub env: Vec<String>,
    /// The program's installation, opened read-only for this launch (and
    /// what it starts) because the thread's rules do not cover it.
    pub granted: Vec<PathBuf>,
    /// What could not be applied, one line each.
    pub missing: Vec<String>,
}

impl Applied {
    /// True when Landlock confines the process.
    pub fn landlocked(&self) -> bool {
        self.landlock_abi.is_some()
    }
}

impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sandbox {}", self.mode)?;
        match self.landlock_abi {
            Some(abi) => write!(f, "; landlock ABI {abi}")?,
            None => write!(f, "; no landlock")?,
        }
        if self.scoped {
            write!(f, " +scope")?;
        }
        if self.net_restricted {
            write!(f, " +tcp")?;
        }
        if self.capabilities_dropped {
            write!(f, "; no capabilities")?;
        }
        if let Some(u) = self.run_as {
            write!(f, "; uid {}:{}", u.uid, u.gid)?;
        }
        if let Some(cg) = &self.cgroup {
            write!(f, "; cgroup {}", cg.display())?;
        }
        if let Some(cg) = &self.pids_cgroup {
            write!(f, "; pids cgroup {}", cg.display())?;
        }
        if !self.cgroup_limits.is_empty() {
            write!(f, " ({})", self.cgroup_limits.join(", "))?;
        }
        if !self.granted.is_empty() {
            let granted: Vec<String> = self
                .granted
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            write!(f, "; granted {}", granted.join(", "))?;
        }
        if !self.missing.is_empty() {
            write!(f, "; missing: {}", self.missing.join("; "))?;
        }
        Ok(())
    }
}

/// The launcher's state for status/doctor and the metric: the mode, what
/// the host offers, and what best-effort could not apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LauncherStatus {
    /// The mode.
    pub mode: Mode,
    /// The host probe, one fact a line.
    pub host: Vec<String>,
    /// What will not be applied to any thread on this host.
    pub missing: Vec<String>,
}
