//! A thread's limits and its kill where the host's controllers are cgroup
//! v1 (its processes in a cgroup of the v1 `pids` hierarchy), run as real
//! processes: a bounded fork bomb stops at `pids.max` while another thread
//! runs; a non-dumpable process that cleared its environment and left its
//! session is still killed; a write past `RLIMIT_FSIZE` fails with EFBIG;
//! `enforce` refuses a host where no cgroup can hold a thread.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(test)]
mod support;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;

use agent_launcher::{
    CgroupLimits, CgroupProbe, Launch, LaunchError, Launcher, Mode, Rlimits, ThreadSandbox,
    probe_host, tagged_pids,
};
use support::{Tree, alive, eventually, landlock_abi, sh};

fn pids_limit(n: u64) -> CgroupLimits {
    CgroupLimits {
        pids_max: Some(n),
        ..CgroupLimits::default()
    }
}

/// Every process in the thread's cgroups.
fn members(sb: &ThreadSandbox) -> BTreeSet<i32> {
    sb.cgroup()
        .into_iter()
        .chain(sb.pids_cgroup())
        .flat_map(|cg| cg.pids().unwrap())
        .collect()
}

/// Spawns `sleep 3131`s in thread `sb` until a fork fails (at most 500);
/// the shell's output.
async fn fork_bomb(sb: &ThreadSandbox) -> String {
    let out = sh(
        sb,
        "sh -c 'n=0; while [ $n -lt 500 ]; do sleep 3131 </dev/null >/dev/null 2>&1 & n=$((n+1)); done; echo spawned=$n' 2>&1; echo bomb=$?",
    )
    .await;
    format!("{}{}", out.stdout, out.stderr)
}

#[tokio::test]
async fn a_fork_bomb_stops_at_the_pids_limit_while_another_thread_runs() {
    let tree = Tree::new();
    let Some((launcher, _cleanup)) = tree.pids_v1_launcher(pids_limit(32)) else {
        return;
    };
    let a = launcher.thread(tree.spec("a")).unwrap();
    let b = launcher.thread(tree.spec("b")).unwrap();
    assert_eq!(a.applied().cgroup_limits, vec!["pids.max=32"]);
    let cg = a.pids_cgroup().unwrap().clone();
    assert!(a.cgroup().is_none());

    let out = fork_bomb(&a).await;
    assert!(!out.contains("spawned=500"), "no limit stopped it: {out}");
    assert!(out.contains("bomb=2"), "{out}");
    let bombs = members(&a);
    assert!(
        (2..=32).contains(&bombs.len()),
        "{} processes: {out}",
        bombs.len()
    );
    let events = std::fs::read_to_string(cg.dir().join("pids.events")).unwrap();
    assert!(!events.contains("max 0"), "{events}");

    // The other thread, and the runner (this process), go on.
    let other = sh(&b, "echo ok; sleep 0 & wait").await;
    assert!(other.ok && other.stdout == "ok\n", "{}", other.stderr);

    let report = a.kill_all();
    assert_eq!(report.killed, bombs.len(), "{report:?}");
    assert!(report.survivors.is_empty(), "{report:?}");
    for pid in &bombs {
        assert!(eventually(|| !alive(*pid)).await, "{pid} survived");
    }
    // The thread is usable again: its processes are gone from the count.
    assert!(sh(&a, "echo again & wait").await.ok);
    a.close();
    b.close();
    assert!(!cg.dir().exists());
}

/// `setsid env -i` plus `PR_SET_DUMPABLE 0`: no session, no tag, an
/// environ only root may read. Writes `<pid> <dumpable>` to `p` in the
/// workspace and sleeps; the shell returns once the file is there.
const HIDE: &str = "setsid env -i /usr/bin/python3 -c \"import ctypes,os,time; c=ctypes.CDLL(None); c.prctl(4,0,0,0,0); open('p.new','w').write('%d %d' % (os.getpid(), c.prctl(3,0,0,0,0))); os.rename('p.new','p'); time.sleep(1000)\" </dev/null >/dev/null 2>&1 & i=0; while [ ! -s p ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; cat p";

/// Starts [`HIDE`] in `sb`; the hidden process's pid.
async fn hide(sb: &ThreadSandbox) -> i32 {
    let _ = std::fs::remove_file(sb.spec().workspace.join("p"));
    let out = sh(sb, HIDE).await;
    let (pid, dumpable) = out.stdout.trim().split_once(' ').expect(&out.stderr);
    assert_eq!(dumpable, "0", "{}", out.stdout);
    let pid: i32 = pid.parse().unwrap();
    assert!(alive(pid));
    // The environment tag cannot find it.
    assert!(!tagged_pids(sb.tag()).contains(&pid));
    pid
}

