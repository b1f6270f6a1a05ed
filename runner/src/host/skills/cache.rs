//! The cache of threads' skill packages (`<workspace root>/.skill-cache/`):
//! one checkout per (repository, commit), shared by every thread, with a
//! total size bound (`--skill-cache-max-bytes`).
//!
//! Which thread uses which checkout is written down by the runner, not read
//! from the thread's workspace (the agent can write that): one record per
//! thread under `.skill-cache/.users/`, outside every sandbox's writable
//! paths. The record is what the thread's sandbox may read
//! ([`thread_entries`]) and what keeps a checkout from eviction. A record
//! whose workspace is gone (the thread was deleted, or its creation failed)
//! no longer counts and is removed at the next eviction.
//!
//! When a new checkout makes the cache larger than its bound, the least
//! recently used checkouts no live thread uses are removed until it fits
//! again (a checkout is "used" when a thread is created with it). One lock
//! orders placing a checkout, recording its user and evicting, so a
//! checkout is never evicted between being found and being recorded.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::fetch::dir_size;

/// The cache's directory name under the workspace root (agent ids may not
/// start with `.`, so no agent's home can take it).
pub const CACHE_DIR: &str = ".skill-cache";

/// Where the per-thread records are, inside the cache.
const USERS_DIR: &str = ".users";

/// Placing, recording and evicting happen one at a time in this process
/// (one runner owns a workspace root).
static BOOKKEEPING: Mutex<()> = Mutex::new(());

/// The checkouts one thread uses.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Users {
    /// The thread's workspace (the thread is live while it exists).
    workspace: PathBuf,
    /// Its checkouts' directory names in the cache.
    entries: Vec<String>,
}

/// The cache under a workspace root.
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
}

impl Cache {
    /// The cache of `workspace_root`, bounded to `max_bytes` in total.
    pub fn new(workspace_root: &Path, max_bytes: u64) -> Self {
        Self {
            dir: workspace_root.join(CACHE_DIR),
            max_bytes,
        }
    }

    /// The checkout of `url` at `commit`, recorded as used by the thread at
    /// `workspace`. Missing, it is made by `fetch` in a staging directory
    /// (removed whatever happens) and renamed into place, so no thread sees
    /// half of one; then the cache is brought back under its bound.
    pub fn checkout(
        &self,
        url: &str,
        commit: &str,
        workspace: &Path,
        fetch: impl FnOnce(&Path) -> Result<(), String>,
    ) -> Result<PathBuf, String> {
        let name = entry_name(url, commit);
        let dir = self.dir.join(&name);
        {
            let _held = lock();
            if dir.is_dir() {
                tracing::debug!(%commit, "thread skill package found in the cache");
                touch(&dir);
                self.record(workspace, &name)?;
                return Ok(dir);
            }
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("creating the cache: {e}"))?;
        let staging = self
            .dir
            .join(format!(".fetch-{}", uuid::Uuid::new_v4().simple()));
        let placed = fetch(&staging).and_then(|()| {
            let _held = lock();
            match std::fs::rename(&staging, &dir) {
                Ok(()) => tracing::info!(%commit, "thread skill package fetched into the cache"),
                // Another thread put it there meanwhile: theirs is as good.
                Err(_) if dir.is_dir() => {}
                Err(e) => return Err(format!("caching the checkout: {e}")),
            }
            touch(&dir);
            self.record(workspace, &name)?;
            self.evict();
            Ok(dir)
        });
        if staging.exists() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        placed
    }

    /// Adds `name` to the record of the thread at `workspace`. Called with
    /// the lock held.
    fn record(&self, workspace: &Path, name: &str) -> Result<(), String> {
        let path = users_path(&self.dir, workspace);
        let mut users = read_users(&path)
            .filter(|u| u.workspace == workspace)
            .unwrap_or_else(|| Users {
                workspace: workspace.to_owned(),
                entries: Vec::new(),
            });
        if users.entries.iter().any(|e| e == name) {
            return Ok(());
        }
        users.entries.push(name.to_owned());
        write_users(&self.dir.join(USERS_DIR), &path, &users)
            .map_err(|e| format!("recording the thread's skill packages: {e}"))
    }

    /// Removes the least recently used checkouts no live thread uses until
    /// the cache fits its bound; drops the records of threads that are
    /// gone. Called with the lock held. Failures are logged: a cache over
    /// its bound still works.
    pub(crate) fn evict(&self) {
        let live = self.live_entries();
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = listing
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| {
                let meta = e.path().symlink_metadata().ok()?;
                meta.is_dir().then(|| {
                    let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    (used, dir_size(&e.path()), e.path())
                })
            })
            .collect();
        let mut total: u64 = entries.iter().map(|(_, size, _)| size).sum();
        if total <= self.max_bytes {
            return;
        }
        entries.sort();
        for (_, size, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            let in_use = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| live.contains(n));
            if in_use {
                continue;
            }
            match remove_entry(&self.dir, &path) {
                Ok(()) => {
                    total = total.saturating_sub(size);
                    tracing::info!(entry = %path.display(), bytes = size, "evicted a skill package from the cache");
                }
                Err(e) => {
                    tracing::warn!(entry = %path.display(), error = %e, "evicting a skill package failed");
                }
            }
        }
        if total > self.max_bytes {
            tracing::warn!(
                bytes = total,
                bound = self.max_bytes,
                "the skill cache is over its bound with packages live threads use"
            );
        }
    }

    /// The names of the checkouts live threads use; records of threads
    /// that are gone are removed.
    fn live_entries(&self) -> HashSet<String> {
        let mut live = HashSet::new();
        let Ok(records) = std::fs::read_dir(self.dir.join(USERS_DIR)) else {
            return live;
        };
        for record in records.flatten() {
            let path = record.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match read_users(&path) {
                Some(users) if users.workspace.is_dir() => live.extend(users.entries),
                _ => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        live
    }
}

/// The checkouts the thread at `workspace` was created with (the runner's
/// record, never the workspace's links): what its sandbox may read.
pub fn thread_entries(workspace_root: &Path, workspace: &Path) -> Vec<PathBuf> {
    let dir = workspace_root.join(CACHE_DIR);
    let Some(users) = read_users(&users_path(&dir, workspace)) else {
        return Vec::new();
    };
    if users.workspace != workspace {
        return Vec::new();
    }
    users
        .entries
        .iter()
        .filter(|name| !name.starts_with('.') && !name.contains('/') && !name.is_empty())
        .map(|name| dir.join(name))
        .filter(|path| path.is_dir())
        .collect()
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    BOOKKEEPING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `<first 8 bytes of sha256(url), hex>-<commit>`
fn entry_name(url: &str, commit: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, url.as_bytes());
    let repo: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{repo}-{commit}")
}

fn users_path(cache: &Path, workspace: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, workspace.as_os_str().as_bytes());
    let key: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    cache.join(USERS_DIR).join(format!("{key}.json"))
}

