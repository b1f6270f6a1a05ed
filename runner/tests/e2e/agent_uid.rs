//! The attack suite again with agents running as another user
//! (`--agent-uid 65534`), as an operator who runs the runner as root
//! deploys it: the engine's `bash` probes (secret files, state, another
//! thread's workspace and capability, `/proc`, signals, writes outside),
//! the admin socket and `/status` dialled from a thread, a non-dumpable
//! `env -i setsid` escapee, a bounded fork bomb, another session's cron
//! jobs, a Claude settings hook planted for other threads, and links
//! planted in codex's home for the runner to write through, and a
//! symlink-swap race against the engine's file tools. Every attack fails while the thread's own work succeeds. Only
//! root may start agents as another uid: elsewhere each test skips, in the
//! ledger (CI runs as root, and fails if one skips).

use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;

use mock_control_plane::MockControlPlane;

use crate::support::*;

/// The uid agents run as.
pub(crate) const AGENT_UID: &str = "65534";

/// Why agents cannot run as another uid here, if they cannot.
pub(crate) fn no_agent_uid() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() } != 0).then_some("--agent-uid needs a root runner")
}

/// [`connected_as_uid`], and agent `a` (scripted) created.
pub(crate) async fn agent_as_uid(
    configure: impl FnOnce(RunnerOpts) -> RunnerOpts,
) -> (MockControlPlane, RunnerProc) {
    let (cp, runner) = connected_as_uid(configure).await;
    create_agent(&cp, "a").await;
    (cp, runner)
}

/// A mock and a connected runner, `configure`d, whose agents run as
/// [`AGENT_UID`]; its directories are opened for that user to walk to
/// its workspace (as an operator must).
pub(crate) async fn connected_as_uid(
    configure: impl FnOnce(RunnerOpts) -> RunnerOpts,
) -> (MockControlPlane, RunnerProc) {
    let dirs: Arc<RunnerDirs> = RunnerDirs::new();
    std::fs::set_permissions(dirs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cp = mock().await;
    let opts = configure(RunnerOpts::new(cp.url()))
        .arg("--agent-uid")
        .arg(AGENT_UID);
    let runner = RunnerProc::start_in(opts, dirs);
    cp.wait_connected(WAIT)
        .await
        .unwrap_or_else(|e| panic!("connects: {e:?}\n{}", runner.logs()));
    (cp, runner)
}

/// Skips (recording why) when agents cannot run as another uid here.
macro_rules! needs_agent_uid {
    () => {
        if let Some(why) = no_agent_uid() {
            test_kit::skip_this_test(why);
            return;
        }
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_agent_bash_attacks_fail_as_the_agent_uid() {
    needs_agent_uid!();
    crate::sandbox::code_agent_bash_suite(&["--agent-uid", AGENT_UID]).await;
}

#[tokio::test]
async fn the_admin_socket_refuses_a_thread_of_the_agent_uid() {
    needs_agent_uid!();
    let (cp, runner) = agent_as_uid(|o| o.arg("--health-addr").arg("127.0.0.1:0")).await;
    // As another uid the thread cannot even connect.
    crate::local_endpoints::admin_socket_refuses_threads(
        &cp,
        &runner,
        crate::local_endpoints::Refusal::ByMode,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_process_of_the_agent_uid_dies_on_interrupt_and_on_delete() {
    needs_agent_uid!();
    if let Some(why) = crate::sandbox_limits::no_hiding_test() {
        test_kit::skip_this_test(&why);
        return;
    }
    let (cp, runner) = agent_as_uid(|o| o).await;
    let thread = create_thread(&cp, "a", "t").await;
    crate::sandbox_limits::a_hidden_process_dies(&cp, runner, &thread).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_of_the_agent_uid_stops_at_the_thread_pids_limit() {
    needs_agent_uid!();
    if let Some(why) = crate::sandbox_limits::no_pids_cgroup() {
        test_kit::skip_this_test(&why);
        return;
    }
    let (cp, runner) = agent_as_uid(|o| o.arg("--sandbox-pids-max").arg("48")).await;
    crate::sandbox_limits::a_fork_bomb_is_held(&cp, runner, 3133).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_jobs_of_another_session_are_out_of_reach_of_the_agent_uid() {
    needs_agent_uid!();
    crate::engine_state::cron_stays_with_its_thread(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_hook_planted_by_the_agent_uid_reaches_no_other_thread() {
    needs_agent_uid!();
    crate::claude_config::hook_reaches_no_other(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_home_link_planted_by_the_agent_uid_is_replaced() {
    needs_agent_uid!();
    crate::codex::planted_codex_home_link(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engines_file_tools_hold_while_an_agent_uid_swaps_links() {
    needs_agent_uid!();
    crate::engine_race::file_tools_hold(true).await;
}
