//! Opens workspace files through one directory fd, never by a path name the
//! agent could change underneath.
//!
//! The workspace root is opened once per tool call as a directory fd; every
//! path below it is resolved with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`, so the kernel itself refuses any resolution
//! (a `..`, an absolute symlink, a symlink swapped in mid-call) that would
//! leave the workspace. Relative symlinks that stay inside are followed;
//! absolute symlinks are refused even when they point inside (the kernel's
//! `RESOLVE_BENEATH` rule). Missing
//! parent directories are made with `mkdirat` on fds resolved the same way,
//! file content is read and written through the resulting fd, and
//! directories are listed through their own fd.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// How every path below the root is resolved.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
/// Retries when the kernel reports a concurrent rename (`EAGAIN`).
const RETRIES: usize = 64;

/// The workspace root, open as a directory.
pub(crate) struct WorkspaceRoot {
    fd: OwnedFd,
    /// The path it was opened by (canonical).
    path: PathBuf,
}

/// A requested path, relative to the root.
pub(crate) struct Target {
    /// Relative path handed to `openat2` (`.` for the root).
    pub(crate) rel: PathBuf,
    /// How the model sees it (lexically normalized, `.` for the root).
    pub(crate) shown: String,
}

/// One directory entry read through a directory fd.
pub(crate) struct Entry {
    pub(crate) name: OsString,
    pub(crate) is_dir: bool,
    /// The link's target, for a symlink (`None` if it could not be read).
    pub(crate) link: Option<Option<PathBuf>>,
}

/// The message for `err` while doing `verb` on `shown`.
pub(crate) fn why(verb: &str, shown: &str, err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::EXDEV) => format!(
            "{shown} leads outside the workspace (refused: a `..` or a symlink leaves it, \
             or a symlink is absolute)"
        ),
        Some(libc::ELOOP) => {
            format!("cannot {verb} {shown}: too many symlinks or a /proc magic link (refused)")
        }
        Some(libc::ENOSYS) => format!(
            "cannot {verb} {shown}: openat2 is unavailable (Linux 5.6+ is required), file access refused"
        ),
        Some(libc::EAGAIN) => {
            format!("cannot {verb} {shown}: it kept changing while being resolved")
        }
        _ => format!("cannot {verb} {shown}: {err}"),
    }
}

