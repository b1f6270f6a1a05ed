//! YAML scenarios for `mock-control-plane serve --script FILE`: a list of
//! steps (wait for the runner, send requests, expect replies, capture values
//! the runner chose, inject faults) run in order against a live
//! [`MockControlPlane`]. A failed step reports the expected subset next to
//! the closest and the latest received messages.
//!
//! ```yaml
//! timeout_ms: 10000          # default timeout of every waiting step
//! vars: {agent: a1}          # initial variables (also --var NAME=VALUE)
//! steps:
//!   - wait_registered: {timeout_ms: 10000}
//!   - send: {requestId: r1, createAgentRequest: {agentId: "${agent}", agentSdk: scripted}}
//!   - expect:
//!       match: {requestId: r1, agentUpdate: {status: AGENT_STATUS_READY}}
//!   - send: {requestId: r2, createThreadRequest: {agentId: "${agent}", model: scripted-fast}}
//!   - expect:
//!       match: {requestId: r2, threadUpdate: {status: THREAD_STATUS_READY}}
//!       capture: {thread: threadUpdate.threadId}
//!   - sleep_ms: 200
//!   - drop_connection: {}
//! ```
//!
//! See `README.md` for every step and option; module `decide` answers
//! approval requests.

mod decide;

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use agent_runner_proto::runner::ClientMessage;
use anyhow::{Context as _, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::Value;

use crate::MockControlPlane;
use crate::json::{client_message_to_json, outgoing_from_json};
use crate::matcher::{Mismatch, as_text, lookup, mismatches, substitute};

/// The default timeout of a waiting step when the file sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many closest / latest messages a failure shows.
const SHOWN_CLOSEST: usize = 3;
const SHOWN_LATEST: usize = 10;

/// A parsed scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Timeout of waiting steps that set none.
    pub default_timeout: Duration,
    /// Variables known before the first step.
    pub vars: BTreeMap<String, String>,
    /// The steps, run in order.
    pub steps: Vec<Step>,
    /// Whether the mock accepts `approvals/1` (`accept_approvals: true`).
    pub accept_approvals: bool,
}

impl Scenario {
    /// Sets what the scenario asks of the mock itself (before a runner
    /// registers: [`run`] does it too, perhaps too late for a runner
    /// already connected).
    pub fn apply(&self, plane: &MockControlPlane) {
        if self.accept_approvals {
            plane.accept_approvals(true);
        }
    }
}

pub use decide::Decide;

/// Where an `expect` starts searching the received log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Since {
    /// The whole log (the default): order-independent, rely on requestIds.
    #[default]
    Start,
    /// Messages received after the latest `send` step began.
    LastSend,
    /// Messages after the one the previous `expect` matched.
    LastMatch,
}

/// One step.
#[derive(Clone, Debug)]
pub enum Step {
    /// Wait until `count` registrations (in total) were recorded.
    WaitRegistered {
        /// How many registrations in total.
        count: usize,
        /// How long to wait (`None`: the scenario's default).
        timeout: Option<Duration>,
    },
    /// Wait until a runner's ControlChannel stream is live.
    WaitConnected {
        /// How long to wait (`None`: the scenario's default).
        timeout: Option<Duration>,
    },
    /// Send a ServerMessage (protobuf JSON, `${var}`s substituted), waiting
    /// for a live stream first.
    Send {
        /// The message, in protobuf JSON.
        message: Value,
    },
    /// Wait for a ClientMessage whose JSON contains `pattern`; optionally
    /// capture fields of it into variables.
    Expect(Expect),
    /// Fail if a ClientMessage containing `pattern` arrives within `within`
    /// (or has already arrived, counting from `since`).
    ExpectNone {
        /// The JSON that must not arrive.
        pattern: Value,
        /// How long to watch.
        within: Duration,
        /// Where in the log to start looking.
        since: Since,
    },
    /// Wait this long.
    Sleep(Duration),
    /// End the live stream with UNAVAILABLE (the runner should reconnect).
    DropConnection,
    /// Stop the server and serve again on the same port.
    Restart,
    /// Check the acknowledged-delivery sequence report: each given count
    /// must equal what was seen.
    ExpectSequence {
        /// Duplicates dropped.
        duplicates: Option<u64>,
        /// Gaps seen.
        gaps: Option<usize>,
        /// Messages without a number on an acked session.
        unnumbered: Option<u64>,
    },
    /// Decide the next approval request not decided yet (module `decide`).
    Decide(Decide),
}

