//! What the read loop hands to the per-agent and per-thread tasks: one
//! command per request, carrying its request id. A module of its own so the
//! routing tables ([`crate::tasks::mailboxes`]) and the tasks share the types
//! without depending on each other.

use agent_runner_proto::runner::ThreadStatus;
use tokio::sync::oneshot;

use crate::delivery::messages::{self, RequestId};
use crate::delivery::outbox::Outbox;
use crate::observe::metrics::RequestOutcome;

pub use crate::host::skills::thread::ThreadPackage;

/// What a `CreateThreadRequest` asks for.
#[derive(Debug, Clone, Default)]
pub struct NewThread {
    /// The id the control plane chose (checked path-safe), if any; `None`:
    /// the runner chooses.
    pub thread_id: Option<String>,
    /// Instructions added to the SDK's prompt for every turn (never empty).
    pub instructions: Option<String>,
    /// Skill packages for this thread only.
    pub skill_packages: Vec<ThreadPackage>,
    /// The thread's model.
    pub model: String,
    /// The thread's reasoning level (`None`: the model's default).
    pub reasoning_level: Option<String>,
    /// The thread's MCP servers (checked; kept in memory only).
    pub mcp_servers: Vec<sdk_adapter::McpServer>,
    /// Protocol 0.7's `cli_secret`: the thread's agent API token (prints
    /// as `***`; registered with the redactor before it gets here).
    pub agent_api_token: Option<crate::config::Secret>,
}

/// A request for an agent's task.
pub enum AgentCmd {
    /// Create the agent in `sdk` (idempotent).
    Create {
        /// The SDK the agent runs on.
        sdk: String,
        /// The request's id, for replies.
        rid: RequestId,
    },
    /// Delete the agent, its threads and workspaces.
    Delete {
        /// The request's id, for replies.
        rid: RequestId,
    },
    /// Create a thread of the agent.
    CreateThread {
        /// What the thread is to be (boxed: the largest command by far).
        thread: Box<NewThread>,
        /// The request's id, for replies.
        rid: RequestId,
    },
    /// Install a skill package into the agent's skills.
    InstallSkill {
        /// The package coordinate (GitHub shorthand, git URL or directory).
        package: String,
        /// The request's id, for replies.
        rid: RequestId,
    },
}

impl AgentCmd {
    /// The request's id (to answer a command no task takes).
    pub fn rid(self) -> RequestId {
        match self {
            AgentCmd::Create { rid, .. }
            | AgentCmd::Delete { rid }
            | AgentCmd::CreateThread { rid, .. }
            | AgentCmd::InstallSkill { rid, .. } => rid,
        }
    }
}

/// A user message for a thread (a new turn, or a steer of the running one).
pub struct UserMessage {
    /// The message.
    pub text: String,
    /// Whether it may steer a running turn.
    pub allow_steer: bool,
    /// A model for this turn instead of the thread's.
    pub model: Option<String>,
    /// A reasoning level for this turn instead of the thread's.
    pub reasoning_level: Option<String>,
    /// The request's id: every update of the turn carries it.
    pub rid: RequestId,
}

/// A request for a thread's task.
pub enum ThreadCmd {
    /// A user message. Boxed, like the decision below: every thread's
    /// mailbox takes a block of 32 commands' room when it is made (tokio's
    /// channel), so the enum is kept to the size of its small variants.
    UserMessage(Box<UserMessage>),
    /// Stop the running turn.
    Interrupt {
        /// The request's id, for replies.
        rid: RequestId,
    },
    /// Delete the thread; `done` is told when it is gone (agent deletion).
    Delete {
        /// The request's id, for replies.
        rid: RequestId,
        /// Told once the thread is gone.
        done: Option<oneshot::Sender<()>>,
    },
    /// The runner is shutting down: interrupt the running turn.
    Drain,
    /// The control plane's decision on one of the thread's approval requests.
    Approval {
        /// The request's id, for replies.
        rid: RequestId,
        /// The decision.
        decision: Box<Decision>,
    },
}

/// An `ApprovalDecision`, checked.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The request decided.
    pub approval_id: String,
    /// The decision.
    pub verdict: sdk_adapter::Verdict,
    /// A question's answer.
    pub answer: Option<String>,
    /// What the agent is told.
    pub message: Option<String>,
}

impl ThreadCmd {
    /// The request's id (to answer a command no task takes).
    pub fn rid(self) -> RequestId {
        match self {
            ThreadCmd::UserMessage(m) => m.rid,
            ThreadCmd::Interrupt { rid }
            | ThreadCmd::Delete { rid, .. }
            | ThreadCmd::Approval { rid, .. } => rid,
            ThreadCmd::Drain => None,
        }
    }
}

/// Answers a request with a `RequestError` saying why it was refused.
pub fn reject(outbox: &Outbox, rid: RequestId, text: String) {
    tracing::warn!(request_id = ?rid, reason = %text, "request refused");
    outbox.push_reply(messages::request_error(rid, text));
}

/// Deleting an unknown thread is done already; anything else is an error.
pub fn unknown_thread(outbox: &Outbox, thread_id: &str, cmd: ThreadCmd) -> RequestOutcome {
    match cmd {
        ThreadCmd::Delete { rid, done } => {
            outbox.push_reply(messages::thread(rid, thread_id, ThreadStatus::Deleted));
            if let Some(done) = done {
                let _ = done.send(());
            }
            RequestOutcome::Answered
        }
        ThreadCmd::Drain => RequestOutcome::Answered,
        ThreadCmd::Interrupt { rid } => {
            reject(outbox, rid, format!("unknown thread {thread_id}"));
            RequestOutcome::Rejected
        }
        ThreadCmd::UserMessage(m) => {
            reject(outbox, m.rid, format!("unknown thread {thread_id}"));
            RequestOutcome::Rejected
        }
        ThreadCmd::Approval { rid, decision } => {
            let text = format!(
                "approval_decision.approval_id: approval {} is already resolved (thread {thread_id} is gone)",
                decision.approval_id
            );
            reject(outbox, rid, text);
            RequestOutcome::Rejected
        }
    }
}
