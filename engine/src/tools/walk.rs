//! The file walk grep and glob share: `.gitignore`-aware (with or without a
//! git repository, via the `ignore` crate), hidden files included, `.git`
//! skipped, and symlinks only when they resolve inside the workspace.
//!
//! The `ignore` crate walks by name; every file it yields is checked again
//! by resolving its workspace-relative path beneath the workspace fd
//! (`beneath`), and whoever opens it (grep) opens it the same way, so a
//! directory swapped for a symlink mid-walk cannot make a tool read outside.

use std::path::{Path, PathBuf};

use ignore::gitignore::Gitignore;
use ignore::{Match, WalkBuilder};

use super::beneath::WorkspaceRoot;

/// One file found by the walk.
pub(crate) struct WalkedFile {
    /// Path relative to the workspace, as shown to the model.
    pub(crate) display: String,
    /// Path relative to the workspace, to open beneath its fd.
    pub(crate) rel: PathBuf,
    /// Path as walked (under the walk root).
    pub(crate) walked: PathBuf,
}

/// Files under `root` (a confined path inside `workspace`; a file yields
/// itself).
///
/// Like ripgrep given an explicit path: `root` itself is searched even when
/// ignored, and the ignore files found below it apply. The `.gitignore` and
/// `.ignore` files of the directories from the workspace down to `root`'s
/// parent apply too; those above the workspace (a parent repository's) do
/// not.
pub(crate) fn files<'a>(
    workspace_root: &'a WorkspaceRoot,
    root: &Path,
) -> impl Iterator<Item = WalkedFile> + 'a {
    let workspace = workspace_root.path().to_path_buf();
    let outer = outer_ignores(&workspace, root);
    let root = root.to_path_buf();
    WalkBuilder::new(&root)
        .standard_filters(true)
        .hidden(false)
        .parents(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |entry| {
            entry.file_name() != ".git"
                && (entry.depth() == 0 || !outer_ignored(&outer, entry.path(), entry_is_dir(entry)))
        })
        .build()
        .filter_map(Result::ok)
        .filter_map(move |entry| {
            let file_type = entry.file_type()?;
            if !file_type.is_file() && !file_type.is_symlink() {
                return None;
            }
            let walked = entry.into_path();
            let rel = walked.strip_prefix(&workspace).ok()?.to_path_buf();
            // Resolved beneath the workspace fd: a symlink leading out (or a
            // directory swapped for one) is skipped.
            if rel.as_os_str().is_empty() || !workspace_root.is_file(&rel) {
                return None;
            }
            Some(WalkedFile {
                display: rel.display().to_string(),
                rel,
                walked,
            })
        })
}

/// The ignore files of the directories from `workspace` down to `root`'s
/// parent, outermost first.
fn outer_ignores(workspace: &Path, root: &Path) -> Vec<Gitignore> {
    let Ok(below) = root.strip_prefix(workspace) else {
        return Vec::new();
    };
    if below.as_os_str().is_empty() {
        return Vec::new();
    }
    let mut dirs = vec![workspace.to_path_buf()];
    let mut current = workspace.to_path_buf();
    let steps: Vec<_> = below.components().collect();
    for component in steps.iter().take(steps.len().saturating_sub(1)) {
        current.push(component);
        dirs.push(current.clone());
    }
    let mut matchers = Vec::new();
    for dir in dirs {
        for name in [".gitignore", ".ignore"] {
            let file = dir.join(name);
            if file.is_file() {
                let (matcher, _errors) = Gitignore::new(&file);
                matchers.push(matcher);
            }
        }
    }
    matchers
}

/// Whether the outer ignore files exclude `path`; deeper files override
/// shallower ones. Only the entry itself is checked: the walk never enters
/// an excluded directory, and `root` (depth 0) is exempt.
fn outer_ignored(matchers: &[Gitignore], path: &Path, is_dir: bool) -> bool {
    let mut ignored = false;
    for matcher in matchers {
        match matcher.matched(path, is_dir) {
            Match::Ignore(_) => ignored = true,
            Match::Whitelist(_) => ignored = false,
            Match::None => {}
        }
    }
    ignored
}

fn entry_is_dir(entry: &ignore::DirEntry) -> bool {
    entry.file_type().is_some_and(|kind| kind.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn respects_gitignore_and_skips_escaping_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::write(root.join("a.rs"), "").unwrap();
        std::fs::write(root.join("x.log"), "").unwrap();
        std::fs::write(root.join("target/out.rs"), "").unwrap();
        std::fs::write(root.join(".git/config"), "").unwrap();
        symlink("/etc/hostname", root.join("host")).unwrap();
        symlink("a.rs", root.join("b.rs")).unwrap();
        // RESOLVE_BENEATH refuses absolute symlinks, even into the workspace.
        symlink(root.join("a.rs"), root.join("c.rs")).unwrap();
        let mut found: Vec<String> = files(&WorkspaceRoot::open(&root).unwrap(), &root)
            .map(|f| f.display)
            .collect();
        found.sort();
        assert_eq!(found, vec![".gitignore", "a.rs", "b.rs"]);
    }

    #[test]
    fn subdirectory_walks_use_workspace_ignores_but_not_parent_ones() {
        let parent = tempfile::tempdir().unwrap();
        let parent = parent.path().canonicalize().unwrap();
        // A parent directory that ignores the whole workspace.
        std::fs::write(parent.join(".gitignore"), "ws/\n").unwrap();
        let root = parent.join("ws");
        std::fs::create_dir_all(root.join("sub/gen")).unwrap();
        std::fs::create_dir_all(root.join("other")).unwrap();
        std::fs::write(root.join(".gitignore"), "gen/\n").unwrap();
        std::fs::write(root.join("sub/a.rs"), "").unwrap();
        std::fs::write(root.join("sub/gen/b.rs"), "").unwrap();
        std::fs::write(root.join("other/c.rs"), "").unwrap();
        let found: Vec<String> = files(&WorkspaceRoot::open(&root).unwrap(), &root.join("sub"))
            .map(|f| f.display)
            .collect();
        assert_eq!(found, vec!["sub/a.rs"]);
        let single: Vec<String> = files(
            &WorkspaceRoot::open(&root).unwrap(),
            &root.join("other/c.rs"),
        )
        .map(|f| f.display)
        .collect();
        assert_eq!(single, vec!["other/c.rs"]);
        // An explicitly named ignored directory is searched (as ripgrep does).
        let explicit: Vec<String> =
            files(&WorkspaceRoot::open(&root).unwrap(), &root.join("sub/gen"))
                .map(|f| f.display)
                .collect();
        assert_eq!(explicit, vec!["sub/gen/b.rs"]);
    }
}
