//! Skill packages (`InstallSkillsMpRequest`): fetch a package, find its
//! skills, check them, and install them into the agent's home.
//!
//! A skill is a directory holding `SKILL.md` whose YAML front matter has a
//! `name` and a `description`. A package is one skill, or many under
//! `skills/*/SKILL.md`. Skills land in `<agent home>/.agents/skills/<name>/`
//! and are recorded in `<agent home>/.agents/.skill-lock.json`.
//!
//! [`coordinate`] parses what the control plane names, [`policy`] decides
//! whether the runner fetches from there at all, [`fetch`] brings the
//! package onto disk (git or a local directory, within the size limit while
//! it downloads), [`package`] finds and checks the skills, [`install`] swaps
//! them into place atomically and keeps the lock. Threads' own packages go
//! through [`thread`] and the bounded shared [`cache`].

pub mod auth;
pub mod cache;
pub mod coordinate;
pub mod fetch;
pub mod install;
pub mod package;
pub mod policy;
pub mod thread;

use std::path::Path;

pub use install::Installed;

pub use crate::config::DEFAULT_SKILL_MAX_BYTES as DEFAULT_MAX_BYTES;
use crate::config::{DEFAULT_SKILL_CACHE_MAX_BYTES, SkillConfig};

/// The skill settings every install follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillSettings {
    /// Largest package, in bytes (`--skill-max-bytes`; while fetching,
    /// `.git` included).
    pub max_bytes: u64,
    /// Where packages may come from.
    pub sources: policy::SourcePolicy,
    /// Bound of the threads' package cache (`--skill-cache-max-bytes`).
    pub cache_max_bytes: u64,
}

impl SkillSettings {
    /// From the settings; `git_host` is the GitHub host (plain http is
    /// allowed to it alone, and only when it is a loopback address).
    pub fn new(max_bytes: u64, config: &SkillConfig, git_host: &str) -> Self {
        let loopback = crate::host::credentials::protocol::is_loopback(git_host);
        Self {
            max_bytes,
            sources: policy::SourcePolicy {
                https: config.https,
                ssh: config.ssh,
                local_dirs: config.local_dirs.clone(),
                http_host: loopback.then(|| git_host.to_owned()),
            },
            cache_max_bytes: config.cache_max_bytes,
        }
    }

    /// The defaults (https only) with another package size limit.
    pub fn with_max_bytes(max_bytes: u64) -> Self {
        Self {
            max_bytes,
            sources: policy::SourcePolicy::default(),
            cache_max_bytes: DEFAULT_SKILL_CACHE_MAX_BYTES,
        }
    }
}

/// Why a skill installation failed.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// The coordinate is not one the runner understands, or names a source
    /// the runner does not fetch from.
    #[error("install_skills_mp_request.package_name: {0}")]
    Coordinate(String),
    /// Fetching failed.
    #[error("fetching {from}: {message}")]
    Fetch {
        /// The source.
        from: String,
        /// What went wrong (tokens masked).
        message: String,
    },
    /// The package is not a valid skill package.
    #[error("invalid skill package: {0}")]
    Package(String),
    /// A file operation failed.
    #[error("installing skills: {0}")]
    Io(#[from] std::io::Error),
}

/// Install the package `coordinate` names into `agent_home`. Blocking (git
/// and file system work): run it on a blocking thread.
///
/// `git_env` is extra environment for git (a token for a private
/// repository, from [`auth::git_env`]).
pub fn install_package(
    agent_home: &Path,
    coordinate: &str,
    settings: &SkillSettings,
    git_env: &[(String, String)],
) -> Result<Vec<Installed>, SkillError> {
    let admitted = settings
        .sources
        .admit(coordinate)
        .map_err(SkillError::Coordinate)?;
    let max_bytes = settings.max_bytes;
    let scratch = tempdir_in(agent_home)?;
    let result = (|| {
        let fetched = fetch::fetch(&admitted, &scratch.join("package"), git_env, max_bytes)?;
        let skills = package::find_skills(&fetched.root, max_bytes)?;
        install::install(agent_home, coordinate, fetched.commit.as_deref(), &skills)
    })();
    // Whatever happened, the scratch copy (a partial fetch too) goes.
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// A scratch directory inside the agent's home (same file system as the
/// skills directory, so the final rename is atomic).
fn tempdir_in(agent_home: &Path) -> Result<std::path::PathBuf, SkillError> {
    let dir = agent_home
        .join(".agents")
        .join(format!(".fetch-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
