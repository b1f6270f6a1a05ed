//! Skill packages for one thread (`CreateThreadRequest.git_skill_packages`):
//! each package is a git repository at a commit and the directories of it
//! that hold skills. Each repository is admitted by the source policy
//! ([`super::policy`]), fetched once per (repository, commit) into the
//! cache shared by every thread ([`super::cache`], which records which
//! thread uses which checkout), checked like any skill package
//! ([`super::package::find_skills`]), and linked into that thread's skills
//! only.
//!
//! A thread without packages sees the agent's skills directory itself
//! (`.agents/skills` and `.claude/skills` are links to it). A thread with
//! packages gets a directory of its own at `.agents/skills` (and
//! `.claude/skills` links to it) holding one link per skill: its packages'
//! skills, and every skill of the agent whose name no package skill takes.
//! Agent skills installed later are linked in by [`link_agent_skills`].
//!
//! `commit_reference` is used as is when it is a full commit id; any other
//! reference (a branch, a tag) is resolved to one with `git ls-remote`
//! first, so the cache is always keyed by a commit.

use std::io;
use std::path::{Component, Path, PathBuf};

use sdk_adapter::beneath;

use super::SkillSettings;
use super::cache::Cache;
use super::coordinate::Source;
use super::fetch::{GitFetch, fetch_git, git};
use super::package::find_skills;
use super::policy::{Transport, redact_url};

/// One package of a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPackage {
    /// The repository (any form `InstallSkillsMpRequest` accepts).
    pub repository_url: String,
    /// The commit (or a branch or tag, resolved to a commit).
    pub commit_reference: String,
    /// Directories of the repository holding a skill (`SKILL.md`) or
    /// skills (`skills/*/SKILL.md`); none listed means the repository's
    /// root.
    pub directories: Vec<String>,
}

impl ThreadPackage {
    /// How errors name the package.
    pub fn label(&self, index: usize) -> String {
        format!(
            "create_thread_request.git_skill_packages[{index}] ({} at {})",
            redact_url(&self.repository_url),
            self.commit_reference
        )
    }
}

/// The git URL, the path prefix inside it and the transport that
/// `repository_url` names, if the source policy admits it.
fn repository(
    settings: &SkillSettings,
    repository_url: &str,
) -> Result<(String, String, Transport), String> {
    let admitted = settings.sources.admit(repository_url)?;
    match admitted.source {
        Source::Git { url, subpath, .. } => Ok((url, subpath, admitted.transport)),
        Source::Dir { path } => Ok((format!("file://{path}"), String::new(), Transport::File)),
    }
}

/// A skill of a thread's packages: its name and where it is in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSkill {
    /// Its name (from its `SKILL.md`).
    pub name: String,
    /// Its directory in the cache.
    pub dir: PathBuf,
}

/// Fetches (or finds in the cache under `workspace_root`) and checks every
/// package, records them as the thread's, then links their skills into
/// `workspace`. `git_envs[i]` is the git environment of package `i` (an
/// installation token, or nothing). Blocking (git and file system work).
/// The error names the package.
pub fn install(
    workspace_root: &Path,
    agent_skills: &Path,
    workspace: &Path,
    packages: &[ThreadPackage],
    git_envs: &[Vec<(String, String)>],
    settings: &SkillSettings,
) -> Result<Vec<ThreadSkill>, String> {
    let cache = Cache::new(workspace_root, settings.cache_max_bytes);
    let mut skills: Vec<ThreadSkill> = Vec::new();
    for (index, package) in packages.iter().enumerate() {
        let env = git_envs.get(index).map(Vec::as_slice).unwrap_or_default();
        let found = package_skills(&cache, workspace, package, env, settings)
            .map_err(|e| format!("{}: {e}", package.label(index)))?;
        for skill in found {
            if skills.iter().any(|s| s.name == skill.name) {
                return Err(format!(
                    "{}: a skill named {:?} comes from two of the thread's packages",
                    package.label(index),
                    skill.name
                ));
            }
            skills.push(skill);
        }
    }
    link(workspace, agent_skills, &skills)
        .map_err(|e| format!("create_thread_request.git_skill_packages: linking skills: {e}"))?;
    Ok(skills)
}

