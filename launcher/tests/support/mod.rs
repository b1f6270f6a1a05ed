//! Shared fixtures of the launcher's process tests: a temp tree with two
//! threads, a state dir and an outside dir; helpers to run sandboxed `sh`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_launcher::{Applied, Launcher, LauncherConfig, Mode, ThreadSandbox, ThreadSpec};

/// A unique scope per launcher, so parallel tests never see each other's
/// processes.
pub fn unique_scope() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "test{}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// root/{threads/a,threads/b}/{ws,tmp,home}, root/state/state.db, root/outside.
pub struct Tree {
    pub root: tempfile::TempDir,
}

impl Tree {
    /// A launcher with per-thread cgroups (and `limits`) and the guard that
    /// removes its subtree; `None`, said on stderr, where the host
    /// delegates no cgroup v2 subtree.
    pub fn cgroup_launcher(
        &self,
        limits: agent_launcher::CgroupLimits,
    ) -> Option<(Launcher, CgroupCleanup)> {
        let probe = agent_launcher::probe_host();
        if let agent_launcher::CgroupProbe::Unavailable { reason } = &probe.cgroup {
            test_kit::skip_this_test(&format!("no delegated cgroup v2 subtree here: {reason}"));
            return None;
        }
        let mut config = self.config(Mode::BestEffort);
        config.cgroups = true;
        config.cgroup_limits = limits;
        let launcher = Launcher::with_probe(config, probe).unwrap();
        let cleanup = CgroupCleanup::of(&launcher);
        Some((launcher, cleanup))
    }

    /// A launcher with per-thread cgroups: v2 where the host delegates a
    /// subtree ([`Self::cgroup_launcher`]), else the v1 `pids` hierarchy
    /// ([`Self::pids_v1_launcher`]); `None`, said as a skip, where neither.
    pub fn any_cgroup_launcher(
        &self,
        limits: agent_launcher::CgroupLimits,
    ) -> Option<(Launcher, CgroupCleanup)> {
        let probe = agent_launcher::probe_host();
        if matches!(probe.cgroup, agent_launcher::CgroupProbe::Available { .. }) {
            self.cgroup_launcher(limits)
        } else {
            self.pids_v1_launcher(limits)
        }
    }

    /// A launcher whose threads' processes live in the cgroup v1 `pids`
    /// hierarchy only (v2 left out, as on a host with the legacy layout),
    /// with `limits`; `None`, said on stderr, where the runner may not
    /// create cgroups there.
    pub fn pids_v1_launcher(
        &self,
        limits: agent_launcher::CgroupLimits,
    ) -> Option<(Launcher, CgroupCleanup)> {
        let mut probe = agent_launcher::probe_host();
        if let Err(why) = &probe.pids_v1 {
            test_kit::skip_this_test(&format!("no usable cgroup v1 pids hierarchy here: {why}"));
            return None;
        }
        probe.cgroup = agent_launcher::CgroupProbe::Unavailable {
            reason: "left out by the test (a v1-only host)".to_string(),
        };
        let mut config = self.config(Mode::BestEffort);
        config.cgroups = true;
        config.cgroup_limits = limits;
        let launcher = Launcher::with_probe(config, probe).unwrap();
        assert!(launcher.cgroup_root().is_none());
        assert!(launcher.pids_root().is_some(), "{:?}", launcher.status());
        let cleanup = CgroupCleanup::of(&launcher);
        Some((launcher, cleanup))
    }

    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        for t in ["a", "b"] {
            std::fs::create_dir_all(root.path().join("threads").join(t).join("ws")).unwrap();
            std::fs::write(
                root.path().join("threads").join(t).join("ws/secret.txt"),
                format!("secret of {t}"),
            )
            .unwrap();
        }
        std::fs::create_dir_all(root.path().join("state")).unwrap();
        std::fs::write(root.path().join("state/state.db"), "runner state").unwrap();
        std::fs::create_dir_all(root.path().join("outside")).unwrap();
        Tree { root }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    pub fn spec(&self, thread: &str) -> ThreadSpec {
        let base = self.root.path().join("threads").join(thread);
        ThreadSpec {
            workspace: base.join("ws"),
            tmp_dir: base.join("tmp"),
            home_dir: base.join("home"),
            ..ThreadSpec::default()
        }
    }

    pub fn config(&self, mode: Mode) -> LauncherConfig {
        let mut c = LauncherConfig::new(mode, unique_scope());
        c.cgroups = false;
        c.protected = vec![self.path("state")];
        c
    }

    pub fn launcher(&self, mode: Mode) -> Launcher {
        Launcher::new(self.config(mode)).unwrap()
    }
}

pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
    pub applied: Applied,
}

/// Runs `sh -c script` in the thread's sandbox and waits for it.
pub async fn sh(sb: &ThreadSandbox, script: &str) -> Output {
    sh_with(sb, script, &[]).await
}

/// As [`sh`] with extra variables set by the "spawn site".
pub async fn sh_with(sb: &ThreadSandbox, script: &str, vars: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(script);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    run(sb, cmd).await
}

pub async fn run(sb: &ThreadSandbox, mut cmd: tokio::process::Command) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let (child, applied) = sb.spawn(&mut cmd).unwrap();
    let out = child.wait_with_output().await.unwrap();
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        applied,
    }
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next());
            !matches!(state, Some(Some('Z')) | Some(Some('X')))
        }
        Err(_) => false,
    }
}

/// Session id of `pid` from /proc/<pid>/stat.
pub fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(3)?.parse().ok()
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn landlock_abi() -> Option<i32> {
    agent_launcher::probe_host().landlock.ok()
}

/// Waits up to 5 s for `f` to hold.
pub async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..500 {
        if f() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    f()
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// Starts `setsid sleep 1000` in the background of a sandboxed sh that
/// exits at once; returns the sleep's pid.
pub async fn escape(sb: &ThreadSandbox, prefix: &str) -> i32 {
    let out = sh(
        sb,
        &format!("{prefix} setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!"),
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    let pid: i32 = out.stdout.trim().parse().unwrap();
    // It outlived its shell and left its session and process group.
    assert!(
        eventually(|| session_of(pid) == Some(pid)).await,
        "setsid did not run"
    );
    assert!(alive(pid));
    pid
}

/// Removes a test's cgroup subtrees (v2 root first, then the v1 `pids`
/// one) even when the test fails midway.
pub struct CgroupCleanup(pub Vec<PathBuf>);

impl CgroupCleanup {
    /// The roots `launcher` made.
    pub fn of(launcher: &Launcher) -> Self {
        CgroupCleanup(
            launcher
                .cgroup_root()
                .into_iter()
                .chain(launcher.pids_root())
                .map(|r| r.dir().to_path_buf())
                .collect(),
        )
    }
}

impl Drop for CgroupCleanup {
    fn drop(&mut self) {
        for root in &self.0 {
            if let Ok(entries) = std::fs::read_dir(root) {
                for e in entries.flatten().filter(|e| e.path().is_dir()) {
                    if let Ok(cg) = agent_launcher::ThreadCgroup::at(&e.path()) {
                        let _ = cg.kill(std::time::Duration::from_secs(2));
                        let _ = cg.remove();
                    }
                }
            }
            let _ = std::fs::remove_dir(root);
        }
    }
}
