//! The runner-wide side of `approvals/1`: whether the control plane
//! accepted the extension, the approval ids, the operator's settings
//! (`--approval-timeout`, `--approval-policy`) and every request still
//! waiting for a decision.
//!
//! An agent's ask reaches its thread's task as a turn event; the task
//! decides who answers ([`crate::tasks::thread`]: a decision remembered
//! for the thread, the operator's policy when the extension is off, else
//! the control plane) and keeps the per-thread part ([`ThreadApprovals`]:
//! the replies, their deadlines, what was approved for the thread). What
//! is here is what others need to see: the read loop finds the thread a
//! decision is for ([`Approvals::thread_of`]) without waiting on anyone,
//! the link re-sends requests still waiting after a reconnect, and the
//! status and the admin socket list them with their age.
//!
//! Ids are `apr-<runner start in ms>-<n>`: unique over the runner's life
//! and, the start time differing, across its restarts.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agent_runner_proto::runner::{ApprovalResolver, ClientMessage};
use sdk_adapter::{ApprovalAnswer, ApprovalAsk, ApprovalKind, ApprovalReply, Verdict};

use crate::delivery::messages::RequestId;

pub use crate::config::{ApprovalPolicy as Policy, DEFAULT_APPROVAL_TIMEOUT as DEFAULT_TIMEOUT};

/// Resolved ids remembered, to tell "already resolved" from "unknown".
const RESOLVED_KEPT: usize = 4096;

/// The policy's answer.
pub fn policy_answer(policy: Policy) -> ApprovalAnswer {
    match policy {
        Policy::Deny => ApprovalAnswer::deny(
            "denied by the runner's approval policy: nobody is there to approve it",
        ),
        Policy::Approve => ApprovalAnswer::approve(),
    }
}

/// A request waiting for the control plane's decision (for routing,
/// re-sending and status).
#[derive(Debug, Clone)]
pub struct WaitingApproval {
    /// The agent of its thread.
    pub agent_id: String,
    /// Its thread.
    pub thread_id: String,
    /// What is asked.
    pub kind: ApprovalKind,
    /// When it was asked.
    pub since: Instant,
    /// The `ApprovalRequest` as sent (re-sent after a reconnect).
    pub request: ClientMessage,
}

/// The runner-wide registry (see the module doc).
pub struct Approvals {
    accepted: AtomicBool,
    next: AtomicU64,
    prefix: u128,
    timeout_ms: AtomicU64,
    approve_by_policy: AtomicBool,
    waiting: Mutex<HashMap<String, WaitingApproval>>,
    resolved: Mutex<(HashSet<String>, VecDeque<String>)>,
}

impl Default for Approvals {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Now, in milliseconds since the epoch.
pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Approvals {
    /// A registry: extension off, default settings, nothing waiting.
    pub fn new() -> Self {
        Self {
            accepted: AtomicBool::new(false),
            next: AtomicU64::new(1),
            prefix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
            timeout_ms: AtomicU64::new(DEFAULT_TIMEOUT.as_millis() as u64),
            approve_by_policy: AtomicBool::new(false),
            waiting: Mutex::new(HashMap::new()),
            resolved: Mutex::new((HashSet::new(), VecDeque::new())),
        }
    }

    /// The operator's settings.
    pub fn configure(&self, timeout: Duration, policy: Policy) {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.timeout_ms.store(ms, Ordering::Relaxed);
        self.approve_by_policy
            .store(policy == Policy::Approve, Ordering::Relaxed);
    }

    /// How long a request waits for a decision.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed))
    }

    /// What the runner answers when no control plane decides.
    pub fn policy(&self) -> Policy {
        if self.approve_by_policy.load(Ordering::Relaxed) {
            Policy::Approve
        } else {
            Policy::Deny
        }
    }

    /// Whether the control plane of the current registration accepted
    /// `approvals/1`.
    pub fn accepted(&self) -> bool {
        self.accepted.load(Ordering::Relaxed)
    }

    /// A registration's answer: whether its control plane decides.
    pub fn set_accepted(&self, accepted: bool) {
        self.accepted.store(accepted, Ordering::Relaxed);
    }

