//! Each thread's own Claude Code config dir (`CLAUDE_CONFIG_DIR`).
//!
//! Claude Code reads its settings from its config dir — `settings.json`
//! with its hooks (commands it runs at every tool call), plugins, agents,
//! commands — and writes its session transcripts there. A config dir
//! shared by threads would let one thread's agent plant a hook that runs
//! inside every other thread's claude. So every thread's claude runs with
//! `CLAUDE_CONFIG_DIR=<thread HOME>/.claude`, a directory of the thread's
//! own (0700, owned like its HOME), which the thread's sandbox lets it
//! write and no other thread's sandbox lets it see.
//!
//! The operator's config dir (`CLAUDE_CONFIG_DIR` of the adapter's extra
//! environment, else of the runner's) is where the operator logged in. It
//! is never handed to a thread: at each start of a thread's claude the
//! login, `.credentials.json`, and nothing else (no settings, hooks,
//! plugins or projects), is copied into the thread's dir. Without an
//! operator's dir nothing is copied (claude then needs an API key in the
//! environment). A thread from before this kept its session's transcript
//! in the operator's dir: that one file is adopted into the thread's dir
//! the first time the thread's claude starts without one, so it resumes.
//! The thread's HOME is the agent's to write, so all file
//! work there goes through [`sdk_adapter::beneath`]: a link planted at
//! `.claude` or at the credential's name is replaced, never followed.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::ClaudeConfig;

/// The config dir's name in the thread's HOME (Claude Code's own default).
pub(crate) const DIR_NAME: &str = ".claude";

/// The login file a thread's config dir is seeded with, and the only one.
pub const CREDENTIALS: &str = ".credentials.json";

/// Larger than any credential file; a bigger one is not copied.
const CREDENTIALS_LIMIT: u64 = 1024 * 1024;

/// The operator's config dir: `CLAUDE_CONFIG_DIR` of the adapter's extra
/// environment, else of the runner's; `None` when neither is set (or it
/// is not absolute). Threads never see it (the runner hides it from their
/// sandboxes); only its [`CREDENTIALS`] reach them, copied.
pub fn operator_config_dir(config: &ClaudeConfig) -> Option<PathBuf> {
    config
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "CLAUDE_CONFIG_DIR")
        .map(|(_, v)| PathBuf::from(v))
        .or_else(|| std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from))
        .filter(|p| p.is_absolute())
}

/// The thread's config dir for the thread HOME `home` (no I/O).
pub(crate) fn thread_config_dir(home: &Path) -> PathBuf {
    home.join(DIR_NAME)
}

/// Makes `<home>/.claude` (0700, owned like `home`) and copies the
/// operator's [`CREDENTIALS`] into it (0600), replacing whatever is at
/// either name; returns the dir. The operator's file is read without
/// following a link (an older runner let agents write that dir).
pub(crate) fn prepare(config: &ClaudeConfig, home: &Path) -> std::io::Result<PathBuf> {
    use sdk_adapter::beneath;
    let dir = thread_config_dir(home);
    std::fs::create_dir_all(home)?;
    let root = beneath::open_root(home)?;
    let owner = beneath::owner_of(&root)?;
    let dir_fd = beneath::ensure_dir(&root, DIR_NAME, Some(0o700), Some(owner))?;
    let Some(source) = operator_config_dir(config) else {
        return Ok(dir);
    };
    let source = match std::fs::File::open(&source) {
        Ok(source) => source,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(dir),
        Err(e) => return Err(e),
    };
    if let Some(bytes) = beneath::read_file(&source, CREDENTIALS, CREDENTIALS_LIMIT)? {
        beneath::write_file(&dir_fd, CREDENTIALS, &bytes, 0o600, Some(owner))?;
    }
    Ok(dir)
}

/// Larger than any transcript worth resuming; a bigger one is not adopted.
const TRANSCRIPT_LIMIT: u64 = 256 * 1024 * 1024;

