//! A thread's side of `approvals/1`: the running turn's agent asks
//! ([`sdk_adapter::TurnEvent::Approval`]), and the thread's task answers
//! it exactly once: at once when the thread approved the same request
//! before ("approve for this thread") or when no control plane decides
//! (the SDK's own fallback answer, else the operator's policy; nothing
//! sent); otherwise an `ApprovalRequest` goes out with the turn's request
//! id and the answer waits for the control plane's decision, the timeout,
//! or the turn's end, each followed by one `ApprovalResolved`.
//!
//! The agent's turn awaits its reply (a oneshot channel), so a waiting turn
//! holds no worker; the thread's task keeps serving its mailbox meanwhile.

use agent_runner_proto::runner::ApprovalOutcome;
use sdk_adapter::{ApprovalAnswer, ApprovalEvent, Verdict};

use super::ThreadTask;
use crate::delivery::messages::{self, RequestId};
use crate::observe::metrics;
use crate::tasks::approvals::{
    Pending, Resolver, WaitingApproval, answer_of, kind_label, policy_answer, unix_ms,
    verdict_label,
};
use crate::tasks::mail::Decision;

impl ThreadTask {
    /// The running turn's agent asks (see the module doc).
    pub(super) async fn ask(&mut self, asked: ApprovalEvent) {
        let ApprovalEvent { ask, reply } = asked;
        let kind = kind_label(ask.kind);
        if self.approvals.approved_for_thread(&ask) {
            metrics::approval_resolved(kind, Resolver::Thread.as_str(), "approve_for_thread");
            reply.send(answer_of(Verdict::ApproveForThread, None, None));
            return;
        }
        let rt = self.rt.clone();
        let Some(turn) = self.active.as_ref().filter(|_| rt.approvals.accepted()) else {
            // No control plane decides (or the turn is gone): the SDK's
            // own answer when it has one, else the operator's policy.
            let answer = ask
                .adapter
                .and_then(|a| a.fallback)
                .unwrap_or_else(|| policy_answer(rt.approvals.policy()));
            let outcome = verdict_label(answer.verdict);
            metrics::approval_resolved(kind, Resolver::Policy.as_str(), outcome);
            tracing::info!(thread_id = %self.spec.thread_id, kind, outcome, "approval decided by the runner's policy");
            reply.send(answer);
            return;
        };
        let id = rt.approvals.next_id();
        let timeout = rt.approvals.timeout();
        let expires =
            unix_ms().saturating_add(i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX));
        let rid = turn.rid.clone();
        let rid_sent = rid.clone();
        let request = messages::approval_request(
            rid.clone(),
            &id,
            &self.spec.thread_id,
            &turn.id,
            &ask,
            expires,
        );
        rt.approvals.register(
            &id,
            WaitingApproval {
                agent_id: self.spec.agent_id.clone(),
                thread_id: self.spec.thread_id.clone(),
                kind: ask.kind,
                since: std::time::Instant::now(),
                request: request.clone(),
            },
        );
        self.approvals.wait(Pending {
            id: id.clone(),
            reply,
            deadline: tokio::time::Instant::now() + timeout,
            kind: ask.kind,
            key: ask.same_as_key(),
            rid,
        });
        tracing::info!(thread_id = %self.spec.thread_id, approval_id = %id, kind, "the agent waits for approval");
        // Recorded before it goes out: a request the control plane saw is
        // one a restart reports ended.
        let recorded = rt
            .store
            .record_approval_wait(id.clone(), self.spec.thread_id.clone(), rid_sent)
            .await;
        if let Err(e) = recorded {
            tracing::error!(thread_id = %self.spec.thread_id, error = %e, "recording the approval request failed");
        }
        self.send(request).await;
    }

    /// The control plane decided.
    pub(super) async fn decide(&mut self, rid: RequestId, decision: Decision) {
        let Some(pending) = self.approvals.take(&decision.approval_id) else {
            let text = self.rt.approvals.not_waiting(&decision.approval_id);
            return self.error(rid, text).await;
        };
        let verdict = decision.verdict;
        if verdict == Verdict::ApproveForThread {
            self.approvals.remember(pending.key.clone());
        }
        if verdict == Verdict::CancelTurn {
            // Interrupted before the agent hears the denial, so it never
            // takes a step after it.
            self.interrupt(rid.clone()).await;
        }
        let answer = answer_of(verdict, decision.answer, decision.message);
        self.resolve(pending, answer, Resolver::ControlPlane, rid)
            .await;
    }

    /// `id`'s deadline passed: denied.
    pub(super) async fn approval_expired(&mut self, id: String) {
        let Some(pending) = self.approvals.take(&id) else {
            return;
        };
        let text = format!(
            "denied: no decision came within {}s",
            self.rt.approvals.timeout().as_secs()
        );
        let rid = pending.rid.clone();
        self.resolve(pending, ApprovalAnswer::deny(text), Resolver::Timeout, rid)
            .await;
    }

    /// The turn ends (interrupt, delete, drain, its end): every request
    /// still waiting is denied.
    pub(super) async fn turn_ended_approvals(&mut self) {
        for pending in self.approvals.take_all() {
            let rid = pending.rid.clone();
            let answer = ApprovalAnswer::deny("the turn ended before a decision came");
            self.resolve(pending, answer, Resolver::TurnEnded, rid)
                .await;
        }
    }

    /// Answers `pending` with `answer` and says so (`ApprovalResolved` with `rid`).
    async fn resolve(
        &mut self,
        pending: Pending,
        answer: ApprovalAnswer,
        resolver: Resolver,
        rid: RequestId,
    ) {
        self.rt.approvals.forget(&pending.id);
        let verdict = answer.verdict;
        metrics::approval_resolved(
            kind_label(pending.kind),
            resolver.as_str(),
            verdict_label(verdict),
        );
        tracing::info!(thread_id = %self.spec.thread_id, approval_id = %pending.id, resolved_by = resolver.as_str(), outcome = verdict_label(verdict), "approval resolved");
        // The agent may be gone already; the resolution is said either way.
        pending.reply.send(answer);
        if let Some(by) = resolver.wire() {
            let outcome: ApprovalOutcome = messages::approval_outcome(verdict);
            self.send(messages::approval_resolved(
                rid,
                &pending.id,
                &self.spec.thread_id,
                outcome,
                by,
            ))
            .await;
            if let Err(e) = self.rt.store.record_approval_end(pending.id.clone()).await {
                tracing::error!(thread_id = %self.spec.thread_id, error = %e, "recording the approval's end failed");
            }
        }
    }
}
