//! Integration tests of the GitHub token broker against real servers on
//! loopback: the App mode through octocrab against the mock GitHub API
//! (which checks the App JWT's RS256 signature), and the control-plane mode
//! against the mock control plane (bearer secret, path prefix). Tokens are
//! short-lived where refresh is the thing under test.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod app;
mod control_plane;

use std::time::Duration;

use agent_runner::github::BrokerOptions;

/// Fast retries: the tests inject failures and wait for the retry.
pub fn fast_retries() -> BrokerOptions {
    BrokerOptions {
        retry_min_delay: Duration::from_millis(5),
        retry_max_delay: Duration::from_millis(20),
        retries: 3,
        ..BrokerOptions::default()
    }
}

/// The value of a counter in the process's metrics.
pub fn counter(name: &str) -> u64 {
    let text = agent_runner::metrics::render(agent_runner::metrics::Scraped::default());
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or(0)
}