/// A thread from before config dirs were per thread kept its session's
/// transcript in the operator's dir (`projects/<project>/<id>.jsonl`):
/// copied into the thread's own dir (0600, owned like `home`), so the
/// thread resumes the session there. Only the session's own file, read
/// without following links; the caller asks only while the thread has no
/// transcript of its own. Whether one was adopted.
pub(crate) fn adopt_transcript(
    config: &ClaudeConfig,
    home: &Path,
    session_id: &str,
) -> std::io::Result<bool> {
    use sdk_adapter::beneath;
    let Some(source) = operator_config_dir(config) else {
        return Ok(false);
    };
    let Ok(source_fd) = std::fs::File::open(&source) else {
        return Ok(false);
    };
    let file = format!("{session_id}.jsonl");
    let found = find_in_projects(&source_fd, &source, |project, dir| {
        Ok(beneath::read_file(dir, &file, TRANSCRIPT_LIMIT)?
            .map(|bytes| (project.to_owned(), bytes)))
    })?;
    let Some((project, bytes)) = found else {
        return Ok(false);
    };
    let root = beneath::open_root(home)?;
    let owner = beneath::owner_of(&root)?;
    let own = beneath::ensure_dir(&root, DIR_NAME, Some(0o700), Some(owner))?;
    let own = beneath::ensure_dir(&own, "projects", None, Some(owner))?;
    let own = beneath::ensure_dir(&own, &project, None, Some(owner))?;
    beneath::write_file(&own, &file, &bytes, 0o600, Some(owner))?;
    Ok(true)
}

