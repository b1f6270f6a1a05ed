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
//!    '<socket>' --thread '<thread id>' --capability-file '<file>'` (git
//!    appends `get`/`store`/`erase`); the file, in the thread's private
//!    home, holds the thread's capability ([`super::capability`]), issued
//!    when this environment is made. The capability itself is never in the
//!    environment or a command line.
//! 3. `credential.useHttpPath` = `true`: git passes the repository path, so
//!    the runner can pick the installation that covers it.
//!
//! And `GIT_TERMINAL_PROMPT=0`: an agent has nobody at a terminal, so when
//! the runner has no token git must fail at once rather than wait for a
//! username on the runner's terminal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::capability::{Capabilities, capability_file};

/// Builds the per-thread git environment.
#[derive(Debug, Clone)]
pub struct GitEnv {
    exe: PathBuf,
    socket: PathBuf,
    /// `GIT_CONFIG_COUNT` of the runner's own environment (kept, appended to).
    inherited: usize,
    /// The threads' capabilities (shared with the credential socket).
    capabilities: Arc<Capabilities>,
}

impl GitEnv {
    /// `exe`: the `agent-runner` binary; `socket`: the credential socket,
    /// which answers the holders of `capabilities`. The inherited
    /// `GIT_CONFIG_COUNT` is read from the process now.
    pub fn new(exe: PathBuf, socket: PathBuf, capabilities: Arc<Capabilities>) -> Self {
        Self::with_inherited(exe, socket, capabilities, inherited_config_count())
    }

    /// The environment for `exe`'s helper speaking to `socket`, after
    /// `inherited` GIT_CONFIG entries the runner itself was given.
    pub fn with_inherited(
        exe: PathBuf,
        socket: PathBuf,
        capabilities: Arc<Capabilities>,
        inherited: usize,
    ) -> Self {
        Self {
            exe,
            socket,
            inherited,
            capabilities,
        }
    }

    /// The `credential.helper` value for `thread_id`, whose capability is
    /// in `capability_file`.
    pub fn helper(&self, thread_id: &str, capability_file: &Path) -> String {
        format!(
            "!{} git-credential --socket {} --thread {} --capability-file {}",
            shell_quote(&self.exe.to_string_lossy()),
            shell_quote(&self.socket.to_string_lossy()),
            shell_quote(thread_id),
            shell_quote(&capability_file.to_string_lossy())
        )
    }

    /// The variables to add to the environment of `thread_id`'s agent,
    /// whose private home is `home`; issues the thread's capability there
    /// (see [`Capabilities::issue`]). When that fails (logged), git is
    /// still pointed at the helper, which then gets nothing: no thread ever
    /// falls back to credentials it cannot prove are its own.
    pub fn for_thread(&self, thread_id: &str, home: &Path) -> Vec<(String, String)> {
        let file = match self.capabilities.issue(thread_id, home) {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!(thread_id, home = %home.display(), error = %e, "issuing the thread's git credential capability failed; its git gets no credentials");
                capability_file(home)
            }
        };
        let entries = [
            ("credential.helper", String::new()),
            ("credential.helper", self.helper(thread_id, &file)),
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

    /// `thread_id` is gone: revoke its capability (and remove its file).
    pub fn revoke(&self, thread_id: &str) {
        self.capabilities.revoke(thread_id);
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

    fn caps() -> Arc<Capabilities> {
        Arc::new(Capabilities::new(None))
    }

    #[test]
    fn entries_follow_the_inherited_ones() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let caps = caps();
        let env = GitEnv::with_inherited("/bin/ar".into(), "/s/c.sock".into(), caps.clone(), 2);
        let vars = env.for_thread("thr-1", &home);
        let file = home.join(super::super::capability::CAPABILITY_FILE);
        let capability = std::fs::read_to_string(&file).unwrap();
        assert_eq!(caps.thread_of(&capability).as_deref(), Some("thr-1"));
        assert!(
            !format!("{vars:?}").contains(&capability),
            "the capability itself is never in the environment"
        );
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
                    format!(
                        "!'/bin/ar' git-credential --socket '/s/c.sock' --thread 'thr-1' --capability-file '{}'",
                        file.display()
                    )
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
        let dir = tempfile::tempdir().unwrap();
        let env = GitEnv::with_inherited("/bin/ar".into(), "/s/c.sock".into(), caps(), 1);
        let file = dir.path().join(super::super::capability::CAPABILITY_FILE);
        let out = Command::new("git")
            .args(["config", "--get-all", "credential.helper"])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", "/nonexistent")
            .env("GIT_CONFIG_KEY_0", "credential.helper")
            .env("GIT_CONFIG_VALUE_0", "store")
            .envs(env.for_thread("t", dir.path()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!(
                "store\n\n!'/bin/ar' git-credential --socket '/s/c.sock' --thread 't' --capability-file '{}'\n",
                file.display()
            )
        );
    }
}