/// An `expect` (or `capture`) step.
#[derive(Clone, Debug)]
pub struct Expect {
    /// The JSON the message must contain.
    pub pattern: Value,
    /// Variable name → dotted path into the matched message's JSON.
    pub capture: BTreeMap<String, String>,
    /// How long to wait (`None`: the scenario's default).
    pub timeout: Option<Duration>,
    /// Where in the log to start looking.
    pub since: Since,
}

impl Step {
    fn kind(&self) -> &'static str {
        match self {
            Step::WaitRegistered { .. } => "wait_registered",
            Step::WaitConnected { .. } => "wait_connected",
            Step::Send { .. } => "send",
            Step::Expect(e) if !e.capture.is_empty() => "expect+capture",
            Step::Expect(_) => "expect",
            Step::ExpectNone { .. } => "expect_none",
            Step::Sleep(_) => "sleep_ms",
            Step::DropConnection => "drop_connection",
            Step::Restart => "restart",
            Step::ExpectSequence { .. } => "expect_sequence",
            Step::Decide(_) => "decide",
        }
    }
}

// ---- parsing ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    vars: BTreeMap<String, Value>,
    #[serde(default)]
    accept_approvals: bool,
    steps: Vec<serde_yaml::Value>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWaitRegistered {
    count: Option<usize>,
    timeout_ms: Option<u64>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeout {
    timeout_ms: Option<u64>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    #[serde(rename = "match", default)]
    pattern: Option<Value>,
    #[serde(default, alias = "vars")]
    capture: BTreeMap<String, String>,
    timeout_ms: Option<u64>,
    #[serde(default)]
    since: Since,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpectNone {
    #[serde(rename = "match", default)]
    pattern: Option<Value>,
    #[serde(default)]
    within_ms: u64,
    #[serde(default)]
    since: Since,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpectSequence {
    duplicates: Option<u64>,
    gaps: Option<usize>,
    unnumbered: Option<u64>,
}

const STEP_KINDS: &str = "wait_registered, wait_connected, send, expect, capture, \
                          expect_none, sleep_ms, drop_connection, restart, expect_sequence, decide";

/// The step's arguments; `null` (`- restart:`) reads as the defaults.
fn args<T: Default + for<'de> Deserialize<'de>>(value: serde_yaml::Value) -> Result<T> {
    if value.is_null() {
        Ok(T::default())
    } else {
        Ok(serde_yaml::from_value(value)?)
    }
}

fn ms(v: Option<u64>) -> Option<Duration> {
    v.map(Duration::from_millis)
}

fn parse_step(raw: serde_yaml::Value) -> Result<Step> {
    let serde_yaml::Value::Mapping(map) = raw else {
        bail!("a step is a mapping with one key (one of {STEP_KINDS})");
    };
    if map.len() != 1 {
        bail!(
            "a step has exactly one key (one of {STEP_KINDS}), this one has {}",
            map.len()
        );
    }
    let Some((key, value)) = map.into_iter().next() else {
        bail!("empty step");
    };
    let Some(kind) = key.as_str() else {
        bail!("a step's key is its kind (one of {STEP_KINDS})");
    };
    let step = match kind {
        "wait_registered" => {
            let a: RawWaitRegistered = args(value)?;
            Step::WaitRegistered {
                count: a.count.unwrap_or(1),
                timeout: ms(a.timeout_ms),
            }
        }
        "wait_connected" => Step::WaitConnected {
            timeout: ms(args::<RawTimeout>(value)?.timeout_ms),
        },
        "send" => {
            let message: Value = serde_yaml::from_value(value)?;
            if !message.is_object() {
                bail!(
                    "send takes a ServerMessage object, e.g. {{requestId: r1, heartbeatRequest: {{}}}}"
                );
            }
            Step::Send { message }
        }
        "expect" | "capture" => {
            let a: RawExpect = args(value)?;
            if kind == "capture" && a.capture.is_empty() {
                bail!("capture needs `capture: {{NAME: dotted.path}}`");
            }
            Step::Expect(Expect {
                pattern: a
                    .pattern
                    .unwrap_or_else(|| Value::Object(Default::default())),
                capture: a.capture,
                timeout: ms(a.timeout_ms),
                since: a.since,
            })
        }
        "expect_none" => {
            let a: RawExpectNone = args(value)?;
            Step::ExpectNone {
                pattern: a
                    .pattern
                    .unwrap_or_else(|| Value::Object(Default::default())),
                within: Duration::from_millis(a.within_ms),
                since: a.since,
            }
        }
        "sleep_ms" => Step::Sleep(Duration::from_millis(serde_yaml::from_value(value)?)),
        "drop_connection" => {
            args::<Empty>(value)?;
            Step::DropConnection
        }
        "restart" => {
            args::<Empty>(value)?;
            Step::Restart
        }
        "expect_sequence" => {
            let a: RawExpectSequence = args(value)?;
            Step::ExpectSequence {
                duplicates: a.duplicates,
                gaps: a.gaps,
                unnumbered: a.unnumbered,
            }
        }
        "decide" => Step::Decide(args::<decide::RawDecide>(value)?.parse()?),
        other => bail!("unknown step kind {other:?} (expected one of {STEP_KINDS})"),
    };
    Ok(step)
}

/// Parses a scenario file's text.
pub fn parse(yaml: &str) -> Result<Scenario> {
    let raw: RawScenario = serde_yaml::from_str(yaml).context("reading the scenario YAML")?;
    let steps = raw
        .steps
        .into_iter()
        .enumerate()
        .map(|(i, step)| parse_step(step).with_context(|| format!("step {}", i + 1)))
        .collect::<Result<Vec<_>>>()?;
    Ok(Scenario {
        default_timeout: ms(raw.timeout_ms).unwrap_or(DEFAULT_TIMEOUT),
        vars: raw
            .vars
            .into_iter()
            .map(|(k, v)| (k, as_text(&v)))
            .collect(),
        steps,
        accept_approvals: raw.accept_approvals,
    })
}

// ---- running ----

/// What a passed scenario leaves behind.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Every variable: the initial ones plus the captures.
    pub vars: BTreeMap<String, String>,
}

struct Run<'a> {
    plane: &'a MockControlPlane,
    default_timeout: Duration,
    vars: BTreeMap<String, String>,
    last_send: usize,
    last_match: usize,
    /// Approval ids a `decide` step answered.
    decided: HashSet<String>,
    out: &'a mut (dyn Write + Send),
}

/// Runs `scenario` against `plane`, writing one progress line per step to
/// `out`. `vars` override the scenario's own. Fails at the first failed
/// step with a readable report.
pub async fn run(
    plane: &MockControlPlane,
    scenario: &Scenario,
    vars: BTreeMap<String, String>,
    out: &mut (dyn Write + Send),
) -> Result<Outcome> {
    scenario.apply(plane);
    let mut all_vars = scenario.vars.clone();
    all_vars.extend(vars);
    let mut run = Run {
        plane,
        default_timeout: scenario.default_timeout,
        vars: all_vars,
        last_send: 0,
        last_match: 0,
        decided: HashSet::new(),
        out,
    };
    let total = scenario.steps.len();
    for (i, step) in scenario.steps.iter().enumerate() {
        let _ = writeln!(run.out, "[{}/{total}] {}", i + 1, step.kind());
        run.step(step)
            .await
            .map_err(|e| anyhow!("step {}/{total} ({}) failed: {e:#}", i + 1, step.kind()))?;
    }
    let _ = writeln!(run.out, "scenario passed ({total} steps)");
    Ok(Outcome { vars: run.vars })
}

impl Run<'_> {
    fn timeout(&self, t: Option<Duration>) -> Duration {
        t.unwrap_or(self.default_timeout)
    }

    fn since(&self, since: Since) -> usize {
        match since {
            Since::Start => 0,
            Since::LastSend => self.last_send,
            Since::LastMatch => self.last_match,
        }
    }

    async fn step(&mut self, step: &Step) -> Result<()> {
        match step {
            Step::WaitRegistered { count, timeout } => {
                let regs = self
                    .plane
                    .wait_for_registrations(*count, self.timeout(*timeout))
                    .await?;
                let sdks: Vec<&str> = regs
                    .iter()
                    .flat_map(|r| r.request.agent_sdks.iter().map(|s| s.name.as_str()))
                    .collect();
                let _ = writeln!(self.out, "  {} registration(s); SDKs {sdks:?}", regs.len());
            }
            Step::WaitConnected { timeout } => {
                self.plane.wait_connected(self.timeout(*timeout)).await?;
                let _ = writeln!(self.out, "  connected");
            }
            Step::Send { message } => {
                let value = substitute(message, &self.vars)?;
                let message = outgoing_from_json(self.plane.protocol(), value.clone())?;
                self.plane.wait_connected(self.default_timeout).await?;
                self.last_send = self.plane.received_count();
                self.plane.send(message).await?;
                let _ = writeln!(self.out, "  sent {value}");
            }
            Step::Expect(expect) => self.expect(expect).await?,
            Step::Decide(decide) => self.decide(decide).await?,
            Step::ExpectNone {
                pattern,
                within,
                since,
            } => {
                let pattern = substitute(pattern, &self.vars)?;
                let from = self.since(*since);
                let found = self
                    .plane
                    .wait_for_after(from, |m| matches(&pattern, m), *within)
                    .await;
                if let Ok((index, message)) = found {
                    bail!(
                        "expected no message containing {pattern}, but #{index} is {}",
                        client_message_to_json(&message)
                    );
                }
                let _ = writeln!(self.out, "  none arrived");
            }
            Step::Sleep(duration) => tokio::time::sleep(*duration).await,
            Step::DropConnection => {
                let dropped = self.plane.drop_stream();
                let _ = writeln!(
                    self.out,
                    "  {}",
                    if dropped {
                        "stream dropped"
                    } else {
                        "no live stream to drop"
                    }
                );
            }
            Step::Restart => {
                self.plane.restart().await?;
                let _ = writeln!(self.out, "  serving again at {}", self.plane.url());
            }
            Step::ExpectSequence {
                duplicates,
                gaps,
                unnumbered,
            } => {
                let r = self.plane.sequence_report();
                let _ = writeln!(
                    self.out,
                    "  processed through {}, {} duplicate(s) dropped, gaps {:?}, {} unnumbered",
                    r.processed, r.duplicates, r.gaps, r.unnumbered
                );
                let checks = [
                    ("duplicates", duplicates.map(|d| (d, r.duplicates))),
                    ("gaps", gaps.map(|g| (g as u64, r.gaps.len() as u64))),
                    ("unnumbered", unnumbered.map(|u| (u, r.unnumbered))),
                ];
                for (what, check) in checks {
                    if let Some((want, got)) = check
                        && want != got
                    {
                        bail!("expected {want} {what}, saw {got} ({r:?})");
                    }
                }
            }
        }
        Ok(())
    }

    async fn expect(&mut self, expect: &Expect) -> Result<()> {
        let pattern = substitute(&expect.pattern, &self.vars)?;
        let from = self.since(expect.since);
        let timeout = self.timeout(expect.timeout);
        let found = self
            .plane
            .wait_for_after(from, |m| matches(&pattern, m), timeout)
            .await;
        let (index, message) = match found {
            Ok(found) => found,
            Err(_) => bail!("{}", self.no_match_report(&pattern, from, timeout)),
        };
        let json = client_message_to_json(&message);
        let _ = writeln!(self.out, "  matched #{index} {json}");
        self.last_match = index + 1;
        for (name, path) in &expect.capture {
            let value = lookup(&json, path).ok_or_else(|| {
                anyhow!("capture {name}: no {path:?} in the matched message #{index} {json}")
            })?;
            let text = as_text(value);
            let _ = writeln!(self.out, "  captured {name} = {text}");
            self.vars.insert(name.clone(), text);
        }
        Ok(())
    }

    /// Expected subset vs the closest and the latest received messages.
    fn no_match_report(&self, pattern: &Value, from: usize, timeout: Duration) -> String {
        let received: Vec<(usize, Value)> = self
            .plane
            .received()
            .iter()
            .map(client_message_to_json)
            .enumerate()
            .collect();
        let mut text = format!(
            "no message containing the expected subset arrived within {timeout:?} \
             (searched from #{from}; {} received in total; runner connected: {})\n\
             expected subset:\n  {pattern}",
            received.len(),
            self.plane.is_connected()
        );
        let mut scored: Vec<(usize, &Value, Vec<Mismatch>)> = received
            .iter()
            .filter(|(i, _)| *i >= from)
            .map(|(i, v)| (*i, v, mismatches(pattern, v)))
            .collect();
        // Fewest mismatches first; among equals, the latest first.
        scored.sort_by(|a, b| a.2.len().cmp(&b.2.len()).then(b.0.cmp(&a.0)));
        if !scored.is_empty() {
            text.push_str("\nclosest received messages:");
            for (i, v, diffs) in scored.iter().take(SHOWN_CLOSEST) {
                let _ = write!(text, "\n  #{i} {v}");
                for d in diffs {
                    let _ = write!(text, "\n      {d}");
                }
            }
        }
        if !received.is_empty() {
            let first = received.len().saturating_sub(SHOWN_LATEST);
            let _ = write!(text, "\nlatest received messages:");
            for (i, v) in &received[first..] {
                let _ = write!(text, "\n  #{i} {v}");
            }
        }
        text
    }
}

