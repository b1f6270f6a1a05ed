//! The one launcher: every process started on behalf of a thread goes through
//! here, so that one place decides and reports what confines it.
//!
//! A runner builds one [`Launcher`] at start (it probes the host once), then
//! one [`ThreadSandbox`] per thread (workspace, TMPDIR, HOME, skills, limits,
//! optional agent uid). A spawn site builds its `tokio::process::Command` as
//! usual and calls [`ThreadSandbox::spawn`] (or [`ThreadSandbox::apply`] on a
//! `std::process::Command`), getting back the child and an [`Applied`] report;
//! a short-lived process started per tool call uses [`ThreadSandbox::launch`],
//! which creates it inside the thread's cgroup instead of moving it there.
//! [`ThreadSandbox::kill_all`] kills every process of the thread, including
//! those that left the process group; [`find_leftovers`] finds what a previous
//! run left behind. See README.md for the guarantees of each [`Mode`].

mod caps;
mod cgroup;
mod cgroup_v1;
mod child_setup;
mod direct;
mod env;
mod error;
mod grants;
mod hardening;
mod installs;
mod landlock_rules;
mod mode;
mod policy;
mod probe;
mod report;
mod rlimits;
mod sandbox;
mod signal_scope;
mod taken_env;
mod thread_cgroups;
mod tracking;
mod vfork;

pub use caps::CapSets;
pub use cgroup::{CgroupLimits, CgroupProbe, CgroupRoot, DEFAULT_PIDS_MAX, ThreadCgroup};
pub use cgroup_v1::probe_pids_v1;
pub use direct::{Launch, SandboxChild};
pub use env::EnvPolicy;
pub use error::LaunchError;
pub use hardening::{Hardening, harden_runner};
pub use mode::Mode;
pub use policy::{AgentUser, DEFAULT_SYSTEM_READ_ONLY, NetRules, ThreadSpec};
pub use probe::{HostProbe, LANDLOCK_ABI_MAX_VAR, probe_host};
pub use report::{Applied, LauncherStatus};
pub use rlimits::{DEFAULT_FSIZE, DEFAULT_NOFILE, Rlimits};
pub use sandbox::{Launcher, LauncherConfig, ThreadSandbox};
pub use taken_env::take_env;
pub use tracking::{
    KillReport, Leftovers, TAG_VAR, find_leftovers, kill_tagged, process_tag, sweep_leftovers,
    tagged_pids,
};
