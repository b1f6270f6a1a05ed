//! Per-thread rate limits on what costs GitHub API calls: a credential
//! request the broker cannot serve from its cache (a token must be minted,
//! or the installations listed again) and every `erase` (it makes the next
//! request a miss). One token bucket per thread, so one agent looping on
//! `git fetch` of repositories nobody covers, or erasing its token over and
//! over, cannot spend the App's (or the control plane's) rate limit for
//! every other thread.
//!
//! Defaults ([`RateLimit::default`]): a burst of [`DEFAULT_BURST`] and one
//! more every [`DEFAULT_REFILL`] (at most 360 an hour per thread, well
//! under GitHub's 5 000 requests an hour for an App). Cache hits are never
//! limited. A limited request gets a note git shows its user and is counted
//! (`agent_runner_git_credential_rate_limited_total`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Requests a thread may make at once before it has to wait.
pub const DEFAULT_BURST: u32 = 10;
/// How often a thread gets one more request.
pub const DEFAULT_REFILL: Duration = Duration::from_secs(10);
/// Buckets kept at most; beyond, full ones are dropped (a full bucket is
/// what a new one would be), then the oldest.
const MAX_BUCKETS: usize = 100_000;

/// How many costly requests a thread may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests at once (the bucket's size).
    pub burst: u32,
    /// One more request per this long.
    pub refill: Duration,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self {
            burst: DEFAULT_BURST,
            refill: DEFAULT_REFILL,
        }
    }
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One token bucket per thread.
pub struct Limiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Limiter {
    /// Buckets of `limit`.
    pub fn new(limit: RateLimit) -> Self {
        Self {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one request from `thread`'s bucket: `Ok`, or how long until
    /// one is available.
    pub fn take(&self, thread: &str) -> Result<(), Duration> {
        self.take_at(thread, Instant::now())
    }

    fn take_at(&self, thread: &str, now: Instant) -> Result<(), Duration> {
        let burst = f64::from(self.limit.burst.max(1));
        let per_sec = 1.0 / self.limit.refill.as_secs_f64().max(f64::EPSILON);
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(thread) {
            buckets.retain(|_, b| level(b, now, burst, per_sec) < burst);
            if buckets.len() >= MAX_BUCKETS
                && let Some(oldest) = buckets
                    .iter()
                    .min_by_key(|(_, b)| b.at)
                    .map(|(k, _)| k.clone())
            {
                buckets.remove(&oldest);
            }
        }
        let bucket = buckets.entry(thread.to_owned()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        bucket.tokens = level(bucket, now, burst, per_sec);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / per_sec))
        }
    }

    /// Forget `thread`'s bucket (the thread is gone).
    pub fn forget(&self, thread: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(thread);
    }
}

fn level(b: &Bucket, now: Instant, burst: f64, per_sec: f64) -> f64 {
    let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
    (b.tokens + elapsed * per_sec).min(burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_refill_per_thread() {
        let l = Limiter::new(RateLimit {
            burst: 3,
            refill: Duration::from_secs(10),
        });
        let t0 = Instant::now();
        for _ in 0..3 {
            l.take_at("a", t0).unwrap();
        }
        let wait = l.take_at("a", t0).unwrap_err();
        assert_eq!(wait, Duration::from_secs(10));
        // Another thread has its own bucket.
        l.take_at("b", t0).unwrap();
        // Five seconds on: half a request, not yet.
        let wait = l.take_at("a", t0 + Duration::from_secs(5)).unwrap_err();
        assert_eq!(wait, Duration::from_secs(5));
        l.take_at("a", t0 + Duration::from_secs(10)).unwrap();
        assert!(l.take_at("a", t0 + Duration::from_secs(10)).is_err());
        // A long pause refills to the burst, not beyond.
        let later = t0 + Duration::from_secs(1000);
        for _ in 0..3 {
            l.take_at("a", later).unwrap();
        }
        assert!(l.take_at("a", later).is_err());
        l.forget("a");
        l.take_at("a", later).unwrap();
    }
}
