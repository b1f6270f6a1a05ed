//! The runner's status as one JSON document (`GET /status`), and its
//! readable rendering (`agent-runner status`).
//!
//! The same [`Status`] type is written by the server and read by the
//! command, so the two cannot disagree about field names. Everything in it
//! is cheap to collect: in-memory tables, one small SQLite count, one walk
//! of `/proc`.
//!
//! The health port answers anyone who can reach it (agents included), so
//! `/status` holds counts only: no agent, thread or turn id, no command
//! line. Which threads exist and what runs in them is the admin socket's
//! (`agent-runner threads`, `ps`), which refuses agents.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use sdk_adapter::SdkStatus;
use serde::{Deserialize, Serialize};

use crate::observe::link_state::{LinkProblem, LinkState};
use crate::tasks::context::Runtime;

/// What `/status` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The runner's version.
    pub version: String,
    /// Its process id.
    pub pid: u32,
    /// How long it has run.
    pub uptime_seconds: u64,
    /// The control-plane link.
    pub connection: Connection,
    /// Whether it is draining.
    pub draining: bool,
    /// `None` when the state database could not be read.
    pub agents: Option<usize>,
    /// Live threads.
    pub threads: usize,
    /// Turns allowed at once.
    pub max_concurrent_turns: usize,
    /// Turns running now (a count: no ids on the health port).
    pub running_turns: usize,
    /// Running turns by SDK name.
    #[serde(default)]
    pub running_turns_by_sdk: BTreeMap<String, usize>,
    /// How long the longest-running turn has run; `None` when none runs.
    #[serde(default)]
    pub oldest_turn_seconds: Option<u64>,
    /// Turns waiting for a slot (`max_concurrent_turns` run): threads whose
    /// user message waits to start a turn (a count).
    #[serde(default)]
    pub waiting_turns: usize,
    /// How long the longest-waiting of them has waited; `None` when none
    /// waits.
    #[serde(default)]
    pub oldest_waiting_turn_seconds: Option<u64>,
    /// The outbox.
    pub outbox: Outbox,
    /// `None` where `/proc` cannot tell.
    pub child_processes: Option<usize>,
    /// The SDKs and their status.
    pub sdks: Vec<Sdk>,
    /// The agent sandbox: mode, what the host offers, what is not applied.
    #[serde(default)]
    pub sandbox: crate::host::sandbox::SandboxStatus,
}

/// The link, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    /// `connecting`, `registered`, `connected` or `closed`.
    pub state: String,
    /// What `/readyz` answers.
    pub ready: bool,
    /// Why not ready; `None` when ready.
    pub not_ready_reason: Option<String>,
    /// Reconnects so far.
    pub reconnects: u64,
    /// The control plane's URL.
    #[serde(default)]
    pub url: String,
    /// The protocol version spoken (`0.2`, `0.7`).
    #[serde(default)]
    pub protocol: String,
    /// The last failure to reach it, with the likely fix.
    #[serde(default)]
    pub last_error: Option<String>,
    /// How long ago that was.
    #[serde(default)]
    pub last_error_seconds_ago: Option<u64>,
    /// While waiting to retry: in how long.
    #[serde(default)]
    pub next_attempt_in_ms: Option<u64>,
}

/// The outbox, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outbox {
    /// Updates waiting.
    pub depth: usize,
    /// How many it holds before making room.
    pub capacity: usize,
    /// Intermediate updates dropped so far.
    pub dropped: u64,
    /// Intermediate updates coalesced so far.
    pub coalesced: u64,
    /// Updates sent and kept until delivery is settled (acknowledged, or
    /// past the legacy re-send window); with acknowledgements they count
    /// against `capacity`.
    #[serde(default)]
    pub unsettled: usize,
}

/// An SDK, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sdk {
    /// Its name.
    pub name: String,
    /// `ready`, `unconfigured`, `error`, or `unknown` before the first
    /// description.
    pub status: String,
    /// Why it is not ready.
    pub error_message: Option<String>,
    /// Its models.
    pub models: Vec<String>,
}

/// Whether the runner should get traffic: registered, ControlChannel open,
/// not draining. The error says why not (the body of a 503 `/readyz`).
pub fn readiness(link: LinkState, draining: bool) -> Result<(), &'static str> {
    if draining {
        return Err("draining: the runner is shutting down and refuses new turns");
    }
    match link {
        LinkState::Connected => Ok(()),
        LinkState::Connecting => Err("not registered with the control plane (connecting)"),
        LinkState::Registered => Err("registered, but the ControlChannel is not open yet"),
        LinkState::Closed => Err("the control-plane link is closed"),
    }
}

