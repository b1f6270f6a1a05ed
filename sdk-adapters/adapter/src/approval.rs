//! How an adapter's turn asks before it acts, in SDK-neutral terms.
//!
//! An SDK that stops to ask (a command to approve, a file change, a
//! permission, a question for the user) sends [`TurnEvent::Approval`] in its
//! turn's event stream, in order with its items, and awaits the answer
//! ([`ask_approval`]). The runner decides who answers: a person at the
//! control plane, the operator's policy, an earlier "for this thread", a
//! timeout, or the turn's end. The waiting turn holds no thread of its own:
//! it awaits a oneshot channel, so any number of turns may wait at once.
//!
//! Every ask gets exactly one answer; one whose answer can no longer come
//! (the runner dropped it) is a denial.

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use crate::{Gone, TurnEvent};

/// What the agent asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalKind {
    /// Run a command.
    CommandExecution,
    /// Write or edit files.
    FileChange,
    /// A permission (a tool, a directory, network access…).
    Permission,
    /// An MCP server asks the user for input.
    McpElicitation,
    /// A question for the user; the answer is text.
    Question,
}

/// Everything a person needs to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAsk {
    /// What kind of request.
    pub kind: ApprovalKind,
    /// One line a person can decide on.
    pub title: String,
    /// The command, for a command execution.
    pub command: Option<String>,
    /// Where it would run.
    pub cwd: Option<String>,
    /// The paths concerned (file changes, permissions).
    pub paths: Vec<String>,
    /// What the agent said about why.
    pub reason: Option<String>,
    /// The choices, for a question or an elicitation that has them.
    pub options: Vec<String>,
    /// The item this request gates, when there is one.
    pub item_id: Option<String>,
    /// What the adapter adds for the runner alone (never sent); boxed, as
    /// most asks have none and turn events stay small.
    pub adapter: Option<Box<AdapterSide>>,
}

/// What an adapter adds to an [`ApprovalAsk`] for the runner alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdapterSide {
    /// The SDK's tool that asks, when its requests are per tool (Claude
    /// Code's): part of what "the same request" means.
    pub tool: Option<String>,
    /// What the SDK answers itself when no control plane decides (the
    /// extension is off); `None`: the runner's `--approval-policy` does.
    pub fallback: Option<ApprovalAnswer>,
}

impl ApprovalAsk {
    /// A request of `kind` titled `title`; the rest is filled in by the caller.
    pub fn new(kind: ApprovalKind, title: impl Into<String>) -> Self {
        Self {
            kind,
            title: title.into(),
            command: None,
            cwd: None,
            paths: Vec::new(),
            reason: None,
            options: Vec::new(),
            item_id: None,
            adapter: None,
        }
    }

    /// A question ask for `questions` as codex's `requestUserInput` and
    /// Claude Code's `AskUserQuestion` both send them (`[{"question",
    /// "header", "options": [{"label"}]}]`): the questions joined as the
    /// title, the first one's header as the reason, its option labels as
    /// the choices.
    pub fn questions(questions: &[serde_json::Value]) -> Self {
        use serde_json::Value;
        let field = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
        let asked: Vec<String> = questions
            .iter()
            .filter_map(|q| field(q, "question"))
            .collect();
        let mut ask = Self::new(ApprovalKind::Question, asked.join(" / "));
        let first = questions.first();
        ask.reason = first.and_then(|q| field(q, "header"));
        ask.options = first
            .and_then(|q| q.get("options"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|o| field(o, "label"))
            .collect();
        ask
    }

    /// What "the same request" means for "approve for this thread": the
    /// kind with the command, or with the paths (and the tool, when set).
    pub fn same_as_key(&self) -> (ApprovalKind, String) {
        let what = match &self.command {
            Some(command) => command.clone(),
            None => self.paths.join("\n"),
        };
        match self.adapter.as_ref().and_then(|a| a.tool.as_ref()) {
            Some(tool) => (self.kind, format!("{tool}\0{what}")),
            None => (self.kind, what),
        }
    }
}

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead, this once.
    Approve,
    /// Go ahead, and for every later request of the same kind and command
    /// (or paths) in this thread.
    ApproveForThread,
    /// Do not.
    Deny,
    /// Do not, and the turn is interrupted.
    CancelTurn,
}

