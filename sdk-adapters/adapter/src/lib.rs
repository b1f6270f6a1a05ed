//! The seam between the runner core and every agent SDK.
//!
//! An SDK (the scripted adapter, the local engine, codex, Claude Code…)
//! implements [`SdkAdapter`]. The core calls it to create agents and threads
//! and to start turns; a started turn hands back a [`Turn`]: a bounded stream
//! of [`TurnEvent`]s plus a [`TurnControl`] to steer or interrupt it.
//!
//! Adapters never see protobuf: the runner core alone turns these events into
//! `ClientMessage`s. That keeps the wire contract in one place and lets an
//! adapter be tested without a control plane.
//!
//! What several adapters' turn tasks do the same way lives here once:
//! [`SteerGate`] (steering against the end of a turn), [`finish_turn`] and
//! [`sleep_until`], and [`ItemContent`] (an item's body, reported as an
//! event).
//!
//! Every process an adapter starts for a thread goes through the thread's
//! [`Sandbox`] (the `agent-launcher` crate, re-exported as [`launcher`]).

mod approval;
pub mod beneath;
pub mod cap;
mod event;
mod mcp;
mod sandbox;
mod sdk;
mod steering;
#[cfg(feature = "testing")]
pub mod testing;
mod turn_task;

/// The launcher every spawn site starts its processes through.
pub use agent_launcher as launcher;
pub use approval::{
    AdapterSide, ApprovalAnswer, ApprovalAsk, ApprovalEvent, ApprovalKind, ApprovalReply, Verdict,
    approval_event, ask_approval,
};
pub use event::{
    CommandInfo, ItemContent, ItemEvent, ItemKind, ItemStatus, TokenUsage, TokenUsageBreakdown,
    TurnEvent, TurnOutcome,
};
pub use mcp::{McpServer, McpTransport, Secret, valid_server_name};
pub use sandbox::Sandbox;
pub use sdk::{
    AgentSpec, Login, LoginStarted, ModelInfo, SdkAdapter, SdkDescription, SdkError, SdkStatus,
    SteerError, TURN_EVENT_BUFFER, ThreadHandle, ThreadSpec, Turn, TurnControl, TurnInput,
};
pub use steering::SteerGate;
pub use turn_task::{Gone, finish_turn, sleep_until};
