//! Small utilities with no knowledge of the runner: secret redaction, the
//! global allocator, HTTP CONNECT proxy support, the closest known word to
//! a mistyped one, and taking a secret out of the environment.

pub(crate) mod allocator;
pub(crate) mod closest;
pub mod proxy;
pub mod redact;
pub mod taken_env;
