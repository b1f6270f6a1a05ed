//! Which cgroups hold a thread's processes, chosen once per launcher: the
//! delegated v2 subtree (tracking, `cgroup.kill`, the limits of the
//! controllers it offers) and, where that offers no `pids` controller or
//! there is no v2 subtree at all, the v1 `pids` hierarchy (`pids.max`, and
//! tracking too). Either one holds every process of the thread, `setsid`
//! and `env -i` ones included; without both, only the environment tag
//! finds them, which a process that clears its environment escapes — mode
//! `enforce` refuses that.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::cgroup::{CgroupLimits, CgroupProbe, CgroupRoot, LIMIT_CONTROLLERS, ThreadCgroup};
use crate::cgroup_v1::{PIDS, setup_pids_root};
use crate::error::LaunchError;
use crate::mode::Mode;
use crate::probe::HostProbe;
use crate::sandbox::LauncherConfig;

/// The launcher's cgroup roots.
#[derive(Clone, Debug, Default)]
pub(crate) struct CgroupRoots {
    /// `<own v2 cgroup>/<scope>`, where delegated.
    pub(crate) v2: Option<CgroupRoot>,
    /// `<own v1 pids cgroup>/<scope>`, where v2 cannot hold `pids.max` or
    /// is missing.
    pub(crate) pids_v1: Option<CgroupRoot>,
    /// The limits written to a thread's v2 cgroup (`pids.max` is not, when
    /// the v1 hierarchy holds it).
    v2_limits: CgroupLimits,
    /// `pids.max` of a thread's v1 cgroup.
    pids_max: Option<u64>,
    /// `LauncherConfig::cgroups`: off, a thread without cgroups is no news.
    enabled: bool,
}

/// What stands in the way of a cgroup, for messages.
fn or_none(why: Option<String>) -> String {
    why.unwrap_or_else(|| "not needed".to_string())
}

impl CgroupRoots {
    /// Sets up the roots the host allows (none when `config.cgroups` is
    /// off), noting in `missing` what is not applied. Mode `enforce` fails
    /// where no cgroup at all can hold a thread.
    pub(crate) fn setup(
        config: &LauncherConfig,
        probe: &HostProbe,
        missing: &mut Vec<String>,
    ) -> Result<Self, LaunchError> {
        let limits = config.cgroup_limits;
        let mut roots = CgroupRoots {
            v2_limits: limits,
            enabled: config.cgroups,
            ..CgroupRoots::default()
        };
        if !config.cgroups {
            return Ok(roots);
        }
        let mut v2_notes = Vec::new();
        let parent = match (&config.cgroup_parent, &probe.cgroup) {
            (Some(dir), _) => Ok(dir.clone()),
            (None, CgroupProbe::Available { dir, .. }) => Ok(dir.clone()),
            (None, CgroupProbe::Unavailable { reason }) => Err(reason.clone()),
        };
        let v2_why = match parent {
            Ok(parent) => {
                let wanted = limits.controllers();
                let wanted: Vec<&str> = LIMIT_CONTROLLERS
                    .iter()
                    .copied()
                    .filter(|c| wanted.contains(c))
                    .collect();
                match CgroupRoot::setup(&parent, &config.scope, &wanted) {
                    Ok((root, notes)) => {
                        v2_notes = notes;
                        roots.v2 = Some(root);
                        None
                    }
                    Err(e) => Some(e.to_string()),
                }
            }
            Err(reason) => Some(reason),
        };
        let v2_pids = roots
            .v2
            .as_ref()
            .is_some_and(|r| r.controllers().iter().any(|c| c == PIDS));
        let want_pids = limits.pids_max.is_some() && !v2_pids;
        let mut v1_why = None;
        if roots.v2.is_none() || want_pids {
            match &probe.pids_v1 {
                Ok(parent) => match setup_pids_root(parent, &config.scope) {
                    Ok(root) => roots.pids_v1 = Some(root),
                    Err(e) => v1_why = Some(e.to_string()),
                },
                Err(why) => v1_why = Some(why.clone()),
            }
        }
        if roots.pids_v1.is_some() {
            // The v1 hierarchy holds `pids.max`: not missing from v2.
            v2_notes.retain(|n| !n.starts_with("cgroup controller pids"));
            roots.v2_limits.pids_max = None;
            roots.pids_max = limits.pids_max;
        }
        missing.extend(v2_notes);
        match (&roots.v2, &roots.pids_v1) {
            (None, None) => {
                let why = format!(
                    "no delegated cgroup v2 subtree ({}) and no cgroup v1 pids hierarchy ({})",
                    or_none(v2_why),
                    or_none(v1_why)
                );
                if config.mode == Mode::Enforce {
                    return Err(LaunchError::Unavailable {
                        what: "cgroup process tracking",
                        why: format!(
                            "{why}; the environment tag alone misses a process that clears its environment"
                        ),
                    });
                }
                missing.push(format!(
                    "cgroup: {why}; processes are tracked by environment tag only (a process that clears its environment escapes the kill) and no cgroup limits apply"
                ));
            }
            (Some(_), None) if want_pids => missing.push(format!(
                "cgroup controller pids: no cgroup v1 pids hierarchy either ({})",
                or_none(v1_why)
            )),
            _ => {}
        }
        Ok(roots)
    }

