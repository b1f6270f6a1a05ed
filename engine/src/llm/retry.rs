//! Retrying a model request before its stream starts: exponential backoff
//! with jitter (`backon`) for 5xx, 408/409 and transport failures, and a 429's
//! `Retry-After` used as the delay instead when the server gives one.

use std::future::Future;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use super::error::LlmError;

/// How a request is retried.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RetryPolicy {
    pub max_retries: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// The longest `Retry-After` waited for; a longer one ends the retries.
    pub max_retry_after: Duration,
}

/// Runs `attempt` until it succeeds, fails with a non-retryable error, or
/// `max_retries` retries are spent (the last error is returned).
pub(crate) async fn with_retries<T, F, Fut>(policy: RetryPolicy, attempt: F) -> Result<T, LlmError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LlmError>>,
{
    let backoff = ExponentialBuilder::default()
        .with_min_delay(policy.initial_backoff)
        .with_max_delay(policy.max_backoff.max(policy.initial_backoff))
        .with_max_times(usize::try_from(policy.max_retries).unwrap_or(usize::MAX))
        .with_jitter();
    attempt
        .retry(backoff)
        .sleep(tokio::time::sleep)
        .when(LlmError::is_retryable)
        .adjust(move |err, next| retry_delay(policy, err, next))
        .notify(|err, delay| {
            tracing::warn!(error = %err, delay_ms = delay.as_millis() as u64, "model request failed; retrying");
        })
        .await
}

/// The delay before the next attempt: the backoff's, or the server's
/// `Retry-After` for a 429. `None` (no attempts left, or a Retry-After longer
/// than the policy allows) ends the retries.
fn retry_delay(policy: RetryPolicy, err: &LlmError, next: Option<Duration>) -> Option<Duration> {
    let backoff = next?;
    match err {
        LlmError::RateLimited {
            retry_after: Some(wait),
            ..
        } => (*wait <= policy.max_retry_after).then_some(*wait),
        _ => Some(backoff),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        max_retries: 2,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(10),
    };

    #[test]
    fn retry_after_replaces_the_backoff_within_bounds() {
        let limited = |secs| LlmError::RateLimited {
            retry_after: Some(Duration::from_secs(secs)),
            message: String::new(),
        };
        let next = Some(Duration::from_millis(3));
        assert_eq!(
            retry_delay(POLICY, &limited(2), next),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_delay(POLICY, &limited(60), next), None);
        assert_eq!(retry_delay(POLICY, &limited(2), None), None);
        let server = LlmError::Server {
            status: 502,
            message: String::new(),
        };
        assert_eq!(retry_delay(POLICY, &server, next), next);
    }

    #[tokio::test]
    async fn stops_at_non_retryable_and_after_max_retries() {
        let mut calls = 0;
        let result: Result<(), _> = with_retries(POLICY, || {
            calls += 1;
            async { Err(LlmError::Unauthorized("no".into())) }
        })
        .await;
        assert!(matches!(result, Err(LlmError::Unauthorized(_))));
        assert_eq!(calls, 1);

        let mut calls = 0;
        let result: Result<(), _> = with_retries(POLICY, || {
            calls += 1;
            async {
                Err(LlmError::Server {
                    status: 500,
                    message: "down".into(),
                })
            }
        })
        .await;
        assert!(matches!(result, Err(LlmError::Server { .. })));
        assert_eq!(calls, 3, "one attempt plus max_retries retries");
    }
}