/// The skills of one package, fetched into the cache if not there yet.
fn package_skills(
    cache: &Cache,
    workspace: &Path,
    package: &ThreadPackage,
    env: &[(String, String)],
    settings: &SkillSettings,
) -> Result<Vec<ThreadSkill>, String> {
    let max_bytes = settings.max_bytes;
    let (url, prefix, transport) = repository(settings, &package.repository_url)?;
    let how = GitFetch {
        transport,
        env,
        max_bytes,
    };
    let commit = resolve(&url, &package.commit_reference, &how)?;
    let checkout = cache.checkout(&url, &commit, workspace, |staging| {
        fetch_git(&url, Some(&commit), "", staging, &how)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })?;
    let mut skills = Vec::new();
    // No directory listed: the repository is one package (its root).
    let root_only = [".".to_owned()];
    let directories = if package.directories.is_empty() {
        &root_only[..]
    } else {
        &package.directories[..]
    };
    for directory in directories {
        let relative = safe_relative(directory)?;
        let root = checkout.join(&prefix).join(relative);
        if !root.is_dir() {
            return Err(format!("no directory {directory:?} at commit {commit}"));
        }
        let found = find_skills(&root, max_bytes).map_err(|e| format!("{directory}: {e}"))?;
        skills.extend(found.into_iter().map(|s| ThreadSkill {
            name: s.name,
            dir: s.dir,
        }));
    }
    Ok(skills)
}

/// `directory` as a path inside the repository (no `..`, not absolute).
fn safe_relative(directory: &str) -> Result<PathBuf, String> {
    let path = Path::new(directory.trim_matches('/'));
    let inside = path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if directory.starts_with('/') || !inside {
        return Err(format!(
            "skills.directory_path {directory:?} must be a path inside the repository"
        ));
    }
    Ok(path.to_owned())
}

fn is_commit_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commit `reference` names in the repository at `url`.
fn resolve(url: &str, reference: &str, how: &GitFetch<'_>) -> Result<String, String> {
    if reference.starts_with('-') {
        return Err(format!(
            "commit_reference {reference:?} may not start with '-'"
        ));
    }
    if is_commit_id(reference) {
        return Ok(reference.to_ascii_lowercase());
    }
    let listed = git(&["ls-remote", "--", url, reference], None, how, None)
        .map_err(|m| format!("resolving {reference:?}: {m}"))?;
    listed
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .find(|sha| is_commit_id(sha))
        .map(str::to_owned)
        .ok_or_else(|| format!("no branch or tag {reference:?} in the repository"))
}

/// Gives `workspace` a skills directory of its own (see the module doc).
/// The agent can write `workspace`: every step goes beneath a directory fd
/// ([`sdk_adapter::beneath`]), so a link planted at `.agents`, `.claude` or
/// a skill's name is replaced (or refused), never followed.
fn link(workspace: &Path, agent_skills: &Path, skills: &[ThreadSkill]) -> io::Result<()> {
    let root = beneath::open_root(workspace)?;
    let agents = beneath::ensure_dir(&root, ".agents", None, None)?;
    let own = beneath::ensure_dir(&agents, "skills", None, None)?;
    for skill in skills {
        beneath::replace_symlink(&skill.dir, &own, &skill.name)?;
    }
    link_agent_skills(agent_skills, workspace)?;
    let claude = beneath::ensure_dir(&root, ".claude", None, None)?;
    beneath::replace_symlink(Path::new("../.agents/skills"), &claude, "skills")
}

