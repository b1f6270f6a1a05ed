//! SDK status after registration. Registration never waits for a probe:
//! it advertises what each SDK can say at once ([`for_registration`]) and
//! the slow descriptions (codex's app-server, the code-agent engine's
//! providers) are probed in the background, each announced with an
//! `agent_sdk_update` when its answer differs from what was advertised.
//!
//! Registration says what each SDK can do,
//! but that changes (codex logs in or out, a CLI is installed, a provider
//! is configured). Every `--sdk-probe-interval`, and whenever the runner
//! itself changed an SDK (a codex login), each SDK is probed afresh and
//! every one whose status or models differ from what the control plane was
//! last told is announced with an `agent_sdk_update` (ClientMessage 10,
//! the whole `AgentSdk`). The checks of later requests use the fresh
//! description too.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use sdk_adapter::{SdkAdapter, SdkDescription};

use agent_runner_proto::runner::ClientMessage;

use crate::delivery::messages::RequestId;
use crate::tasks::context::Runtime;

/// The `agent_sdk_update` announcing `d`.
pub use crate::delivery::messages::agent_sdk_update;

/// The `agent_sdk_update`s announcing `d`: in protocol 0.7 (model names
/// unique across SDKs) also every other SDK whose advertised names changed
/// with it.
pub fn sdk_updates(rt: &Runtime, request_id: RequestId, d: SdkDescription) -> Vec<ClientMessage> {
    match rt.thread_only() {
        None => vec![agent_sdk_update(request_id, d)],
        Some(t) => t
            .updates(&rt.sdks.advertised(), &d.name)
            .into_iter()
            .map(|sdk| crate::delivery::messages::agent_sdk_message(request_id.clone(), sdk))
            .collect(),
    }
}

/// Probe every SDK now and announce those that changed (carrying
/// `request_id`, the request that caused the change, if any); how many
/// changed.
pub async fn announce_changes(rt: &Runtime, request_id: RequestId) -> usize {
    let changed = rt.sdks.reprobe().await;
    let count = changed.len();
    for d in changed {
        tracing::info!(sdk = %d.name, status = ?d.status, models = d.models.len(), "SDK changed since registration; announcing it");
        for update in sdk_updates(rt, request_id.clone(), d) {
            rt.outbox.push(update).await;
        }
    }
    count
}

/// What a registration advertises, at once (see [`crate::tasks::sdks::Sdks::known`]).
/// The SDKs whose description takes a probe are probed by
/// [`probe_pending`], once the registration is sent: a probe starts a CLI
/// (codex's is node), which would compete for the CPU with the runner's
/// own start on a small machine.
pub fn for_registration(rt: &Arc<Runtime>) -> Vec<SdkDescription> {
    rt.sdks.known()
}

/// Probes, in the background, each SDK whose full description is still
/// unknown (one probe per SDK at a time); each is announced with an
/// `agent_sdk_update` when its answer differs from what was advertised.
pub fn probe_pending(rt: &Arc<Runtime>) {
    for adapter in rt.sdks.pending() {
        probe_in_background(rt, adapter);
    }
}

fn probe_in_background(rt: &Arc<Runtime>, adapter: Arc<dyn SdkAdapter>) {
    let name = adapter.name().to_owned();
    if !rt.sdks.begin_probe(&name) {
        return;
    }
    let ticket = rt.sdks.ticket();
    let rt = rt.clone();
    rt.tasks.clone().spawn(async move {
        let started = tokio::time::Instant::now();
        let d = adapter.describe().await;
        rt.sdks.end_probe(&name);
        tracing::debug!(sdk = %name, status = ?d.status, ms = started.elapsed().as_millis() as u64, "SDK probed");
        if let Some(d) = rt.sdks.settle(ticket, d) {
            tracing::info!(sdk = %d.name, status = ?d.status, models = d.models.len(), "SDK probed after registration; announcing it");
            for update in sdk_updates(&rt, None, d) {
                rt.outbox.push(update).await;
            }
        }
    });
}

/// Re-probe every `interval` until `close` (a zero interval: never).
pub fn spawn(rt: Arc<Runtime>, interval: Duration, close: CancellationToken) {
    if interval.is_zero() {
        return;
    }
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: registration just probed.
        ticks.tick().await;
        loop {
            tokio::select! {
                () = close.cancelled() => break,
                _ = ticks.tick() => {
                    announce_changes(&rt, None).await;
                }
            }
        }
    });
}
