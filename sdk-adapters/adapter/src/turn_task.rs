//! What every adapter's turn task does the same way: notice that nobody
//! listens any more ([`Gone`]), wait for an optional deadline
//! ([`sleep_until`]), and end the turn ([`finish_turn`]).

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::{TurnControl, TurnEvent, TurnOutcome};

/// The receiver of a turn's events was dropped: nobody reads the turn any
/// more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

/// Sleeps until `at`; never wakes without one (for a `select!` branch whose
/// timer may not be set).
pub async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The end of a turn task whose loop returned `outcome`: the `closing`
/// events (COMPLETED snapshots of items still open, so none dangles) go
/// out, then [`TurnEvent::Finished`], always last. When nobody listened any
/// more, the SDK is told to stop working on the turn instead.
pub async fn finish_turn(
    events: &mpsc::Sender<TurnEvent>,
    outcome: Result<TurnOutcome, Gone>,
    closing: impl IntoIterator<Item = TurnEvent>,
    control: &impl TurnControl,
) {
    match outcome {
        Ok(outcome) => {
            for event in closing {
                if events.send(event).await.is_err() {
                    return;
                }
            }
            let _ = events.send(TurnEvent::Finished(outcome)).await;
        }
        Err(Gone) => control.interrupt(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;

    use super::*;
    use crate::SteerError;

    #[derive(Default)]
    struct Counting(AtomicU32);

    #[async_trait]
    impl TurnControl for Counting {
        async fn steer(&self, _text: String, _tag: u64) -> Result<(), SteerError> {
            Err(SteerError::TurnEnded)
        }
        fn interrupt(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn usage(n: i64) -> TurnEvent {
        TurnEvent::usage(crate::TokenUsage {
            model_context_window: Some(n),
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn closing_events_then_finished() {
        let (tx, mut rx) = mpsc::channel(8);
        let control = Counting::default();
        let outcome = Ok(TurnOutcome::Completed);
        finish_turn(&tx, outcome, [usage(1), usage(2)], &control).await;
        assert_eq!(rx.recv().await, Some(usage(1)));
        assert_eq!(rx.recv().await, Some(usage(2)));
        assert_eq!(
            rx.recv().await,
            Some(TurnEvent::Finished(TurnOutcome::Completed))
        );
        assert_eq!(control.0.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn nobody_listening_interrupts() {
        let (tx, rx) = mpsc::channel(8);
        drop(rx);
        let control = Counting::default();
        finish_turn(&tx, Err(Gone), [usage(1)], &control).await;
        assert_eq!(control.0.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn sleep_until_without_a_deadline_never_wakes() {
        let slept = tokio::time::timeout(Duration::from_millis(20), sleep_until(None)).await;
        assert!(slept.is_err());
        let deadline = Instant::now() + Duration::from_millis(1);
        tokio::time::timeout(Duration::from_secs(30), sleep_until(Some(deadline)))
            .await
            .expect("a set deadline wakes");
    }
}
