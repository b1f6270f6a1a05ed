//! Process-wide counters that more than one module bumps.

use std::sync::atomic::AtomicU64;

/// Outbound updates that broke their `buf.validate` rules (runner bugs).
pub static INVALID_OUTBOUND: AtomicU64 = AtomicU64::new(0);
