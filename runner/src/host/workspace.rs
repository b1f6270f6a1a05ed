//! Where agents and threads live on disk, and the check that keeps ids from
//! the wire from ever naming a path outside it.
//!
//! Layout under `--workspace-root`:
//! `<agent_id>/` is the agent's home (skills under `.agents/skills/`), and
//! `<agent_id>/threads/<thread_id>/` is a thread's workspace, where its
//! commands run, and `<agent_id>/private/<thread_id>/` holds what belongs to
//! the thread but not in its workspace (a git work tree the agent may
//! commit): its `home/` (HOME, caches, the thread's credential capability)
//! and `tmp/` (TMPDIR). An id becomes a path component only after
//! [`check_id`].
//!
//! Skills installed for an agent must be visible to whichever SDK runs its
//! threads, and each SDK looks in its own place relative to the directory it
//! works in: Codex and the local engine in `.agents/skills/`, Claude Code in
//! `.claude/skills/`. So every thread workspace gets those two entries as
//! symlinks to the agent's one skills directory: an install (or upgrade)
//! shows up in every thread at once, with nothing copied.

use std::io;
use std::path::{Path, PathBuf};

/// Longest id accepted from the wire.
pub const MAX_ID_LEN: usize = 128;

/// Accept `value` as an id (for field `field`) that is safe as one path
/// component: 1 to 128 characters of `[A-Za-z0-9._-]`, not starting with `.`
/// (so never `.`, `..` or a hidden name). The error names the field.
pub fn check_id(field: &str, value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= MAX_ID_LEN
        && !value.starts_with('.')
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{field}: must be 1 to {MAX_ID_LEN} characters of [A-Za-z0-9._-], not starting with '.' (got {:?})",
            truncate(value, 64)
        ))
    }
}

fn truncate(value: &str, max: usize) -> &str {
    match value.char_indices().nth(max) {
        Some((i, _)) => &value[..i],
        None => value,
    }
}

/// The workspace root and the directories under it.
#[derive(Debug, Clone)]
pub struct Workspaces {
    root: PathBuf,
}

impl Workspaces {
    /// Workspaces under `root` (created if missing).
    pub fn new(root: PathBuf) -> io::Result<Self> {
        std::fs::create_dir_all(&root)?;
        Ok(Self {
            root: root.canonicalize()?,
        })
    }

    /// The workspace root (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Ids must have passed [`check_id`].
    pub fn agent_home(&self, agent_id: &str) -> PathBuf {
        self.root.join(agent_id)
    }

    /// The workspace of `thread_id` of `agent_id`.
    pub fn thread_dir(&self, agent_id: &str, thread_id: &str) -> PathBuf {
        self.agent_home(agent_id).join("threads").join(thread_id)
    }

    /// What belongs to `thread_id` outside its workspace: `home/` and
    /// `tmp/`; visible to that thread's processes only.
    pub fn thread_private(&self, agent_id: &str, thread_id: &str) -> PathBuf {
        self.agent_home(agent_id).join("private").join(thread_id)
    }

    /// The thread's HOME (`<private>/home`).
    pub fn thread_home(&self, agent_id: &str, thread_id: &str) -> PathBuf {
        self.thread_private(agent_id, thread_id).join("home")
    }

    /// The thread's TMPDIR (`<private>/tmp`).
    pub fn thread_tmp(&self, agent_id: &str, thread_id: &str) -> PathBuf {
        self.thread_private(agent_id, thread_id).join("tmp")
    }

    /// Where the agent's skills are installed.
    pub fn agent_skills(&self, agent_id: &str) -> PathBuf {
        self.agent_home(agent_id).join(".agents").join("skills")
    }

    /// Creates `dir` (a workspace or home, under the root) if missing.
    pub fn create(&self, dir: &Path) -> io::Result<()> {
        self.ensure(dir).map(drop)
    }

    /// Opens `dir` (under the root), creating what is missing, one
    /// component beneath the other by directory fd
    /// ([`sdk_adapter::beneath::ensure_dir`]): a link planted on the way is
    /// replaced by a directory, never followed, whoever could write there.
    fn ensure(&self, dir: &Path) -> io::Result<std::os::fd::OwnedFd> {
        use std::path::Component;
        let outside = || {
            io::Error::other(format!(
                "{} is not a plain path under the workspace root",
                dir.display()
            ))
        };
        let rel = dir.strip_prefix(&self.root).map_err(|_| outside())?;
        let mut fd = sdk_adapter::beneath::open_root(&self.root)?;
        for part in rel.components() {
            let Component::Normal(name) = part else {
                return Err(outside());
            };
            let name = name.to_str().ok_or_else(outside)?;
            fd = sdk_adapter::beneath::ensure_dir(&fd, name, None, None)?;
        }
        Ok(fd)
    }

