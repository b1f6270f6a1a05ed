//! The `code-agent` SDK adapter.