    /// A fresh id.
    pub fn next_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("apr-{}-{n}", self.prefix)
    }

    /// `id` waits for the control plane from now on.
    pub fn register(&self, id: &str, waiting: WaitingApproval) {
        crate::observe::metrics::approvals_waiting(1);
        lock(&self.waiting).insert(id.to_owned(), waiting);
    }

    /// `id` is resolved (whoever resolved it): it waits no more.
    pub fn forget(&self, id: &str) {
        if lock(&self.waiting).remove(id).is_none() {
            return;
        }
        crate::observe::metrics::approvals_waiting(-1);
        let mut resolved = lock(&self.resolved);
        let (set, order) = &mut *resolved;
        set.insert(id.to_owned());
        order.push_back(id.to_owned());
        while order.len() > RESOLVED_KEPT {
            if let Some(old) = order.pop_front() {
                set.remove(&old);
            }
        }
    }

    /// The agent and thread `id` waits in; `Err` says why there is none
    /// (the text names the id).
    pub fn thread_of(&self, id: &str) -> Result<(String, String), String> {
        if let Some(w) = lock(&self.waiting).get(id) {
            return Ok((w.agent_id.clone(), w.thread_id.clone()));
        }
        Err(self.not_waiting(id))
    }

    /// Why `id` waits for no decision.
    pub fn not_waiting(&self, id: &str) -> String {
        if lock(&self.resolved).0.contains(id) {
            format!("approval_decision.approval_id: approval {id} is already resolved")
        } else {
            format!("approval_decision.approval_id: unknown approval {id}")
        }
    }

    /// Every request waiting, oldest first.
    pub fn waiting(&self) -> Vec<(String, WaitingApproval)> {
        let mut all: Vec<_> = lock(&self.waiting)
            .iter()
            .map(|(id, w)| (id.clone(), w.clone()))
            .collect();
        all.sort_by_key(|(_, w)| w.since);
        all
    }
}

/// Who resolved a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// The control plane's decision.
    ControlPlane,
    /// No decision came in time (`--approval-timeout`): denied.
    Timeout,
    /// The turn ended (interrupt, delete, drain, its end): denied.
    TurnEnded,
    /// The operator's policy (`--approval-policy`): the extension is off.
    Policy,
    /// An earlier "approve for this thread" (nothing is sent).
    Thread,
}

impl Resolver {
    /// Its metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ControlPlane => "control_plane",
            Self::Timeout => "timeout",
            Self::TurnEnded => "turn_ended",
            Self::Policy => "policy",
            Self::Thread => "thread",
        }
    }

    /// Its wire name (`None`: never sent).
    pub fn wire(self) -> Option<ApprovalResolver> {
        match self {
            Self::ControlPlane => Some(ApprovalResolver::ControlPlane),
            Self::Timeout => Some(ApprovalResolver::Timeout),
            Self::TurnEnded => Some(ApprovalResolver::TurnEnded),
            Self::Policy => Some(ApprovalResolver::Policy),
            Self::Thread => None,
        }
    }
}

/// A kind's metric label.
pub fn kind_label(kind: ApprovalKind) -> &'static str {
    match kind {
        ApprovalKind::CommandExecution => "command_execution",
        ApprovalKind::FileChange => "file_change",
        ApprovalKind::Permission => "permission",
        ApprovalKind::McpElicitation => "mcp_elicitation",
        ApprovalKind::Question => "question",
    }
}

/// A verdict's metric label.
pub fn verdict_label(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Approve => "approve",
        Verdict::ApproveForThread => "approve_for_thread",
        Verdict::Deny => "deny",
        Verdict::CancelTurn => "cancel_turn",
    }
}

/// A registration's answer: whether its control plane decides from now
/// on. Without acknowledged delivery, an `ApprovalRequest` sent on the
/// connection that dropped may be lost with it: every request still waiting
/// goes again (with acknowledged delivery the outbox re-sends whatever was
/// not acknowledged already).
pub fn registered(rt: &crate::tasks::context::Runtime, accepted: bool, acked: bool) {
    rt.approvals.set_accepted(accepted);
    if !accepted || acked {
        return;
    }
    for (id, waiting) in rt.approvals.waiting() {
        tracing::debug!(approval_id = %id, "approval request sent again after a reconnect");
        rt.outbox.push_reply(waiting.request);
    }
}

/// One request of a thread waiting for the control plane.
pub struct Pending {
    /// Its id.
    pub id: String,
    /// Where the answer goes.
    pub reply: ApprovalReply,
    /// When it is resolved by timeout.
    pub deadline: tokio::time::Instant,
    /// What it asks.
    pub kind: ApprovalKind,
    /// What "the same request" is (for "approve for this thread").
    pub key: (ApprovalKind, String),
    /// The request id it was sent with (the turn's).
    pub rid: RequestId,
}

/// Whether "approve for this thread" can stand for later requests like
/// `key`: never for questions and elicitations (each wants its own
/// answer), nor for a request that names no command, path or tool (a
/// codex permission request without paths): remembered, it would approve
/// every later one of its kind.
fn rememberable(key: &(ApprovalKind, String)) -> bool {
    !matches!(key.0, ApprovalKind::Question | ApprovalKind::McpElicitation) && !key.1.is_empty()
}

