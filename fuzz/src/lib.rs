//! The fuzz harness for `ServerMessage`s, shared by the libFuzzer
//! target (`fuzz_targets/server_message.rs`, nightly) and the stable driver
//! (`src/bin/stable_driver.rs`).
//!
//! One input = the protobuf bytes of one `ServerMessage`, exactly what the
//! runner reads off the ControlChannel. It goes through the runner's own
//! decoding (prost), validation and dispatch ([`agent_runner::dispatch`])
//! into a real in-process runtime: SQLite state, workspaces, agent and thread
//! tasks and the `scripted` adapter. Checked after each input:
//!
//! - no panic anywhere (the harness re-raises panics of runner tasks);
//! - an invalid message (`buf.validate` violation, no request, an id that is
//!   not path-safe) is answered with a `RequestError` carrying its request id
//!   before `dispatch` returns (the read loop answers it itself);
//! - a valid message with a request id gets a reply carrying that id within
//!   [`REPLY_WITHIN`] (no hang);
//! - bytes that do not decode are what tonic rejects before dispatch (the
//!   link then drops the stream and reconnects); nothing to answer;
//! - acknowledged delivery: every message goes through the
//!   link's own handling ([`agent_runner::link::on_server_message`]) on a
//!   session that accepted `acked-delivery/1`, with every update the harness
//!   takes recorded as sent ([`agent_runner::link::Sending`]). An
//!   `acked_sequence` beyond what was sent or going backwards settles
//!   nothing (no update dropped); a sensible one settles exactly what it
//!   covers; a message carrying only an acknowledgement is not answered.
//!
//! Safety of the host: turn scripts are run for real by the scripted
//! adapter, so `run COMMAND` lines become `say COMMAND` and `sleep MS` lines
//! `think MS` (same length, so validity is unchanged) before dispatch.
//! `InstallSkillsMpRequest`s that pass validation are sent to an agent that
//! does not exist (skill installation fetches packages over the network).
//!
//! The structure-aware mutator ([`mutate`]) edits decoded messages: swaps
//! the request kind, plants ids the runtime knows (or almost-valid ones),
//! splices script lines, and byte-mutates single fields.

// A fuzz harness: a failed expect is a finding, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use agent_runner::context::Runtime;
use agent_runner::in_flight::Mode;
use agent_runner::link::{Sending, on_server_message};
use agent_runner::messages;
use agent_runner::sdks::Sdks;
use agent_runner::store::{AgentRow, Store, ThreadRow};
use agent_runner::workspace::{Workspaces, check_id};
use agent_runner_proto::Validate;
use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use prost::Message as _;
use sdk_adapter::{AgentSpec, SdkAdapter, SdkDescription, SdkError, ThreadHandle, ThreadSpec};

mod seeds;

pub use seeds::seeds;

/// The agent and thread every fresh harness starts with (planted in its
/// state before the runtime restores it), so inputs can reach real threads.
pub const KNOWN_AGENT: &str = "fuzz-agent";
/// A thread of [`KNOWN_AGENT`] that every fresh harness starts with.
pub const KNOWN_THREAD: &str = "thr-0123456789abcdef0123456789abcdef";
/// Stands in for the agent of a valid skill installation (see module docs).
const NO_AGENT: &str = "fuzz-no-such-agent";

/// How long a valid request may go unanswered before it counts as a hang.
pub const REPLY_WITHIN: Duration = Duration::from_secs(10);
/// Start afresh after this many inputs (bounded state and memory).
const RESET_EVERY: u64 = 20_000;
/// Start afresh when this many threads exist.
const MAX_THREADS: usize = 500;

/// What one input did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not a `ServerMessage` on the wire: tonic fails the stream before
    /// dispatch.
    Undecodable,
    /// Rejected by the read loop with a `RequestError`.
    Invalid,
    /// Valid; answered by its agent or thread task (or at once).
    Answered,
    /// Valid without a request id: nothing to correlate a reply with.
    Unchecked,
    /// Only an acknowledgement: taken, not answered.
    AckOnly,
}

/// The scripted adapter with the host protected (see the module docs).
struct Sandboxed(sdk_scripted::ScriptedAdapter);

