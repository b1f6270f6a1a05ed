//! `ThreadSandbox::launch`: a process created inside its thread's cgroup
//! (`clone3(CLONE_INTO_CGROUP)`) gets everything `spawn` gives it — the
//! sandbox's environment, confinement, its own session — and is waited
//! for, killed and reaped through its pidfd.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(test)]
mod support;

use std::io::Read as _;
use std::os::unix::process::ExitStatusExt as _;

use agent_launcher::{Launch, LaunchError, Mode, SandboxChild, TAG_VAR, ThreadSandbox};
use support::{Tree, alive, eventually, landlock_abi, session_of};

/// Runs `sh -c script` through `launch`; (stdout + stderr, exit status).
async fn launch_sh(sb: &ThreadSandbox, script: &str) -> (String, std::process::ExitStatus) {
    let (mut reader, writer) = std::io::pipe().unwrap();
    let launch = Launch::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .envs([("FROM_SITE", "site")])
        .stderr(writer.try_clone().unwrap())
        .stdout(writer);
    let (mut child, _) = sb.launch(launch).unwrap();
    let status = child.wait().await.unwrap();
    let mut out = String::new();
    reader.read_to_string(&mut out).unwrap();
    (out, status)
}

#[tokio::test]
async fn a_launch_runs_with_the_sandbox_environment_streams_and_status() {
    let tree = Tree::new();
    let launcher = tree.launcher(Mode::BestEffort);
    let a = launcher.thread(tree.spec("a")).unwrap();
    let (out, status) = launch_sh(
        &a,
        &format!(
            "echo out; echo err >&2; echo \"tag=${TAG_VAR} site=$FROM_SITE home=$HOME\"; \
             pwd; grep SigIgn /proc/self/status; exit 3"
        ),
    )
    .await;
    assert_eq!(status.code(), Some(3), "{out}");
    assert!(out.contains("out\n") && out.contains("err\n"), "{out}");
    assert!(out.contains(&format!("tag={} ", a.tag())), "{out}");
    assert!(out.contains("site=site "), "{out}");
    assert!(
        out.contains(&format!("home={}", a.spec().home_dir.display())),
        "{out}"
    );
    // The working directory defaults to the workspace.
    assert!(
        out.contains(&format!("{}\n", a.spec().workspace.display())),
        "{out}"
    );
    // The runner's ignored SIGPIPE is not inherited.
    let ignored = out
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:\t"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap();
    assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
}

#[tokio::test]
async fn a_launched_process_leads_its_own_session_and_can_be_killed() {
    let tree = Tree::new();
    let launcher = tree.launcher(Mode::BestEffort);
    let a = launcher.thread(tree.spec("a")).unwrap();
    let (mut child, _) = a.launch(Launch::new("sleep").arg("30")).unwrap();
    let pid = child.id() as i32;
    assert!(eventually(|| session_of(pid) == Some(pid)).await);
    child.start_kill().unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // Waited for: reaped, gone from /proc.
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    // A second wait answers the same.
    assert_eq!(child.wait().await.unwrap().signal(), Some(libc::SIGKILL));
}

#[tokio::test]
async fn dropping_a_running_child_kills_and_reaps_it() {
    let tree = Tree::new();
    let launcher = tree.launcher(Mode::BestEffort);
    let a = launcher.thread(tree.spec("a")).unwrap();
    let (child, _): (SandboxChild, _) = a.launch(Launch::new("sleep").arg("30")).unwrap();
    let pid = child.id() as i32;
    assert!(alive(pid));
    drop(child);
    let proc_dir = format!("/proc/{pid}");
    assert!(
        eventually(|| !std::path::Path::new(&proc_dir).exists()).await,
        "pid {pid} was not killed and reaped"
    );
}