/// Writes a record whole (a reader sees the old one or the new one).
fn write_users(dir: &Path, path: &Path, users: &Users) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(
        &tmp,
        serde_json::to_vec(users).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, path)
}

fn read_users(path: &Path) -> Option<Users> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Marks a checkout used now (its modification time orders eviction).
fn touch(dir: &Path) {
    if let Err(e) = std::fs::File::open(dir).and_then(|f| f.set_modified(SystemTime::now())) {
        tracing::debug!(dir = %dir.display(), error = %e, "marking a cached skill package used failed");
    }
}

/// Renames the checkout out of sight first (no thread can find half of
/// one), then removes it.
fn remove_entry(cache: &Path, path: &Path) -> std::io::Result<()> {
    let doomed = cache.join(format!(".evict-{}", uuid::Uuid::new_v4().simple()));
    std::fs::rename(path, &doomed)?;
    std::fs::remove_dir_all(&doomed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(dir: &Path, bytes: usize) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("blob"), vec![7u8; bytes]).map_err(|e| e.to_string())
    }

    fn set_used(dir: &Path, secs: u64) {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        std::fs::File::open(dir).unwrap().set_modified(at).unwrap();
    }

    /// Over the bound, the least recently used checkouts no live thread
    /// uses go; a live thread's stay even when older; a deleted thread's
    /// record stops counting.
    #[test]
    fn eviction_removes_the_least_recently_used_unused_checkouts() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let live = root.join("a/threads/live");
        let gone = root.join("a/threads/gone");
        for w in [&live, &gone] {
            std::fs::create_dir_all(w).unwrap();
        }
        // Room for three checkouts of 1,000 bytes.
        let cache = Cache::new(root, 3_500);
        let old_live = cache.checkout("u", "c1", &live, |d| fill(d, 1000)).unwrap();
        let old_gone = cache.checkout("u", "c2", &gone, |d| fill(d, 1000)).unwrap();
        let newer = cache.checkout("u", "c3", &gone, |d| fill(d, 1000)).unwrap();
        set_used(&old_live, 1);
        set_used(&old_gone, 2);
        set_used(&newer, 3);
        std::fs::remove_dir_all(&gone).unwrap();
        assert_eq!(thread_entries(root, &live), std::slice::from_ref(&old_live));
        // A fourth: over the bound; the oldest unused one goes.
        let fourth = cache.checkout("u", "c4", &live, |d| fill(d, 1000)).unwrap();
        assert!(old_live.is_dir() && newer.is_dir() && fourth.is_dir());
        assert!(!old_gone.exists());
        // A fifth, larger: the remaining unused one goes too, and the live
        // thread's stay although the cache stays over its bound.
        let fifth = cache.checkout("u", "c5", &live, |d| fill(d, 2000)).unwrap();
        assert!(!newer.exists());
        assert!(old_live.is_dir() && fourth.is_dir() && fifth.is_dir());
        assert_eq!(thread_entries(root, &live), [old_live, fourth, fifth]);
        // The gone thread's record was dropped; nothing is left staged.
        let names: Vec<String> = std::fs::read_dir(root.join(CACHE_DIR))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert_eq!(names, [USERS_DIR]);
        assert_eq!(
            std::fs::read_dir(root.join(CACHE_DIR).join(USERS_DIR))
                .unwrap()
                .count(),
            1
        );
    }

    /// A failed fetch leaves nothing behind; a found checkout is not
    /// fetched again; only the runner's record grants access.
    #[test]
    fn failed_fetches_leave_nothing_and_records_are_per_thread() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let (one, two) = (root.join("a/threads/1"), root.join("a/threads/2"));
        for w in [&one, &two] {
            std::fs::create_dir_all(w).unwrap();
        }
        let cache = Cache::new(root, 1 << 20);
        let err = cache
            .checkout("u", "c1", &one, |d| {
                fill(d, 10)?;
                Err("too large".into())
            })
            .unwrap_err();
        assert_eq!(err, "too large");
        let left: Vec<_> = std::fs::read_dir(root.join(CACHE_DIR))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let dir = cache.checkout("u", "c1", &one, |d| fill(d, 10)).unwrap();
        let again = cache
            .checkout("u", "c1", &two, |_| Err("fetched again".into()))
            .unwrap();
        assert_eq!(dir, again);
        assert_eq!(thread_entries(root, &one), std::slice::from_ref(&dir));
        assert_eq!(thread_entries(root, &two), [dir]);
        assert!(thread_entries(root, &root.join("a/threads/3")).is_empty());
    }
}
