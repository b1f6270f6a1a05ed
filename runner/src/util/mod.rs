//! Small utilities with no knowledge of the runner: secret redaction, the
//! global allocator, HTTP CONNECT proxy support, the closest known word to
//! a mistyped one.

pub(crate) mod allocator;
pub(crate) mod closest;
pub mod proxy;
pub mod redact;
