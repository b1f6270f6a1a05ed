//! The runner's Prometheus metrics: the one registry, every metric in it, and
//! the small, named calls the rest of the runner makes when something happens.
//!
//! Crate choice: `prometheus-client`, the Prometheus project's own Rust
//! client (github.com/prometheus/client_rust). It gives typed counters,
//! gauges and histograms with label sets, and encodes them itself
//! (OpenMetrics text, which Prometheus scrapes natively). The alternative,
//! `metrics` + `metrics-exporter-prometheus`, adds a global recorder facade
//! and an exporter with its own HTTP listener that we do not need: the runner
//! already serves `/metrics` beside `/livez`, `/readyz` and `/status`
//! ([`crate::ops::health`]).
//!
//! One process-wide set ([`get`]) because a process exposes one `/metrics`
//! and the events counted happen all over the runner. Gauges that mirror
//! state owned elsewhere (outbox depth, child processes) are set when scraped
//! ([`render`]), so they cannot drift from what they mirror.
//!
//! Every name starts with `agent_runner_` and carries its unit; counters get
//! `_total` from the encoder. The exact list is in `docs/operating.md`.
//!
//! The parts: this file holds the registry and renders it; [`catalogue`]
//! names and describes every metric; [`requests`] follows a request to its
//! first reply; [`events`] is every other call the runner makes; [`labels`]
//! are the label sets.

mod catalogue;
mod events;
mod labels;
mod requests;

pub use events::delivery_set_aside;
pub use events::{
    adapter_error, approval_resolved, approvals_waiting, delivery_ack_ignored,
    delivery_legacy_released_early, delivery_resent, delivery_unacked_full,
    get_token_refresh_failures, git_credential_rate_limited, journal_append, link_state,
    outbox_coalesced, outbox_dropped, outbox_totals, reconnect, reconnects, register_failed,
    sandbox_missing, sdks_enabled, store_batch, token_refresh_failed, token_refreshed, turn_ended,
    turn_started, turn_wait_ended, turn_waiting,
};
pub use requests::{RequestOutcome, awaits_reply, request_arrived, request_handled, update_sent};

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{LazyLock, Mutex, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::observe::link_state::LinkState;
use crate::observe::message_kind as kinds;

use labels::{
    AdapterErrorLabels, ApprovalLabels, CodeLabel, FeatureLabel, Histograms, KindLabel, ModeLabel,
    RequestLabels, SdkLabel, StateLabel, ThreadLabel, TurnLabels, request_histogram,
    turn_histogram,
};
use requests::Pending;

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The process's metrics (one registry).
pub struct Metrics {
    registry: Registry,
    connection_state: Family<StateLabel, Gauge>,
    reconnects: Counter,
    register_failures: Family<CodeLabel, Counter>,
    requests: Family<RequestLabels, Counter>,
    request_duration: Histograms<KindLabel>,
    updates_sent: Family<KindLabel, Counter>,
    outbox_depth: Gauge,
    outbox_dropped: Counter,
    outbox_coalesced: Counter,
    delivery_unsettled: Gauge,
    delivery_resent: Family<ModeLabel, Counter>,
    delivery_acks_ignored: Counter,
    delivery_unacked_full: Counter,
    delivery_legacy_released: Counter,
    delivery_set_aside: Family<KindLabel, Counter>,
    journal_appends: Histogram,
    store_busy: Family<ThreadLabel, Counter<f64>>,
    store_jobs: Family<ThreadLabel, Counter>,
    store_commits: Family<ThreadLabel, Counter>,
    running_turns: Family<SdkLabel, Gauge>,
    waiting_turns: Family<SdkLabel, Gauge>,
    turn_duration: Histograms<TurnLabels>,
    child_processes: Gauge,
    adapter_errors: Family<AdapterErrorLabels, Counter>,
    approvals: Family<ApprovalLabels, Counter>,
    approvals_waiting: Gauge,
    token_refreshes: Counter,
    token_refresh_failures: Counter,
    sandbox_missing: Family<FeatureLabel, Gauge>,
    git_credential_rate_limited: Counter,
    /// Request id → (kind, arrival) until its first reply is sent.
    pending: Mutex<HashMap<String, Pending>>,
    /// How many `pending` holds, so the link, for every update it sends,
    /// can skip the lock when nothing waits for a first reply.
    pending_len: AtomicUsize,
    /// `updates_sent`'s counter per kind ([`kinds::kind_index`]), taken
    /// from the family once: the family hashes the label on every lookup
    /// and the link counts every update.
    sent_by_kind: [OnceLock<Counter>; kinds::KINDS.len()],
}

/// Every state the link can be in, as `connection_state` lists them.
const STATES: [LinkState; 4] = [
    LinkState::Connecting,
    LinkState::Registered,
    LinkState::Connected,
    LinkState::Closed,
];

impl Metrics {
    fn new() -> Self {
        let mut m = Self {
            // Registered below ([`catalogue::register`]).
            registry: Registry::default(),
            connection_state: Family::default(),
            reconnects: Counter::default(),
            register_failures: Family::default(),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(request_histogram),
            updates_sent: Family::default(),
            outbox_depth: Gauge::default(),
            outbox_dropped: Counter::default(),
            outbox_coalesced: Counter::default(),
            delivery_unsettled: Gauge::default(),
            delivery_resent: Family::default(),
            delivery_acks_ignored: Counter::default(),
            delivery_unacked_full: Counter::default(),
            delivery_legacy_released: Counter::default(),
            delivery_set_aside: Family::default(),
            // 10 µs … ~80 ms.
            journal_appends: Histogram::new(exponential_buckets(0.000_01, 2.0, 14)),
            store_busy: Family::default(),
            store_jobs: Family::default(),
            store_commits: Family::default(),
            running_turns: Family::default(),
            waiting_turns: Family::default(),
            turn_duration: Family::new_with_constructor(turn_histogram),
            child_processes: Gauge::default(),
            adapter_errors: Family::default(),
            approvals: Family::default(),
            approvals_waiting: Gauge::default(),
            token_refreshes: Counter::default(),
            token_refresh_failures: Counter::default(),
            sandbox_missing: Family::default(),
            git_credential_rate_limited: Counter::default(),
            pending: Mutex::new(HashMap::new()),
            pending_len: AtomicUsize::new(0),
            sent_by_kind: Default::default(),
        };
        let mut registry = Registry::with_prefix("agent_runner");
        catalogue::register(&mut registry, &m);
        m.registry = registry;
        for state in STATES {
            m.connection_state
                .get_or_create(&StateLabel {
                    state: state.as_str(),
                })
                .set(0);
        }
        m
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn get() -> &'static Metrics {
    &METRICS
}

/// Values read when scraped.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scraped {
    /// Updates waiting in the outbox.
    pub outbox_depth: usize,
    /// Updates sent and not yet settled.
    pub delivery_unsettled: usize,
    /// `None` where it cannot be counted (no /proc).
    pub child_processes: Option<usize>,
}

/// The whole exposition, in OpenMetrics text ([`CONTENT_TYPE`]).
pub fn render(scraped: Scraped) -> String {
    let m = get();
    m.outbox_depth
        .set(i64::try_from(scraped.outbox_depth).unwrap_or(i64::MAX));
    m.delivery_unsettled
        .set(i64::try_from(scraped.delivery_unsettled).unwrap_or(i64::MAX));
    m.child_processes.set(
        scraped
            .child_processes
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)),
    );
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &m.registry);
    out
}

/// The canonical upper-case name of a gRPC status code (`UNAVAILABLE`).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests;