fn matches(pattern: &Value, message: &ClientMessage) -> bool {
    crate::matcher::is_subset(pattern, &client_message_to_json(message))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_every_step_kind() {
        let scenario = parse(
            r#"
timeout_ms: 2500
vars: {agent: a1, n: 3}
steps:
  - wait_registered: {timeout_ms: 100}
  - wait_registered:
  - wait_connected: {}
  - send: {requestId: r1, createAgentRequest: {agentId: "${agent}", agentSdk: scripted}}
  - expect: {match: {requestId: r1}, timeout_ms: 5, since: last_send}
  - capture: {match: {threadUpdate: {}}, capture: {thread: threadUpdate.threadId}}
  - expect_none: {match: {requestError: {}}, within_ms: 10}
  - sleep_ms: 20
  - drop_connection: {}
  - restart:
  - decide: {outcome: deny, message: no}
"#,
        )
        .expect("parses");
        assert_eq!(scenario.default_timeout, Duration::from_millis(2500));
        assert_eq!(scenario.vars.get("n").map(String::as_str), Some("3"));
        let kinds: Vec<&str> = scenario.steps.iter().map(Step::kind).collect();
        assert_eq!(
            kinds,
            [
                "wait_registered",
                "wait_registered",
                "wait_connected",
                "send",
                "expect",
                "expect+capture",
                "expect_none",
                "sleep_ms",
                "drop_connection",
                "restart",
                "decide"
            ]
        );
        match &scenario.steps[4] {
            Step::Expect(e) => {
                assert_eq!(e.pattern, json!({"requestId": "r1"}));
                assert_eq!(e.since, Since::LastSend);
                assert_eq!(e.timeout, Some(Duration::from_millis(5)));
            }
            other => panic!("unexpected {other:?}"),
        }
        match &scenario.steps[1] {
            Step::WaitRegistered { count, timeout } => {
                assert_eq!((*count, *timeout), (1, None));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn rejects_malformed_steps_with_their_number() {
        for (yaml, needle) in [
            ("steps: [{sned: {}}]", "unknown step kind"),
            ("steps: [{send: {}, sleep_ms: 1}]", "exactly one key"),
            ("steps: [{capture: {match: {}}}]", "capture needs"),
            ("steps: [{expect: {mtch: {}}}]", "mtch"),
            ("steps: [{send: 3}]", "ServerMessage object"),
            ("steps: [plain]", "mapping"),
            ("steps: [{decide: {outcome: maybe}}]", "unknown outcome"),
            ("stpes: []", "stpes"),
        ] {
            let err = parse(yaml).expect_err(yaml);
            let text = format!("{err:#}");
            assert!(text.contains(needle), "{yaml}: {text}");
        }
    }

    #[test]
    fn shipped_basic_scenario_parses() {
        let text = include_str!("../../scenarios/basic.yaml");
        let scenario = parse(text).expect("basic.yaml parses");
        assert!(
            scenario
                .steps
                .iter()
                .any(|s| matches!(s, Step::Expect(e) if !e.capture.is_empty()))
        );
    }
}
