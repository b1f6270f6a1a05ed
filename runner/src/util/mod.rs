//! Small utilities with no knowledge of the runner: secret redaction, the
//! global allocator, and HTTP CONNECT proxy support.

pub(crate) mod allocator;
pub mod proxy;
pub mod redact;