impl WorkspaceRoot {
    /// Opens the workspace root (a canonical path the agent cannot change).
    pub(crate) fn open(path: &Path) -> Result<Self, String> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|err| format!("workspace {} is not accessible: {err}", path.display()))?;
        Ok(Self {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// `requested` (relative, or absolute inside the workspace) as a target.
    pub(crate) fn target(&self, requested: &str) -> Result<Target, String> {
        if requested.is_empty() {
            return Err("path is empty".to_string());
        }
        if requested.contains('\0') {
            return Err("path contains a NUL byte".to_string());
        }
        let asked = Path::new(requested);
        let rel = if asked.is_absolute() {
            let canonical = self.path.canonicalize().ok();
            [Some(self.path.as_path()), canonical.as_deref()]
                .into_iter()
                .flatten()
                .find_map(|base| asked.strip_prefix(base).ok())
                .map(Path::to_path_buf)
                .ok_or_else(|| format!("{requested} is outside the workspace"))?
        } else {
            asked.to_path_buf()
        };
        let rel = if rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rel
        };
        Ok(Target {
            shown: lexical(&rel),
            rel,
        })
    }

    /// `openat2` beneath the root, retried while renames race it.
    fn open_at(&self, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        // openat2 refuses O_NOCTTY with O_PATH (EINVAL).
        let flags = if flags.contains(OFlags::PATH) {
            flags | OFlags::CLOEXEC
        } else {
            flags | OFlags::CLOEXEC | OFlags::NOCTTY
        };
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(&self.fd, rel, flags, mode, RESOLVE) {
                Err(Errno::AGAIN) if tries < RETRIES => tries += 1,
                other => return other.map_err(io::Error::from),
            }
        }
    }

    /// A regular file opened for reading (`verb` names the action in errors).
    pub(crate) fn read_file(&self, target: &Target, verb: &str) -> Result<File, String> {
        let fd = self
            .open_at(
                &target.rel,
                OFlags::RDONLY | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(|err| why(verb, &target.shown, &err))?;
        regular(fd, &target.shown)
    }

    /// A regular file opened for reading and writing; with `create`, a
    /// missing file (and its missing parents) is created. Also says whether
    /// the file existed.
    pub(crate) fn rw_file(&self, target: &Target, create: bool) -> Result<(File, bool), String> {
        let flags = OFlags::RDWR | OFlags::NONBLOCK;
        match self.open_at(&target.rel, flags, Mode::empty()) {
            Ok(fd) => return Ok((regular(fd, &target.shown)?, true)),
            Err(err) if create && err.kind() == io::ErrorKind::NotFound => {}
            Err(err) if err.raw_os_error() == Some(libc::EISDIR) => {
                return Err(format!("{} is a directory", target.shown));
            }
            Err(err) => return Err(why("open", &target.shown, &err)),
        }
        if !matches!(
            target.rel.components().next_back(),
            Some(Component::Normal(_))
        ) {
            return Err(format!("{} is a directory", target.shown));
        }
        self.make_parents(target)?;
        let fd = self
            .open_at(
                &target.rel,
                flags | OFlags::CREATE,
                Mode::from_raw_mode(0o666),
            )
            .map_err(|err| why("create", &target.shown, &err))?;
        Ok((regular(fd, &target.shown)?, false))
    }

    /// Creates the missing directories above `target`, each with `mkdirat`
    /// in a directory resolved beneath the root.
    fn make_parents(&self, target: &Target) -> Result<(), String> {
        let Some(parent) = target.rel.parent() else {
            return Ok(());
        };
        let mut prefix = PathBuf::new();
        let mut current: Option<OwnedFd> = None;
        for component in parent.components() {
            prefix.push(component);
            let dir_flags = OFlags::PATH | OFlags::DIRECTORY;
            let opened = match self.open_at(&prefix, dir_flags, Mode::empty()) {
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    let Component::Normal(name) = component else {
                        return Err(why("create the directories of", &target.shown, &err));
                    };
                    let here: BorrowedFd<'_> =
                        current.as_ref().map_or(self.fd.as_fd(), |fd| fd.as_fd());
                    match rustix::fs::mkdirat(here, name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(err) => {
                            return Err(why(
                                "create the directories of",
                                &target.shown,
                                &err.into(),
                            ));
                        }
                    }
                    self.open_at(&prefix, dir_flags, Mode::empty())
                }
                other => other,
            };
            current =
                Some(opened.map_err(|err| why("create the directories of", &target.shown, &err))?);
        }
        Ok(())
    }

    /// The entries of the directory `target`, read through its fd.
    pub(crate) fn list(&self, target: &Target) -> Result<Vec<Entry>, String> {
        let fd = self
            .open_at(
                &target.rel,
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .map_err(|err| match err.raw_os_error() {
                Some(libc::ENOTDIR) => format!("{} is not a directory", target.shown),
                _ => why("list", &target.shown, &err),
            })?;
        let reading = Dir::read_from(&fd).map_err(|err| why("list", &target.shown, &err.into()))?;
        let mut entries = Vec::new();
        for entry in reading {
            let entry = entry.map_err(|err| why("list", &target.shown, &err.into()))?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string();
            if name == "." || name == ".." {
                continue;
            }
            let mut kind = entry.file_type();
            if kind == FileType::Unknown {
                kind = rustix::fs::statat(&fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                    .map(|stat| FileType::from_raw_mode(stat.st_mode))
                    .unwrap_or(FileType::Unknown);
            }
            let link = (kind == FileType::Symlink).then(|| {
                rustix::fs::readlinkat(&fd, name.as_os_str(), Vec::new())
                    .ok()
                    .map(|target| PathBuf::from(OsStr::from_bytes(target.as_bytes())))
            });
            entries.push(Entry {
                name,
                is_dir: kind == FileType::Directory,
                link,
            });
        }
        Ok(entries)
    }

    /// Where `target` (a file or directory) really is, resolved beneath the
    /// root: the absolute path a walker may start from.
    pub(crate) fn real_path(&self, target: &Target) -> Result<(PathBuf, bool), String> {
        let fd = self
            .open_at(&target.rel, OFlags::PATH, Mode::empty())
            .map_err(|err| match err.kind() {
                io::ErrorKind::NotFound => format!("{} does not exist", target.shown),
                _ => why("open", &target.shown, &err),
            })?;
        let is_dir = rustix::fs::fstat(&fd)
            .map(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Directory)
            .map_err(|err| why("open", &target.shown, &err.into()))?;
        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        let real = std::fs::read_link(link).unwrap_or_else(|_| self.path.join(&target.rel));
        if !real.starts_with(&self.path) {
            return Err(format!(
                "{} leads outside the workspace (refused)",
                target.shown
            ));
        }
        Ok((real, is_dir))
    }

    /// Whether the workspace-relative `rel` resolves beneath the root to a
    /// regular file.
    pub(crate) fn is_file(&self, rel: &Path) -> bool {
        self.open_at(rel, OFlags::PATH, Mode::empty())
            .and_then(|fd| rustix::fs::fstat(&fd).map_err(io::Error::from))
            .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile)
    }

    /// The root's path (canonical).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// The content of `path` (absolute, under `root`), opened beneath `root`'s
/// fd; refused when it is larger than `max` bytes. For callers that hold a
/// path rather than a tool argument (LSP document sync).
pub(crate) fn read_under(root: &Path, path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let shown = path.display().to_string();
    let rel = path
        .strip_prefix(root)
        .map_err(|_| format!("{shown} is outside {}", root.display()))?;
    let opened = WorkspaceRoot::open(root)?;
    let target = Target {
        rel: if rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rel.to_path_buf()
        },
        shown,
    };
    let file = opened.read_file(&target, "read")?;
    let size = file
        .metadata()
        .map_err(|err| why("read", &target.shown, &err))?
        .len();
    if size > max {
        return Err(format!(
            "{} is {size} bytes, over the {max}-byte limit for the language server",
            target.shown
        ));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, max + 1), &mut bytes)
        .map_err(|err| why("read", &target.shown, &err))?;
    Ok(bytes)
}

