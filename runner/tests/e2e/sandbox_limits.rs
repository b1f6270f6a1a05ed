//! A thread's default limits and its kill, end to end: the real runner
//! (root here and in CI) against the mock control plane, its scripted agent
//! acting as a hostile one. A bounded fork bomb stops at the thread's
//! `pids.max` while another thread's turn completes; a 40 GiB file stops
//! at the default file-size limit with EFBIG; a non-dumpable process that
//! cleared its environment (no tag) and left its session dies on interrupt
//! and on thread delete. The pids tests skip, in the ledger, on a host
//! where no cgroup can hold a thread (neither a delegated v2 subtree with
//! a pids controller nor a writable v1 pids hierarchy).

use std::path::Path;

use agent_launcher::CgroupProbe;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::MockControlPlane;

use crate::sandbox::{gone, outlives_its_turn_then_dies_on_delete, pid_in, wait_gone};
use crate::support::*;

/// Why no cgroup can bound a thread's processes here, if so.
pub(crate) fn no_pids_cgroup() -> Option<String> {
    let probe = agent_launcher::probe_host();
    let v2_pids = matches!(&probe.cgroup, CgroupProbe::Available { controllers, .. }
        if controllers.iter().any(|c| c == "pids"));
    match (&probe.pids_v1, v2_pids) {
        (Ok(_), _) | (_, true) => None,
        (Err(why), false) => Some(format!(
            "no pids cgroup for a thread: cgroup {}; cgroup v1 pids: {why}",
            probe.cgroup
        )),
    }
}

/// Why no cgroup can hold a thread's processes here, if so.
fn no_thread_cgroup() -> Option<String> {
    let probe = agent_launcher::probe_host();
    match (&probe.cgroup, &probe.pids_v1) {
        (CgroupProbe::Available { .. }, _) | (_, Ok(_)) => None,
        (CgroupProbe::Unavailable { reason }, Err(why)) => Some(format!(
            "no cgroup for a thread: v2 {reason}; v1 pids {why}"
        )),
    }
}

/// Spawns `sleep <marker>`s, each in a session of its own (the step's
/// group kill misses them), until a fork fails or 500 are running. Each
/// test gives its own marker, so tests running at once count only theirs.
fn bomb(marker: u32) -> String {
    format!(
        "run sh -c 'n=0; while [ $n -lt 500 ]; do setsid sleep {marker} </dev/null >/dev/null 2>&1 & n=$((n+1)); done; echo spawned=$n' 2>&1; echo bomb=$?"
    )
}

/// The pids of every `sleep <marker>` on the host.
fn bombs(marker: u32) -> Vec<i32> {
    let cmdline = format!("sleep\0{marker}\0");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == cmdline.as_bytes())
        })
        .filter(|pid| !gone(*pid))
        .collect()
}

