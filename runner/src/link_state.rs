//! What the link is doing, published by [`crate::link`] and read by the
//! health endpoints, `/status` and the metrics. A leaf of its own so that
//! those readers need nothing else of the link.

/// What the link is doing (for health checks, metrics and status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Registering (or waiting to retry).
    Connecting,
    /// `RegisterRunner` succeeded; the ControlChannel is being opened.
    Registered,
    /// Registered and the ControlChannel is open.
    Connected,
    /// Stopped for good (shutdown or refusal).
    Closed,
}

impl LinkState {
    /// The state's name in `/status` and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Connecting => "connecting",
            LinkState::Registered => "registered",
            LinkState::Connected => "connected",
            LinkState::Closed => "closed",
        }
    }
}
