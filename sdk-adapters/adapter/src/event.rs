//! What a running turn reports, in SDK-neutral terms.
//!
//! The enums are exhaustive on purpose: when an SDK grows a new kind of
//! output, adding a variant makes every place that must handle it fail to
//! compile until it does.

/// One event of a running turn, in the order the SDK produced it.
///
/// The large payloads are boxed so that the event itself stays a few words:
/// a tokio channel allocates its first block of 32 slots when it is made, so
/// every running turn's event channel costs 32 × `size_of::<TurnEvent>()`
/// even while idle (184 B unboxed: 5.9 KiB a turn, 58 MiB at 10,000 turns).
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// An item started, grew, or finished.
    Item(Box<ItemEvent>),
    /// Token accounting for the turn so far.
    Usage(Box<TokenUsage>),
    /// A steering message accepted by [`crate::TurnControl::steer`] joined the
    /// turn here; everything after it was caused by that message.
    Steered {
        /// The `tag` passed to `steer`.
        tag: u64,
    },
    /// The SDK named (or renamed) the thread: its title for it. `None`
    /// clears the name. The runner sends it as a `ThreadNameUpdate`.
    ThreadNamed(Option<String>),
    /// The turn waits for a decision ([`crate::ask_approval`]); the runner
    /// answers through the event's reply, exactly once.
    Approval(Box<crate::ApprovalEvent>),
    /// The turn is over. Always the last event; the stream ends after it.
    Finished(TurnOutcome),
}

impl TurnEvent {
    /// An item's event, boxed (see the type's doc).
    pub fn item(item: ItemEvent) -> Self {
        TurnEvent::Item(Box::new(item))
    }

    /// A token-usage event, boxed (see the type's doc).
    pub fn usage(usage: TokenUsage) -> Self {
        TurnEvent::Usage(Box::new(usage))
    }
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The SDK finished the turn normally.
    Completed,
    /// The turn was stopped by [`crate::TurnControl::interrupt`].
    Interrupted,
    /// The turn failed; the text says why (it reaches the control plane).
    Failed(String),
}

/// Kinds of items a turn produces (the protocol's `ItemType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemKind {
    /// The user's message (always a turn's first item).
    UserMessage,
    /// Text the agent says.
    AgentMessage,
    /// The agent's reasoning.
    Reasoning,
    /// A shell command (with [`CommandInfo`]).
    CommandExecution,
    /// A plan or todo list.
    Plan,
    /// A file written or edited (the text is the diff).
    FileChange,
    /// A tool call that is not a shell command (MCP or built-in).
    McpToolCall,
    /// A call to another agent.
    CollabAgentToolCall,
    /// A web search.
    WebSearch,
    /// An image the agent looked at.
    ImageView,
    /// The agent entered review mode.
    EnteredReviewMode,
    /// The agent left review mode.
    ExitedReviewMode,
    /// The SDK compacted the conversation's context.
    ContextCompaction,
}

/// Whether an item is still growing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemStatus {
    /// Still changing: a later update of the same item supersedes it.
    Running,
    /// Final.
    Completed,
}

/// A snapshot of one item: the runner forwards each as an `ItemUpdate`.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemEvent {
    /// Unique among the runner's items (adapters prefix it with the turn id).
    pub item_id: String,
    /// What kind of item it is.
    pub kind: ItemKind,
    /// Running or completed.
    pub status: ItemStatus,
    /// The item's text so far (for RUNNING) or in full (for COMPLETED).
    pub text: Option<String>,
    /// Present for `CommandExecution` items.
    pub command: Option<CommandInfo>,
}

/// What an item holds, without its id and status: adapters keep their open
/// items this way and report a snapshot with [`ItemContent::event`].
#[derive(Debug, Clone, PartialEq)]
pub struct ItemContent {
    /// What kind of item it is.
    pub kind: ItemKind,
    /// Its text (message, reasoning, diff, tool result…), capped like all output.
    pub text: Option<String>,
    /// For command items: the command and, once done, its output and exit code.
    pub command: Option<CommandInfo>,
}

impl ItemContent {
    /// The item as `item_id` in `status`.
    pub fn event(&self, item_id: impl Into<String>, status: ItemStatus) -> TurnEvent {
        TurnEvent::item(ItemEvent {
            item_id: item_id.into(),
            kind: self.kind,
            status,
            text: self.text.clone(),
            command: self.command.clone(),
        })
    }
}

