//! Keeps every tool path inside the session workspace.
//!
//! A requested path (relative to the workspace, or absolute inside it) is
//! resolved the way the kernel would resolve it, one component at a time:
//! each component that exists is canonicalized (so symlinks are followed and
//! their targets checked), `..` climbs from the resolved directory, and the
//! first missing component switches to plain lexical joining (a missing
//! component cannot be a symlink). At every step the path must stay at or
//! under the canonical workspace, so `../x`, `/etc/passwd`, a symlink to
//! `/etc` and `link/../../x` through a symlinked directory are all refused.
//! Dangling symlinks are refused too: writing through one would create its
//! target wherever it points.
//!
//! This is a check by name, so a symlink swapped in between the check and
//! a later use by name would defeat it. The file tools therefore do not
//! open anything through it: they resolve beneath the workspace's directory
//! fd (`beneath`, `openat2(RESOLVE_BENEATH)`). It remains for what only
//! needs a name: permission matching and the LSP tools' paths (whose
//! document reads are again opened beneath the server root's fd).

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// The absolute path `requested` names inside `workspace`, or a message
/// saying why it is refused. The workspace itself is accepted (`.`).
pub fn confine(workspace: &Path, requested: &str) -> Result<PathBuf, String> {
    if requested.is_empty() {
        return Err("path is empty".to_string());
    }
    if requested.contains('\0') {
        return Err("path contains a NUL byte".to_string());
    }
    let root = workspace
        .canonicalize()
        .map_err(|err| format!("workspace {} is not accessible: {err}", workspace.display()))?;
    let requested_path = Path::new(requested);
    let relative = if requested_path.is_absolute() {
        strip_workspace(requested_path, workspace, &root)
            .ok_or_else(|| format!("{requested} is outside the workspace"))?
    } else {
        requested_path.to_path_buf()
    };
    resolve_under(&root, &relative).map_err(|why| format!("{requested}: {why}"))
}

/// `path` relative to the workspace, for display and permission matching
/// (`.` for the workspace itself). Falls back to the path as given.
pub fn relative_display(workspace: &Path, path: &Path) -> String {
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    match path.strip_prefix(&root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// The part of an absolute `path` below the workspace, given either as
/// passed in or in canonical form.
fn strip_workspace(path: &Path, workspace: &Path, root: &Path) -> Option<PathBuf> {
    for base in [root, workspace] {
        if let Ok(rest) = path.strip_prefix(base) {
            return Some(rest.to_path_buf());
        }
    }
    None
}

/// Walk `relative` from the canonical `root`, refusing any step outside it.
fn resolve_under(root: &Path, relative: &Path) -> Result<PathBuf, String> {
    let mut current = root.to_path_buf();
    // Components below the deepest existing ancestor, joined lexically.
    let mut missing: Vec<OsString> = Vec::new();
    for component in relative.components() {
        match component {
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err("unexpected root component".to_string());
            }
            Component::ParentDir => {
                if missing.pop().is_some() {
                    continue;
                }
                if current == root {
                    return Err("escapes the workspace through `..`".to_string());
                }
                current.pop();
            }
            Component::Normal(name) => {
                if !missing.is_empty() {
                    missing.push(name.to_os_string());
                    continue;
                }
                let next = current.join(name);
                match std::fs::symlink_metadata(&next) {
                    Ok(meta) => {
                        let resolved = next.canonicalize().map_err(|err| {
                            if meta.file_type().is_symlink() {
                                format!("{} is a dangling symlink", name.to_string_lossy())
                            } else {
                                format!("cannot resolve {}: {err}", name.to_string_lossy())
                            }
                        })?;
                        if !resolved.starts_with(root) {
                            return Err(format!(
                                "{} resolves outside the workspace",
                                name.to_string_lossy()
                            ));
                        }
                        current = resolved;
                    }
                    Err(err) if err.kind() == io::ErrorKind::NotFound => {
                        missing.push(name.to_os_string());
                    }
                    Err(err) => {
                        return Err(format!("cannot inspect {}: {err}", name.to_string_lossy()));
                    }
                }
            }
        }
    }
    for name in missing {
        current.push(name);
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn workspace() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("src/nested")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "x").unwrap();
        (dir, root)
    }

    #[test]
    fn relative_and_absolute_paths_inside_resolve() {
        let (_dir, root) = workspace();
        assert_eq!(
            confine(&root, "src/lib.rs").unwrap(),
            root.join("src/lib.rs")
        );
        assert_eq!(
            confine(&root, "./src/../src/lib.rs").unwrap(),
            root.join("src/lib.rs")
        );
        let abs = root.join("src/lib.rs");
        assert_eq!(confine(&root, abs.to_str().unwrap()).unwrap(), abs);
        assert_eq!(confine(&root, ".").unwrap(), root);
    }

    #[test]
    fn missing_components_are_joined_lexically() {
        let (_dir, root) = workspace();
        assert_eq!(
            confine(&root, "new/dir/../file.txt").unwrap(),
            root.join("new/file.txt")
        );
        assert_eq!(confine(&root, "new/../src").unwrap(), root.join("src"));
    }

    #[test]
    fn escapes_are_refused() {
        let (_dir, root) = workspace();
        assert!(confine(&root, "../x").unwrap_err().contains("escapes"));
        assert!(confine(&root, "src/../../x").is_err());
        assert!(confine(&root, "new/../../x").is_err());
        assert!(
            confine(&root, "/etc/passwd")
                .unwrap_err()
                .contains("outside")
        );
        assert!(confine(&root, "").is_err());
    }

    #[test]
    fn symlinks_pointing_outside_are_refused() {
        let (_dir, root) = workspace();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        symlink(outside.path(), root.join("out")).unwrap();
        symlink(root.join("src"), root.join("inside")).unwrap();
        symlink(root.join("nowhere"), root.join("dangling")).unwrap();
        assert!(
            confine(&root, "etc/passwd")
                .unwrap_err()
                .contains("outside")
        );
        assert!(confine(&root, "etc").is_err());
        assert!(confine(&root, "out/secret").is_err());
        assert!(confine(&root, "out/new-file").is_err());
        assert!(confine(&root, "dangling").unwrap_err().contains("dangling"));
        // A symlinked directory inside resolves to its target; `..` from there
        // climbs from the target, as the kernel does.
        assert_eq!(
            confine(&root, "inside/lib.rs").unwrap(),
            root.join("src/lib.rs")
        );
        assert_eq!(
            confine(&root, "inside/nested/..").unwrap(),
            root.join("src")
        );
    }

    #[test]
    fn relative_display_strips_the_workspace() {
        let (_dir, root) = workspace();
        assert_eq!(
            relative_display(&root, &root.join("src/lib.rs")),
            "src/lib.rs"
        );
        assert_eq!(relative_display(&root, &root), ".");
    }
}
