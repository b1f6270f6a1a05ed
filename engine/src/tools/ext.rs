//! Typed extensions of a [`ToolContext`](super::ToolContext): the handles
//! the area tools (memory, planning, cron) need, put there by the engine, so
//! that `tools` does not depend on those areas (they depend on `tools`).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// A map from a type to one shared value of that type.
#[derive(Default, Clone)]
pub struct Extensions {
    values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Extensions {
    /// Stores `value`, replacing any earlier value of its type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        self.values.insert(TypeId::of::<T>(), value);
    }

    /// The value of type `T`, if one was stored.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.values
            .get(&TypeId::of::<T>())
            .cloned()
            .and_then(|value| value.downcast::<T>().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_by_type() {
        let mut ext = Extensions::default();
        assert!(ext.get::<String>().is_none());
        ext.insert(Arc::new("x".to_string()));
        ext.insert(Arc::new(3u32));
        assert_eq!(ext.get::<String>().unwrap().as_str(), "x");
        assert_eq!(*ext.get::<u32>().unwrap(), 3);
    }
}
