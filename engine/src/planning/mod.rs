//! Planning (issue 13): execution plans and goals. The model writes a plan
//! either through `CreatePlan` (structured output against [`plan::schema`],
//! in `service/planning.rs`) or by calling the `plan` tool ([`tool`]) with
//! the same document; both land in the session's [`PlanRegistry`] entry
//! under a plan id `plan-N` (N counts the session's plans from 1).
//! Plans live as long as the engine process (not written to disk).

pub mod goal;
pub mod plan;
pub mod tool;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use code_agent_proto::ExecutionPlan;

/// Plans kept per session; a newer one pushes out the oldest.
pub const MAX_PLANS: usize = 32;

/// One session's plans, oldest first.
#[derive(Debug, Default)]
pub struct SessionPlans {
    inner: Mutex<(u64, Vec<(String, ExecutionPlan)>)>,
}

impl SessionPlans {
    /// Stores `plan`; its id.
    pub fn add(&self, plan: ExecutionPlan) -> String {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.0 += 1;
        let id = format!("plan-{}", inner.0);
        inner.1.push((id.clone(), plan));
        if inner.1.len() > MAX_PLANS {
            inner.1.remove(0);
        }
        id
    }

    /// The plan `id`, or the latest for an empty id or `latest`.
    pub fn get(&self, id: &str) -> Option<(String, ExecutionPlan)> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match id.trim() {
            "" | "latest" => inner.1.last().cloned(),
            id => inner.1.iter().find(|(pid, _)| pid == id).cloned(),
        }
    }
}

/// Every session's plans.
#[derive(Debug, Default)]
pub struct PlanRegistry {
    sessions: Mutex<HashMap<String, Arc<SessionPlans>>>,
}

impl PlanRegistry {
    /// Session `id`'s plans (created empty on first use).
    pub fn for_session(&self, id: &str) -> Arc<SessionPlans> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    /// Forgets a destroyed session's plans.
    pub fn remove(&self, id: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
}