#[tokio::test]
async fn a_non_dumpable_process_without_tag_or_session_is_killed() {
    if !Path::new("/usr/bin/python3").is_file() {
        test_kit::skip_this_test("no /usr/bin/python3 to make a non-dumpable process with");
        return;
    }
    let tree = Tree::new();
    let Some((launcher, _cleanup)) = tree.pids_v1_launcher(pids_limit(64)) else {
        return;
    };
    let a = launcher.thread(tree.spec("a")).unwrap();
    let cg = a.pids_cgroup().unwrap().clone();

    let pid = hide(&a).await;
    assert!(cg.pids().unwrap().contains(&pid));
    let report = a.kill_all();
    assert!(eventually(|| !alive(pid)).await, "interrupt left {pid}");
    assert!(
        report.killed >= 1 && report.survivors.is_empty(),
        "{report:?}"
    );

    // Nor can a process leave: cgroupfs is read-only inside the sandbox.
    if landlock_abi().is_some() {
        let own = cg.dir().parent().and_then(Path::parent).unwrap();
        let out = sh(
            &a,
            &format!("echo $$ > {}/cgroup.procs && echo LEFT", own.display()),
        )
        .await;
        assert!(!out.stdout.contains("LEFT"), "{}", out.stdout);
    }

    let pid = hide(&a).await;
    let report = a.close();
    assert!(eventually(|| !alive(pid)).await, "close left {pid}");
    assert!(report.killed >= 1, "{report:?}");
    assert!(!cg.dir().exists());
}

/// `launch` creates its child in the v2 cgroup only; it joins the v1
/// `pids` one before exec. A process in both counts once in the kill.
#[tokio::test]
async fn a_launched_process_joins_every_cgroup_of_its_thread() {
    let tree = Tree::new();
    let Some((launcher, _cleanup)) = tree.any_cgroup_launcher(pids_limit(16)) else {
        return;
    };
    let a = launcher.thread(tree.spec("a")).unwrap();
    if a.applied().cgroup_limits != vec!["pids.max=16"] {
        test_kit::skip_this_test(&format!("no pids controller here: {}", a.applied()));
        return;
    }
    let (mut child, _) = a.launch(Launch::new("sleep").arg("30")).unwrap();
    let pid = child.id() as i32;
    for cg in a.cgroup().into_iter().chain(a.pids_cgroup()) {
        assert!(cg.pids().unwrap().contains(&pid), "{}", cg.dir().display());
    }
    let report = a.close();
    assert_eq!(report.killed, 1, "{report:?}");
    assert_eq!(child.wait().await.unwrap().signal(), Some(libc::SIGKILL));
}

#[tokio::test]
async fn writes_past_the_file_size_limit_fail_with_efbig() {
    let tree = Tree::new();
    let mut config = tree.config(Mode::BestEffort);
    config.rlimits = Rlimits {
        fsize: Some(1 << 20),
        ..Rlimits::default()
    };
    let a = Launcher::new(config)
        .unwrap()
        .thread(tree.spec("a"))
        .unwrap();
    assert!(a.applied().rlimits.contains(&("fsize", 1 << 20)));
    // Ignoring SIGXFSZ, the write gets the error instead of the signal.
    let out = sh(&a, "trap '' XFSZ; head -c 2097152 /dev/zero > big").await;
    assert!(
        !out.ok && out.stderr.contains("File too large"),
        "{}",
        out.stderr
    );
    let size = std::fs::metadata(tree.path("threads/a/ws/big"))
        .unwrap()
        .len();
    assert_eq!(size, 1 << 20);

    // The default stops a 40 GiB file. `truncate` first: a sparse file
    // costs no disk even where the limit were missing, and then the
    // `fallocate` that would fill the disk does not run.
    let a = tree
        .launcher(Mode::BestEffort)
        .thread(tree.spec("a"))
        .unwrap();
    assert!(
        a.applied()
            .rlimits
            .contains(&("fsize", agent_launcher::DEFAULT_FSIZE))
    );
    let out = sh(
        &a,
        "trap '' XFSZ; if truncate -s 40G sparse; then echo NO-LIMIT; else fallocate -l 40G full; fi",
    )
    .await;
    assert!(!out.stdout.contains("NO-LIMIT"), "{}", out.stdout);
    assert!(!out.ok, "{}", out.stdout);
    assert!(out.stderr.contains("File too large"), "{}", out.stderr);
    let full = std::fs::metadata(tree.path("threads/a/ws/full")).map_or(0, |m| m.len());
    assert_eq!(full, 0);
}

#[tokio::test]
async fn enforce_refuses_a_host_where_no_cgroup_can_hold_a_thread() {
    if landlock_abi().is_none() {
        test_kit::skip_this_test("Landlock unavailable (enforce fails on it first)");
        return;
    }
    let tree = Tree::new();
    let probe = || {
        let mut p = probe_host();
        p.cgroup = CgroupProbe::Unavailable {
            reason: "no cgroup2 file system mounted".to_string(),
        };
        p.pids_v1 = Err("no cgroup v1 pids hierarchy mounted".to_string());
        p
    };
    let mut config = tree.config(Mode::Enforce);
    config.cgroups = true;
    let err = Launcher::with_probe(config.clone(), probe()).unwrap_err();
    assert!(
        matches!(
            err,
            LaunchError::Unavailable {
                what: "cgroup process tracking",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("clears its environment"), "{err}");

    config.mode = Mode::BestEffort;
    let launcher = Launcher::with_probe(config, probe()).unwrap();
    let status = launcher.status();
    assert!(
        status
            .missing
            .iter()
            .any(|m| m.starts_with("cgroup: ") && m.contains("environment tag only")),
        "{status:?}"
    );
    let a = launcher.thread(tree.spec("a")).unwrap();
    assert!(a.cgroup().is_none() && a.pids_cgroup().is_none());
    assert!(sh(&a, "true").await.ok);
}
