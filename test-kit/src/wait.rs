//! Waiting for what a test cannot be told about (a file appearing, a
//! process going, a log line): the condition polled until it holds, the
//! test failing with its own message once [`WAIT`] has passed.

use std::time::Duration;

use crate::runner::WAIT;

/// How often [`until`] looks again.
const POLL: Duration = Duration::from_millis(20);

/// Polls `holds` until it is true; panics with `why()` (what did not
/// happen, and what was seen instead) after [`WAIT`].
pub async fn until(holds: impl FnMut() -> bool, why: impl FnOnce() -> String) {
    within(WAIT, holds, why).await;
}

/// [`until`], giving up after `wait`.
async fn within(wait: Duration, mut holds: impl FnMut() -> bool, why: impl FnOnce() -> String) {
    let deadline = tokio::time::Instant::now() + wait;
    while !holds() {
        if tokio::time::Instant::now() >= deadline {
            panic!("{}", why());
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_once_the_condition_holds() {
        let mut n = 0;
        until(
            || {
                n += 1;
                n == 3
            },
            || "never".into(),
        )
        .await;
        assert_eq!(n, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "the file never came")]
    async fn fails_with_its_message_after_the_wait() {
        within(
            Duration::from_millis(50),
            || false,
            || "the file never came".into(),
        )
        .await;
    }
}