fn interrupt(agent: &str, thread: &str) -> Request {
    Request::InterruptTurnRequest(InterruptTurnRequest {
        agent_id: agent.into(),
        thread_id: thread.into(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_stops_at_the_thread_pids_limit_while_others_are_served() {
    if let Some(why) = no_pids_cgroup() {
        test_kit::skip_this_test(&why);
        return;
    }
    let (cp, runner) = agent_with(|o| o.arg("--sandbox-pids-max").arg("48")).await;
    a_fork_bomb_is_held(&cp, runner, 3132).await;
}

/// On a runner with agent `a` and `--sandbox-pids-max 48`: a fork bomb in
/// one thread stops at the limit, another thread is served meanwhile, an
/// interrupt kills every bomb and the thread runs again.
pub(crate) async fn a_fork_bomb_is_held(cp: &MockControlPlane, runner: RunnerProc, marker: u32) {
    let thread = create_thread(cp, "a", "tb").await;
    start_turn(
        cp,
        "bomb",
        "a",
        &thread,
        &format!("{}\nsleep 60000", bomb(marker)),
    )
    .await;
    let done = cp
        .wait_for(
            |m| rid_is(m, "bomb") && !command_outputs(std::slice::from_ref(m)).is_empty(),
            WAIT,
        )
        .await
        .unwrap_or_else(|e| panic!("the bomb's step ends: {e:?}\n{}", runner.logs()));
    let out = command_outputs(std::slice::from_ref(&done)).join("");
    assert!(!out.contains("spawned=500"), "no limit stopped it: {out}");
    assert!(out.contains("bomb=2"), "{out}");
    let running = bombs(marker);
    assert!(
        !running.is_empty() && running.len() <= 48,
        "{} bombs: {out}",
        running.len()
    );

    // The runner and another thread go on while the bombs hold the limit.
    let other = create_thread(cp, "a", "to").await;
    send(
        cp,
        "other",
        user_message("a", &other, "run echo served", false),
    )
    .await;
    turn_completed(cp, "other").await;
    assert_eq!(command_outputs(&replies(cp, "other")), ["served\n"]);

    // An interrupt kills every one; the thread then runs again.
    send(cp, "i1", interrupt("a", &thread)).await;
    turn_completed(cp, "i1").await;
    // By their command line, not their pids: a pid freed by the kill may
    // be reused by another test's process (pid_max is 32,768 here).
    test_kit::wait::until(
        || bombs(marker).is_empty(),
        || {
            format!(
                "the interrupt left {} of {} bombs",
                bombs(marker).len(),
                running.len()
            )
        },
    )
    .await;
    send(
        cp,
        "again",
        user_message("a", &thread, "run echo again", false),
    )
    .await;
    turn_completed(cp, "again").await;
    assert_eq!(command_outputs(&replies(cp, "again")), ["again\n"]);
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_past_the_default_size_limit_fails_with_efbig() {
    let (cp, runner, thread) = thread_ready().await;
    // `truncate` first: a sparse file costs no disk even if the limit were
    // missing, and then the `fallocate` that would fill it does not run.
    let line = "run trap '' XFSZ; if truncate -s 40G sparse; then echo NO-LIMIT; else fallocate -l 40G full; echo fallocate=$?; fi 2>&1";
    send(&cp, "f", user_message("a", &thread, line, false)).await;
    turn_completed(&cp, "f").await;
    let out = command_outputs(&replies(&cp, "f")).join("");
    assert!(!out.contains("NO-LIMIT"), "{out}");
    assert!(
        out.contains("File too large") && out.contains("fallocate=1"),
        "{out}"
    );
    let full = runner.thread_workspace("a", &thread).join("full");
    assert_eq!(std::fs::metadata(&full).map_or(0, |m| m.len()), 0);
    runner.stop().await;
}

/// Leaves its session, clears its environment (so drops the thread's
/// tag), makes itself non-dumpable, writes its pid and sleeps; the step
/// waits for the pid.
const HIDE: &str = "run setsid env -i /usr/bin/python3 -c \"import ctypes,os,time; ctypes.CDLL(None).prctl(4,0,0,0,0); open('hidden.pid.new','w').write(str(os.getpid())); os.rename('hidden.pid.new','hidden.pid'); time.sleep(1000)\" </dev/null >/dev/null 2>&1 & i=0; while [ ! -s hidden.pid ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done";

/// `pid` carries no tag the runner could find it by.
fn untagged(pid: i32) -> bool {
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(env) => !env.windows(18).any(|w| w == b"AGENT_LAUNCHER_TAG"),
        // Not readable: non-dumpable, and this test not root.
        Err(_) => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_process_dies_on_interrupt_and_on_delete() {
    if let Some(why) = no_hiding_test() {
        test_kit::skip_this_test(&why);
        return;
    }
    let (cp, runner, thread) = thread_ready().await;
    a_hidden_process_dies(&cp, runner, &thread).await;
}

/// Whether this host lacks what the hidden-process test needs: a thread
/// cgroup and a python to make a non-dumpable process with.
pub(crate) fn no_hiding_test() -> Option<String> {
    if let Some(why) = no_thread_cgroup() {
        return Some(why);
    }
    (!Path::new("/usr/bin/python3").is_file())
        .then(|| "no /usr/bin/python3 to make a non-dumpable process with".to_owned())
}

/// On a runner with agent `a` and its `thread`: a process that hid from
/// the tag (`setsid env -i`, non-dumpable) dies on interrupt and, started
/// again by a turn that ends, on thread delete.
pub(crate) async fn a_hidden_process_dies(cp: &MockControlPlane, runner: RunnerProc, thread: &str) {
    let thread = thread.to_owned();
    let pid_file = runner.thread_workspace("a", &thread).join("hidden.pid");

    start_turn(cp, "m1", "a", &thread, &format!("{HIDE}\nsleep 60000")).await;
    let pid = pid_in(&pid_file).await;
    assert!(!gone(pid) && untagged(pid), "{}", runner.logs());
    send(cp, "i1", interrupt("a", &thread)).await;
    turn_completed(cp, "i1").await;
    wait_gone(pid, "interrupt").await;

    outlives_its_turn_then_dies_on_delete(cp, &thread, &pid_file, HIDE, "hidden").await;
    runner.stop().await;
}