/// Calls `found` with each project dir (its name and an fd) of the Claude
/// config dir open as `config` (listed at `path`) until it returns
/// something: every dir is opened beneath `config`, never through a link,
/// whatever the listing said.
pub(crate) fn find_in_projects<T>(
    config: impl AsFd,
    path: &Path,
    mut found: impl FnMut(&str, &OwnedFd) -> std::io::Result<Option<T>>,
) -> std::io::Result<Option<T>> {
    use sdk_adapter::beneath;
    let Ok(entries) = std::fs::read_dir(path.join("projects")) else {
        return Ok(None);
    };
    let Some(projects) = beneath::open_dir(config, "projects")? else {
        return Ok(None);
    };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(dir) = beneath::open_dir(&projects, &name)? else {
            continue;
        };
        if let Some(hit) = found(&name, &dir)? {
            return Ok(Some(hit));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A session's transcript holding one message.
    const SESSION: &[u8] = br#"{"type":"user","message":{"role":"user","content":"hi"}}"#;

    /// The operator's settings: a hook no thread may get.
    const HOOK: &[u8] =
        br#"{"hooks":{"PreToolUse":[{"hooks":[{"type":"command","command":"evil"}]}]}}"#;

    fn operator(tmp: &Path) -> (PathBuf, ClaudeConfig) {
        let dir = tmp.join("operator");
        std::fs::create_dir_all(dir.join("plugins")).unwrap();
        std::fs::create_dir_all(dir.join("projects/p")).unwrap();
        std::fs::write(dir.join(CREDENTIALS), b"{\"token\":\"op\"}").unwrap();
        std::fs::write(dir.join("settings.json"), HOOK).unwrap();
        std::fs::write(dir.join("projects/p/s.jsonl"), SESSION).unwrap();
        let config = ClaudeConfig {
            env: vec![("CLAUDE_CONFIG_DIR".into(), dir.display().to_string())],
            ..ClaudeConfig::default()
        };
        (dir, config)
    }

    /// Two threads: two dirs, each 0700 with the credential (0600) and
    /// nothing else of the operator's.
    #[test]
    fn each_thread_gets_its_own_dir_with_the_credential_only() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, config) = operator(tmp.path());
        let one = prepare(&config, &tmp.path().join("t1/home")).unwrap();
        let two = prepare(&config, &tmp.path().join("t2/home")).unwrap();
        assert_ne!(one, two);
        for dir in [&one, &two] {
            let names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(names, [CREDENTIALS], "{}", dir.display());
            assert_eq!(
                std::fs::read(dir.join(CREDENTIALS)).unwrap(),
                b"{\"token\":\"op\"}"
            );
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(dir), 0o700);
            assert_eq!(mode(&dir.join(CREDENTIALS)), 0o600);
        }
        // What a thread wrote itself stays, and stays its own.
        std::fs::write(one.join("settings.json"), b"{\"hooks\":{}}").unwrap();
        prepare(&config, &tmp.path().join("t1/home")).unwrap();
        assert!(one.join("settings.json").exists());
        assert!(!two.join("settings.json").exists());
    }

    /// The agent linked its config dir's credential (and then the whole
    /// dir) to files outside: seeding replaces the links, the outside
    /// files keep their bytes.
    #[test]
    fn a_planted_link_does_not_make_seeding_write_outside() {
        let tmp = tempfile::tempdir().unwrap();
        let (operator_dir, config) = operator(tmp.path());
        let outside = tmp.path().join("state.db");
        std::fs::write(&outside, b"precious").unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join(DIR_NAME)).unwrap();
        std::os::unix::fs::symlink(&outside, home.join(DIR_NAME).join(CREDENTIALS)).unwrap();
        let dir = prepare(&config, &home).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
        assert!(!dir.join(CREDENTIALS).is_symlink());
        // The whole dir a link to the operator's: replaced by a real one.
        std::fs::remove_dir_all(home.join(DIR_NAME)).unwrap();
        std::os::unix::fs::symlink(&operator_dir, home.join(DIR_NAME)).unwrap();
        let dir = prepare(&config, &home).unwrap();
        assert!(!dir.is_symlink() && dir.is_dir());
        assert!(!dir.join("settings.json").exists());
        assert_eq!(
            std::fs::read(operator_dir.join("settings.json")).unwrap(),
            HOOK
        );
    }

    /// A link at the operator's credential (planted while an older runner
    /// let agents write that dir) is not followed: nothing is copied.
    #[test]
    fn a_linked_operator_credential_is_not_copied() {
        let tmp = tempfile::tempdir().unwrap();
        let (operator_dir, config) = operator(tmp.path());
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, b"runner secret").unwrap();
        std::fs::remove_file(operator_dir.join(CREDENTIALS)).unwrap();
        std::os::unix::fs::symlink(&secret, operator_dir.join(CREDENTIALS)).unwrap();
        let dir = prepare(&config, &tmp.path().join("home")).unwrap();
        assert!(!dir.join(CREDENTIALS).exists());
    }

    /// A session of the shared dir of an older runner: its transcript is
    /// adopted into the thread's dir, and found there; a linked one is not.
    #[test]
    fn a_session_of_the_shared_dir_is_adopted() {
        let tmp = tempfile::tempdir().unwrap();
        let (operator_dir, config) = operator(tmp.path());
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        assert!(adopt_transcript(&config, &home, "s").unwrap());
        assert_eq!(
            std::fs::read(home.join(".claude/projects/p/s.jsonl")).unwrap(),
            SESSION
        );
        assert!(crate::transcript::prepare_resume(&home, "s"));
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, b"runner secret").unwrap();
        std::os::unix::fs::symlink(&secret, operator_dir.join("projects/p/linked.jsonl")).unwrap();
        assert!(!adopt_transcript(&config, &home, "linked").unwrap());
        assert!(!adopt_transcript(&config, &home, "missing").unwrap());
    }

    /// No operator's dir: an empty dir of the thread's own.
    #[test]
    fn without_an_operator_dir_the_thread_dir_is_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let config = ClaudeConfig {
            env: vec![(
                "CLAUDE_CONFIG_DIR".into(),
                tmp.path().join("missing").display().to_string(),
            )],
            ..ClaudeConfig::default()
        };
        let dir = prepare(&config, &tmp.path().join("home")).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }

    /// The agent races the seeding: it keeps swapping `~/.claude` (then
    /// `~/.claude/projects`) with a link to a directory outside while the
    /// runner prepares the dir and adopts a transcript over and over.
    /// Nothing is ever written, chmodded or chowned outside.
    #[test]
    fn seeding_holds_while_the_agent_swaps_its_config_dir_for_a_link() {
        use sdk_adapter::testing::race::race;
        let tmp = tempfile::tempdir().unwrap();
        let (_, config) = operator(tmp.path());
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("p")).unwrap();
        std::fs::write(outside.join("state.db"), b"precious").unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join(DIR_NAME).join("projects")).unwrap();
        let outcome = race(&home.join(DIR_NAME), &outside, || {
            prepare(&config, &home).map(drop)
        });
        eprintln!("config dir: {outcome:?}");
        std::fs::create_dir_all(home.join(DIR_NAME).join("projects")).unwrap();
        let outcome = race(&home.join(DIR_NAME).join("projects"), &outside, || {
            adopt_transcript(&config, &home, "s").map(drop)
        });
        eprintln!("projects: {outcome:?}");
    }
}