#[async_trait::async_trait]
impl SdkAdapter for Sandboxed {
    fn name(&self) -> &str {
        self.0.name()
    }
    async fn describe(&self) -> SdkDescription {
        self.0.describe().await
    }
    async fn create_agent(&self, agent: &AgentSpec) -> Result<(), SdkError> {
        self.0.create_agent(agent).await
    }
    async fn delete_agent(&self, agent_id: &str) -> Result<(), SdkError> {
        self.0.delete_agent(agent_id).await
    }
    async fn create_thread(&self, spec: &ThreadSpec) -> Result<ThreadHandle, SdkError> {
        self.0.create_thread(spec).await
    }
    async fn delete_thread(&self, spec: &ThreadSpec) -> Result<(), SdkError> {
        self.0.delete_thread(spec).await
    }
    async fn start_turn(
        &self,
        spec: &ThreadSpec,
        mut input: sdk_adapter::TurnInput,
    ) -> Result<sdk_adapter::Turn, SdkError> {
        input.text = defuse(&input.text);
        self.0.start_turn(spec, input).await
    }
}

/// `run X` → `say X`, `sleep N` → `think N`, line by line, same length.
pub fn defuse(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            if let Some(rest) = line.strip_prefix("run ") {
                format!("say {rest}")
            } else if let Some(rest) = line.strip_prefix("sleep ") {
                format!("think {rest}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

struct Live {
    tokio: tokio::runtime::Runtime,
    runner: Arc<Runtime>,
    /// Delivery on an acked session: every update taken is recorded here.
    sending: Arc<Sending>,
    /// The last sensible acknowledgement.
    acked: u64,
    _dir: tempfile::TempDir,
}

/// Unacknowledged updates above which the harness acknowledges everything
/// (bounded memory over long runs).
const ACK_ALL_ABOVE: usize = 10_000;

impl Live {
    fn new() -> Self {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("harness: tokio runtime");
        let dir = tempfile::tempdir().expect("harness: temporary directory");
        let store = Store::open(&dir.path().join("state")).expect("harness: state");
        let workspaces = Workspaces::new(dir.path().join("ws")).expect("harness: workspaces");
        store
            .put_agent(&AgentRow {
                agent_id: KNOWN_AGENT.into(),
                sdk: "scripted".into(),
            })
            .expect("harness: plant agent");
        store
            .put_thread(&ThreadRow {
                thread_id: KNOWN_THREAD.into(),
                agent_id: KNOWN_AGENT.into(),
                sdk_thread_id: "thread-fuzz".into(),
                model: "scripted-fast".into(),
                reasoning_level: None,
                last_turn_id: None,
                instructions: None,
                agent_api_token: None,
            })
            .expect("harness: plant thread");
        let sdks = Sdks::from_adapters(vec![Arc::new(Sandboxed(
            sdk_scripted::ScriptedAdapter::new(),
        ))]);
        let runner = Runtime::bare(sdks, store, workspaces, 100_000, 64, 1 << 20);
        tokio.block_on(async {
            runner.sdks.describe_all().await;
            agent_runner::restore::restore(&runner, &Default::default())
                .await
                .expect("harness: restore");
        });
        let sending = Arc::new(Sending::new(
            runner.outbox.clone(),
            None,
            agent_runner::journal::Recovered::default(),
            Duration::from_secs(30),
        ));
        sending.registered(true, 0);
        Live {
            tokio,
            runner,
            sending,
            acked: 0,
            _dir: dir,
        }
    }

    /// Takes every queued update the way the link does (numbered and
    /// recorded as sent).
    fn drain(&mut self) -> Vec<ClientMessage> {
        let mut out = vec![];
        while !self.runner.outbox.is_empty() {
            let epoch = self.sending.epoch();
            out.extend(
                self.tokio
                    .block_on(self.sending.next_batch(epoch))
                    .into_iter()
                    .map(|o| o.decode()),
            );
        }
        if self.sending.unsettled() > ACK_ALL_ABOVE {
            self.acked = self.sending.last_sequence();
            self.sending.ack(self.acked);
        }
        out
    }
}

/// An in-process runtime with the scripted SDK that inputs are dispatched into.
pub struct Harness {
    live: Live,
    runs: u64,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// A fresh harness (state, workspaces and tasks in a temp dir).
    pub fn new() -> Self {
        Harness {
            live: Live::new(),
            runs: 0,
        }
    }

    /// One input: protobuf bytes of a `ServerMessage`. Panics on a finding.
    pub fn run_bytes(&mut self, data: &[u8]) -> Outcome {
        match ServerMessage::decode(data) {
            Ok(msg) => self.run_message(msg),
            Err(_) => Outcome::Undecodable,
        }
    }

    /// Dispatches `msg` and checks what the module doc promises.
    pub fn run_message(&mut self, mut msg: ServerMessage) -> Outcome {
        self.runs += 1;
        if self.runs.is_multiple_of(RESET_EVERY)
            || self.live.runner.mailboxes.thread_count() > MAX_THREADS
            || self
                .live
                .runner
                .mailboxes
                .agent_threads(KNOWN_AGENT)
                .is_empty()
        {
            self.live = Live::new();
        }
        let invalid = expected_invalid(&msg);
        if !invalid && let Some(Request::InstallSkillsMpRequest(r)) = &mut msg.request {
            r.agent_id = NO_AGENT.into();
        }
        let rid = messages::request_id(&msg.request_id);
        let ack_only =
            msg.acked_sequence != 0 && msg.request.is_none() && msg.request_id.is_empty();
        let live = &mut self.live;
        // What earlier inputs left queued is not this input's answer.
        live.drain();
        let (highest, before) = (live.sending.last_sequence(), live.sending.unsettled());
        {
            let _in_runtime = live.tokio.enter();
            on_server_message(&live.runner, &live.sending, Mode::Acked, msg.clone());
        }
        check_ack(live, &msg, highest, before);
        if ack_only {
            // Nothing ran since (no await): whatever is queued now was
            // queued by the read loop itself.
            let queued = live.runner.outbox.try_pop_many(usize::MAX);
            assert!(
                queued.is_empty(),
                "an acknowledgement-only message was answered: {msg:?}\n{queued:?}"
            );
            return Outcome::AckOnly;
        }
        let live = &self.live;
        if invalid {
            let replies: Vec<ClientMessage> = live
                .runner
                .outbox
                .try_pop_many(usize::MAX)
                .into_iter()
                .map(|t| t.decode())
                .collect();
            let answered = replies.iter().any(|m| {
                m.request_id == rid && matches!(m.payload, Some(Payload::RequestError(_)))
            });
            assert!(
                answered,
                "invalid message not answered with a RequestError at once: {msg:?}\nqueued: {replies:?}"
            );
            return Outcome::Invalid;
        }
        let Some(rid) = rid else {
            // Let the tasks run so their work (and any panic) happens now.
            live.tokio.block_on(tokio::task::yield_now());
            return Outcome::Unchecked;
        };
        let outbox = live.runner.outbox.clone();
        let replied = live.tokio.block_on(async {
            tokio::time::timeout(REPLY_WITHIN, async {
                loop {
                    let m = outbox.pop().await;
                    if m.request_id.as_deref() == Some(rid.as_str()) {
                        return m;
                    }
                }
            })
            .await
        });
        match replied {
            Ok(_) => Outcome::Answered,
            Err(_) => panic!("no reply within {REPLY_WITHIN:?} (hang) to {msg:?}"),
        }
    }
}

/// An acknowledgement settles exactly what it covers, or nothing when it
/// makes no sense; no update is dropped on its word.
fn check_ack(live: &mut Live, msg: &ServerMessage, highest: u64, before: usize) {
    let after = live.sending.unsettled();
    let a = msg.acked_sequence;
    if a == 0 || a > highest || a < live.acked {
        assert_eq!(
            after, before,
            "acked_sequence {a} (sent through {highest}, acknowledged {}) changed what is kept",
            live.acked
        );
        return;
    }
    // Everything taken was recorded with consecutive numbers: what stays
    // is what lies above the acknowledgement.
    assert_eq!(
        after,
        (highest - a) as usize,
        "acked_sequence {a} of {highest} settled the wrong updates"
    );
    live.acked = a;
}

/// What the runner must reject in its read loop: `buf.validate` violations,
/// no request at all, or an agent/thread id that is not path-safe.
pub fn expected_invalid(msg: &ServerMessage) -> bool {
    if msg.validate().is_err() {
        return true;
    }
    let ids: Vec<&str> = match &msg.request {
        None => return true,
        Some(Request::HeartbeatRequest(_))
        | Some(Request::CodexConfigurationRequest(_))
        | Some(Request::ApprovalDecision(_)) => vec![],
        Some(Request::CreateAgentRequest(r)) => vec![&r.agent_id],
        Some(Request::DeleteAgentRequest(r)) => vec![&r.agent_id],
        Some(Request::CreateThreadRequest(r)) => vec![&r.agent_id],
        Some(Request::InstallSkillsMpRequest(r)) => vec![&r.agent_id],
        Some(Request::DeleteThreadRequest(r)) => vec![&r.agent_id, &r.thread_id],
        Some(Request::InterruptTurnRequest(r)) => vec![&r.agent_id, &r.thread_id],
        Some(Request::CreateUserMessageRequest(r)) => vec![&r.agent_id, &r.thread_id],
    };
    ids.iter().any(|id| check_id("id", id).is_err())
}

/// A small deterministic generator for the mutator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    /// The next pseudo-random number (xorshift).
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One of `options`.
    pub fn pick<'a>(&mut self, options: &[&'a str]) -> &'a str {
        options[self.below(options.len())]
    }
}

