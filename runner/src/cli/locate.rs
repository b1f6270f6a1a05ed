//! Where a running runner is, found as `run` finds its own settings:
//! `--state-dir` (or `AGENT_RUNNER_STATE_DIR`), else `state_dir` in the
//! `--config` file (or `AGENT_RUNNER_CONFIG`), else `~/.agent-runner/state`.
//! `ps`, `threads`, `interrupt`, `kill` and `logs` take these flags
//! (`status` finds the health endpoints through `--config` the same way).

use std::path::PathBuf;

/// The flags naming the runner a command talks to.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunnerLocation {
    /// The runner's config file (as `run --config`), read for its `state_dir`.
    #[arg(long, env = "AGENT_RUNNER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The runner's state dir (as `run --state-dir`: its admin socket and
    /// transcripts are there). Default: `state_dir` of the --config file,
    /// else ~/.agent-runner/state.
    #[arg(long, env = "AGENT_RUNNER_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

impl RunnerLocation {
    /// The state dir `run` would use with these settings.
    pub fn state_dir(&self) -> anyhow::Result<PathBuf> {
        if let Some(dir) = &self.state_dir {
            return Ok(dir.clone());
        }
        if let Some(dir) = crate::config::file_state_dir(self.config.as_deref())? {
            return Ok(dir);
        }
        Ok(crate::config::default_state_dir())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_over_the_config_file_which_wins_over_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("runner.toml");
        std::fs::write(&file, "state_dir = \"/srv/runner-state\"\n").unwrap();
        let from_file = RunnerLocation {
            config: Some(file.clone()),
            state_dir: None,
        };
        assert_eq!(
            from_file.state_dir().unwrap(),
            PathBuf::from("/srv/runner-state")
        );
        let flag = RunnerLocation {
            config: Some(file),
            state_dir: Some("/flag".into()),
        };
        assert_eq!(flag.state_dir().unwrap(), PathBuf::from("/flag"));
        let default = RunnerLocation::default().state_dir().unwrap();
        assert!(default.ends_with(".agent-runner/state"), "{default:?}");
        // A config file that cannot be read is an error naming it, not a
        // silent fall-back to the default.
        let missing = RunnerLocation {
            config: Some(dir.path().join("missing.toml")),
            state_dir: None,
        };
        let err = missing.state_dir().unwrap_err().to_string();
        assert!(err.contains("missing.toml"), "{err}");
    }
}
