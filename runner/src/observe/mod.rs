//! What the runner publishes about itself: the Prometheus metrics every
//! layer counts into, and the link's state that health, `/status` and the
//! metrics read. A leaf layer, so that every other layer may count.

pub(crate) mod link_state;
pub(crate) mod message_kind;
pub mod metrics;