/// Links every skill of the agent (in `agent_skills`) that `workspace`'s own
/// skills directory lacks; a workspace whose skills directory is the
/// agent's (a link) needs nothing. Called after each agent skill install.
pub fn link_agent_skills(agent_skills: &Path, workspace: &Path) -> io::Result<()> {
    let root = beneath::open_root(workspace)?;
    let Some(agents) = beneath::open_dir(&root, ".agents")? else {
        return Ok(());
    };
    let Some(own) = beneath::open_dir(&agents, "skills")? else {
        return Ok(());
    };
    let Ok(entries) = std::fs::read_dir(agent_skills) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.starts_with('.') || name.contains('/') {
            continue;
        }
        beneath::symlink_if_missing(&entry.path(), &own, name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_must_stay_inside_the_repository() {
        assert!(safe_relative("skills/lint").is_ok());
        assert!(safe_relative("./skills").is_ok());
        for bad in ["../x", "/etc", "skills/../../x"] {
            let err = safe_relative(bad).unwrap_err();
            assert!(err.contains("directory_path"), "{err}");
        }
    }

    #[test]
    fn commit_ids_are_used_as_is() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let how = GitFetch {
            transport: Transport::File,
            env: &[],
            max_bytes: 1,
        };
        assert_eq!(resolve("file:///nowhere", sha, &how).unwrap(), sha);
        assert!(resolve("file:///nowhere", "-x", &how).is_err());
    }

    /// Links planted at `.agents`, `.claude` and `.claude/skills` lead
    /// outside: linking replaces them and creates nothing outside.
    #[test]
    fn planted_links_are_replaced_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let workspace = tmp.path().join("w");
        let agent_skills = tmp.path().join("agent-skills");
        let outside = tmp.path().join("outside");
        for d in [&workspace, &agent_skills, &outside] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::create_dir(agent_skills.join("lint")).unwrap();
        std::fs::write(outside.join("keep"), b"precious").unwrap();
        std::os::unix::fs::symlink(&outside, workspace.join(".agents")).unwrap();
        std::fs::create_dir(workspace.join(".claude")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep"), workspace.join(".claude/skills")).unwrap();
        super::link(&workspace, &agent_skills, &[]).unwrap();
        let names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("keep")]);
        assert_eq!(std::fs::read(outside.join("keep")).unwrap(), b"precious");
        assert!(!workspace.join(".agents").is_symlink());
        assert!(workspace.join(".agents/skills/lint").is_symlink());
        assert_eq!(
            std::fs::read_link(workspace.join(".claude/skills")).unwrap(),
            std::path::Path::new("../.agents/skills")
        );
    }

    /// The agent races the linking: it keeps swapping `.agents/skills`
    /// (then `.claude`) with a link to a directory outside while the runner
    /// links the thread's skills over and over. Nothing is ever linked,
    /// created or changed outside.
    #[test]
    fn linking_holds_while_the_agent_swaps_the_skills_dir_for_a_link() {
        use sdk_adapter::testing::race::race;
        let tmp = tempfile::tempdir().unwrap();
        let workspace = tmp.path().join("w");
        let agent_skills = tmp.path().join("agent-skills");
        let outside = tmp.path().join("outside");
        for d in [&workspace, &agent_skills, &outside] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::create_dir(agent_skills.join("lint")).unwrap();
        std::fs::write(outside.join("keep"), b"precious").unwrap();
        let skills = [ThreadSkill {
            name: "review".into(),
            dir: tmp.path().join("cache/review"),
        }];
        std::fs::create_dir_all(workspace.join(".agents/skills")).unwrap();
        let outcome = race(&workspace.join(".agents/skills"), &outside, || {
            super::link(&workspace, &agent_skills, &skills)
        });
        eprintln!(".agents/skills: {outcome:?}");
        std::fs::create_dir_all(workspace.join(".claude")).unwrap();
        let outcome = race(&workspace.join(".claude"), &outside, || {
            super::link(&workspace, &agent_skills, &skills)
        });
        eprintln!(".claude: {outcome:?}");
    }
}
