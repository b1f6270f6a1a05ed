//! When an installation token is replaced: at the latest [`DEFAULT_MARGIN`]
//! before it expires, or once [`DEFAULT_FRACTION`] of its lifetime has
//! passed, whichever comes first. A one-hour GitHub token is replaced after
//! 45 minutes; a token living less than the margin is replaced on every use.

use std::time::{Duration, SystemTime};

/// Replace a token at the latest this long before it expires.
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(5 * 60);
/// Replace a token once this share of its lifetime has passed.
pub const DEFAULT_FRACTION: f64 = 0.75;
/// A token that could not be replaced is still handed out while it has at
/// least this long to live (the failure is reported; callers go on working).
pub const STALE_GRACE: Duration = Duration::from_secs(30);

/// When tokens are refreshed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefreshPolicy {
    /// At the latest this long before expiry.
    pub margin: Duration,
    /// At the latest after this share (0..=1) of the lifetime.
    pub fraction: f64,
}

impl Default for RefreshPolicy {
    fn default() -> Self {
        Self {
            margin: DEFAULT_MARGIN,
            fraction: DEFAULT_FRACTION,
        }
    }
}

impl RefreshPolicy {
    /// When a token received at `minted` that expires at `expires` is due
    /// for replacement (never before `minted`, never after `expires`).
    pub fn refresh_at(&self, minted: SystemTime, expires: SystemTime) -> SystemTime {
        let lifetime = expires.duration_since(minted).unwrap_or(Duration::ZERO);
        let fraction = self.fraction.clamp(0.0, 1.0);
        let by_fraction = minted + lifetime.mul_f64(fraction);
        let by_margin = expires
            .checked_sub(self.margin)
            .filter(|t| *t > minted)
            .unwrap_or(minted);
        by_fraction.min(by_margin)
    }
}

/// Whether a token that failed to refresh may still be handed out at `now`.
pub fn still_usable(expires: SystemTime, now: SystemTime) -> bool {
    now + STALE_GRACE < expires
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn at(minutes: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + MIN * minutes as u32
    }

    #[test]
    fn an_hour_token_is_replaced_at_75_percent() {
        let p = RefreshPolicy::default();
        assert_eq!(p.refresh_at(at(0), at(60)), at(45));
    }

    #[test]
    fn a_short_token_is_replaced_five_minutes_before_expiry_when_that_is_earlier() {
        let p = RefreshPolicy::default();
        // 75 % of 16 min is 12 min; 5 min before expiry is 11 min.
        assert_eq!(p.refresh_at(at(0), at(16)), at(11));
        // 20 min: 15 min either way.
        assert_eq!(p.refresh_at(at(0), at(20)), at(15));
    }

    #[test]
    fn a_token_shorter_than_the_margin_is_due_at_once() {
        let p = RefreshPolicy::default();
        assert_eq!(p.refresh_at(at(0), at(4)), at(0));
        assert_eq!(
            p.refresh_at(at(0), at(0) + Duration::from_secs(2)),
            at(0),
            "a two-second token is never reused"
        );
    }

    #[test]
    fn an_already_expired_token_is_due_at_once() {
        let p = RefreshPolicy::default();
        assert_eq!(p.refresh_at(at(10), at(5)), at(10));
    }

    #[test]
    fn custom_policies() {
        let p = RefreshPolicy {
            margin: Duration::ZERO,
            fraction: 0.5,
        };
        assert_eq!(p.refresh_at(at(0), at(10)), at(5));
        let p = RefreshPolicy {
            margin: Duration::ZERO,
            fraction: 7.0,
        };
        assert_eq!(p.refresh_at(at(0), at(10)), at(10), "fraction clamps to 1");
    }

    #[test]
    fn stale_tokens_are_usable_until_shortly_before_expiry() {
        assert!(still_usable(at(10), at(9)));
        assert!(!still_usable(at(10), at(10) - Duration::from_secs(10)));
        assert!(!still_usable(at(10), at(11)));
    }
}