#[tokio::test]
async fn a_launch_that_cannot_start_says_which_step_failed() {
    let tree = Tree::new();
    let launcher = tree.launcher(Mode::BestEffort);
    let a = launcher.thread(tree.spec("a")).unwrap();
    let err = a
        .launch(Launch::new("/nonexistent/agent-tool"))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("/nonexistent/agent-tool") && text.contains("exec"),
        "{text}"
    );
    let err = a
        .launch(Launch::new("/bin/true").current_dir(tree.path("missing-dir")))
        .unwrap_err();
    assert!(err.to_string().contains("working directory"), "{err}");
    let err = a
        .launch(Launch::new("no-such-program-on-path"))
        .unwrap_err();
    assert!(matches!(err, LaunchError::Io { .. }), "{err}");
    assert!(err.to_string().contains("not found on PATH"), "{err}");
}

#[tokio::test]
async fn a_launch_is_confined_like_a_spawn() {
    if landlock_abi().is_none() {
        test_kit::skip_this_test("no Landlock on this host");
        return;
    }
    let tree = Tree::new();
    let launcher = tree.launcher(Mode::BestEffort);
    let a = launcher.thread(tree.spec("a")).unwrap();
    let other = tree.path("threads/b/ws/secret.txt");
    let (out, status) = launch_sh(&a, &format!("cat secret.txt && cat {}", other.display())).await;
    assert!(out.contains("secret of a"), "{out}");
    assert!(!out.contains("secret of b"), "{out}");
    assert!(!status.success(), "{out}");
}

#[tokio::test]
async fn a_launched_process_is_born_in_the_thread_cgroup() {
    let tree = Tree::new();
    let Some((launcher, _cleanup)) = tree.cgroup_launcher(Default::default()) else {
        return;
    };
    let a = launcher.thread(tree.spec("a")).unwrap();
    let cg = a.cgroup().unwrap().clone();
    let (out, status) = launch_sh(&a, "cat /proc/self/cgroup").await;
    assert!(status.success(), "{out}");
    let name = cg.dir().file_name().unwrap().to_string_lossy().into_owned();
    let v2 = out
        .lines()
        .find(|l| l.starts_with("0::"))
        .unwrap_or_default();
    assert!(v2.ends_with(&format!("/{name}")), "{out}");
    // And the cgroup kills it like any other process of the thread.
    let (mut child, _) = a.launch(Launch::new("sleep").arg("30")).unwrap();
    let pid = child.id() as i32;
    assert!(cg.pids().unwrap().contains(&pid));
    let report = a.close();
    assert!(report.cgroups.contains(&cg.dir().to_path_buf()));
    assert_eq!(child.wait().await.unwrap().signal(), Some(libc::SIGKILL));
}

/// The launch blocks every signal on the calling thread while the child
/// borrows the runner's memory: the child starts with none blocked, and the
/// caller's own mask is exactly as it was afterwards.
#[tokio::test]
async fn a_launch_leaves_the_signal_masks_as_they_were() {
    let tree = Tree::new();
    let launcher = tree.launcher(Mode::BestEffort);
    let a = launcher.thread(tree.spec("a")).unwrap();
    // SAFETY: plain sigset manipulation on this (the test's) thread.
    let mask = || unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut set);
        set
    };
    let mut before = mask();
    // SAFETY: as above.
    unsafe {
        libc::sigaddset(&mut before, libc::SIGUSR2);
        libc::sigdelset(&mut before, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
    }
    let (out, status) = launch_sh(&a, "grep SigBlk /proc/self/status").await;
    assert!(status.success(), "{out}");
    let blocked = out
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:\t"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap();
    assert_eq!(blocked, 0, "{out}");
    let after = mask();
    // SAFETY: reading the sets made above.
    unsafe {
        assert_eq!(libc::sigismember(&after, libc::SIGUSR2), 1);
        assert_eq!(libc::sigismember(&after, libc::SIGUSR1), 0);
        libc::sigdelset(&mut before, libc::SIGUSR2);
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
    }
}
