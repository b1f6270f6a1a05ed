//! What agents may see and run, from the settings: the paths they must
//! never see, the programs they must be able to run, the SDK homes they
//! may write, and the skill packages a thread may read.

use std::path::{Path, PathBuf};

use crate::config::RunConfig;
use crate::host::workspace::Workspaces;

/// Paths agents must never see: every file-valued setting marked hidden
/// (`config::files`: the config file, the secret file, the GitHub App key,
/// the remote engine's token file, `--sandbox-protect`, the state dirs as
/// given), the state dir and the embedded engine's state dir as resolved
/// (they have defaults), the operator's Claude Code config dir (threads
/// get a copy of its login only) and systemd's `$CREDENTIALS_DIRECTORY`
/// (`LoadCredential=`) when the runner was given one.
pub fn protected_paths(config: &RunConfig) -> Vec<PathBuf> {
    let mut out = vec![config.state_dir.clone()];
    out.extend(config.sdk_options.code_agent.state_dir.clone());
    out.extend(config.hidden_files.iter().cloned());
    out.extend(sdk_claude_code::operator_config_dir(
        &config.sdk_options.claude,
    ));
    out.extend(
        std::env::var_os("CREDENTIALS_DIRECTORY")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute()),
    );
    out.sort();
    out.dedup();
    out
}

/// What agents must be able to run besides the system: this binary (the
/// git credential helper is `agent-runner git-credential`) and the codex
/// and claude CLIs when they are given as paths: the CLI's directory, or,
/// for a CLI installed with npm, the whole `node_modules` tree it sits in
/// (the npm wrapper starts a native binary from a sibling package), for
/// every agent process. Each launch of a CLI (found on PATH or not) also
/// gets its whole installation, the node it runs on included, opened for
/// that process alone (the launcher's per-launch grants).
pub(super) fn runner_programs(config: &RunConfig) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::env::current_exe().into_iter().collect();
    let options = &config.sdk_options;
    for bin in [&options.codex.bin, &options.claude.bin] {
        if bin.components().count() > 1
            && let Ok(real) = std::fs::canonicalize(bin)
        {
            out.extend(program_dir(&real));
        }
    }
    out
}

/// The directory agents need to read to run the program at `real` (a
/// resolved path): the outermost `node_modules` above it, else its own.
pub(super) fn program_dir(real: &Path) -> Option<PathBuf> {
    let node_modules = real
        .ancestors()
        .filter(|dir| dir.file_name().is_some_and(|name| name == "node_modules"))
        .last();
    node_modules.or(real.parent()).map(Path::to_path_buf)
}

/// The checkouts of the thread's own packages (`git_skill_packages`) in
/// the shared skill cache, and only those, so a thread reads no other
/// thread's packages. They come from the runner's record of the packages
/// the thread was created with (written before the thread's sandbox, kept
/// across restarts; [`crate::host::skills::cache`]), never from the links
/// in its workspace, which the agent can change.
pub(super) fn thread_package_skills(workspaces: &Workspaces, workspace: &Path) -> Vec<PathBuf> {
    crate::host::skills::cache::thread_entries(workspaces.root(), workspace)
}

/// The SDK homes the operator configured, created if missing, as
/// (what every thread's sandbox may write, what the probe's may write).
///
/// - codex: the operator's `CODEX_HOME` (`sdk_codex::operator_codex_home`:
///   the adapter's, else the runner's, else `$HOME/.codex`). Threads never
///   see it: each gets its own CODEX_HOME in its HOME, seeded from this one.
///   The describe probe and a `CodexConfigurationRequest` login work on it
///   directly, so a login is what later threads are seeded with.
/// - Claude Code: nothing. Each thread's claude has a `CLAUDE_CONFIG_DIR`
///   of its own in its HOME, seeded with the login of the operator's
///   (`sdk_claude_code::operator_config_dir`), which no sandbox sees
///   ([`protected_paths`]).
///
/// So no thread may write anything outside its own directories: the first
/// list is empty, and stays a list for an SDK that cannot seed a copy.
pub(super) fn sdk_homes(config: &RunConfig) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let options = &config.sdk_options;
    let enabled = |sdk: &str| config.sdks.is_empty() || config.sdks.iter().any(|s| s == sdk);
    // A home the operator named must work (a warning says why not); codex's
    // default `$HOME/.codex` is only used when it can be.
    let named = options.codex.env.iter().any(|(k, _)| k == "CODEX_HOME")
        || std::env::var_os("CODEX_HOME").is_some_and(|v| Path::new(&v).is_absolute());
    let codex = sdk_codex::operator_codex_home(&options.codex)
        .filter(|p| p.is_absolute() && enabled("codex"))
        .and_then(|home| match std::fs::create_dir_all(&home) {
            Ok(()) => Some(home),
            Err(e) if named => {
                tracing::warn!(home = %home.display(), error = %e, "an SDK home cannot be created; agents will not see it");
                None
            }
            Err(e) => {
                tracing::debug!(home = %home.display(), error = %e, "no default SDK home");
                None
            }
        });
    (Vec::new(), codex.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunArgs;

    /// The hidden settings `run` was given (`config::files` holds which
    /// they are), the resolved state dirs and the operator's Claude Code
    /// config dir are all protected; a not-secret one is not.
    #[test]
    fn hidden_settings_and_the_operators_claude_dir_are_protected() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let config_file = file("runner.toml", "drain_timeout = \"5s\"\n");
        let secret = file("secret", "s3cret");
        let token = file("token", "engine-token");
        let env_file = file("env", "AGENT_RUNNER_SECRET=x\n");
        let ca = dir.path().join("public-ca.pem");
        let mut args = RunArgs {
            config: Some(config_file.clone()),
            control_plane_url: Some("http://127.0.0.1:1".into()),
            secret_file: Some(secret.clone()),
            state_dir: Some(dir.path().join("state")),
            ..RunArgs::default()
        };
        args.code_agent.code_agent_endpoint = Some("http://127.0.0.1:9".into());
        args.code_agent.code_agent_auth_token_file = Some(token.clone());
        args.sandbox.sandbox_protect = vec![env_file.clone()];
        args.sandbox.sandbox_read_only = vec![ca.clone()];
        let mut config = RunConfig::resolve(args, None).unwrap();
        let claude = dir.path().join("claude-operator");
        config
            .sdk_options
            .claude
            .env
            .push(("CLAUDE_CONFIG_DIR".into(), claude.display().to_string()));
        let protected = protected_paths(&config);
        for path in [
            &config_file,
            &secret,
            &token,
            &env_file,
            &claude,
            &dir.path().join("state"),
        ] {
            assert!(
                protected.contains(path),
                "{} in {protected:?}",
                path.display()
            );
        }
        assert!(!protected.contains(&ca), "{protected:?}");
        // Threads write nothing outside their own directories.
        assert_eq!(sdk_homes(&config).0, Vec::<PathBuf>::new());
    }
}
