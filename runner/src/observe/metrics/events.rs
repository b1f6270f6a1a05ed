//! The small, named calls the rest of the runner makes when something
//! happens: the link, updates, the outbox and delivery, the store, turns
//! and adapters, the sandbox and GitHub tokens.

use std::time::Duration;

use sdk_adapter::TurnOutcome;

use super::labels::{
    AdapterErrorLabels, ApprovalLabels, CodeLabel, FeatureLabel, KindLabel, ModeLabel, SdkLabel,
    StateLabel, ThreadLabel, TurnLabels,
};
use super::{STATES, code_name, get};
use crate::observe::link_state::LinkState;

/// The link entered `state`.
pub fn link_state(state: LinkState) {
    for s in STATES {
        get()
            .connection_state
            .get_or_create(&StateLabel { state: s.as_str() })
            .set(i64::from(s == state));
    }
}

/// The link was lost and will start a new session.
pub fn reconnect() {
    get().reconnects.inc();
}

/// Reconnects so far.
pub fn reconnects() -> u64 {
    get().reconnects.get()
}

/// `RegisterRunner` failed with `code`.
pub fn register_failed(code: tonic::Code) {
    get()
        .register_failures
        .get_or_create(&CodeLabel {
            code: code_name(code),
        })
        .inc();
}

/// An intermediate update was dropped from a full outbox.
pub fn outbox_dropped() {
    get().outbox_dropped.inc();
}

/// An intermediate update was coalesced in a full outbox.
pub fn outbox_coalesced() {
    get().outbox_coalesced.inc();
}

/// `(dropped, coalesced)` so far, process-wide.
pub fn outbox_totals() -> (u64, u64) {
    let m = get();
    (m.outbox_dropped.get(), m.outbox_coalesced.get())
}

/// `n` updates were sent again after a connection died (`mode`: "acked"
/// or "legacy").
pub fn delivery_resent(mode: &'static str, n: usize) {
    get()
        .delivery_resent
        .get_or_create(&ModeLabel { mode })
        .inc_by(n as u64);
}

/// An acknowledgement was ignored (nonsense, or not negotiated).
pub fn delivery_ack_ignored() {
    get().delivery_acks_ignored.inc();
}

/// The unacknowledged updates filled the outbox capacity.
pub fn delivery_unacked_full() {
    get().delivery_unacked_full.inc();
}

/// Legacy mode: `n` sent terminal updates released from the re-send set
/// early (its count bound).
pub fn delivery_legacy_released_early(n: usize) {
    get().delivery_legacy_released.inc_by(n as u64);
}

/// An update the control plane kept rejecting was set aside (not sent
/// again; an error update replaces it).
pub fn delivery_set_aside(kind: &'static str) {
    get()
        .delivery_set_aside
        .get_or_create(&KindLabel { kind })
        .inc();
}

/// Store thread `name` ran `jobs` jobs in one transaction, busy for `took`.
pub fn store_batch(name: &str, jobs: usize, took: Duration) {
    let label = ThreadLabel {
        thread: name.to_owned(),
    };
    let m = get();
    m.store_busy
        .get_or_create(&label)
        .inc_by(took.as_secs_f64());
    m.store_jobs.get_or_create(&label).inc_by(jobs as u64);
    m.store_commits.get_or_create(&label).inc();
}

/// One durable update took `took` to journal.
pub fn journal_append(took: Duration) {
    get().journal_appends.observe(took.as_secs_f64());
}

/// These SDKs are enabled: their running- and waiting-turn series exist
/// from the start (at 0), so an autoscaler sees the metric before the first
/// turn.
pub fn sdks_enabled(names: &[String]) {
    let m = get();
    for sdk in names {
        let label = SdkLabel { sdk: sdk.clone() };
        let _series = m.running_turns.get_or_create(&label);
        let _series = m.waiting_turns.get_or_create(&label);
    }
}

/// A thread's next turn on `sdk` began to wait for a turn slot.
pub fn turn_waiting(sdk: &str) {
    get()
        .waiting_turns
        .get_or_create(&SdkLabel {
            sdk: sdk.to_owned(),
        })
        .inc();
}

/// A turn on `sdk` waits no more (it started, or its message was answered).
pub fn turn_wait_ended(sdk: &str) {
    get()
        .waiting_turns
        .get_or_create(&SdkLabel {
            sdk: sdk.to_owned(),
        })
        .dec();
}

/// A turn started on `sdk`.
pub fn turn_started(sdk: &str) {
    get()
        .running_turns
        .get_or_create(&SdkLabel {
            sdk: sdk.to_owned(),
        })
        .inc();
}

/// A turn on `sdk` ended with `outcome` after `ran`.
pub fn turn_ended(sdk: &str, outcome: &TurnOutcome, ran: Duration) {
    let m = get();
    m.running_turns
        .get_or_create(&SdkLabel {
            sdk: sdk.to_owned(),
        })
        .dec();
    let outcome = match outcome {
        TurnOutcome::Completed => "completed",
        TurnOutcome::Interrupted => "interrupted",
        TurnOutcome::Failed(_) => "failed",
    };
    m.turn_duration
        .get_or_create(&TurnLabels {
            sdk: sdk.to_owned(),
            outcome,
        })
        .observe(ran.as_secs_f64());
}

/// An SDK adapter's `operation` returned an error (or a turn failed).
pub fn adapter_error(sdk: &str, operation: &'static str) {
    get()
        .adapter_errors
        .get_or_create(&AdapterErrorLabels {
            sdk: sdk.to_owned(),
            operation,
        })
        .inc();
}

/// An agent's request of `kind` ended: `resolver` decided `outcome`.
pub fn approval_resolved(kind: &'static str, resolver: &'static str, outcome: &'static str) {
    get()
        .approvals
        .get_or_create(&ApprovalLabels {
            kind,
            resolver,
            outcome,
        })
        .inc();
}

/// Requests waiting for the control plane: `delta` more (or fewer).
pub fn approvals_waiting(delta: i64) {
    get().approvals_waiting.inc_by(delta);
}

/// The agent sandbox could not apply `feature` on this host.
pub fn sandbox_missing(feature: &str) {
    get()
        .sandbox_missing
        .get_or_create(&FeatureLabel {
            feature: feature.to_owned(),
        })
        .set(1);
}

/// A GitHub installation token was minted (see [`crate::host::github`]).
pub fn token_refreshed() {
    get().token_refreshes.inc();
}

/// An attempt to mint a GitHub installation token failed.
pub fn token_refresh_failed() {
    get().token_refresh_failures.inc();
}

/// A thread's git credential request was refused by its rate limit.
pub fn git_credential_rate_limited() {
    get().git_credential_rate_limited.inc();
}

/// Failed attempts to mint a token so far.
pub fn get_token_refresh_failures() -> u64 {
    get().token_refresh_failures.get()
}