/// Gather the status now.
pub fn collect(
    rt: &Runtime,
    link: LinkState,
    problem: &LinkProblem,
    child_processes: Option<usize>,
) -> Status {
    let now = std::time::SystemTime::now();
    let draining = rt.is_draining();
    let ready = readiness(link, draining);
    let stats = rt.outbox.stats();
    let enabled = rt.sdks.names();
    let advertised = rt.sdks.advertised();
    let sdks = enabled
        .into_iter()
        .map(|name| match advertised.iter().find(|d| d.name == name) {
            Some(d) => Sdk {
                name,
                status: sdk_status(d.status).to_owned(),
                error_message: d
                    .error_message
                    .as_deref()
                    .map(|e| rt.redactor.redact(e).into_owned()),
                models: d.models.iter().map(|m| m.name.clone()).collect(),
            },
            None => Sdk {
                name,
                status: "unknown".to_owned(),
                error_message: None,
                models: vec![],
            },
        })
        .collect();
    let turns = rt.running_turn_list();
    let waiting = rt.waiting_turn_list();
    let mut running_turns_by_sdk = BTreeMap::new();
    for t in &turns {
        *running_turns_by_sdk.entry(t.sdk.clone()).or_insert(0) += 1;
    }
    Status {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        pid: std::process::id(),
        uptime_seconds: rt.started.elapsed().as_secs(),
        connection: Connection {
            state: link.as_str().to_owned(),
            ready: ready.is_ok(),
            not_ready_reason: ready.err().map(str::to_owned),
            reconnects: crate::observe::metrics::reconnects(),
            url: problem.url.clone(),
            protocol: if rt.thread_only().is_some() {
                crate::config::Protocol::V07
            } else {
                crate::config::Protocol::V02
            }
            .as_str()
            .to_owned(),
            last_error: problem.last_error.clone(),
            last_error_seconds_ago: problem
                .last_error_at
                .and_then(|at| now.duration_since(at).ok())
                .map(|d| d.as_secs()),
            next_attempt_in_ms: problem
                .next_attempt_at
                .map(|at| at.duration_since(now).map_or(0, |d| d.as_millis() as u64)),
        },
        draining,
        agents: rt.store.agents().ok().map(|a| a.len()),
        threads: rt.mailboxes.thread_count(),
        max_concurrent_turns: rt.max_turns,
        running_turns: turns.len(),
        running_turns_by_sdk,
        oldest_turn_seconds: turns.iter().map(|t| t.started.elapsed().as_secs()).max(),
        waiting_turns: waiting.len(),
        oldest_waiting_turn_seconds: waiting.iter().map(|t| t.since.elapsed().as_secs()).max(),
        outbox: Outbox {
            depth: stats.depth,
            capacity: rt.outbox.capacity(),
            dropped: stats.dropped,
            coalesced: stats.coalesced,
            unsettled: stats.unsettled,
        },
        child_processes,
        sdks,
        sandbox: rt.sandboxes.status().clone(),
    }
}

fn sdk_status(status: SdkStatus) -> &'static str {
    match status {
        SdkStatus::Ready => "ready",
        SdkStatus::Unconfigured => "unconfigured",
        SdkStatus::Error => "error",
    }
}

fn age(seconds: u64) -> String {
    super::human::duration(Duration::from_secs(seconds))
}

/// The readable summary `agent-runner status` prints.
pub fn render(s: &Status) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_summary(&mut out, s);
    out
}

fn write_summary(out: &mut String, s: &Status) -> std::fmt::Result {
    writeln!(
        out,
        "agent-runner {}  pid {}  up {}",
        s.version,
        s.pid,
        age(s.uptime_seconds)
    )?;
    let c = &s.connection;
    match &c.not_ready_reason {
        None => writeln!(out, "connection  {} (ready)", c.state)?,
        Some(why) => writeln!(out, "connection  {} (not ready: {why})", c.state)?,
    }
    if !c.url.is_empty() {
        writeln!(out, "control     {}", c.url)?;
    }
    if !c.protocol.is_empty() {
        writeln!(out, "protocol    {}", c.protocol)?;
    }
    if let Some(error) = &c.last_error {
        let ago = c
            .last_error_seconds_ago
            .map(|s| format!(" ({} ago)", age(s)))
            .unwrap_or_default();
        writeln!(out, "last error  {error}{ago}")?;
    }
    if let Some(ms) = c.next_attempt_in_ms {
        writeln!(
            out,
            "next try    in {}",
            super::human::duration(Duration::from_millis(ms))
        )?;
    }
    writeln!(out, "reconnects  {}", c.reconnects)?;
    writeln!(out, "draining    {}", if s.draining { "yes" } else { "no" })?;
    match s.agents {
        Some(n) => writeln!(out, "agents      {n}")?,
        None => writeln!(out, "agents      unknown (state database unreadable)")?,
    }
    writeln!(out, "threads     {}", s.threads)?;
    writeln!(
        out,
        "turns       {} running (limit {}), {} waiting for a slot",
        s.running_turns, s.max_concurrent_turns, s.waiting_turns
    )?;
    for (sdk, n) in &s.running_turns_by_sdk {
        writeln!(out, "  {sdk}  {n} running")?;
    }
    if let Some(oldest) = s.oldest_turn_seconds {
        writeln!(out, "  oldest running for {}", age(oldest))?;
    }
    if let Some(oldest) = s.oldest_waiting_turn_seconds {
        writeln!(out, "  oldest waiting for {}", age(oldest))?;
    }
    if s.running_turns + s.waiting_turns > 0 {
        writeln!(
            out,
            "  (which threads: `agent-runner threads` or `ps` on this host)"
        )?;
    }
    let o = &s.outbox;
    writeln!(
        out,
        "outbox      {} queued (capacity {}), {} sent unsettled, {} dropped, {} coalesced",
        o.depth, o.capacity, o.unsettled, o.dropped, o.coalesced
    )?;
    match s.child_processes {
        Some(n) => writeln!(out, "processes   {n} alive under the runner")?,
        None => writeln!(out, "processes   unknown (no /proc)")?,
    }
    writeln!(out, "sdks")?;
    for sdk in &s.sdks {
        write!(out, "  {}  {}", sdk.name, sdk.status)?;
        if let Some(why) = &sdk.error_message {
            write!(out, " ({why})")?;
        }
        if !sdk.models.is_empty() {
            write!(out, "  models: {}", sdk.models.join(", "))?;
        }
        writeln!(out)?;
    }
    write_sandbox(out, &s.sandbox)
}

