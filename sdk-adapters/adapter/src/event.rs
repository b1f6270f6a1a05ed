//! What a running turn reports, in SDK-neutral terms.
//!
//! The enums are exhaustive on purpose: when an SDK grows a new kind of
//! output, adding a variant makes every place that must handle it fail to
//! compile until it does.

/// One event of a running turn, in the order the SDK produced it.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// An item started, grew, or finished.
    Item(ItemEvent),
    /// Token accounting for the turn so far.
    Usage(TokenUsage),
    /// A steering message accepted by [`crate::TurnControl::steer`] joined the
    /// turn here; everything after it was caused by that message.
    Steered {
        /// The `tag` passed to `steer`.
        tag: u64,
    },
    /// The turn is over. Always the last event; the stream ends after it.
    Finished(TurnOutcome),
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

/// Kinds of items a turn produces (contract §1 `ItemType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemKind {
    UserMessage,
    AgentMessage,
    Reasoning,
    CommandExecution,
    Plan,
    FileChange,
    McpToolCall,
    CollabAgentToolCall,
    WebSearch,
    ImageView,
    EnteredReviewMode,
    ExitedReviewMode,
    ContextCompaction,
}

/// Whether an item is still growing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemStatus {
    Running,
    Completed,
}

/// A snapshot of one item: the runner forwards each as an `ItemUpdate`.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemEvent {
    /// Unique among the runner's items (adapters prefix it with the turn id).
    pub item_id: String,
    pub kind: ItemKind,
    pub status: ItemStatus,
    /// The item's text so far (for RUNNING) or in full (for COMPLETED).
    pub text: Option<String>,
    /// Present for `CommandExecution` items.
    pub command: Option<CommandInfo>,
}

/// A command an agent ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandInfo {
    pub command: String,
    pub cwd: String,
    pub process_id: String,
    /// Combined output; set once the command finished.
    pub output: Option<String>,
    pub exit_code: Option<i32>,
}

/// Token counts of one request or a whole turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsageBreakdown {
    pub input_tokens: i64,
    pub cached_input_tokens: i64,
    pub output_tokens: i64,
    pub reasoning_output_tokens: i64,
    pub total_tokens: i64,
}

/// Cumulative and latest usage of a thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub total: TokenUsageBreakdown,
    pub last: TokenUsageBreakdown,
    pub model_context_window: Option<i64>,
}
