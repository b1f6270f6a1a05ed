//! Operations: how a person watches and steers a running runner.
//!
//! The health server (`/livez`, `/readyz`, `/metrics`, `/status`), the
//! `/status` document, the local admin socket behind `agent-runner ps`,
//! `threads`, `interrupt` and `kill`, the process's logging set-up, and how
//! durations and sizes are shown to people (`human`). Nothing
//! below this layer depends on it.

pub(crate) mod admin;
pub(crate) mod admin_peer;
pub(crate) mod health;
pub(crate) mod human;
pub(crate) mod logging;
pub(crate) mod status;
