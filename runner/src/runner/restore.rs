//! Start-up: what the store knows comes back before the first connection.
//!
//! Agents and threads are re-opened in their SDKs and get their tasks
//! again; every turn that was running when the runner died is reported
//! ended. Above the tasks ([`crate::tasks::agent`], [`crate::tasks::thread`]) because it
//! starts them.

use std::collections::HashSet;
use std::sync::Arc;

use agent_runner_proto::runner::{ApprovalOutcome, ApprovalResolver, TurnStatus};
use sdk_adapter::AgentSpec;

use crate::delivery::messages;
use crate::host::store::StoreError;
use crate::tasks::context::Runtime;

/// Bring back what the store knows: agents and threads are re-opened in
/// their SDKs, and every turn that was running when the runner died is
/// reported ended (`RequestError` + `TurnUpdate COMPLETED`) — unless its
/// own `TurnUpdate COMPLETED` is in `journaled_ends` (`(thread_id,
/// sdk_turn_id)` of completions the outbox journal will send): the turn
/// ended before the crash and only its record lagged behind. Every approval
/// request still recorded as waiting is reported resolved `TURN_ENDED`.
pub async fn restore(
    rt: &Arc<Runtime>,
    journaled_ends: &HashSet<(String, String)>,
) -> Result<(), StoreError> {
    for row in rt.store.running_turns()? {
        if journaled_ends.contains(&(row.thread_id.clone(), row.sdk_turn_id.clone())) {
            rt.store.finish_turn(&row.thread_id, &row.sdk_turn_id)?;
            continue;
        }
        let rid = row.request_id.clone();
        rt.outbox.push_reply(messages::request_error(
            rid.clone(),
            format!(
                "the runner restarted while turn {} was running; the turn was interrupted",
                row.sdk_turn_id
            ),
        ));
        rt.outbox.push_reply(messages::turn(
            rid,
            &row.thread_id,
            &row.sdk_turn_id,
            TurnStatus::Completed,
        ));
        rt.store.finish_turn(&row.thread_id, &row.sdk_turn_id)?;
        tracing::warn!(thread_id = %row.thread_id, turn_id = %row.sdk_turn_id, "turn lost in a restart reported as interrupted");
    }
    // Every approval request the dead runner's turns waited on ended with
    // them (their turns were reported ended above).
    for (approval_id, thread_id, rid) in rt.store.waiting_approvals()? {
        rt.outbox.push_reply(messages::approval_resolved(
            rid,
            &approval_id,
            &thread_id,
            ApprovalOutcome::Deny,
            ApprovalResolver::TurnEnded,
        ));
        rt.store.forget_approval(&approval_id)?;
        tracing::warn!(%thread_id, %approval_id, "approval request lost in a restart reported as ended with its turn");
    }
    let agents = rt.store.agents()?;
    for a in &agents {
        if let Some(adapter) = rt.sdks.get(&a.sdk) {
            let spec = AgentSpec {
                agent_id: a.agent_id.clone(),
                home: rt.workspaces.agent_home(&a.agent_id),
            };
            if let Err(e) = adapter.create_agent(&spec).await {
                crate::observe::metrics::adapter_error(&a.sdk, "create_agent");
                tracing::warn!(agent_id = %a.agent_id, error = %e, "re-opening agent failed");
            }
        } else {
            tracing::warn!(agent_id = %a.agent_id, sdk = %a.sdk, "agent's SDK is not enabled; its requests will fail");
        }
    }
    for row in rt.store.threads()? {
        let Some(sdk) = agents.iter().find(|a| a.agent_id == row.agent_id) else {
            continue;
        };
        // Masked again before anything of the thread can quote it.
        if let Some(token) = &row.agent_api_token {
            rt.redactor.add(token);
        }
        let spec = rt.thread_spec(&row);
        if let Some(adapter) = rt.sdks.get(&sdk.sdk)
            && let Err(e) = adapter.create_thread(&spec).await
        {
            crate::observe::metrics::adapter_error(&sdk.sdk, "create_thread");
            tracing::warn!(thread_id = %row.thread_id, error = %e, "re-opening thread failed");
        }
        crate::tasks::thread::start(rt, sdk.sdk.clone(), spec, row.last_turn_id.clone());
    }
    Ok(())
}
