//! Settings of skill packages' sources: which transports a package URL
//! from the control plane may use (`https` by default, `ssh` when the
//! operator says so), which local directories `file://` packages may come
//! from, and how large the shared cache of thread packages may grow.
//! The control plane's package names are untrusted input: without these
//! settings it can make the runner fetch only over https.

use super::layer::settings;
use super::*;

settings! {
    /// Flags of skill package sources (each also an env var).
    #[derive(Debug, Clone, Default, Args)]
    pub struct SkillArgs {
        /// A transport skill package URLs from the control plane may use:
        /// `https` or `ssh` (also `git@host:path`); repeatable,
        /// comma-separated in the variable. Local directories are allowed by
        /// --skill-local-dir instead; `http://`, `git://` and every other git
        /// transport are always refused. Default: `https`.
        #[arg(
            long = "skill-sources",
            env = "AGENT_RUNNER_SKILL_SOURCES",
            value_name = "SCHEME",
            value_delimiter = ',',
            help_heading = "Directories and limits",
        )]
        pub skill_sources: Vec<String>,
        /// An absolute directory `file://` skill packages may come from (the
        /// package's real path, links and `..` resolved, must be inside it);
        /// repeatable, comma-separated in the variable. Default: none: no
        /// `file://` package is accepted.
        #[arg(
            long = "skill-local-dir",
            env = "AGENT_RUNNER_SKILL_LOCAL_DIR",
            value_name = "DIR",
            value_delimiter = ',',
            help_heading = "Directories and limits",
        )]
        pub skill_local_dir: Vec<PathBuf>,
        /// The total size of the cache of threads' skill packages
        /// (`<workspace root>/.skill-cache`), in bytes: past it, the least
        /// recently used packages no live thread uses are removed. Default:
        /// `1073741824` (1 GiB).
        #[arg(
            long,
            env = "AGENT_RUNNER_SKILL_CACHE_MAX_BYTES",
            value_name = "BYTES",
            help_heading = "Directories and limits",
        )]
        pub skill_cache_max_bytes: Option<u64>,
    }
}

/// Default bound on the skill cache's total size.
pub const DEFAULT_SKILL_CACHE_MAX_BYTES: u64 = 1024 * 1024 * 1024;

/// Where skill packages may come from, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillConfig {
    /// `https` is in `--skill-sources`.
    pub https: bool,
    /// `ssh` is in `--skill-sources`.
    pub ssh: bool,
    /// `--skill-local-dir`, canonical.
    pub local_dirs: Vec<PathBuf>,
    /// `--skill-cache-max-bytes`.
    pub cache_max_bytes: u64,
}

impl Default for SkillConfig {
    fn default() -> Self {
        Self {
            https: true,
            ssh: false,
            local_dirs: Vec::new(),
            cache_max_bytes: DEFAULT_SKILL_CACHE_MAX_BYTES,
        }
    }
}

impl SkillArgs {
    /// Checked settings (defaults for what is not given).
    pub(super) fn resolve(self) -> Result<SkillConfig, ConfigError> {
        let mut config = SkillConfig::default();
        let sources: Vec<String> = self
            .skill_sources
            .iter()
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect();
        if !sources.is_empty() {
            config.https = false;
            for source in sources {
                match source.as_str() {
                    "https" => config.https = true,
                    "ssh" => config.ssh = true,
                    "file" => {
                        return Err(key_err(
                            "skill_sources",
                            "file is not a source here: list the directories in skill_local_dir",
                        ));
                    }
                    other => {
                        return Err(key_err(
                            "skill_sources",
                            format!(
                                "{other:?} is not https or ssh (other transports are never allowed)"
                            ),
                        ));
                    }
                }
            }
        }
        for dir in self.skill_local_dir {
            if !dir.is_absolute() {
                return Err(key_err(
                    "skill_local_dir",
                    format!("{} is not an absolute path", dir.display()),
                ));
            }
            let real = dir
                .canonicalize()
                .map_err(|e| key_err("skill_local_dir", format!("{}: {e}", dir.display())))?;
            if !real.is_dir() {
                return Err(key_err(
                    "skill_local_dir",
                    format!("{} is not a directory", dir.display()),
                ));
            }
            config.local_dirs.push(real);
        }
        match self.skill_cache_max_bytes {
            Some(0) => return Err(key_err("skill_cache_max_bytes", "must be at least 1")),
            Some(n) => config.cache_max_bytes = n,
            None => {}
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_local_dirs_and_the_cache_bound() {
        let config = SkillArgs::default().resolve().unwrap();
        assert_eq!(config, SkillConfig::default());
        assert!(config.https && !config.ssh);
        let tmp = tempfile::tempdir().unwrap();
        let config = SkillArgs {
            skill_sources: vec!["SSH".into()],
            skill_local_dir: vec![tmp.path().join(".")],
            skill_cache_max_bytes: Some(5),
        }
        .resolve()
        .unwrap();
        assert!(!config.https && config.ssh);
        assert_eq!(config.local_dirs, [tmp.path().canonicalize().unwrap()]);
        assert_eq!(config.cache_max_bytes, 5);
        for (args, needle) in [
            (
                SkillArgs {
                    skill_sources: vec!["http".into()],
                    ..SkillArgs::default()
                },
                "is not https or ssh",
            ),
            (
                SkillArgs {
                    skill_sources: vec!["file".into()],
                    ..SkillArgs::default()
                },
                "skill_local_dir",
            ),
            (
                SkillArgs {
                    skill_local_dir: vec!["relative".into()],
                    ..SkillArgs::default()
                },
                "absolute",
            ),
            (
                SkillArgs {
                    skill_local_dir: vec![tmp.path().join("missing")],
                    ..SkillArgs::default()
                },
                "missing",
            ),
            (
                SkillArgs {
                    skill_cache_max_bytes: Some(0),
                    ..SkillArgs::default()
                },
                "at least 1",
            ),
        ] {
            let err = args.resolve().unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }
}
