//! Delivery: everything between an update being made and the control
//! plane having it.
//!
//! [`messages`] builds the outbound `ClientMessage`s, within the size caps
//! of [`fit`]; [`outbox`] is the way in: it masks each update, encodes it
//! once, journals the durable ones and queues them with a bound, from
//! then on as their bytes and a [`label`] (the update itself is freed as
//! it enters);
//! [`sending`] is the way out, and the owner of the rest: it holds the
//! outbox, hands the link its next batch (re-sends first, numbered in
//! acked mode) as [`outgoing`] bytes, keeps what was sent in an
//! [`in_flight`] set until the link hands it an acknowledgement or a
//! connection's end, and sets the outbox's bound to what it holds;
//! [`journal`] makes durable updates survive a crash; [`transcript`]
//! records each thread's updates for `agent-runner logs`.

pub(crate) mod fit;
pub mod in_flight;
pub mod journal;
pub mod label;
pub mod messages;
pub(crate) mod outbox;
pub mod outgoing;
pub mod sending;
pub(crate) mod transcript;
