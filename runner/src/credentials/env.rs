//! The environment that points every git an agent runs at
//! `agent-runner git-credential`, without touching anyone's git config
//! files: git reads `GIT_CONFIG_COUNT` / `GIT_CONFIG_KEY_<n>` /
//! `GIT_CONFIG_VALUE_<n>` as if they were `-c key=value` options.
//!
//! The entries, appended after any the runner itself inherited:
//! 1. `credential.helper` = empty: drops every helper configured before
//!    (the user's keychain, a cache), so agents never see other secrets and
//!    git never prompts.
//! 2. `credential.helper` = `!'<agent-runner>' git-credential --socket
//!    '<socket>' --thread '<thread id>'` (git appends `get`/`store`/`erase`).
//! 3. `credential.useHttpPath` = `true`: git passes the repository path, so
//!    the runner can pick the installation that covers it.
//!
//! And `GIT_TERMINAL_PROMPT=0`: an agent has nobody at a terminal, so when
//! the runner has no token git must fail at once rather than wait for a
//! username on the runner's terminal.

use std::path::{Path, PathBuf};

/// Builds the per-thread git environment.
#[derive(Debug, Clone)]
pub struct GitEnv {
    exe: PathBuf,
    socket: PathBuf,
    /// `GIT_CONFIG_COUNT` of the runner's own environment (kept, appended to).
    inherited: usize,
}

impl GitEnv {
    /// `exe`: the `agent-runner` binary; `socket`: the credential socket.
    /// The inherited `GIT_CONFIG_COUNT` is read from the process now.
    pub fn new(exe: PathBuf, socket: PathBuf) -> Self {
        Self::with_inherited(exe, socket, inherited_config_count())
    }

    /// The environment for `exe`'s helper speaking to `socket`, after `inherited` GIT_CONFIG entries the runner itself was given.
    pub fn with_inherited(exe: PathBuf, socket: PathBuf, inherited: usize) -> Self {
        Self {
            exe,
            socket,
            inherited,
        }
    }

    /// The `credential.helper` value for `thread_id`.
    pub fn helper(&self, thread_id: &str) -> String {
        format!(
            "!{} git-credential --socket {} --thread {}",
            shell_quote(&self.exe.to_string_lossy()),
            shell_quote(&self.socket.to_string_lossy()),
            shell_quote(thread_id)
        )
    }

    /// The variables to add to the environment of `thread_id`'s agent.
    pub fn for_thread(&self, thread_id: &str) -> Vec<(String, String)> {
        let entries = [
            ("credential.helper", String::new()),
            ("credential.helper", self.helper(thread_id)),
            ("credential.useHttpPath", "true".to_owned()),
        ];
        let mut env = vec![("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned())];
        env.extend(config_entries(self.inherited, entries));
        env
    }

    /// The credential socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

/// `GIT_CONFIG_COUNT` of the runner's own environment: how many
/// `GIT_CONFIG_*` entries every git the runner starts already inherits, and
/// so where entries of ours begin. A value that is not a number is warned
/// about and counted as none.
pub fn inherited_config_count() -> usize {
    match std::env::var("GIT_CONFIG_COUNT") {
        Err(_) => 0,
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            tracing::warn!(value = %v, "GIT_CONFIG_COUNT is not a number; ignoring the inherited GIT_CONFIG_* entries");
            0
        }),
    }
}

/// The `GIT_CONFIG_COUNT` / `GIT_CONFIG_KEY_<n>` / `GIT_CONFIG_VALUE_<n>`
/// variables that add `entries` (`key`, `value`) after the `inherited` ones.
pub fn config_entries<const N: usize>(
    inherited: usize,
    entries: [(&str, String); N],
) -> Vec<(String, String)> {
    let mut env = Vec::with_capacity(1 + 2 * N);
    env.push(("GIT_CONFIG_COUNT".to_owned(), (inherited + N).to_string()));
    for (i, (key, value)) in entries.into_iter().enumerate() {
        let n = inherited + i;
        env.push((format!("GIT_CONFIG_KEY_{n}"), key.to_owned()));
        env.push((format!("GIT_CONFIG_VALUE_{n}"), value));
    }
    env
}

/// `s` as one POSIX shell word: single-quoted, each `'` as `'\''`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn entries_follow_the_inherited_ones() {
        let env = GitEnv::with_inherited("/bin/ar".into(), "/s/c.sock".into(), 2);
        let vars = env.for_thread("thr-1");
        assert_eq!(
            vars,
            vec![
                ("GIT_TERMINAL_PROMPT".into(), "0".into()),
                ("GIT_CONFIG_COUNT".into(), "5".into()),
                ("GIT_CONFIG_KEY_2".into(), "credential.helper".into()),
                ("GIT_CONFIG_VALUE_2".into(), String::new()),
                ("GIT_CONFIG_KEY_3".into(), "credential.helper".into()),
                (
                    "GIT_CONFIG_VALUE_3".into(),
                    "!'/bin/ar' git-credential --socket '/s/c.sock' --thread 'thr-1'".into()
                ),
                ("GIT_CONFIG_KEY_4".into(), "credential.useHttpPath".into()),
                ("GIT_CONFIG_VALUE_4".into(), "true".into()),
            ]
        );
    }

    /// The quoting survives a real shell, even with quotes and spaces.
    #[test]
    fn quoting_survives_sh() {
        let odd = "/tmp/it's a $dir/\"x\"";
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", shell_quote(odd)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), odd);
    }

    /// Git itself sees the entries: the helper list is reset, then ours.
    #[test]
    fn git_reads_the_entries() {
        let env = GitEnv::with_inherited("/bin/ar".into(), "/s/c.sock".into(), 1);
        let out = Command::new("git")
            .args(["config", "--get-all", "credential.helper"])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", "/nonexistent")
            .env("GIT_CONFIG_KEY_0", "credential.helper")
            .env("GIT_CONFIG_VALUE_0", "store")
            .envs(env.for_thread("t"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "store\n\n!'/bin/ar' git-credential --socket '/s/c.sock' --thread 't'\n"
        );
    }
}
