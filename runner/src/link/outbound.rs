//! The runner → control plane half of one session: the stream the
//! transport pulls updates from.
//!
//! Batches come from [`Sending`] (re-sends first, then the outbox; each
//! update numbered and recorded there, masked and encoded already by the
//! outbox — the one place outbound text is masked, whoever produced it).
//! While one batch goes out the next is taken (once no more than
//! `REFILL_AT` of it remain), so its journal write overlaps the sending
//! and no more than a batch and that mark are out of the outbox's reach.
//! The stream ends when the session ends, or when shutdown asked to close
//! and nothing waits (a clean half-close).
//!
//! Written as a [`Stream`] by hand, not an `unfold` of one future per
//! update: that future was boxed for every update (the compiler cannot
//! prove the unboxed one `Send`), and that allocation per update showed
//! in the runner's CPU. Here an update
//! ready to go costs a pop; a future is made per batch.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::delivery::outgoing::Outgoing;
use crate::delivery::sending::{Batch, Sending};

/// The next batch is taken once `ready` holds this many updates or
/// fewer: enough to cover its journal commit (a write on the journal's
/// writer thread, tens of microseconds) at the link's pace, few enough
/// that whatever is queued meanwhile (a heartbeat's answer) waits behind at
/// most this and one batch. Taking whenever no batch was under way let
/// `ready` grow by a batch per update sent while the transport was
/// slower than the producers: ten thousand updates, numbered and out of
/// the outbox's reach (no coalescing, no backpressure), with every answer
/// behind them (bench/HISTORY.md, round Z12).
const REFILL_AT: usize = 64;

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send + Sync>>;

/// The batch under way.
enum Next {
    /// Being taken: waiting for updates or a sequence reservation, and
    /// cancel-safe until it returns (nothing is taken before). `closable`:
    /// started while nothing waited, so shutdown's close may end the stream
    /// instead.
    Taking { batch: Boxed<Batch>, closable: bool },
    /// Taken (recorded as sent), waiting for its journal write; never
    /// dropped for a close.
    Committing(Boxed<Vec<Outgoing>>),
}

/// What polling the batch under way did.
enum Advanced {
    /// Its updates are in `ready`.
    Ready,
    /// It came back empty: this session's half is finished.
    Empty,
    /// Still waiting (the waker is registered).
    Waiting,
}

/// The outbound half (see the module docs).
pub(super) struct Outbound {
    sending: Arc<Sending>,
    /// The connection this half belongs to (see [`Sending::take_batch`]).
    epoch: u64,
    /// Taken and committed, not yet handed to the transport (lost with the
    /// session only as far as the transport would have lost them: kept
    /// updates are re-sent).
    ready: VecDeque<Outgoing>,
    next: Option<Next>,
    session_over: CancellationToken,
    over: Pin<Box<WaitForCancellationFutureOwned>>,
    closing: Pin<Box<WaitForCancellationFutureOwned>>,
    done: bool,
}

/// The outbound half of a session over `sending`, ending with
/// `session_over` or, once nothing waits, with `close`.
pub(super) fn outbound(
    sending: Arc<Sending>,
    session_over: CancellationToken,
    close: CancellationToken,
) -> Outbound {
    Outbound {
        epoch: sending.epoch(),
        sending,
        ready: VecDeque::new(),
        next: None,
        over: Box::pin(session_over.clone().cancelled_owned()),
        session_over,
        closing: Box::pin(close.cancelled_owned()),
        done: false,
    }
}

impl Outbound {
    /// Starts taking the next batch.
    fn take(&mut self, closable: bool) {
        let (sending, epoch) = (self.sending.clone(), self.epoch);
        self.next = Some(Next::Taking {
            batch: Box::pin(async move { sending.take_batch(epoch).await }),
            closable,
        });
    }

    /// Polls the batch under way: a taken batch goes on to its journal
    /// write, a committed one into `ready`.
    fn advance(&mut self, cx: &mut Context<'_>) -> Advanced {
        loop {
            match self.next.as_mut() {
                None => return Advanced::Waiting,
                Some(Next::Taking { batch, .. }) => match batch.as_mut().poll(cx) {
                    Poll::Ready(batch) => {
                        self.next = Some(Next::Committing(Box::pin(batch.committed())));
                    }
                    Poll::Pending => return Advanced::Waiting,
                },
                Some(Next::Committing(out)) => match out.as_mut().poll(cx) {
                    Poll::Ready(out) => {
                        self.next = None;
                        if out.is_empty() {
                            return Advanced::Empty;
                        }
                        self.ready.extend(out);
                        return Advanced::Ready;
                    }
                    Poll::Pending => return Advanced::Waiting,
                },
            }
        }
    }

    /// Waiting for a batch: whether the session ended, or shutdown asked
    /// to close while nothing waits (then the session ends here).
    fn ends_while_waiting(&mut self, cx: &mut Context<'_>) -> bool {
        if self.over.as_mut().poll(cx).is_ready() {
            return true;
        }
        let closable = matches!(self.next, Some(Next::Taking { closable: true, .. }));
        if closable && self.sending.idle() && self.closing.as_mut().poll(cx).is_ready() {
            self.session_over.cancel();
            return true;
        }
        false
    }
}