    /// The roots in use (v2 first).
    pub(crate) fn roots(&self) -> Vec<&CgroupRoot> {
        self.v2.iter().chain(&self.pids_v1).collect()
    }

    /// Creates the cgroups of the thread tagged `tag` (named by its token)
    /// and writes their limits. Mode `enforce` fails when roots exist but
    /// neither cgroup could be made.
    pub(crate) fn thread(
        &self,
        tag: &str,
        mode: Mode,
        missing: &mut Vec<String>,
    ) -> Result<ThreadCgroups, LaunchError> {
        // The tag is `<scope>.<token>`; the cgroup is named by the token.
        let name = tag.rsplit('.').next().unwrap_or(tag);
        let mut out = ThreadCgroups::default();
        let mut failed = Vec::new();
        if let Some(root) = &self.v2 {
            match root.create_thread(name) {
                Ok(cg) => {
                    let (applied, not) = cg.apply_limits(&self.v2_limits, root.controllers());
                    out.limits.extend(applied);
                    missing.extend(not);
                    out.v2 = Some(cg);
                }
                Err(e) => failed.push(format!("thread cgroup: {e}")),
            }
        }
        if let Some(root) = &self.pids_v1 {
            match root.create_thread(name) {
                Ok(cg) => {
                    let pids = CgroupLimits {
                        memory_max: None,
                        pids_max: self.pids_max,
                        cpu_max: None,
                    };
                    let (applied, not) = cg.apply_limits(&pids, root.controllers());
                    out.limits.extend(applied);
                    missing.extend(not);
                    out.pids_v1 = Some(cg);
                }
                Err(e) => failed.push(format!("thread cgroup (v1 pids): {e}")),
            }
        }
        let none = out.v2.is_none() && out.pids_v1.is_none();
        if none && mode == Mode::Enforce && !self.roots().is_empty() {
            return Err(LaunchError::Unavailable {
                what: "thread cgroup",
                why: failed.join("; "),
            });
        }
        missing.extend(failed);
        if none && self.enabled && !(self.v2_limits.is_empty() && self.pids_max.is_none()) {
            missing.push("cgroup limits: no thread cgroup".to_string());
        }
        Ok(out)
    }
}

/// One thread's cgroups: either, both or none.
#[derive(Clone, Debug, Default)]
pub(crate) struct ThreadCgroups {
    pub(crate) v2: Option<ThreadCgroup>,
    pub(crate) pids_v1: Option<ThreadCgroup>,
    /// The limits written (`pids.max=1024`, …).
    pub(crate) limits: Vec<String>,
}

impl ThreadCgroups {
    fn each(&self) -> impl Iterator<Item = &ThreadCgroup> {
        self.v2.iter().chain(&self.pids_v1)
    }

    /// The cgroup directories.
    pub(crate) fn dirs(&self) -> Vec<PathBuf> {
        self.each().map(|cg| cg.dir().to_path_buf()).collect()
    }

    /// Kills every process in them: [`kill_counted`].
    pub(crate) fn kill(&self, wait: Duration) -> (usize, Vec<i32>) {
        kill_counted(&self.each().collect::<Vec<_>>(), wait)
    }

    /// Removes them (emptied by [`Self::kill`]).
    pub(crate) fn remove(&self) {
        for cg in self.each() {
            if let Err(e) = cg.remove() {
                tracing::warn!(cgroup = %cg.dir().display(), error = %e, "cannot remove thread cgroup");
            }
        }
    }
}

/// Kills every process in `cgroups`, in order (v2 first: its `cgroup.kill`
/// leaves the v1 `pids` cgroups of the same threads empty); (how many of
/// those there before are gone, those still there). `cgroup.kill` gives
/// no count: the members before the kills, less those after, are what
/// they ended; a process in two of the cgroups counts once.
pub(crate) fn kill_counted(cgroups: &[&ThreadCgroup], wait: Duration) -> (usize, Vec<i32>) {
    let members = || -> BTreeSet<i32> {
        cgroups
            .iter()
            .flat_map(|cg| cg.pids().unwrap_or_default())
            .collect()
    };
    let before = members();
    for cg in cgroups {
        if let Err(e) = cg.kill(wait) {
            tracing::warn!(cgroup = %cg.dir().display(), error = %e, "cgroup kill failed");
        }
    }
    let after = members();
    (
        before.difference(&after).count(),
        after.into_iter().collect(),
    )
}
