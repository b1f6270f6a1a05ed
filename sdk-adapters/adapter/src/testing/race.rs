//! A hostile agent racing the runner's own file work: a thread that keeps
//! swapping a directory the runner writes into with a symlink to a
//! directory outside (`renameat2(RENAME_EXCHANGE)`, what the agent's
//! `bash` can run in a loop), and a snapshot of that outside directory to
//! show nothing was written, chowned, chmodded or linked there.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a swapper runs at most.
const SWAP_LIMIT: Duration = Duration::from_secs(3);

/// `renameat2(RENAME_EXCHANGE)` of two absolute paths.
fn exchange(a: &CString, b: &CString) -> bool {
    // SAFETY: both are NUL-terminated paths that outlive the call.
    unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        ) == 0
    }
}

fn is_dir_not_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// A thread swapping `target` (a directory the runner works in) with a
/// symlink to `outside`, for at most [`SWAP_LIMIT`]. When the runner has
/// replaced the link it found (so both names are directories), the spare
/// directory is removed and a fresh link planted, so the pressure stays on.
pub struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicUsize>,
    handle: JoinHandle<()>,
}

impl Swapper {
    /// Starts swapping `target` with a link to `outside` kept at
    /// `<target>.swap`.
    pub fn start(target: &Path, outside: &Path) -> Self {
        let mut spare = target.as_os_str().to_owned();
        spare.push(".swap");
        let spare = PathBuf::from(spare);
        let _ = std::fs::remove_file(&spare);
        std::os::unix::fs::symlink(outside, &spare).unwrap();
        let a = CString::new(target.as_os_str().as_bytes()).unwrap();
        let b = CString::new(spare.as_os_str().as_bytes()).unwrap();
        let (target, outside) = (target.to_path_buf(), outside.to_path_buf());
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicUsize::new(0));
        let handle = {
            let (stop, swaps) = (stop.clone(), swaps.clone());
            std::thread::spawn(move || {
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) && started.elapsed() < SWAP_LIMIT {
                    if exchange(&a, &b) {
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                    if is_dir_not_link(&target) && is_dir_not_link(&spare) {
                        let _ = std::fs::remove_dir_all(&spare);
                        let _ = std::os::unix::fs::symlink(&outside, &spare);
                    } else if std::fs::symlink_metadata(&spare).is_err() {
                        let _ = std::os::unix::fs::symlink(&outside, &spare);
                    }
                }
                // Leave things as they were: the directory back at `target`
                // and no link beside it, so what the test does next (another
                // race beneath `target`) does not go through a link the
                // swapper left and write outside itself.
                if !is_dir_not_link(&target) && is_dir_not_link(&spare) {
                    exchange(&a, &b);
                }
                if std::fs::symlink_metadata(&spare).is_ok_and(|m| m.file_type().is_symlink()) {
                    let _ = std::fs::remove_file(&spare);
                }
            })
        };
        Self {
            stop,
            swaps,
            handle,
        }
    }

    /// Stops the swapper; how many swaps it made.
    pub fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap();
        self.swaps.load(Ordering::Relaxed)
    }
}

/// One entry of a [`Snapshot`]: type and mode bits, owner, and the bytes of
/// a file or the target of a link.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    /// The owner.
    pub uid: u32,
    /// The group.
    pub gid: u32,
    /// A file's bytes, a link's target, empty for a directory.
    pub bytes: Vec<u8>,
}

/// Everything under a directory (itself included), never following a link.
pub type Snapshot = BTreeMap<PathBuf, Entry>;

/// The [`Snapshot`] of `dir`.
pub fn snapshot(dir: &Path) -> Snapshot {
    let mut all = Snapshot::new();
    walk(dir, Path::new(""), &mut all);
    all
}

fn walk(path: &Path, rel: &Path, all: &mut Snapshot) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let bytes = if meta.is_file() {
        std::fs::read(path).unwrap()
    } else if meta.file_type().is_symlink() {
        std::fs::read_link(path)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec()
    } else {
        Vec::new()
    };
    all.insert(
        rel.to_path_buf(),
        Entry {
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
            bytes,
        },
    );
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            let name = entry.unwrap().file_name();
            walk(&path.join(&name), &rel.join(&name), all);
        }
    }
}

/// What racing the runner came to.
#[derive(Debug)]
pub struct Outcome {
    /// Rounds the runner's work succeeded.
    pub done: usize,
    /// Rounds it refused (returned an error).
    pub refused: usize,
    /// Swaps the agent made.
    pub swaps: usize,
}

/// Runs `work` (the runner's file work) over and over for about two
/// seconds while a [`Swapper`] swaps `target` with a link to `outside`,
/// then checks that `outside` is exactly as it was: no new entry, no
/// changed byte, mode or owner. Panics otherwise, or if the swapper never
/// swapped or the work never once succeeded.
pub fn race(
    target: &Path,
    outside: &Path,
    mut work: impl FnMut() -> std::io::Result<()>,
) -> Outcome {
    let before = snapshot(outside);
    let swapper = Swapper::start(target, outside);
    let (mut done, mut refused) = (0, 0);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        match work() {
            Ok(()) => done += 1,
            Err(_) => refused += 1,
        }
    }
    let swaps = swapper.stop();
    let outcome = Outcome {
        done,
        refused,
        swaps,
    };
    assert_eq!(snapshot(outside), before, "outside changed: {outcome:?}");
    assert!(swaps > 0, "the swapper never swapped: {outcome:?}");
    assert!(done > 0, "the work never succeeded: {outcome:?}");
    outcome
}
