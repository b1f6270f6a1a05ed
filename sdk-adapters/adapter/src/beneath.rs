//! File work inside a directory an agent can write (a thread's HOME or
//! workspace) that never follows a link the agent planted.
//!
//! Every name is resolved beneath a directory fd with `openat2(
//! RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` and no symlink is followed at
//! the last component; files are written to a fresh `O_CREAT | O_EXCL`
//! temporary name and renamed over the final name, so a link planted there
//! is replaced, not written through. Ownership and modes are set on the
//! opened fd (`fchown`/`fchmod`), never by path. Built on `rustix`, which
//! the workspace already uses for `openat2` (engine), rather than raw libc.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Gid, Mode, OFlags, ResolveFlags, Uid};

/// The resolution every lookup under a directory fd uses.
fn resolve() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

/// An owner to give what is created: `(uid, gid)`.
pub type Owner = (u32, u32);

/// Opens `path` (a directory the runner itself chose, e.g. a thread's HOME)
/// as a directory fd; the last component must not be a symlink.
pub fn open_root(path: &Path) -> std::io::Result<OwnedFd> {
    let fd = rustix::fs::open(
        path,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(fd)
}

/// The owner of the directory `dir` (what files created in it should get).
pub fn owner_of(dir: impl AsFd) -> std::io::Result<Owner> {
    let st = rustix::fs::fstat(dir)?;
    Ok((st.st_uid, st.st_gid))
}

/// Opens (creating if missing) the directory `name` (one component) under
/// `parent`, set to `mode` (`None`: a new one gets 0777 less the umask, an
/// existing one keeps its mode), owned by `owner`. A non-directory planted
/// at the name (a symlink, a file) is removed and a directory made in its
/// place.
pub fn ensure_dir(
    parent: impl AsFd,
    name: &str,
    mode: Option<u32>,
    owner: Option<Owner>,
) -> std::io::Result<OwnedFd> {
    let parent = parent.as_fd();
    let open = || {
        rustix::fs::openat2(
            parent,
            name,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
            resolve(),
        )
    };
    let fd = match open() {
        Ok(fd) => fd,
        Err(e) if e == rustix::io::Errno::NOENT => {
            mkdir(parent, name, mode)?;
            open()?
        }
        Err(e) if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR => {
            rustix::fs::unlinkat(parent, name, AtFlags::empty())?;
            mkdir(parent, name, mode)?;
            open()?
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(mode) = mode {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    }
    if let Some((uid, gid)) = owner {
        rustix::fs::fchown(&fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
    }
    Ok(fd)
}

/// Opens the directory `name` under `parent` if it is one (not a link to
/// one): `None` when it is missing or something else.
pub fn open_dir(parent: impl AsFd, name: &str) -> std::io::Result<Option<OwnedFd>> {
    match rustix::fs::openat2(
        parent,
        name,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve(),
    ) {
        Ok(fd) => Ok(Some(fd)),
        Err(e)
            if e == rustix::io::Errno::NOENT
                || e == rustix::io::Errno::LOOP
                || e == rustix::io::Errno::NOTDIR =>
        {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Makes `name` in `dir` a symlink to `target` unless something is there
/// already (then it is left alone).
pub fn symlink_if_missing(target: &Path, dir: impl AsFd, name: &str) -> std::io::Result<()> {
    match rustix::fs::symlinkat(target, dir, name) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::EXIST => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Makes `name` in `dir` a symlink to `target`, replacing a symlink there
/// (by renaming a fresh one over it); anything else there is an error.
pub fn replace_symlink(target: &Path, dir: impl AsFd, name: &str) -> std::io::Result<()> {
    let dir = dir.as_fd();
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st)
            if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Symlink =>
        {
            return Err(std::io::Error::other(format!(
                "{name} exists and is not a link"
            )));
        }
        Ok(_) => {}
        Err(e) if e == rustix::io::Errno::NOENT => {}
        Err(e) => return Err(e.into()),
    }
    for n in 0..64u32 {
        let tmp = format!(".{name}.tmp-{}-{n}", std::process::id());
        match rustix::fs::symlinkat(target, dir, tmp.as_str()) {
            Ok(()) => {
                let renamed = rustix::fs::renameat(dir, tmp.as_str(), dir, name);
                if renamed.is_err() {
                    let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
                }
                return Ok(renamed?);
            }
            Err(e) if e == rustix::io::Errno::EXIST => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(std::io::Error::other(format!(
        "no free temporary name for {name}"
    )))
}

fn mkdir(parent: impl AsFd, name: &str, mode: Option<u32>) -> std::io::Result<()> {
    let mode = Mode::from_raw_mode(mode.unwrap_or(0o777));
    match rustix::fs::mkdirat(parent, name, mode) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::EXIST => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes `bytes` as `name` (one component) in `dir` with `mode`, owned by
/// `owner`: through a fresh temporary name renamed over `name`, so whatever
/// was at `name` (a planted symlink included) is replaced, never followed.
pub fn write_file(
    dir: impl AsFd,
    name: &str,
    bytes: &[u8],
    mode: u32,
    owner: Option<Owner>,
) -> std::io::Result<()> {
    let dir = dir.as_fd();
    let (tmp, fd) = create_temp(dir, name, mode)?;
    let written = (|| {
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes)?;
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
        if let Some((uid, gid)) = owner {
            rustix::fs::fchown(&file, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
        }
        rustix::fs::renameat(dir, tmp.as_str(), dir, name)?;
        Ok::<(), std::io::Error>(())
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    written
}

/// Opens the regular file `name` (one component) in `dir` for reading,
/// with its size: `None` when it is missing or is anything but a regular
/// file (a symlink is not followed; a FIFO is opened without blocking and
/// refused).
fn open_regular(dir: impl AsFd, name: &str) -> std::io::Result<Option<(OwnedFd, u64)>> {
    let fd = match rustix::fs::openat2(
        dir,
        name,
        OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
        resolve(),
    ) {
        Ok(fd) => fd,
        Err(e)
            if e == rustix::io::Errno::NOENT
                || e == rustix::io::Errno::LOOP
                || e == rustix::io::Errno::NOTDIR =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some((fd, u64::try_from(st.st_size).unwrap_or(u64::MAX))))
}

/// Reads the regular file `name` (one component) in `dir`, at most `limit`
/// bytes: `None` when it is missing, or is anything but a regular file (a
/// symlink is not followed), or is larger. For reading a file an agent may
/// once have been able to replace (an operator's SDK home of an older
/// runner): a link planted there never makes the runner copy its target.
pub fn read_file(dir: impl AsFd, name: &str, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let Some((fd, size)) = open_regular(dir, name)? else {
        return Ok(None);
    };
    if size > limit {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Ok(None);
    }
    Ok(Some(bytes))
}

/// Opens the regular file `name` (one component) in `dir` to read it
/// through: `None` as for [`read_file`] (no link followed, a FIFO refused
/// without blocking), whatever its size.
pub fn open_file(dir: impl AsFd, name: &str) -> std::io::Result<Option<std::fs::File>> {
    Ok(open_regular(dir, name)?.map(|(fd, _)| std::fs::File::from(fd)))
}

/// Removes `name` (one component) from `dir` if present; a symlink there is
/// removed itself (its target is never touched).
pub fn remove_file(dir: impl AsFd, name: &str) -> std::io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::NOENT => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A new file `.<name>.tmp-<pid>-<n>` created exclusively in `dir`.
fn create_temp(dir: impl AsFd, name: &str, mode: u32) -> std::io::Result<(String, OwnedFd)> {
    let dir = dir.as_fd();
    for n in 0..64u32 {
        let tmp = format!(".{name}.tmp-{}-{n}", std::process::id());
        match rustix::fs::openat2(
            dir,
            tmp.as_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode & 0o600),
            resolve(),
        ) {
            Ok(fd) => return Ok((tmp, fd)),
            Err(e) if e == rustix::io::Errno::EXIST => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(std::io::Error::other(format!(
        "no free temporary name for {name}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_link_at_the_name_is_replaced_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, b"precious").unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::create_dir(home.join(".d")).unwrap();
        std::os::unix::fs::symlink(&outside, home.join(".d/auth.json")).unwrap();
        let root = open_root(&home).unwrap();
        let dir = ensure_dir(&root, ".d", Some(0o700), None).unwrap();
        write_file(&dir, "auth.json", b"seed", 0o600, None).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
        assert_eq!(std::fs::read(home.join(".d/auth.json")).unwrap(), b"seed");
        assert!(!home.join(".d/auth.json").is_symlink());
    }

    #[test]
    fn reading_follows_no_link_and_takes_regular_files_only() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, b"precious").unwrap();
        let dir = tmp.path().join("d");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("f"), b"mine").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        let root = open_root(&dir).unwrap();
        assert_eq!(
            read_file(&root, "f", 4).unwrap().as_deref(),
            Some(&b"mine"[..])
        );
        assert_eq!(read_file(&root, "f", 3).unwrap(), None, "too large");
        assert_eq!(read_file(&root, "link", 64).unwrap(), None);
        assert_eq!(read_file(&root, "sub", 64).unwrap(), None);
        assert_eq!(read_file(&root, "missing", 64).unwrap(), None);
    }

    #[test]
    fn a_planted_link_at_the_directory_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::symlink(&outside, home.join(".d")).unwrap();
        let root = open_root(&home).unwrap();
        let dir = ensure_dir(&root, ".d", Some(0o700), None).unwrap();
        write_file(&dir, "f", b"x", 0o600, None).unwrap();
        assert!(!outside.join("f").exists());
        assert!(home.join(".d").is_dir() && !home.join(".d").is_symlink());
    }
}
