//! Where a child's unsolicited output goes: the turn that is running, if
//! any. Both adapters route a long-lived child's lines this way — a turn
//! installs itself, the router delivers, the turn clears itself when done
//! (a later turn's installation is never cleared by an earlier turn).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;

/// The current listener of a child's messages.
#[derive(Debug)]
pub struct TurnSink<T> {
    current: Mutex<Option<(u64, mpsc::UnboundedSender<T>)>>,
    next: AtomicU64,
}

impl<T> Default for TurnSink<T> {
    fn default() -> Self {
        Self {
            current: Mutex::new(None),
            next: AtomicU64::new(0),
        }
    }
}

impl<T> TurnSink<T> {
    fn lock(&self) -> MutexGuard<'_, Option<(u64, mpsc::UnboundedSender<T>)>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new turn listens from now on (replacing any earlier one). Returns
    /// its id (for [`TurnSink::clear`]), a sender for the turn's own
    /// messages, and the receiver.
    pub fn install(&self) -> (u64, mpsc::UnboundedSender<T>, mpsc::UnboundedReceiver<T>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        *self.lock() = Some((id, tx.clone()));
        (id, tx, rx)
    }

    /// The turn `id` stops listening; a later turn's installation stays.
    pub fn clear(&self, id: u64) {
        let mut current = self.lock();
        if current
            .as_ref()
            .is_some_and(|(current_id, _)| *current_id == id)
        {
            *current = None;
        }
    }

    /// Deliver to the running turn; false when there is none.
    pub fn send(&self, message: T) -> bool {
        match self.lock().as_ref() {
            Some((_, tx)) => tx.send(message).is_ok(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_turn_hears_and_clears() {
        let sink = TurnSink::default();
        assert!(!sink.send(1));
        let (first, _tx, mut first_rx) = sink.install();
        assert!(sink.send(2));
        let (second, _tx2, mut second_rx) = sink.install();
        sink.clear(first);
        assert!(sink.send(3));
        assert_eq!(first_rx.try_recv().unwrap(), 2);
        assert!(first_rx.try_recv().is_err());
        assert_eq!(second_rx.try_recv().unwrap(), 3);
        sink.clear(second);
        assert!(!sink.send(4));
    }
}
