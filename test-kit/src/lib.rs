//! What the runner's tests and benchmarks share, written once:
//!
//! | module | what |
//! |---|---|
//! | [`paths`] | the workspace, its target directory, the built runner binary, tools on `PATH` |
//! | [`process`] | a child's stderr captured line by line; stopping a runner as an operator does |
//! | [`runner`] | a runner process against a mock control plane (temporary state, health off) |
//! | [`requests`] | requests to the runner through the mock, and waiting for their updates |
//! | [`faults`] | faults at random moments while waves of turns stream (drops, restarts, stalls, kills) |
//! | [`skip`] | a test that cannot run says so, and the skip ledger CI reads |
//! | [`wait`] | polling what a test cannot be told about until it holds, failing after [`WAIT`] |
//!
//! Used as a dev-dependency by the runner's test targets (`runner/tests/e2e`,
//! `runner/tests/deploy`) and the test suites that skip, and as a normal
//! dependency by the benchmarks (`bench/`) and the fuzz harness (`fuzz/`, its
//! seed requests); it depends only on the mock
//! control plane and the protocol (runner/tests/architecture.rs checks it).

// Test support: a failed unwrap here is a failed test (or benchmark run)
// with its message, as in the tests that call it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod faults;
pub mod paths;
pub mod process;
pub mod requests;
pub mod runner;
pub mod skip;
pub mod wait;

pub use paths::{free_port, have, is_root, runner_bin, target_dir, workspace_root};
pub use process::{Logs, spawn_logged};
pub use runner::{Kit, Plain, RunnerDirs, RunnerOpts, RunnerProc, WAIT};
pub use skip::{current_test, skip, skip_this_test};