impl Stream for Outbound {
    type Item = Outgoing;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Outgoing>> {
        let s = self.get_mut();
        loop {
            if s.done || s.session_over.is_cancelled() {
                // The transport may poll a finished session's half: give it
                // nothing (what it held is recorded and goes again).
                s.done = true;
                return Poll::Ready(None);
            }
            if let Some(msg) = s.ready.pop_front() {
                // Take the next batch once this one is nearly out, and
                // poll it once, so its journal write runs while the rest
                // goes out (taking is cheap; only the commit is waited
                // for). Not sooner: what `ready` holds is numbered and
                // past the outbox's bound, and an answer queued now waits
                // behind all of it.
                if s.next.is_none() && s.ready.len() <= REFILL_AT && !s.sending.idle() {
                    s.take(false);
                }
                // An empty batch (this connection ended) is dropped here;
                // the next take returns one too and ends the stream.
                let _ = s.advance(cx);
                tracing::trace!(
                    kind = msg.label.kind(),
                    sequence = msg.sequence,
                    "update sent"
                );
                crate::observe::metrics::update_sent(
                    msg.label.kind_index(),
                    msg.label.first_reply(),
                    msg.label.is_error(),
                );
                return Poll::Ready(Some(msg));
            }
            if s.next.is_none() {
                let closable = s.sending.idle();
                s.take(closable);
            }
            match s.advance(cx) {
                Advanced::Ready => continue,
                Advanced::Empty => {
                    // Only a finished session's half gets an empty batch.
                    s.done = true;
                    return Poll::Ready(None);
                }
                Advanced::Waiting => {
                    if s.ends_while_waiting(cx) {
                        s.done = true;
                        return Poll::Ready(None);
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt as _;

    use super::*;
    use crate::delivery::outbox::Outbox;

    fn sending() -> (Arc<Outbox>, Arc<Sending>) {
        sending_with_room(64)
    }

    /// An outbox of `capacity` and its legacy-mode `Sending`, no journal.
    fn sending_with_room(capacity: usize) -> (Arc<Outbox>, Arc<Sending>) {
        let outbox = Arc::new(Outbox::new(capacity, crate::util::redact::Redactor::new()));
        let sending = Arc::new(Sending::new(
            outbox.clone(),
            None,
            crate::delivery::journal::Recovered::default(),
            Duration::from_secs(30),
        ));
        (outbox, sending)
    }

    fn reply(n: usize) -> agent_runner_proto::runner::ClientMessage {
        crate::delivery::messages::request_error(Some(format!("r{n}")), "x".to_owned())
    }

    /// Updates queued before and while the stream waits go out in order;
    /// the waiting stream wakes for them.
    #[tokio::test]
    async fn updates_go_out_in_order_including_those_queued_while_it_waits() {
        let (outbox, sending) = sending();
        for n in 0..3 {
            outbox.push_reply(reply(n));
        }
        let mut stream = outbound(sending, CancellationToken::new(), CancellationToken::new());
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(stream.next().await.expect("an update"));
        }
        let later = tokio::spawn(async move {
            let next = stream.next().await;
            (next, stream)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        outbox.push_reply(reply(3));
        let (next, _stream) = tokio::time::timeout(Duration::from_secs(5), later)
            .await
            .expect("woken")
            .expect("joined");
        got.push(next.expect("the later update"));
        let ids: Vec<_> = got
            .iter()
            .map(|o| o.decode().request_id.unwrap_or_default())
            .collect();
        assert_eq!(ids, ["r0", "r1", "r2", "r3"]);
    }

    /// A transport slower than the producers: what the stream takes out
    /// of the outbox ahead of what it has sent stays within one batch and
    /// the refill mark, so the outbox keeps the rest (where its bound,
    /// coalescing and backpressure apply) and an answer queued meanwhile
    /// waits behind no more than that. Taking a batch whenever none was
    /// under way took the whole outbox in a few updates' time.
    #[tokio::test]
    async fn a_slow_transport_takes_no_more_than_a_batch_ahead() {
        use crate::delivery::sending::BATCH;
        const QUEUED: usize = 5_000;
        let (outbox, sending) = sending_with_room(2 * QUEUED);
        for n in 0..QUEUED {
            outbox.push_reply(reply(n));
        }
        let mut stream = outbound(sending, CancellationToken::new(), CancellationToken::new());
        for _ in 0..10 {
            stream.next().await.expect("an update");
        }
        let taken = QUEUED - outbox.stats().depth;
        assert!(
            taken <= BATCH + REFILL_AT + 10,
            "{taken} of {QUEUED} taken out of the outbox after 10 sent"
        );
        outbox.push_urgent(crate::delivery::messages::heartbeat(Some("hb".into())));
        let mut ahead = 0;
        loop {
            let next = stream.next().await.expect("an update");
            if next.label.kind() == "heartbeat_response" {
                break;
            }
            ahead += 1;
        }
        assert!(
            ahead <= BATCH + REFILL_AT,
            "the answer waited behind {ahead} updates"
        );
    }

    /// Shutdown's close ends a stream with nothing waiting (and ends the
    /// session); while updates wait, they go first.
    #[tokio::test]
    async fn close_ends_the_stream_once_nothing_waits() {
        let (outbox, sending) = sending();
        let (over, close) = (CancellationToken::new(), CancellationToken::new());
        outbox.push_reply(reply(0));
        close.cancel();
        let mut stream = outbound(sending, over.clone(), close);
        assert!(stream.next().await.is_some(), "what waits goes first");
        let end = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        assert!(matches!(end, Ok(None)), "then the stream ends");
        assert!(over.is_cancelled(), "and the session with it");
        assert!(stream.next().await.is_none(), "and stays ended");
    }

    /// A waiting stream ends when its session does.
    #[tokio::test]
    async fn the_session_ending_ends_a_waiting_stream() {
        let (_outbox, sending) = sending();
        let over = CancellationToken::new();
        let mut stream = outbound(sending, over.clone(), CancellationToken::new());
        let waiting = tokio::spawn(async move { stream.next().await.is_none() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        over.cancel();
        let ended = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .expect("joined");
        assert!(ended);
    }
}