/// The sandbox lines of `status` and `sdk list`.
pub fn write_sandbox(
    out: &mut String,
    s: &crate::host::sandbox::SandboxStatus,
) -> std::fmt::Result {
    writeln!(out, "sandbox     {}", s.mode)?;
    if let Some(why) = &s.refused {
        writeln!(out, "  REFUSING every turn: {why}")?;
    }
    for fact in &s.host {
        writeln!(out, "  host: {fact}")?;
    }
    for missing in &s.missing {
        writeln!(out, "  not applied: {missing}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_connected_and_not_draining() {
        assert!(readiness(LinkState::Connected, false).is_ok());
        for (state, word) in [
            (LinkState::Connecting, "not registered"),
            (LinkState::Registered, "not open"),
            (LinkState::Closed, "closed"),
        ] {
            let why = readiness(state, false).unwrap_err();
            assert!(why.contains(word), "{why}");
        }
        let why = readiness(LinkState::Connected, true).unwrap_err();
        assert!(why.starts_with("draining"), "{why}");
    }

    #[test]
    fn summary_names_everything() {
        let s = Status {
            version: "1.2.3".into(),
            pid: 42,
            uptime_seconds: 3725,
            connection: Connection {
                state: "connected".into(),
                ready: true,
                not_ready_reason: None,
                reconnects: 2,
                url: "https://cp.example.com/grpc".into(),
                protocol: "0.2".into(),
                last_error: Some("lost the control plane at https://cp.example.com/grpc (ControlChannel): h2 protocol error".into()),
                last_error_seconds_ago: Some(90),
                next_attempt_in_ms: Some(1_234),
            },
            draining: false,
            agents: Some(3),
            threads: 4,
            max_concurrent_turns: 256,
            running_turns: 1,
            running_turns_by_sdk: BTreeMap::from([("scripted".to_owned(), 1)]),
            oldest_turn_seconds: Some(75),
            waiting_turns: 2,
            oldest_waiting_turn_seconds: Some(3),
            outbox: Outbox {
                depth: 5,
                capacity: 10_000,
                dropped: 1,
                coalesced: 0,
                unsettled: 3,
            },
            child_processes: Some(2),
            sdks: vec![Sdk {
                name: "scripted".into(),
                status: "ready".into(),
                error_message: None,
                models: vec!["scripted-fast".into()],
            }],
            sandbox: crate::host::sandbox::SandboxStatus {
                mode: "best-effort".into(),
                host: vec!["landlock: ABI 7".into()],
                missing: vec!["cgroup: no delegated cgroup v2".into()],
                refused: None,
            },
        };
        let text = render(&s);
        for want in [
            "agent-runner 1.2.3  pid 42  up 1h 2m\n",
            "connection  connected (ready)",
            "control     https://cp.example.com/grpc",
            "last error  lost the control plane at https://cp.example.com/grpc (ControlChannel): h2 protocol error (1m 30s ago)",
            "next try    in 1.2s\n",
            "reconnects  2",
            "agents      3",
            "threads     4",
            "turns       1 running (limit 256), 2 waiting for a slot\n",
            "  scripted  1 running\n",
            "  oldest running for 1m 15s\n",
            "  oldest waiting for 3.0s\n",
            "outbox      5 queued (capacity 10000), 3 sent unsettled, 1 dropped, 0 coalesced",
            "processes   2 alive",
            "  scripted  ready  models: scripted-fast",
            "sandbox     best-effort",
            "  host: landlock: ABI 7",
            "  not applied: cgroup: no delegated cgroup v2",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), s);
    }
}
