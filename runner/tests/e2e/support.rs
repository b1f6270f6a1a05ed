//! Starting runner processes and talking to them through the mock: the
//! shared test kit (`test-kit/`), bound to this target's runner binary and
//! to the runner library's cgroup sweep.

use std::path::{Path, PathBuf};

use mock_control_plane::MockControlPlane;

pub use test_kit::requests::*;
pub use test_kit::runner::mock;
pub use test_kit::{RunnerOpts, WAIT};

/// The kit as the runner's end-to-end tests use it.
pub struct E2e;

impl test_kit::Kit for E2e {
    /// The binary cargo built for this test target: always the fresh one.
    fn runner_bin() -> PathBuf {
        PathBuf::from(runner_bin())
    }

    /// A SIGKILLed runner's agents' cgroups (and processes that escaped
    /// their group), swept as the next start on the state directory would.
    fn sweep_state(state_dir: &Path) {
        agent_runner::sandbox::sweep_state_dir(state_dir);
    }
}

/// A runner process of these tests (see [`test_kit::RunnerProc`]).
pub type RunnerProc = test_kit::RunnerProc<E2e>;
/// A runner's temporary state and workspace directories, shared by the
/// runners started on them one after another.
pub type RunnerDirs = test_kit::RunnerDirs<E2e>;

pub fn runner_bin() -> &'static str {
    env!("CARGO_BIN_EXE_agent-runner")
}

/// A mock and a connected runner.
pub async fn connected() -> (MockControlPlane, RunnerProc) {
    connected_with(|opts| opts).await
}

/// A mock and a runner started with the options `configure` makes, connected.
pub async fn connected_with(
    configure: impl FnOnce(RunnerOpts) -> RunnerOpts,
) -> (MockControlPlane, RunnerProc) {
    test_kit::runner::connected_with(configure).await
}

/// [`connected_with`], and agent `a` (scripted) created.
pub async fn agent_with(
    configure: impl FnOnce(RunnerOpts) -> RunnerOpts,
) -> (MockControlPlane, RunnerProc) {
    test_kit::runner::agent_with(configure).await
}

/// A mock, a connected runner, agent `a` and its thread; the thread's id.
pub async fn thread_ready() -> (MockControlPlane, RunnerProc, String) {
    test_kit::runner::thread_ready().await
}
