//! Every metric's name, unit and help text, registered in the order
//! `/metrics` lists them: what an operator reads, kept apart from the
//! code that counts.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::Metrics;
use super::labels::VersionLabel;

/// Registers every metric of `m` in `registry`, area by area.
pub(super) fn register(registry: &mut Registry, m: &Metrics) {
    link(registry, m);
    requests(registry, m);
    delivery(registry, m);
    store(registry, m);
    agents(registry, m);
    host(registry, m);
}

/// The link's metrics: the build, the connection's state, reconnects and registration failures.
fn link(registry: &mut Registry, m: &Metrics) {
    let info: Family<VersionLabel, Gauge> = Family::default();
    info.get_or_create(&VersionLabel {
        version: env!("CARGO_PKG_VERSION"),
    })
    .set(1);
    registry.register("build_info", "The runner's version (always 1)", info);
    registry.register(
        "connection_state",
        "The control-plane link's state: 1 for the current one (connecting, registered, connected, closed)",
        m.connection_state.clone(),
    );
    registry.register(
        "reconnects",
        "Times the control-plane link was lost and a new session was started",
        m.reconnects.clone(),
    );
    registry.register(
        "register_failures",
        "RegisterRunner calls that failed, by gRPC status code",
        m.register_failures.clone(),
    );
}

/// Requests and the updates answering them.
fn requests(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "requests",
        "Requests received on the ControlChannel, by kind and by what the dispatcher did with them (accepted, answered, invalid, rejected)",
        m.requests.clone(),
    );
    registry.register_with_unit(
        "request_duration",
        "From a request's arrival to the first update answering it being handed to the ControlChannel",
        Unit::Seconds,
        m.request_duration.clone(),
    );
    registry.register(
        "updates_sent",
        "Updates handed to the ControlChannel, by kind",
        m.updates_sent.clone(),
    );
}

/// The outbox, delivery and the journal.
fn delivery(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "outbox_depth",
        "Updates queued for the control plane",
        m.outbox_depth.clone(),
    );
    registry.register(
        "outbox_dropped",
        "Intermediate updates dropped because the outbox was full",
        m.outbox_dropped.clone(),
    );
    registry.register(
        "outbox_coalesced",
        "Intermediate updates merged into a queued one because the outbox was full",
        m.outbox_coalesced.clone(),
    );
    registry.register(
        "delivery_unsettled",
        "Updates handed to the control plane and kept until delivery is settled (acknowledged, or past the legacy re-send window); they count against the outbox capacity",
        m.delivery_unsettled.clone(),
    );
    registry.register(
        "delivery_resent",
        "Updates sent again after a connection died, by delivery mode (acked: every unacknowledged update; legacy: terminal and structural updates)",
        m.delivery_resent.clone(),
    );
    registry.register(
        "delivery_acks_ignored",
        "Acknowledgements ignored because they made no sense (beyond what was sent, or from a control plane that did not accept acked delivery)",
        m.delivery_acks_ignored.clone(),
    );
    registry.register(
        "delivery_unacked_full",
        "Times the unacknowledged updates filled the outbox capacity (the control plane is not acknowledging)",
        m.delivery_unacked_full.clone(),
    );
    registry.register(
        "delivery_legacy_released_early",
        "Legacy mode: sent terminal updates no longer kept for a re-send before their window ended, because more than the outbox capacity were kept (a dirty drop would not re-send them)",
        m.delivery_legacy_released.clone(),
    );
    registry.register(
        "delivery_set_aside",
        "Updates set aside, by kind: the control plane ended the stream each time, several times in a row, with the update sent and not acknowledged; not sent again, an error update replaces it",
        m.delivery_set_aside.clone(),
    );
    registry.register_with_unit(
        "journal_append_duration",
        "Time to journal one durable update (a group commit shared with the updates journaled at the same time)",
        Unit::Seconds,
        m.journal_appends.clone(),
    );
}

/// The store's threads.
fn store(registry: &mut Registry, m: &Metrics) {
    registry.register_with_unit(
        "store_thread_busy",
        "Time a store thread spent running jobs and committing them, by thread (outbox-journal: the journal's whole cost, off the async workers)",
        Unit::Seconds,
        m.store_busy.clone(),
    );
    registry.register(
        "store_thread_jobs",
        "Jobs a store thread ran (one per journaled update, sequence mark batch, forget or reservation), by thread",
        m.store_jobs.clone(),
    );
    registry.register(
        "store_thread_commits",
        "Transactions a store thread committed (group commits), by thread",
        m.store_commits.clone(),
    );
}

/// Turns, agent processes and SDK adapters.
fn agents(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "running_turns",
        "Turns running now, by SDK",
        m.running_turns.clone(),
    );
    registry.register(
        "waiting_turns",
        "Turns waiting for a slot (--max-concurrent-turns) now, by SDK: threads whose user message waits to start a turn",
        m.waiting_turns.clone(),
    );
    registry.register_with_unit(
        "turn_duration",
        "How long finished turns ran, by SDK and outcome (completed, interrupted, failed)",
        Unit::Seconds,
        m.turn_duration.clone(),
    );
    registry.register(
        "child_processes",
        "Live (non-zombie) processes descended from the runner: agents and the commands they run",
        m.child_processes.clone(),
    );
    registry.register(
        "adapter_errors",
        "Errors an SDK adapter returned, by SDK and operation (a failed turn is operation=\"turn\")",
        m.adapter_errors.clone(),
    );
    registry.register(
        "approvals",
        "Agents' approval requests and questions by how they ended: kind, resolver (control_plane, timeout, turn_ended, policy, thread) and outcome",
        m.approvals.clone(),
    );
    registry.register(
        "approvals_waiting",
        "Approval requests waiting for the control plane's decision now",
        m.approvals_waiting.clone(),
    );
}

/// GitHub tokens, the sandbox and git credentials.
fn host(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "token_refreshes",
        "GitHub installation tokens minted (first tokens and refreshes)",
        m.token_refreshes.clone(),
    );
    registry.register(
        "token_refresh_failures",
        "Failed attempts to mint a GitHub installation token (each retry counts)",
        m.token_refresh_failures.clone(),
    );
    registry.register(
        "sandbox_missing",
        "1 for each isolation the agent sandbox could not apply on this host (best-effort mode), by feature (Landlock, cgroup, cgroup limits, …)",
        m.sandbox_missing.clone(),
    );
    registry.register(
        "git_credential_rate_limited",
        "Git credential requests refused by the per-thread rate limit on token mints and erases",
        m.git_credential_rate_limited.clone(),
    );
}
