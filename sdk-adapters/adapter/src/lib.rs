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

mod event;
mod sdk;
#[cfg(feature = "testing")]
pub mod testing;

pub use event::{
    CommandInfo, ItemEvent, ItemKind, ItemStatus, TokenUsage, TokenUsageBreakdown, TurnEvent,
    TurnOutcome,
};
pub use sdk::{
    AgentSpec, ModelInfo, SdkAdapter, SdkDescription, SdkError, SdkStatus, SteerError,
    TURN_EVENT_BUFFER, ThreadHandle, ThreadSpec, Turn, TurnControl, TurnInput, given,
};