/// Replaces the whole content of an open file.
pub(crate) fn replace_content(file: &mut File, content: &[u8]) -> io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(content)?;
    file.flush()
}

/// `fd` as a [`File`] if it is a regular file.
fn regular(fd: OwnedFd, shown: &str) -> Result<File, String> {
    let stat = rustix::fs::fstat(&fd).map_err(|err| why("open", shown, &err.into()))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(File::from(fd)),
        FileType::Directory => Err(format!("{shown} is a directory")),
        _ => Err(format!("{shown} is not a regular file")),
    }
}

/// `rel` with `.` dropped and `..` folded where it can be, for display.
fn lexical(rel: &Path) -> String {
    let mut parts: Vec<&OsStr> = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(name) => parts.push(name),
            Component::ParentDir => {
                if parts.last().is_some_and(|last| *last != "..") {
                    parts.pop();
                } else {
                    parts.push(OsStr::new(".."));
                }
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        return ".".to_string();
    }
    parts
        .iter()
        .map(|part| part.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn root() -> (tempfile::TempDir, WorkspaceRoot) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(path.join("src")).unwrap();
        std::fs::write(path.join("src/lib.rs"), "lib").unwrap();
        let root = WorkspaceRoot::open(&path).unwrap();
        (dir, root)
    }

    #[test]
    fn resolves_inside_and_refuses_outside() {
        let (_dir, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        symlink(outside.path(), root.path().join("out")).unwrap();
        symlink("src", root.path().join("inside")).unwrap();
        let mut text = String::new();
        let target = root.target("inside/lib.rs").unwrap();
        assert_eq!(target.shown, "inside/lib.rs");
        root.read_file(&target, "read")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "lib");
        for path in ["out/secret", "../x", "src/../../x", "out"] {
            let err = root
                .read_file(&root.target(path).unwrap(), "read")
                .unwrap_err();
            assert!(err.contains("leads outside the workspace"), "{path}: {err}");
        }
        let err = root
            .rw_file(&root.target("out/new/x").unwrap(), true)
            .unwrap_err();
        assert!(err.contains("outside"), "{err}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
        assert!(root.target("/etc/passwd").is_err());
        assert_eq!(root.target("./a/../b").unwrap().shown, "b");
        assert_eq!(root.target(".").unwrap().shown, ".");
    }

    #[test]
    fn creates_parents_beneath() {
        let (_dir, root) = root();
        let target = root.target("new/dir/../f.txt").unwrap();
        let (mut file, existed) = root.rw_file(&target, true).unwrap();
        assert!(!existed);
        replace_content(&mut file, b"x").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("new/f.txt")).unwrap(),
            "x"
        );
        let names: Vec<_> = root
            .list(&root.target("new").unwrap())
            .unwrap()
            .into_iter()
            .map(|entry| (entry.name, entry.is_dir))
            .collect();
        assert_eq!(names.len(), 2);
    }
}
