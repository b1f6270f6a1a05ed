//! The per-thread state of an adapter that keeps one agent process per
//! runner thread, keyed by thread id and tagged with the owning agent, so
//! "everything of agent X" (for `delete_agent`) is one call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

struct Entry<S> {
    agent_id: String,
    slot: Arc<S>,
}

/// Thread id → the adapter's slot for that thread.
pub struct ThreadTable<S> {
    threads: Mutex<HashMap<String, Entry<S>>>,
}

impl<S> Default for ThreadTable<S> {
    fn default() -> Self {
        Self {
            threads: Mutex::new(HashMap::new()),
        }
    }
}

impl<S> ThreadTable<S> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry<S>>> {
        self.threads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread's slot, made by `make` (and remembered) if it has none.
    pub fn get_or_try_insert<E>(
        &self,
        thread_id: &str,
        agent_id: &str,
        make: impl FnOnce() -> Result<S, E>,
    ) -> Result<Arc<S>, E> {
        let mut threads = self.lock();
        if let Some(entry) = threads.get(thread_id) {
            return Ok(entry.slot.clone());
        }
        let slot = Arc::new(make()?);
        threads.insert(
            thread_id.to_owned(),
            Entry {
                agent_id: agent_id.to_owned(),
                slot: slot.clone(),
            },
        );
        Ok(slot)
    }

    /// Forget a thread; its slot, if it had one.
    pub fn remove(&self, thread_id: &str) -> Option<Arc<S>> {
        self.lock().remove(thread_id).map(|e| e.slot)
    }

    /// Forget every thread of `agent_id`; their slots.
    pub fn remove_agent(&self, agent_id: &str) -> Vec<Arc<S>> {
        let mut threads = self.lock();
        let ids: Vec<String> = threads
            .iter()
            .filter(|(_, e)| e.agent_id == agent_id)
            .map(|(id, _)| id.clone())
            .collect();
        ids.iter()
            .filter_map(|id| threads.remove(id))
            .map(|e| e.slot)
            .collect()
    }

    /// Every slot (for shutdown).
    pub fn all(&self) -> Vec<Arc<S>> {
        self.lock().values().map(|e| e.slot.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_by_thread_and_by_agent() {
        let t: ThreadTable<u32> = ThreadTable::new();
        let a = t.get_or_try_insert("t1", "a", || Ok::<_, ()>(1)).unwrap();
        let again = t.get_or_try_insert("t1", "a", || Ok::<_, ()>(9)).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        t.get_or_try_insert("t2", "a", || Ok::<_, ()>(2)).unwrap();
        t.get_or_try_insert("t3", "b", || Ok::<_, ()>(3)).unwrap();
        assert_eq!(t.get_or_try_insert("t4", "b", || Err("no")), Err("no"));
        let mut gone: Vec<u32> = t.remove_agent("a").iter().map(|s| **s).collect();
        gone.sort();
        assert_eq!(gone, [1, 2]);
        assert_eq!(t.all().len(), 1);
        assert_eq!(t.remove("t3").map(|s| *s), Some(3));
        assert!(t.remove("t3").is_none());
    }
}
