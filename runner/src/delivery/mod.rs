//! Delivery: everything between an update being made and the control
//! plane having it.
//!
//! [`messages`] builds the outbound `ClientMessage`s, within the size caps
//! of [`fit`]; [`outbox`] queues them with a bound; [`in_flight`] keeps
//! what was sent until delivery is known; [`journal`] makes durable updates
//! survive a crash; [`transcript`] records each thread's updates for
//! `agent-runner logs`.

pub(crate) mod fit;
pub mod in_flight;
pub mod journal;
pub mod messages;
pub(crate) mod outbox;
pub(crate) mod transcript;