const IDS: &[&str] = &[
    KNOWN_AGENT,
    KNOWN_THREAD,
    "a",
    "",
    ".",
    "..",
    ".hidden",
    "../etc",
    "a/b",
    "a\\b",
    "a b",
    "thr-00000000000000000000000000000000",
    "é",
    "\0",
    "x-y_z.1",
];
const REQUEST_IDS: &[&str] = &["", "r1", "r2", "hb", "\u{1F600}", " "];
const SDKS: &[&str] = &["scripted", "", "codex", "SCRIPTED"];
const MODELS: &[&str] = &["scripted-fast", "scripted-slow", "", "gpt"];
const LEVELS: &[&str] = &["low", "high", "", "max"];
const LINES: &[&str] = &[
    "say x",
    "think y",
    "usage 10 20",
    "usage -1 x",
    "usage 9223372036854775807 9223372036854775807",
    "fail boom",
    "sleep 1",
    "run true",
    "say",
    "",
    "\r",
    "hello",
    "sleep soon",
];

fn some_or_none(rng: &mut Rng, options: &[&str]) -> Option<String> {
    (rng.below(3) != 0).then(|| rng.pick(options).to_owned())
}

fn script(rng: &mut Rng) -> String {
    let n = 1 + rng.below(4);
    (0..n)
        .map(|_| rng.pick(LINES))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A random request of a random kind, fields from the dictionaries.
pub fn random_request(rng: &mut Rng) -> Request {
    let agent = |rng: &mut Rng| {
        if rng.below(2) == 0 {
            KNOWN_AGENT.to_owned()
        } else {
            rng.pick(IDS).to_owned()
        }
    };
    let thread = |rng: &mut Rng| {
        if rng.below(2) == 0 {
            KNOWN_THREAD.to_owned()
        } else {
            rng.pick(IDS).to_owned()
        }
    };
    match rng.below(8) {
        0 => Request::HeartbeatRequest(HeartbeatRequest {}),
        1 => Request::CreateAgentRequest(CreateAgentRequest {
            agent_id: agent(rng),
            agent_sdk: rng.pick(SDKS).into(),
        }),
        2 => Request::DeleteAgentRequest(DeleteAgentRequest {
            agent_id: agent(rng),
        }),
        3 => Request::CreateThreadRequest(CreateThreadRequest {
            agent_id: agent(rng),
            model: rng.pick(MODELS).into(),
            reasoning_level: some_or_none(rng, LEVELS),
            ..Default::default()
        }),
        4 => Request::DeleteThreadRequest(DeleteThreadRequest {
            agent_id: agent(rng),
            thread_id: thread(rng),
        }),
        5 => Request::InterruptTurnRequest(InterruptTurnRequest {
            agent_id: agent(rng),
            thread_id: thread(rng),
        }),
        6 => Request::InstallSkillsMpRequest(InstallSkillsMpRequest {
            agent_id: agent(rng),
            package_name: rng.pick(&["", "pkg", "github:o/r", "../x"]).into(),
        }),
        _ => Request::CreateUserMessageRequest(CreateUserMessageRequest {
            agent_id: agent(rng),
            thread_id: thread(rng),
            text: script(rng),
            allow_steer: rng.below(2) == 0,
            model: some_or_none(rng, MODELS),
            model_reasoning_level: some_or_none(rng, LEVELS),
        }),
    }
}

/// The string fields of a message, for byte-level mutation.
fn strings(msg: &mut ServerMessage) -> Vec<&mut String> {
    let mut v = vec![&mut msg.request_id];
    match &mut msg.request {
        Some(Request::CreateAgentRequest(r)) => v.extend([&mut r.agent_id, &mut r.agent_sdk]),
        Some(Request::DeleteAgentRequest(r)) => v.push(&mut r.agent_id),
        Some(Request::CreateThreadRequest(r)) => {
            v.extend([&mut r.agent_id, &mut r.model]);
            v.extend(r.reasoning_level.as_mut());
        }
        Some(Request::DeleteThreadRequest(r)) => v.extend([&mut r.agent_id, &mut r.thread_id]),
        Some(Request::InterruptTurnRequest(r)) => v.extend([&mut r.agent_id, &mut r.thread_id]),
        Some(Request::InstallSkillsMpRequest(r)) => {
            v.extend([&mut r.agent_id, &mut r.package_name]);
        }
        Some(Request::CreateUserMessageRequest(r)) => {
            v.extend([&mut r.agent_id, &mut r.thread_id, &mut r.text]);
            v.extend(r.model.as_mut());
            v.extend(r.model_reasoning_level.as_mut());
        }
        Some(Request::ApprovalDecision(r)) => v.push(&mut r.approval_id),
        Some(Request::HeartbeatRequest(_)) | Some(Request::CodexConfigurationRequest(_)) | None => {
        }
    }
    v
}

/// One structure-aware edit of `msg`. `bytes` mutates a field's bytes in
/// place (libFuzzer's own mutator in the fuzz target).
pub fn mutate(msg: &mut ServerMessage, rng: &mut Rng, bytes: &mut dyn FnMut(&mut Vec<u8>)) {
    match rng.below(8) {
        7 => {
            // Acknowledgements: none, small, huge, or planted alone.
            msg.acked_sequence = match rng.below(4) {
                0 => 0,
                1 => rng.below(64) as u64,
                2 => u64::MAX - rng.below(2) as u64,
                _ => {
                    msg.request = None;
                    msg.request_id.clear();
                    1 + rng.below(1_000) as u64
                }
            };
        }
        0 => msg.request = Some(random_request(rng)),
        1 => msg.request_id = rng.pick(REQUEST_IDS).to_owned(),
        2 => msg.request = None,
        3 => {
            // Plant a known or almost-valid id into one id field.
            let id = rng.pick(IDS).to_owned();
            let mut fields = strings(msg);
            let n = fields.len();
            if n > 1 {
                *fields[1 + rng.below(n - 1)] = id;
            }
        }
        4 => {
            if let Some(Request::CreateUserMessageRequest(r)) = &mut msg.request {
                let line = rng.pick(LINES);
                match rng.below(3) {
                    0 => r.text = format!("{}\n{line}", r.text),
                    1 => r.text = line.to_owned(),
                    _ => r.allow_steer = !r.allow_steer,
                }
            } else {
                msg.request = Some(random_request(rng));
            }
        }
        _ => {
            let mut fields = strings(msg);
            let i = rng.below(fields.len());
            let mut raw = std::mem::take(fields[i]).into_bytes();
            bytes(&mut raw);
            *fields[i] = String::from_utf8_lossy(&raw).into_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defuse_keeps_length_and_disarms_commands() {
        let t = "say a\nrun rm -rf /\nsleep 99999\n run x\nrunning";
        let d = defuse(t);
        assert_eq!(d.len(), t.len());
        assert_eq!(d, "say a\nsay rm -rf /\nthink 99999\n run x\nrunning");
    }

    #[test]
    fn seeds_behave_as_labelled() {
        let mut h = Harness::new();
        for (name, msg) in seeds() {
            let outcome = h.run_message(msg);
            let want =
                if name == "no_request" || name.ends_with("bad_id") || name.ends_with("empty_text")
                {
                    Outcome::Invalid
                } else if name == "ack_only" || name == "ack_going_backwards" {
                    Outcome::AckOnly
                } else {
                    Outcome::Answered
                };
            assert_eq!(outcome, want, "{name}");
        }
    }
}