    /// Create a thread's workspace (if missing) with the agent's skills
    /// linked in where each SDK looks for them. Idempotent: a thread
    /// re-opened after a restart gets links it lacks; an entry the agent
    /// replaced with something of its own is left alone.
    pub fn create_thread(&self, agent_id: &str, thread_id: &str) -> io::Result<PathBuf> {
        let dir = self.thread_dir(agent_id, thread_id);
        let root = self.ensure(&dir)?;
        let skills = self.agent_skills(agent_id);
        self.ensure(&skills)?;
        // The agent can write the workspace: beneath its fd, a link planted
        // at `.agents`/`.claude` is replaced, not followed.
        for sdk_dir in [".agents", ".claude"] {
            let parent = sdk_adapter::beneath::ensure_dir(&root, sdk_dir, None, None)?;
            sdk_adapter::beneath::symlink_if_missing(&skills, &parent, "skills")?;
        }
        Ok(dir)
    }

    /// Remove a directory tree under the root; a missing one is fine.
    pub fn remove(&self, dir: &Path) -> io::Result<()> {
        if !dir.starts_with(&self.root) || dir == self.root {
            return Err(io::Error::other(format!(
                "refusing to remove {} outside the workspace root",
                dir.display()
            )));
        }
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_escape_are_rejected() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "/etc",
            "a/b",
            ".hidden",
            "a\0b",
            "a b",
            &"x".repeat(129),
        ] {
            let err = check_id("agent_id", bad).unwrap_err();
            assert!(err.starts_with("agent_id:"), "{err}");
        }
        for good in ["a", "agent-1", "A.b_c", &"x".repeat(128)] {
            check_id("agent_id", good).unwrap();
        }
    }

    #[test]
    fn thread_workspaces_see_the_agents_skills() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        let t = ws.create_thread("a", "t").unwrap();
        assert_eq!(t, ws.thread_dir("a", "t"));
        // Installed after the thread exists: still visible through both links.
        let skill = ws.agent_skills("a").join("lint");
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(skill.join("SKILL.md"), "---\nname: lint\n---\n").unwrap();
        for sdk_dir in [".agents", ".claude"] {
            let seen = t.join(sdk_dir).join("skills/lint/SKILL.md");
            assert!(seen.is_file(), "{} missing", seen.display());
        }
        // Re-opening is harmless.
        ws.create_thread("a", "t").unwrap();
    }

    /// The agent linked `.agents` to a directory outside its workspace: the
    /// next open replaces the link, nothing is created outside.
    #[test]
    fn a_planted_sdk_dir_link_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        let t = ws.create_thread("a", "t").unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::remove_file(t.join(".agents/skills")).unwrap();
        std::fs::remove_dir(t.join(".agents")).unwrap();
        std::os::unix::fs::symlink(&outside, t.join(".agents")).unwrap();
        ws.create_thread("a", "t").unwrap();
        assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
        assert!(!t.join(".agents").is_symlink());
        assert!(t.join(".agents/skills").is_symlink());
    }

    /// A link planted on the way to a workspace (the agent's `threads`
    /// dir, its skills dir) is replaced by a directory, never followed:
    /// opening a thread creates nothing outside the root.
    #[test]
    fn a_link_planted_above_a_workspace_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::create_dir(ws.agent_home("a")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.agent_home("a").join("threads")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.agent_home("a").join(".agents")).unwrap();
        let t = ws.create_thread("a", "t").unwrap();
        assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
        assert!(t.is_dir() && !ws.agent_home("a").join("threads").is_symlink());
        assert!(ws.agent_skills("a").is_dir() && !ws.agent_home("a").join(".agents").is_symlink());
        assert!(ws.create(dir.path()).is_err(), "outside the root");
    }

    #[test]
    fn remove_stays_inside_root() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        let t = ws.thread_dir("a", "t");
        ws.create(&t).unwrap();
        std::fs::write(t.join("f"), "x").unwrap();
        ws.remove(&ws.agent_home("a")).unwrap();
        assert!(!ws.agent_home("a").exists());
        ws.remove(&ws.agent_home("a")).unwrap();
        assert!(ws.remove(dir.path()).is_err());
    }

    /// The agent races the opening: it keeps swapping `.agents` with a
    /// link to a directory outside while the runner opens the thread over
    /// and over. Nothing is ever linked, created or changed outside.
    #[test]
    fn opening_holds_while_the_agent_swaps_its_sdk_dir_for_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        let t = ws.create_thread("a", "t").unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"precious").unwrap();
        let outcome = sdk_adapter::testing::race::race(&t.join(".agents"), &outside, || {
            ws.create_thread("a", "t").map(drop)
        });
        eprintln!("{outcome:?}");
    }
}
