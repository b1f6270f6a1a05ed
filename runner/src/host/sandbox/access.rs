//! What agents may see and run, from the settings: the paths they must
//! never see, the programs they must be able to run, the SDK homes they
//! may write, and the skill packages a thread may read.

use std::path::{Path, PathBuf};

use crate::config::RunConfig;
use crate::host::workspace::Workspaces;

/// Paths agents must never see, from the settings.
pub fn protected_paths(config: &RunConfig) -> Vec<PathBuf> {
    let mut out = vec![config.state_dir.clone()];
    out.extend(config.secret_file.clone());
    out.extend(config.github_app_key_file.clone());
    out.extend(config.sdk_options.code_agent.state_dir.clone());
    out
}

/// What agents must be able to run besides the system: this binary (the
/// git credential helper is `agent-runner git-credential`) and the codex
/// and claude CLIs when they are given as paths: the CLI's directory, or,
/// for a CLI installed with npm, the whole `node_modules` tree it sits in
/// (the npm wrapper starts a native binary from a sibling package). A CLI
/// found on PATH under `/usr` is readable already; one elsewhere needs
/// `--sandbox-read-only`.
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
/// - Claude Code: `CLAUDE_CONFIG_DIR` when set (the adapter's, else the
///   runner's). It holds the login and the sessions' transcripts, and
///   Claude Code has no way to seed a copy, so every thread gets it
///   read-write: Claude threads share it. Unset, each thread uses its own
///   HOME's `~/.claude` and needs an API key in the environment.
pub(super) fn sdk_homes(config: &RunConfig) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let options = &config.sdk_options;
    let lookup = |env: &[(String, String)], key: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| PathBuf::from(v))
            .or_else(|| std::env::var_os(key).map(PathBuf::from))
            .filter(|p| p.is_absolute())
    };
    // A home the operator named must work (a warning says why not); codex's
    // default `$HOME/.codex` is only used when it can be.
    let created = |home: PathBuf, named: bool| match std::fs::create_dir_all(&home) {
        Ok(()) => Some(home),
        Err(e) if named => {
            tracing::warn!(home = %home.display(), error = %e, "an SDK home cannot be created; agents will not see it");
            None
        }
        Err(e) => {
            tracing::debug!(home = %home.display(), error = %e, "no default SDK home");
            None
        }
    };
    let enabled = |sdk: &str| config.sdks.is_empty() || config.sdks.iter().any(|s| s == sdk);
    let claude: Vec<PathBuf> = lookup(&options.claude.env, "CLAUDE_CONFIG_DIR")
        .filter(|_| enabled("claude-code"))
        .and_then(|home| created(home, true))
        .into_iter()
        .collect();
    let codex_named = lookup(&options.codex.env, "CODEX_HOME").is_some();
    let codex = sdk_codex::operator_codex_home(&options.codex)
        .filter(|p| p.is_absolute() && enabled("codex"))
        .and_then(|home| created(home, codex_named));
    let probe = claude.iter().cloned().chain(codex).collect();
    (claude, probe)
}
