//! Per-thread credential capabilities: what makes the credential socket
//! answer for a thread. A thread id alone is public (it is in every update
//! and in the helper's command line); the capability is a 256-bit secret
//! from the OS RNG, written to a file in the thread's private home
//! ([`CAPABILITY_FILE`], 0600; the home 0700) that only the thread's own
//! processes can read once the sandbox hides every other thread's home. The
//! helper reads the file and presents its content; the socket maps it back
//! to the thread ([`Capabilities::thread_of`]).
//!
//! The runner keeps only a SHA-256 digest of each capability, in memory.
//! A capability is issued when the thread is opened in this runner process
//! (created, or restored at start: a restarted runner issues new ones, so
//! every capability of an earlier run is dead) and revoked (forgotten, its
//! file removed) when the thread is deleted. It never appears in argv,
//! logs or `/status`, and is added to the process's redactor
//! ([`crate::util::redact::Redactor::process`]) when issued, so an agent printing
//! its own file reaches the control plane as `***`.
//!
//! The file is written without following symlinks an agent may have put in
//! its home: the home directory is opened once (`O_NOFOLLOW`), and the file
//! is created next to it under a temporary name and renamed into place
//! relative to that directory handle.

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use ring::rand::SecureRandom;

/// The capability file's name in the thread's home.
pub const CAPABILITY_FILE: &str = ".agent-runner-git-capability";
/// Random bytes per capability (hex-encoded in the file, after
/// [`CAPABILITY_PREFIX`]).
pub const CAPABILITY_BYTES: usize = 32;
/// What every capability starts with. Like GitHub's `ghs_`, it makes a
/// leaked one recognisable; uppercase, it also keeps the redactor fast:
/// every update's text is scanned for every capability, and the scan's
/// prefilter looks for bytes the secrets start with. Bare hex starts with
/// digits and `a`–`f`, found all through command output, line numbers and
/// hashes: 130–280 MB/s over digit-heavy text, where this prefix's rare
/// bytes let it skip at 5–110 GB/s (aho-corasick 1.1, 100 capabilities,
/// a `git log` and the bench's `say line N` script).
pub const CAPABILITY_PREFIX: &str = "ARC_";

type Digest = [u8; 32];

