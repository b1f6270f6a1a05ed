//! Gives freed memory back to the OS when a thread is about to wait.
//!
//! The runner's global allocator is mimalloc (see `main.rs`). It returns a
//! freed span to the OS after its purge delay (10 ms, mimalloc's default),
//! so memory freed and needed again soon — every streamed update's — is
//! reused without a page fault. Returning it at once instead (a delay of 0,
//! as the runner did before) was costly at the highest update rates:
//! `madvise`, TLB shootdowns, page faults and zeroing.
//!
//! But a span's delayed purge runs only when the thread that owns it
//! allocates or frees again: a thread that goes quiet would keep what it
//! freed last, indefinitely. So a thread about to wait — a tokio worker
//! parking, the runner's own threads before blocking on their queues, a
//! blocking-pool thread after a thread creation's step (`agent.rs`), the
//! main thread once the runner has started — purges what it holds
//! ([`before_wait`]), at most every [`EVERY`], so a worker that parks
//! thousands of times a second under load pays for it a few times.
//!
//! Measured against the delay of 0 (`runner-bench --only throughput`,
//! `perf stat` task-clock of the runner, four alternating pairs): 1,626 ->
//! 1,473 ms mean for the same updates, every run below every run before.
//! It costs memory: 1.1 MiB at 10,000 threads (236.5 MiB), 1.5 MiB at
//! 1,000 (`--only scale --quick`, 45.5 / 44.6 -> 47.0 MiB, and once 31.2),
//! 0.15 MiB of anonymous memory idle.

use std::cell::Cell;
use std::time::{Duration, Instant};

// The library calls into mimalloc itself, so it is linked wherever the
// library is (its tests included), whether or not it is the global
// allocator there.
use mimalloc as _;

unsafe extern "C" {
    /// mimalloc's `mi_collect`: frees the calling thread's empty pages;
    /// `force` also purges what waits for its delay, on every segment the
    /// thread owns and on the arenas.
    fn mi_collect(force: bool);
}

/// A waiting thread purges at most this often.
pub const EVERY: Duration = Duration::from_millis(50);

thread_local! {
    /// When this thread last purged.
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The calling thread is about to wait: purges what it freed, unless it
/// did so less than [`EVERY`] ago. For tokio's `on_thread_park` and the
/// runner's threads before they block.
pub fn before_wait() {
    let now = Instant::now();
    let purge = LAST.with(|last| {
        let purge = due(last.get(), now);
        if purge {
            last.set(Some(now));
        }
        purge
    });
    if purge {
        // SAFETY: a plain call into the allocator, on the calling thread's
        // own heap; it takes no pointers.
        unsafe { mi_collect(true) };
    }
}

/// Whether a thread that last purged at `last` purges at `now`.
fn due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|t| now.saturating_duration_since(t) >= EVERY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_purges_first_then_at_most_every_interval() {
        let t = Instant::now();
        assert!(due(None, t), "a thread's first wait purges");
        assert!(!due(Some(t), t));
        assert!(!due(Some(t), t + EVERY - Duration::from_millis(1)));
        assert!(due(Some(t), t + EVERY));
        assert!(due(Some(t), t + 10 * EVERY));
    }

    #[test]
    fn waiting_records_the_purge() {
        std::thread::spawn(|| {
            assert_eq!(LAST.with(Cell::get), None);
            before_wait();
            assert!(LAST.with(Cell::get).is_some(), "the first wait purges");
        })
        .join()
        .unwrap();
    }
}