/// The answer to an [`ApprovalAsk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAnswer {
    /// The decision.
    pub verdict: Verdict,
    /// A question's answer text.
    pub answer: Option<String>,
    /// What the person (or the runner) tells the agent, e.g. why it was denied.
    pub message: Option<String>,
}

impl ApprovalAnswer {
    /// A denial saying `message`.
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Deny,
            answer: None,
            message: Some(message.into()),
        }
    }

    /// An approval (this once).
    pub fn approve() -> Self {
        Self {
            verdict: Verdict::Approve,
            answer: None,
            message: None,
        }
    }

    /// Whether the agent may go ahead.
    pub fn approved(&self) -> bool {
        matches!(self.verdict, Verdict::Approve | Verdict::ApproveForThread)
    }
}

/// Where the one answer goes; the first [`ApprovalReply::send`] wins.
#[derive(Clone)]
pub struct ApprovalReply(Arc<Mutex<Option<oneshot::Sender<ApprovalAnswer>>>>);

impl ApprovalReply {
    /// A reply and the receiver its answer arrives on.
    pub fn new() -> (Self, oneshot::Receiver<ApprovalAnswer>) {
        let (tx, rx) = oneshot::channel();
        (Self(Arc::new(Mutex::new(Some(tx)))), rx)
    }

    /// Answers; `false` when it was answered already or nobody waits any more.
    pub fn send(&self, answer: ApprovalAnswer) -> bool {
        let taken = match self.0.lock() {
            Ok(mut slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        taken.is_some_and(|tx| tx.send(answer).is_ok())
    }
}

impl std::fmt::Debug for ApprovalReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalReply")
    }
}

impl PartialEq for ApprovalReply {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// An ask in the event stream, with where its answer goes.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalEvent {
    /// What is asked.
    pub ask: ApprovalAsk,
    /// Where the answer goes.
    pub reply: ApprovalReply,
}

/// `ask` as the event to put in the turn's stream, and its answer to await
/// once it is sent (a denial when the answer can no longer come). For an
/// adapter that must go on reading its SDK while the person decides: it
/// sends the event in order with the turn's items and awaits the answer on
/// a task of its own.
pub fn approval_event(
    ask: ApprovalAsk,
) -> (
    TurnEvent,
    impl Future<Output = ApprovalAnswer> + Send + 'static,
) {
    let (reply, answer) = ApprovalReply::new();
    let answer = async move {
        answer
            .await
            .unwrap_or_else(|_| ApprovalAnswer::deny("the turn ended before a decision came"))
    };
    (
        TurnEvent::Approval(Box::new(ApprovalEvent { ask, reply })),
        answer,
    )
}

/// Asks `ask` through the turn's event stream and waits for the answer (a
/// denial when the answer can no longer come); `Gone` when nobody reads
/// the turn any more.
pub async fn ask_approval(
    events: &mpsc::Sender<TurnEvent>,
    ask: ApprovalAsk,
) -> Result<ApprovalAnswer, Gone> {
    let (event, answer) = approval_event(ask);
    events.send(event).await.map_err(|_| Gone)?;
    Ok(answer.await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_answer_wins_and_a_dropped_one_denies() {
        let (tx, mut rx) = mpsc::channel(4);
        let asking = tokio::spawn(async move {
            ask_approval(&tx, ApprovalAsk::new(ApprovalKind::Question, "name?")).await
        });
        let Some(TurnEvent::Approval(event)) = rx.recv().await else {
            panic!("an approval event");
        };
        assert!(event.reply.send(ApprovalAnswer::approve()));
        assert!(!event.reply.send(ApprovalAnswer::deny("late")));
        assert_eq!(asking.await.unwrap(), Ok(ApprovalAnswer::approve()));

        let (tx, mut rx) = mpsc::channel(4);
        let asking = tokio::spawn(async move {
            ask_approval(&tx, ApprovalAsk::new(ApprovalKind::Question, "q")).await
        });
        drop(rx.recv().await);
        let answer = asking.await.unwrap().unwrap();
        assert!(!answer.approved());
    }
}