fn digest(capability: &str) -> Digest {
    let d = ring::digest::digest(&ring::digest::SHA256, capability.trim().as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// What is known of one thread's capability.
struct Issued {
    digest: Digest,
    home: PathBuf,
}

#[derive(Default)]
struct Table {
    /// digest → thread id.
    by_digest: HashMap<Digest, String>,
    /// thread id → its capability.
    by_thread: HashMap<String, Issued>,
}

/// The capabilities of this runner's threads.
pub struct Capabilities {
    table: Mutex<Table>,
    /// When agents run as another user: the capability file is given to
    /// that user (read by the helper, which runs as the agent).
    agent_uid: Option<u32>,
    rng: ring::rand::SystemRandom,
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("threads", &self.table().by_thread.len())
            .field("agent_uid", &self.agent_uid)
            .finish()
    }
}

/// Where the capability file of a thread whose home is `home` lives.
pub fn capability_file(home: &Path) -> PathBuf {
    home.join(CAPABILITY_FILE)
}

impl Capabilities {
    /// An empty table; files are handed to `agent_uid` when set.
    pub fn new(agent_uid: Option<u32>) -> Self {
        Self {
            table: Mutex::new(Table::default()),
            agent_uid,
            rng: ring::rand::SystemRandom::new(),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make sure `thread_id` has a live capability in its file under
    /// `home` (created 0700 if missing): the one already issued in this
    /// process if the file still holds it, else a new one (the old one
    /// dies). Returns the file's path.
    pub fn issue(&self, thread_id: &str, home: &Path) -> io::Result<PathBuf> {
        // Only HOME itself is private (0700); its parents keep the default
        // mode, or an agent running as another uid could not reach it.
        if let Some(parent) = home.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(home) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let dir = open_dir(home)?;
        let mut table = self.table();
        if let Some(issued) = table.by_thread.get(thread_id)
            && issued.home == home
            && read_at(&dir, CAPABILITY_FILE).is_ok_and(|held| digest(&held) == issued.digest)
        {
            return Ok(capability_file(home));
        }
        let mut bytes = [0u8; CAPABILITY_BYTES];
        self.rng
            .fill(&mut bytes)
            .map_err(|_| io::Error::other("the OS random number generator failed"))?;
        let capability = format!("{CAPABILITY_PREFIX}{}", hex(&bytes));
        crate::util::redact::Redactor::process().add(&capability);
        write_at(&dir, CAPABILITY_FILE, &capability, self.agent_uid)?;
        let fresh = digest(&capability);
        if let Some(old) = table.by_thread.insert(
            thread_id.to_owned(),
            Issued {
                digest: fresh,
                home: home.to_owned(),
            },
        ) {
            table.by_digest.remove(&old.digest);
        }
        table.by_digest.insert(fresh, thread_id.to_owned());
        Ok(capability_file(home))
    }

    /// The thread `presented` is the capability of, if it is live.
    pub fn thread_of(&self, presented: &str) -> Option<String> {
        if presented.trim().is_empty() {
            return None;
        }
        self.table().by_digest.get(&digest(presented)).cloned()
    }

    /// Forget `thread_id`'s capability and remove its file: whoever kept a
    /// copy gets nothing with it any more.
    pub fn revoke(&self, thread_id: &str) {
        let removed = {
            let mut table = self.table();
            let removed = table.by_thread.remove(thread_id);
            if let Some(issued) = &removed {
                table.by_digest.remove(&issued.digest);
            }
            removed
        };
        if let Some(issued) = removed {
            let gone = open_dir(&issued.home).and_then(|dir| unlink_at(&dir, CAPABILITY_FILE));
            match gone {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(thread_id, error = %e, "removing the thread's credential capability file failed (the capability is revoked all the same)")
                }
            }
        }
    }

    /// Threads with a live capability.
    pub fn len(&self) -> usize {
        self.table().by_thread.len()
    }

    /// Whether no thread has a capability.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn cstr(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::other("a path holds a NUL byte"))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `dir` opened as a directory, refusing a symlink in its last component.
fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let path = cstr(dir.as_os_str().as_bytes())?;
    // SAFETY: a valid NUL-terminated path; the fd returned is owned below.
    let fd = check(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Read `name` in `dir` (not following a symlink), at most 1 KiB.
fn read_at(dir: &OwnedFd, name: &str) -> io::Result<String> {
    let name = cstr(name.as_bytes())?;
    // SAFETY: a valid directory fd and NUL-terminated name.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut text = String::new();
    file.take(1024).read_to_string(&mut text)?;
    Ok(text)
}

/// Write `content` to `name` in `dir` atomically (a temporary file, 0600,
/// renamed over it), owned by `uid` when given. Not synced: a capability
/// lives only as long as this runner process (a restart issues new ones),
/// so surviving a power cut is worth nothing, and a creation waited for
/// the disk on each (threads of an agent are created one after another).
fn write_at(dir: &OwnedFd, name: &str, content: &str, uid: Option<u32>) -> io::Result<()> {
    let tmp_name = format!("{name}.{}.tmp", std::process::id());
    let tmp = cstr(tmp_name.as_bytes())?;
    let target = cstr(name.as_bytes())?;
    // A leftover of a crash: not a symlink followed, just removed.
    // SAFETY: a valid directory fd and NUL-terminated name.
    unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    // SAFETY: a valid directory fd and NUL-terminated name.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            tmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let written = (|| {
        if let Some(uid) = uid {
            // SAFETY: a valid fd; -1 keeps the group.
            check(unsafe { libc::fchown(file.as_raw_fd(), uid, u32::MAX) })?;
        }
        file.write_all(content.as_bytes())?;
        // SAFETY: valid fds and NUL-terminated names.
        check(unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                dir.as_raw_fd(),
                target.as_ptr(),
            )
        })?;
        Ok(())
    })();
    if written.is_err() {
        // SAFETY: a valid directory fd and NUL-terminated name.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    }
    written
}

fn unlink_at(dir: &OwnedFd, name: &str) -> io::Result<()> {
    let name = cstr(name.as_bytes())?;
    // SAFETY: a valid directory fd and NUL-terminated name.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_capability_maps_to_its_thread_only_and_dies_on_revoke() {
        let dir = tempfile::tempdir().unwrap();
        let caps = Capabilities::new(None);
        let home_a = dir.path().join("private/thr-a/home");
        let home_b = dir.path().join("private/thr-b/home");
        let file_a = caps.issue("thr-a", &home_a).unwrap();
        let file_b = caps.issue("thr-b", &home_b).unwrap();
        assert_eq!(file_a, home_a.join(CAPABILITY_FILE));
        assert_eq!(mode(&file_a), 0o600);
        assert_eq!(mode(&home_a), 0o700);
        let a = std::fs::read_to_string(&file_a).unwrap();
        let b = std::fs::read_to_string(&file_b).unwrap();
        assert_eq!(a.len(), CAPABILITY_PREFIX.len() + 2 * CAPABILITY_BYTES);
        assert!(a.starts_with(CAPABILITY_PREFIX), "{a}");
        assert_ne!(a, b);
        assert_eq!(caps.thread_of(&a).as_deref(), Some("thr-a"));
        assert_eq!(caps.thread_of(&b).as_deref(), Some("thr-b"));
        for bad in [
            "",
            "  ",
            "thr-a",
            CAPABILITY_PREFIX,
            &a[..32],
            &a[4..],
            &format!("{a}0"),
        ] {
            assert_eq!(caps.thread_of(bad), None, "{bad:?}");
        }
        // Issuing again while the file holds it keeps it.
        caps.issue("thr-a", &home_a).unwrap();
        assert_eq!(std::fs::read_to_string(&file_a).unwrap(), a);
        caps.revoke("thr-a");
        assert_eq!(caps.thread_of(&a), None);
        assert!(!file_a.exists());
        assert_eq!(caps.thread_of(&b).as_deref(), Some("thr-b"));
        assert_eq!(caps.len(), 1);
    }

    /// A runner that starts again issues new capabilities: the old file's
    /// content is worth nothing to the new table.
    #[test]
    fn a_new_runner_process_reissues() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let first = Capabilities::new(None);
        let file = first.issue("thr-a", &home).unwrap();
        let old = std::fs::read_to_string(&file).unwrap();
        let second = Capabilities::new(None);
        second.issue("thr-a", &home).unwrap();
        let new = std::fs::read_to_string(&file).unwrap();
        assert_ne!(old, new);
        assert_eq!(second.thread_of(&old), None);
        assert_eq!(second.thread_of(&new).as_deref(), Some("thr-a"));
    }

    /// A file the agent overwrote is replaced by a new capability (the one
    /// it overwrote dies with it).
    #[test]
    fn a_tampered_file_is_reissued() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let caps = Capabilities::new(None);
        let file = caps.issue("thr-a", &home).unwrap();
        let old = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, "guess").unwrap();
        caps.issue("thr-a", &home).unwrap();
        let new = std::fs::read_to_string(&file).unwrap();
        assert_ne!(new, old);
        assert_eq!(caps.thread_of(&old), None);
        assert_eq!(caps.thread_of("guess"), None);
        assert_eq!(caps.thread_of(&new).as_deref(), Some("thr-a"));
    }

    /// A symlink planted where the file goes is replaced, not followed.
    #[test]
    fn a_planted_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        std::os::unix::fs::symlink(&victim, home.join(CAPABILITY_FILE)).unwrap();
        let caps = Capabilities::new(None);
        let file = caps.issue("thr-a", &home).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(!std::fs::symlink_metadata(&file).unwrap().is_symlink());
        // A home that is itself a symlink is refused.
        let link = dir.path().join("linked-home");
        std::os::unix::fs::symlink(&home, &link).unwrap();
        assert!(caps.issue("thr-b", &link).is_err());
    }
}
