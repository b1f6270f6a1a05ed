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
//! `_total` from the encoder. The exact list is in `deploy/README.md`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use agent_runner_proto::runner::ClientMessage;
use agent_runner_proto::runner::client_message::Payload;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use sdk_adapter::TurnOutcome;

use crate::observe::link_state::LinkState;
use crate::observe::message_kind as kinds;

/// Requests whose first reply is still awaited, at most (beyond it new
/// requests are counted but not timed, so a control plane that never gets
/// answers cannot grow memory).
const MAX_PENDING_REQUESTS: usize = 10_000;

/// A request whose outcome is not counted yet, or whose first reply has
/// not left yet. The dispatcher and the first reply may come in either
/// order (a reply can leave before the dispatcher is done with it).
struct Pending {
    kind: &'static str,
    arrived: Instant,
    /// What the dispatcher did, once it is done: `None` while dispatching.
    dispatched: Option<RequestOutcome>,
    /// Whether the first reply was a `RequestError`, once it left.
    replied: Option<bool>,
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SdkLabel {
    sdk: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TurnLabels {
    sdk: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdapterErrorLabels {
    sdk: String,
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FeatureLabel {
    feature: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ThreadLabel {
    thread: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabel {
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn request_histogram() -> Histogram {
    // 1 ms … ~16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn turn_histogram() -> Histogram {
    Histogram::new([
        1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
    ])
}

/// What became of a request as the dispatcher saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// Handed to an agent's or thread's task: counted when its first reply
    /// leaves, as `completed` (anything but a `RequestError`) or `failed`
    /// (a `RequestError`: unknown SDK, model or thread…); counted
    /// `accepted` only when it cannot be followed (no request id).
    Accepted,
    /// Answered by the dispatcher itself (heartbeat, deleting an unknown thread).
    Answered,
    /// Failed validation (`buf.validate`, ids, no request set).
    Invalid,
    /// Valid but refused at once (mailbox full, unknown thread, wrong agent).
    Rejected,
}

impl RequestOutcome {
    fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Accepted => "accepted",
            RequestOutcome::Answered => "answered",
            RequestOutcome::Invalid => "invalid",
            RequestOutcome::Rejected => "rejected",
        }
    }
}

/// The process's metrics (one registry).
pub struct Metrics {
    registry: Registry,
    connection_state: Family<StateLabel, Gauge>,
    reconnects: Counter,
    register_failures: Family<CodeLabel, Counter>,
    requests: Family<RequestLabels, Counter>,
    request_duration: Histograms<KindLabel>,
    updates_sent: Family<KindLabel, Counter>,
    invalid_updates: Family<KindLabel, Counter>,
    outbox_depth: Gauge,
    outbox_dropped: Counter,
    outbox_coalesced: Counter,
    delivery_unsettled: Gauge,
    delivery_resent: Family<ModeLabel, Counter>,
    delivery_acks_ignored: Counter,
    delivery_unacked_full: Counter,
    delivery_legacy_released: Counter,
    journal_appends: Histogram,
    store_busy: Family<ThreadLabel, Counter<f64>>,
    store_jobs: Family<ThreadLabel, Counter>,
    store_commits: Family<ThreadLabel, Counter>,
    running_turns: Family<SdkLabel, Gauge>,
    turn_duration: Histograms<TurnLabels>,
    child_processes: Gauge,
    adapter_errors: Family<AdapterErrorLabels, Counter>,
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
    /// and the link counts every update (1 % of the throughput profile).
    sent_by_kind: [OnceLock<Counter>; kinds::KINDS.len()],
}

const STATES: [LinkState; 4] = [
    LinkState::Connecting,
    LinkState::Registered,
    LinkState::Connected,
    LinkState::Closed,
];

impl Metrics {
    fn new() -> Self {
        let mut m = Self {
            registry: Registry::with_prefix("agent_runner"),
            connection_state: Family::default(),
            reconnects: Counter::default(),
            register_failures: Family::default(),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(request_histogram),
            updates_sent: Family::default(),
            invalid_updates: Family::default(),
            outbox_depth: Gauge::default(),
            outbox_dropped: Counter::default(),
            outbox_coalesced: Counter::default(),
            delivery_unsettled: Gauge::default(),
            delivery_resent: Family::default(),
            delivery_acks_ignored: Counter::default(),
            delivery_unacked_full: Counter::default(),
            delivery_legacy_released: Counter::default(),
            // 10 µs … ~80 ms.
            journal_appends: Histogram::new(exponential_buckets(0.000_01, 2.0, 14)),
            store_busy: Family::default(),
            store_jobs: Family::default(),
            store_commits: Family::default(),
            running_turns: Family::default(),
            turn_duration: Family::new_with_constructor(turn_histogram),
            child_processes: Gauge::default(),
            adapter_errors: Family::default(),
            token_refreshes: Counter::default(),
            token_refresh_failures: Counter::default(),
            sandbox_missing: Family::default(),
            git_credential_rate_limited: Counter::default(),
            pending: Mutex::new(HashMap::new()),
            pending_len: AtomicUsize::new(0),
            sent_by_kind: Default::default(),
        };
        let info: Family<VersionLabel, Gauge> = Family::default();
        info.get_or_create(&VersionLabel {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
        m.registry
            .register("build_info", "The runner's version (always 1)", info);
        m.registry.register(
            "connection_state",
            "The control-plane link's state: 1 for the current one (connecting, registered, connected, closed)",
            m.connection_state.clone(),
        );
        m.registry.register(
            "reconnects",
            "Times the control-plane link was lost and a new session was started",
            m.reconnects.clone(),
        );
        m.registry.register(
            "register_failures",
            "RegisterRunner calls that failed, by gRPC status code",
            m.register_failures.clone(),
        );
        m.registry.register(
            "requests",
            "Requests received on the ControlChannel, by kind and by what the dispatcher did with them (accepted, answered, invalid, rejected)",
            m.requests.clone(),
        );
        m.registry.register_with_unit(
            "request_duration",
            "From a request's arrival to the first update answering it being handed to the ControlChannel",
            Unit::Seconds,
            m.request_duration.clone(),
        );
        m.registry.register(
            "updates_sent",
            "Updates handed to the ControlChannel, by kind",
            m.updates_sent.clone(),
        );
        m.registry.register(
            "invalid_updates",
            "Updates not sent because they broke their buf.validate rules (runner bugs), by kind",
            m.invalid_updates.clone(),
        );
        m.registry.register(
            "outbox_depth",
            "Updates queued for the control plane",
            m.outbox_depth.clone(),
        );
        m.registry.register(
            "outbox_dropped",
            "Intermediate updates dropped because the outbox was full",
            m.outbox_dropped.clone(),
        );
        m.registry.register(
            "outbox_coalesced",
            "Intermediate updates merged into a queued one because the outbox was full",
            m.outbox_coalesced.clone(),
        );
        m.registry.register(
            "delivery_unsettled",
            "Updates handed to the control plane and kept until delivery is settled (acknowledged, or past the legacy re-send window); they count against the outbox capacity",
            m.delivery_unsettled.clone(),
        );
        m.registry.register(
            "delivery_resent",
            "Updates sent again after a connection died, by delivery mode (acked: every unacknowledged update; legacy: terminal and structural updates)",
            m.delivery_resent.clone(),
        );
        m.registry.register(
            "delivery_acks_ignored",
            "Acknowledgements ignored because they made no sense (beyond what was sent, or from a control plane that did not accept acked delivery)",
            m.delivery_acks_ignored.clone(),
        );
        m.registry.register(
            "delivery_unacked_full",
            "Times the unacknowledged updates filled the outbox capacity (the control plane is not acknowledging)",
            m.delivery_unacked_full.clone(),
        );
        m.registry.register(
            "delivery_legacy_released_early",
            "Legacy mode: sent terminal updates no longer kept for a re-send before their window ended, because more than the outbox capacity were kept (a dirty drop would not re-send them)",
            m.delivery_legacy_released.clone(),
        );
        m.registry.register_with_unit(
            "journal_append_duration",
            "Time to journal one durable update (a group commit shared with the updates journaled at the same time)",
            Unit::Seconds,
            m.journal_appends.clone(),
        );
        m.registry.register_with_unit(
            "store_thread_busy",
            "Time a store thread spent running jobs and committing them, by thread (outbox-journal: the journal's whole cost, off the async workers)",
            Unit::Seconds,
            m.store_busy.clone(),
        );
        m.registry.register(
            "store_thread_jobs",
            "Jobs a store thread ran (one per journaled update, sequence mark batch, forget or reservation), by thread",
            m.store_jobs.clone(),
        );
        m.registry.register(
            "store_thread_commits",
            "Transactions a store thread committed (group commits), by thread",
            m.store_commits.clone(),
        );
        m.registry.register(
            "running_turns",
            "Turns running now, by SDK",
            m.running_turns.clone(),
        );
        m.registry.register_with_unit(
            "turn_duration",
            "How long finished turns ran, by SDK and outcome (completed, interrupted, failed)",
            Unit::Seconds,
            m.turn_duration.clone(),
        );
        m.registry.register(
            "child_processes",
            "Live (non-zombie) processes descended from the runner: agents and the commands they run",
            m.child_processes.clone(),
        );
        m.registry.register(
            "adapter_errors",
            "Errors an SDK adapter returned, by SDK and operation (a failed turn is operation=\"turn\")",
            m.adapter_errors.clone(),
        );
        m.registry.register(
            "token_refreshes",
            "GitHub installation tokens minted (first tokens and refreshes)",
            m.token_refreshes.clone(),
        );
        m.registry.register(
            "token_refresh_failures",
            "Failed attempts to mint a GitHub installation token (each retry counts)",
            m.token_refresh_failures.clone(),
        );
        m.registry.register(
            "sandbox_missing",
            "1 for each isolation the agent sandbox could not apply on this host (best-effort mode), by feature (Landlock, cgroup, cgroup limits, …)",
            m.sandbox_missing.clone(),
        );
        m.registry.register(
            "git_credential_rate_limited",
            "Git credential requests refused by the per-thread rate limit on token mints and erases",
            m.git_credential_rate_limited.clone(),
        );
        for state in STATES {
            m.connection_state
                .get_or_create(&StateLabel {
                    state: state.as_str(),
                })
                .set(0);
        }
        m
    }

    fn pending(&self) -> Pendings<'_> {
        Pendings {
            map: self.pending.lock().unwrap_or_else(|p| p.into_inner()),
            len: &self.pending_len,
        }
    }
}

/// The requests waiting for their first reply, locked; their number is
/// published as the lock is released.
struct Pendings<'a> {
    map: MutexGuard<'a, HashMap<String, Pending>>,
    len: &'a AtomicUsize,
}

impl std::ops::Deref for Pendings<'_> {
    type Target = HashMap<String, Pending>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Pendings<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

impl Drop for Pendings<'_> {
    fn drop(&mut self) {
        // Before the lock is released (fields drop after this): a request
        // is counted before anything can reply to it.
        self.len.store(self.map.len(), Ordering::Relaxed);
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn get() -> &'static Metrics {
    &METRICS
}

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

/// A request of `kind` arrived: when it has an id, time it until the first
/// update answering it is sent. Call before any reply can be queued, so the
/// reply cannot beat the clock.
pub fn request_arrived(kind: &'static str, request_id: Option<&str>) {
    if let Some(id) = request_id {
        let mut pending = get().pending();
        if pending.len() < MAX_PENDING_REQUESTS || pending.contains_key(id) {
            pending.insert(
                id.to_owned(),
                Pending {
                    kind,
                    arrived: Instant::now(),
                    dispatched: None,
                    replied: None,
                },
            );
        }
    }
}

/// Count a request by what the dispatcher did with it; one it handed to a
/// task is counted when it ends instead (see [`RequestOutcome::Accepted`]).
pub fn request_handled(kind: &'static str, request_id: Option<&str>, outcome: RequestOutcome) {
    let m = get();
    let mut pending = m.pending();
    let Some((id, p)) = request_id.and_then(|id| pending.get_mut(id).map(|p| (id, p))) else {
        // Not followed (no request id): counted as the dispatcher left it.
        drop(pending);
        count_request(kind, outcome.as_str());
        return;
    };
    let counted = match (outcome, p.replied) {
        // Handed over and already answered: by that answer.
        (RequestOutcome::Accepted, Some(failed)) => Some(reply_outcome(failed)),
        // Handed over: its first reply will count it.
        (RequestOutcome::Accepted, None) => None,
        // Ended in the dispatcher.
        (other, _) => Some(other.as_str()),
    };
    p.dispatched = Some(outcome);
    if p.replied.is_some() {
        pending.remove(id);
    }
    drop(pending);
    if let Some(outcome) = counted {
        count_request(kind, outcome);
    }
}

fn reply_outcome(failed: bool) -> &'static str {
    if failed { "failed" } else { "completed" }
}

fn count_request(kind: &'static str, outcome: &'static str) {
    get()
        .requests
        .get_or_create(&RequestLabels { kind, outcome })
        .inc();
}

/// `msg` was handed to the ControlChannel.
pub fn update_sent(msg: &ClientMessage) {
    let m = get();
    let kind = kinds::kind_index(msg);
    if let Some(sent) = m.sent_by_kind.get(kind) {
        sent.get_or_init(|| {
            m.updates_sent
                .get_or_create(&KindLabel {
                    kind: kinds::KINDS[kind],
                })
                .clone()
        })
        .inc();
    }
    let Some(id) = &msg.request_id else {
        return;
    };
    if m.pending_len.load(Ordering::Relaxed) == 0 {
        // Nothing waits for a first reply (the request was counted, under
        // the lock, before it was dispatched).
        return;
    }
    let mut pending = m.pending();
    let Some(p) = pending.get_mut(id) else {
        return;
    };
    if p.replied.is_some() {
        return;
    }
    let failed = matches!(&msg.payload, Some(Payload::RequestError(_)));
    p.replied = Some(failed);
    let (kind, arrived, dispatched) = (p.kind, p.arrived, p.dispatched);
    if dispatched.is_some() {
        pending.remove(id);
    }
    drop(pending);
    m.request_duration
        .get_or_create(&KindLabel { kind })
        .observe(arrived.elapsed().as_secs_f64());
    if dispatched == Some(RequestOutcome::Accepted) {
        count_request(kind, reply_outcome(failed));
    }
}

/// `msg` broke its validation rules and was not sent.
pub fn invalid_update(msg: &ClientMessage) {
    get()
        .invalid_updates
        .get_or_create(&KindLabel {
            kind: kinds::kind(msg),
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

/// These SDKs are enabled: their running-turn series exist from the start
/// (at 0), so an autoscaler sees the metric before the first turn.
pub fn sdks_enabled(names: &[String]) {
    for sdk in names {
        let _series = get()
            .running_turns
            .get_or_create(&SdkLabel { sdk: sdk.clone() });
    }
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
mod tests {
    use super::*;
    use crate::delivery::messages;

    fn requests(kind: &'static str, outcome: &'static str) -> u64 {
        get()
            .requests
            .get_or_create(&RequestLabels { kind, outcome })
            .get()
    }

    /// A request handed to a task counts as it ends — failed when its first
    /// reply is a RequestError, completed otherwise — whichever comes first,
    /// the dispatcher or the reply; one the dispatcher ended counts once.
    #[test]
    fn requests_count_by_how_they_ended() {
        let error = |id: &str| messages::request_error(Some(id.to_owned()), "unknown SDK");
        let ok = |id: &str| messages::heartbeat(Some(id.to_owned()));
        // Dispatcher first, then a RequestError.
        request_arrived("unit-test-a", Some("ua1"));
        request_handled("unit-test-a", Some("ua1"), RequestOutcome::Accepted);
        assert_eq!(requests("unit-test-a", "accepted"), 0);
        update_sent(&error("ua1"));
        // The reply first (it raced the dispatcher), then the dispatcher.
        request_arrived("unit-test-a", Some("ua2"));
        update_sent(&ok("ua2"));
        update_sent(&ok("ua2"));
        request_handled("unit-test-a", Some("ua2"), RequestOutcome::Accepted);
        assert_eq!(requests("unit-test-a", "failed"), 1);
        assert_eq!(requests("unit-test-a", "completed"), 1);
        assert_eq!(requests("unit-test-a", "accepted"), 0);
        // Ended in the dispatcher, its reply out before or after: once.
        request_arrived("unit-test-b", Some("ub1"));
        update_sent(&ok("ub1"));
        request_handled("unit-test-b", Some("ub1"), RequestOutcome::Answered);
        request_arrived("unit-test-b", Some("ub2"));
        request_handled("unit-test-b", Some("ub2"), RequestOutcome::Answered);
        update_sent(&ok("ub2"));
        assert_eq!(requests("unit-test-b", "answered"), 2);
        assert_eq!(requests("unit-test-b", "completed"), 0);
        // No request id: counted as the dispatcher left it.
        request_handled("unit-test-c", None, RequestOutcome::Accepted);
        assert_eq!(requests("unit-test-c", "accepted"), 1);
    }

    #[test]
    fn names_carry_prefix_units_and_total() {
        register_failed(tonic::Code::Unavailable);
        adapter_error("unit-test-sdk", "start_turn");
        request_handled("heartbeat_request", None, RequestOutcome::Answered);
        update_sent(&messages::heartbeat(None));
        invalid_update(&messages::heartbeat(None));
        sdks_enabled(&["unit-test-sdk".to_owned()]);
        turn_started("unit-test-sdk");
        turn_ended(
            "unit-test-sdk",
            &TurnOutcome::Completed,
            Duration::from_secs(2),
        );
        request_arrived("heartbeat_request", Some("unit-test-names"));
        update_sent(&messages::heartbeat(Some("unit-test-names".to_owned())));
        let text = render(Scraped {
            outbox_depth: 3,
            delivery_unsettled: 1,
            child_processes: Some(2),
        });
        for name in [
            "agent_runner_build_info{version=",
            "agent_runner_connection_state{state=\"connecting\"}",
            "agent_runner_reconnects_total ",
            "agent_runner_register_failures_total{code=\"UNAVAILABLE\"}",
            "agent_runner_requests_total{kind=\"heartbeat_request\",outcome=\"answered\"}",
            "# TYPE agent_runner_request_duration_seconds histogram",
            "# UNIT agent_runner_request_duration_seconds seconds",
            "agent_runner_updates_sent_total{kind=\"heartbeat_response\"}",
            "agent_runner_invalid_updates_total{kind=\"heartbeat_response\"}",
            "agent_runner_outbox_depth 3",
            "agent_runner_outbox_dropped_total ",
            "agent_runner_outbox_coalesced_total ",
            "agent_runner_delivery_unsettled 1",
            "agent_runner_delivery_acks_ignored_total ",
            "agent_runner_delivery_unacked_full_total ",
            "# UNIT agent_runner_journal_append_duration_seconds seconds",
            "agent_runner_running_turns{sdk=\"unit-test-sdk\"} 0",
            "agent_runner_turn_duration_seconds_bucket{le=\"5.0\",sdk=\"unit-test-sdk\",outcome=\"completed\"} 1",
            "agent_runner_child_processes 2",
            "agent_runner_adapter_errors_total{sdk=\"unit-test-sdk\",operation=\"start_turn\"} 1",
            // Other tests of this process mint tokens: no value asserted.
            "agent_runner_token_refreshes_total ",
            "agent_runner_token_refresh_failures_total ",
            "agent_runner_git_credential_rate_limited_total ",
        ] {
            assert!(text.contains(name), "missing {name:?} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_request_is_timed_until_its_first_reply() {
        let id = "unit-test-request-timing";
        request_arrived("heartbeat_request", Some(id));
        assert!(get().pending().contains_key(id));
        update_sent(&messages::heartbeat(Some(id.to_owned())));
        // Kept until the dispatcher, which this reply raced, is done too.
        request_handled("heartbeat_request", Some(id), RequestOutcome::Answered);
        assert!(!get().pending().contains_key(id));
        let text = render(Scraped::default());
        assert!(
            text.contains(
                "agent_runner_request_duration_seconds_count{kind=\"heartbeat_request\"}"
            ),
            "{text}"
        );
    }
}
