//! Putting checked skills into place and keeping the lock file.
//!
//! Each skill is staged in full beside its final place and then swapped in
//! with one `renameat2(RENAME_EXCHANGE)` (or a plain rename when it is new),
//! so a reader of `.agents/skills/<name>/` sees the old skill or the new one,
//! never a half-copied one. A skill whose content hash matches the lock is
//! left alone (installing the same version again is a no-op).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::SkillError;
use super::package::Skill;

/// `.agents/.skill-lock.json`
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Lock {
    /// The lock file's format version.
    pub version: u32,
    /// The installed skills, by name.
    pub skills: BTreeMap<String, LockEntry>,
}

/// One installed skill in the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// The skill's name.
    pub name: String,
    /// The package coordinate it came from.
    pub source: String,
    /// The commit it was installed from (git packages).
    pub resolved_commit: Option<String>,
    /// `sha256:` over the skill's relative paths and contents.
    pub content_hash: String,
    /// RFC 3339, UTC.
    pub installed_at: String,
}

/// What happened to one skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The skill's name.
    pub name: String,
    /// False when the same content was installed already.
    pub changed: bool,
}

/// Where an agent's lock file is.
pub fn lock_path(agent_home: &Path) -> std::path::PathBuf {
    agent_home.join(".agents").join(".skill-lock.json")
}

/// An agent's lock file (empty when missing or unreadable).
pub fn read_lock(agent_home: &Path) -> Lock {
    std::fs::read(lock_path(agent_home))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Lock {
            version: 1,
            ..Lock::default()
        })
}

/// Installs the package at `source` into the agent's skills (see the module doc).
pub fn install(
    agent_home: &Path,
    source: &str,
    commit: Option<&str>,
    skills: &[Skill],
) -> Result<Vec<Installed>, SkillError> {
    let skills_dir = agent_home.join(".agents").join("skills");
    std::fs::create_dir_all(&skills_dir)?;
    let mut lock = read_lock(agent_home);
    lock.version = 1;
    let mut out = Vec::with_capacity(skills.len());
    for skill in skills {
        let hash = content_hash(&skill.dir)?;
        let dest = skills_dir.join(&skill.name);
        let same = lock
            .skills
            .get(&skill.name)
            .is_some_and(|e| e.content_hash == hash)
            && dest.is_dir();
        if !same {
            let stage = skills_dir.join(format!(".stage-{}", uuid::Uuid::new_v4().simple()));
            copy_tree(&skill.dir, &stage)?;
            swap_into_place(&stage, &dest)?;
            lock.skills.insert(
                skill.name.clone(),
                LockEntry {
                    name: skill.name.clone(),
                    source: source.to_owned(),
                    resolved_commit: commit.map(str::to_owned),
                    content_hash: hash,
                    installed_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                        .to_string(),
                },
            );
        }
        out.push(Installed {
            name: skill.name.clone(),
            changed: !same,
        });
    }
    write_lock(agent_home, &lock)?;
    Ok(out)
}

fn write_lock(agent_home: &Path, lock: &Lock) -> Result<(), SkillError> {
    let path = lock_path(agent_home);
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    let text = serde_json::to_vec_pretty(lock).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

/// Move the fully staged `stage` to `dest`: an atomic exchange when `dest`
/// exists (the old content ends up in `stage` and is removed).
fn swap_into_place(stage: &Path, dest: &Path) -> Result<(), SkillError> {
    if !dest.exists() {
        std::fs::rename(stage, dest)?;
        return Ok(());
    }
    let a = CString::new(stage.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let b = CString::new(dest.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: two NUL-terminated paths; renameat2 touches no memory of ours.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc != 0 {
        // No RENAME_EXCHANGE on this file system: move aside, then in.
        let old = stage.with_extension("old");
        std::fs::rename(dest, &old)?;
        std::fs::rename(stage, dest)?;
        std::fs::remove_dir_all(&old)?;
        return Ok(());
    }
    std::fs::remove_dir_all(stage)?;
    Ok(())
}

/// Copy a skill directory (files keep their permissions, symlinks stay
/// symlinks; they were checked to stay inside the package).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let src = entry.path();
        let dst = to.join(&name);
        let ty = std::fs::symlink_metadata(&src)?.file_type();
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if ty.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// `sha256:<hex>` over every entry's relative path, kind and content, in
/// sorted order.
pub fn content_hash(dir: &Path) -> std::io::Result<String> {
    let mut entries = Vec::new();
    collect(dir, dir, &mut entries)?;
    entries.sort();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for rel in entries {
        let path = dir.join(&rel);
        let meta = std::fs::symlink_metadata(&path)?;
        ctx.update(rel.as_os_str().as_bytes());
        ctx.update(b"\0");
        if meta.file_type().is_symlink() {
            ctx.update(b"L");
            ctx.update(std::fs::read_link(&path)?.as_os_str().as_bytes());
        } else {
            ctx.update(b"F");
            ctx.update(&std::fs::read(&path)?);
        }
        ctx.update(b"\0");
    }
    let digest = ctx.finish();
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == ".git" {
            continue;
        }
        let path = entry.path();
        let ty = std::fs::symlink_metadata(&path)?.file_type();
        if ty.is_dir() {
            collect(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_owned());
        }
    }
    Ok(())
}
