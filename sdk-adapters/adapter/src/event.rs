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

/// What an item holds, without its id and status: adapters keep their open
/// items this way and report a snapshot with [`ItemContent::event`].
#[derive(Debug, Clone, PartialEq)]
pub struct ItemContent {
    pub kind: ItemKind,
    pub text: Option<String>,
    pub command: Option<CommandInfo>,
}

impl ItemContent {
    /// The item as `item_id` in `status`.
    pub fn event(&self, item_id: impl Into<String>, status: ItemStatus) -> TurnEvent {
        TurnEvent::Item(ItemEvent {
            item_id: item_id.into(),
            kind: self.kind,
            status,
            text: self.text.clone(),
            command: self.command.clone(),
        })
    }
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
    pub total: TokenUsageBreakdown,
    pub last: TokenUsageBreakdown,
    pub model_context_window: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_reports_itself_under_an_id_and_status() {
        let content = ItemContent {
            kind: ItemKind::Plan,
            text: Some("1. look".into()),
            command: None,
        };
        assert_eq!(
            content.event("turn-1-item-2", ItemStatus::Completed),
            TurnEvent::Item(ItemEvent {
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
