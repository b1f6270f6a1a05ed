//! Lanes and external tasks: each tool belongs to a proto lane (query,
//! execute, generate); a session's lane handler says whether that lane's
//! calls run inside the engine (INTERNAL), are handed to the client as an
//! `ExternalTask` and wait for `CompleteExternalTask` (EXTERNAL), or run
//! inside while the client is told about them (HYBRID).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use code_agent_proto::{ExternalTask, LaneHandlerConfig, SessionLane, TaskHandlerMode};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// How long an external task waits when its handler names no timeout.
pub const DEFAULT_EXTERNAL_TIMEOUT_MS: u64 = 60_000;

/// `query`, `execute`, … (chunk metadata, event data).
pub fn lane_name(lane: SessionLane) -> &'static str {
    match lane {
        SessionLane::Unknown => "unknown",
        SessionLane::Control => "control",
        SessionLane::Query => "query",
        SessionLane::Execute => "execute",
        SessionLane::Generate => "generate",
    }
}

/// INTERNAL with the default timeout.
pub fn default_handler() -> LaneHandlerConfig {
    LaneHandlerConfig {
        mode: TaskHandlerMode::Internal as i32,
        timeout_ms: DEFAULT_EXTERNAL_TIMEOUT_MS,
    }
}

/// Fills in what a client left at zero.
pub fn normalize(mut config: LaneHandlerConfig) -> LaneHandlerConfig {
    if config.mode == TaskHandlerMode::Unknown as i32 {
        config.mode = TaskHandlerMode::Internal as i32;
    }
    if config.timeout_ms == 0 {
        config.timeout_ms = DEFAULT_EXTERNAL_TIMEOUT_MS;
    }
    config
}

/// What the outside world answered.
#[derive(Debug, Clone)]
pub struct TaskResult {
    pub success: bool,
    pub result: String,
    pub error: String,
}

/// How waiting for an external task ended.
#[derive(Debug, Clone)]
pub enum TaskOutcome {
    Completed(TaskResult),
    TimedOut,
    Cancelled,
}

struct Pending {
    task: ExternalTask,
    deadline: Instant,
    tx: oneshot::Sender<TaskResult>,
}

/// External tasks of one session waiting for their result.
#[derive(Default)]
pub struct PendingTasks {
    tasks: Mutex<HashMap<String, Pending>>,
}

impl std::fmt::Debug for PendingTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingTasks")
            .field("count", &self.list().len())
            .finish()
    }
}

impl PendingTasks {
    /// The waiting tasks, with their remaining time.
    pub fn list(&self) -> Vec<ExternalTask> {
        let now = Instant::now();
        let mut tasks: Vec<ExternalTask> = self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|p| {
                let mut task = p.task.clone();
                task.remaining_ms =
                    u64::try_from(p.deadline.saturating_duration_since(now).as_millis())
                        .unwrap_or(u64::MAX);
                task
            })
            .collect();
        tasks.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        tasks
    }

    /// Delivers a result; false when no such task waits.
    pub fn complete(&self, task_id: &str, result: TaskResult) -> bool {
        let pending = self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(task_id);
        pending.is_some_and(|p| p.tx.send(result).is_ok())
    }

    /// Registers `task` and waits for its result, its timeout or `cancel`.
    pub async fn wait(&self, task: ExternalTask, cancel: &CancellationToken) -> TaskOutcome {
        let timeout = Duration::from_millis(task.timeout_ms);
        let id = task.task_id.clone();
        let (tx, rx) = oneshot::channel();
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).insert(
            id.clone(),
            Pending {
                task,
                deadline: Instant::now() + timeout,
                tx,
            },
        );
        let outcome = tokio::select! {
            result = rx => match result {
                Ok(r) => TaskOutcome::Completed(r),
                Err(_) => TaskOutcome::Cancelled,
            },
            () = tokio::time::sleep(timeout) => TaskOutcome::TimedOut,
            () = cancel.cancelled() => TaskOutcome::Cancelled,
        };
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_times_out_and_leaves_the_list() {
        let pending = PendingTasks::default();
        let task = ExternalTask {
            task_id: "t".into(),
            timeout_ms: 1,
            ..Default::default()
        };
        let outcome = pending.wait(task, &CancellationToken::new()).await;
        assert!(matches!(outcome, TaskOutcome::TimedOut));
        assert!(pending.list().is_empty());
        assert!(!pending.complete(
            "t",
            TaskResult {
                success: true,
                result: String::new(),
                error: String::new()
            }
        ));
    }
}