/// A thread's waiting requests and what was approved for the thread.
#[derive(Default)]
pub struct ThreadApprovals {
    pending: Vec<Pending>,
    remembered: HashSet<(ApprovalKind, String)>,
}

impl ThreadApprovals {
    /// Whether `ask` was approved for the thread already.
    pub fn approved_for_thread(&self, ask: &ApprovalAsk) -> bool {
        let key = ask.same_as_key();
        rememberable(&key) && self.remembered.contains(&key)
    }

    /// Later requests like `key` are approved without asking — unless it
    /// says nothing of what was approved (see [`rememberable`]): then the
    /// approval was for that request only.
    pub fn remember(&mut self, key: (ApprovalKind, String)) {
        if rememberable(&key) {
            self.remembered.insert(key);
        }
    }

    /// `pending` waits from now on.
    pub fn wait(&mut self, pending: Pending) {
        self.pending.push(pending);
    }

    /// Takes the waiting request `id`, if it still waits.
    pub fn take(&mut self, id: &str) -> Option<Pending> {
        let at = self.pending.iter().position(|p| p.id == id)?;
        Some(self.pending.remove(at))
    }

    /// Takes every waiting request.
    pub fn take_all(&mut self) -> Vec<Pending> {
        std::mem::take(&mut self.pending)
    }

    /// Resolves with the id of the first request whose deadline passed;
    /// never while none waits.
    pub async fn next_expiry(&self) -> String {
        let Some(first) = self.pending.iter().min_by_key(|p| p.deadline) else {
            return std::future::pending().await;
        };
        tokio::time::sleep_until(first.deadline).await;
        first.id.clone()
    }
}

/// The answer the agent gets for a decision.
pub fn answer_of(
    verdict: Verdict,
    answer: Option<String>,
    message: Option<String>,
) -> ApprovalAnswer {
    ApprovalAnswer {
        verdict,
        answer: answer.filter(|a| !a.is_empty()),
        message: message.filter(|m| !m.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting() -> WaitingApproval {
        WaitingApproval {
            agent_id: "a".into(),
            thread_id: "t".into(),
            kind: ApprovalKind::CommandExecution,
            since: Instant::now(),
            request: ClientMessage::default(),
        }
    }

    #[test]
    fn ids_are_unique_and_resolved_ones_are_told_apart_from_unknown_ones() {
        let approvals = Approvals::new();
        let (a, b) = (approvals.next_id(), approvals.next_id());
        assert_ne!(a, b);
        approvals.register(&a, waiting());
        assert_eq!(approvals.thread_of(&a), Ok(("a".into(), "t".into())));
        approvals.forget(&a);
        let err = approvals.thread_of(&a).unwrap_err();
        assert!(
            err.contains("already resolved") && err.contains(&a),
            "{err}"
        );
        let err = approvals.thread_of("apr-x").unwrap_err();
        assert!(err.contains("unknown approval apr-x"), "{err}");
    }

    #[test]
    fn approved_for_thread_means_the_same_kind_and_command() {
        let mut thread = ThreadApprovals::default();
        let mut ask = ApprovalAsk::new(ApprovalKind::CommandExecution, "run ls");
        ask.command = Some("ls".into());
        assert!(!thread.approved_for_thread(&ask));
        thread.remember(ask.same_as_key());
        assert!(thread.approved_for_thread(&ask));
        let mut other = ask.clone();
        other.command = Some("rm -rf /".into());
        assert!(!thread.approved_for_thread(&other));
        let mut question = ApprovalAsk::new(ApprovalKind::Question, "ls");
        question.command = Some("ls".into());
        thread.remember(question.same_as_key());
        assert!(!thread.approved_for_thread(&question));
        // A permission naming nothing is approved once, not for the thread.
        let vague = ApprovalAsk::new(ApprovalKind::Permission, "more access");
        thread.remember(vague.same_as_key());
        assert!(!thread.approved_for_thread(&vague));
        let mut elicit = ApprovalAsk::new(ApprovalKind::McpElicitation, "token?");
        elicit.paths = vec!["server".into()];
        thread.remember(elicit.same_as_key());
        assert!(!thread.approved_for_thread(&elicit));
    }

    #[test]
    fn policies_parse_and_answer() {
        assert_eq!(Policy::parse("deny"), Ok(Policy::Deny));
        assert!(policy_answer(Policy::parse("approve").unwrap()).approved());
        assert!(!policy_answer(Policy::Deny).approved());
        assert!(Policy::parse("maybe").is_err());
    }
}