/// A command an agent ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandInfo {
    /// The command line as the agent ran it.
    pub command: String,
    /// The directory it ran in.
    pub cwd: String,
    /// The process id (or the item id when the SDK reports none).
    pub process_id: String,
    /// Combined output; set once the command finished.
    pub output: Option<String>,
    /// Its exit code, once it finished (`None` when killed by a signal or
    /// unknown).
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did and the SDK says so.
    pub signal: Option<i32>,
    /// It was stopped because the turn was interrupted.
    pub interrupted: bool,
}

impl CommandInfo {
    /// How a finished command's output ends, so that whoever reads only
    /// the output can tell failure from success: `[interrupted]`,
    /// `[killed by signal N]` or `[exit status N]` (N not 0). `None` for a
    /// command that exited 0, or whose end the SDK does not report.
    pub fn end_marker(&self) -> Option<String> {
        if self.interrupted {
            return Some("[interrupted]".to_owned());
        }
        match (self.signal, self.exit_code) {
            (Some(signal), _) => Some(format!("[killed by signal {signal}]")),
            (None, Some(0) | None) => None,
            (None, Some(code)) => Some(format!("[exit status {code}]")),
        }
    }
}

/// Token counts of one request or a whole turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsageBreakdown {
    /// Tokens of the prompt.
    pub input_tokens: i64,
    /// Prompt tokens served from the provider's cache.
    pub cached_input_tokens: i64,
    /// Tokens generated.
    pub output_tokens: i64,
    /// Generated tokens spent on reasoning.
    pub reasoning_output_tokens: i64,
    /// All tokens counted, as the SDK reports it.
    pub total_tokens: i64,
}

impl TokenUsageBreakdown {
    /// Adds `other` to these counts, field by field. The numbers come off
    /// the wire: sums saturate rather than overflow.
    pub fn accumulate(&mut self, other: &Self) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_output_tokens = self
            .reasoning_output_tokens
            .saturating_add(other.reasoning_output_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
    }
}

/// Cumulative and latest usage of a thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Usage since the thread began.
    pub total: TokenUsageBreakdown,
    /// Usage of the latest model request.
    pub last: TokenUsageBreakdown,
    /// The model's context window, when the SDK knows it.
    pub model_context_window: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_event_stays_a_few_words() {
        // Every running turn's channel holds a block of 32 of these from the
        // start; this bound keeps that block at 1 KiB.
        let size = std::mem::size_of::<TurnEvent>();
        assert!(
            size <= 32,
            "TurnEvent is {size} bytes; box the large variant"
        );
    }

    #[test]
    fn a_finished_command_says_how_it_ended() {
        let end = |exit_code, signal, interrupted| {
            CommandInfo {
                exit_code,
                signal,
                interrupted,
                ..CommandInfo::default()
            }
            .end_marker()
        };
        assert_eq!(end(Some(0), None, false), None);
        assert_eq!(end(None, None, false), None, "not reported");
        assert_eq!(
            end(Some(3), None, false).as_deref(),
            Some("[exit status 3]")
        );
        assert_eq!(
            end(None, Some(9), false).as_deref(),
            Some("[killed by signal 9]")
        );
        assert_eq!(end(None, Some(9), true).as_deref(), Some("[interrupted]"));
    }

    #[test]
    fn content_reports_itself_under_an_id_and_status() {
        let content = ItemContent {
            kind: ItemKind::Plan,
            text: Some("1. look".into()),
            command: None,
        };
        assert_eq!(
            content.event("turn-1-item-2", ItemStatus::Completed),
            TurnEvent::item(ItemEvent {
                item_id: "turn-1-item-2".into(),
                kind: ItemKind::Plan,
                status: ItemStatus::Completed,
                text: Some("1. look".into()),
                command: None,
            })
        );
    }

    #[test]
    fn usage_accumulates_and_saturates() {
        let last = TokenUsageBreakdown {
            input_tokens: 10,
            cached_input_tokens: 2,
            output_tokens: i64::MAX,
            reasoning_output_tokens: 1,
            total_tokens: 15,
        };
        let mut sum = last;
        sum.accumulate(&last);
        assert_eq!(
            sum,
            TokenUsageBreakdown {
                input_tokens: 20,
                cached_input_tokens: 4,
                output_tokens: i64::MAX,
                reasoning_output_tokens: 2,
                total_tokens: 30,
            }
        );
    }
}
