//! What the read loop hands to the per-agent and per-thread tasks: one
//! command per request, carrying its request id. A module of its own so the
//! routing tables ([`crate::mailboxes`]) and the tasks share the types
//! without depending on each other.

use agent_runner_proto::runner::ThreadStatus;
use tokio::sync::oneshot;

use crate::metrics::RequestOutcome;
use crate::outbox::Outbox;
use crate::updates::{self, RequestId};

/// A request for an agent's task.
pub enum AgentCmd {
    Create {
        sdk: String,
        rid: RequestId,
    },
    Delete {
        rid: RequestId,
    },
    CreateThread {
        model: String,
        reasoning_level: Option<String>,
        rid: RequestId,
    },
    InstallSkill {
        package: String,
        rid: RequestId,
    },
}

impl AgentCmd {
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
    pub text: String,
    pub allow_steer: bool,
    pub model: Option<String>,
    pub reasoning_level: Option<String>,
    pub rid: RequestId,
}

/// A request for a thread's task.
pub enum ThreadCmd {
    UserMessage(UserMessage),
    Interrupt {
        rid: RequestId,
    },
    /// Delete the thread; `done` is told when it is gone (agent deletion).
    Delete {
        rid: RequestId,
        done: Option<oneshot::Sender<()>>,
    },
    /// The runner is shutting down: interrupt the running turn.
    Drain,
}

impl ThreadCmd {
    pub fn rid(self) -> RequestId {
        match self {
            ThreadCmd::UserMessage(m) => m.rid,
            ThreadCmd::Interrupt { rid } | ThreadCmd::Delete { rid, .. } => rid,
            ThreadCmd::Drain => None,
        }
    }
}

/// Answers a request with a `RequestError` saying why it was refused.
pub fn reject(outbox: &Outbox, rid: RequestId, text: String) {
    tracing::info!(request_id = ?rid, error = %text, "request rejected");
    outbox.push_reply(updates::request_error(rid, text));
}

/// Deleting an unknown thread is done already; anything else is an error.
pub fn unknown_thread(outbox: &Outbox, thread_id: &str, cmd: ThreadCmd) -> RequestOutcome {
    match cmd {
        ThreadCmd::Delete { rid, done } => {
            outbox.push_reply(updates::thread(rid, thread_id, ThreadStatus::Deleted));
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
    }
}
