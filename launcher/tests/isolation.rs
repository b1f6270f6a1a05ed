//! Attacks of a prompt-injected agent against its sandbox, run as real
//! processes: each must fail under `enforce` and succeed under `off` (so
//! every test would fail without the feature it checks).

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(test)]
mod support;

use agent_launcher::{CapSets, Launcher, Mode, NetRules, Rlimits};
use support::{Tree, alive, is_root, landlock_abi, sh, sh_with};

fn require_landlock() -> bool {
    if landlock_abi().is_none() {
        test_kit::skip_this_test("Landlock unavailable on this kernel");
        return false;
    }
    true
}

#[tokio::test]
async fn writes_only_in_its_workspace_tmpdir_and_home() {
    if !require_landlock() {
        return;
    }
    let tree = Tree::new();
    let launcher = tree.launcher(Mode::Enforce);
    let a = launcher.thread(tree.spec("a")).unwrap();
    assert!(a.applied().landlocked(), "{}", a.applied());
    let own = sh(&a, "echo x > ws-file && echo y > \"$TMPDIR/t\" && echo z > \"$HOME/h\" && mkdir -p \"$HOME/.cache/x\" && rm ws-file").await;
    assert!(own.ok, "own dirs must be writable: {}", own.stderr);
    assert!(tree.path("threads/a/home/h").exists());

    for target in [
        tree.path("outside/f"),
        tree.path("threads/b/ws/f"),
        tree.path("state/f"),
        "/tmp/agent-launcher-escape".into(),
    ] {
        let out = sh(&a, &format!("echo pwned > '{}'", target.display())).await;
        assert!(!out.ok && !target.exists(), "wrote {}", target.display());
    }

    // The same write succeeds without the sandbox.
    let off = tree.launcher(Mode::Off);
    let a_off = off.thread(tree.spec("a")).unwrap();
    let target = tree.path("outside/f");
    assert!(
        sh(&a_off, &format!("echo pwned > '{}'", target.display()))
            .await
            .ok
    );
    assert!(target.exists());
}

#[tokio::test]
async fn cannot_read_another_thread_nor_the_state_dir() {
    if !require_landlock() {
        return;
    }
    let tree = Tree::new();
    let script = format!(
        "cat '{}' '{}'",
        tree.path("threads/b/ws/secret.txt").display(),
        tree.path("state/state.db").display()
    );
    let a = tree.launcher(Mode::Enforce).thread(tree.spec("a")).unwrap();
    let out = sh(&a, &script).await;
    assert!(!out.ok);
    assert!(!out.stdout.contains("secret of b") && !out.stdout.contains("runner state"));
    // Its own workspace and the system stay readable.
    let own = sh(&a, "cat secret.txt && ls /usr/bin >/dev/null").await;
    assert!(
        own.ok && own.stdout.contains("secret of a"),
        "{}",
        own.stderr
    );

    let a_off = tree.launcher(Mode::Off).thread(tree.spec("a")).unwrap();
    let out = sh(&a_off, &script).await;
    assert!(out.ok && out.stdout.contains("secret of b") && out.stdout.contains("runner state"));
}

#[tokio::test]
async fn cannot_read_the_environ_of_the_runner() {
    if !require_landlock() {
        return;
    }
    let tree = Tree::new();
    let script = format!("tr '\\0' '\\n' < /proc/{}/environ", std::process::id());
    let a = tree.launcher(Mode::Enforce).thread(tree.spec("a")).unwrap();
    let out = sh(&a, &script).await;
    assert!(
        !out.ok && out.stdout.is_empty(),
        "read runner environ: {}",
        out.stdout
    );

    let a_off = tree.launcher(Mode::Off).thread(tree.spec("a")).unwrap();
    let out = sh(&a_off, &script).await;
    assert!(out.ok && out.stdout.contains('='), "{}", out.stderr);
}

#[tokio::test]
async fn cannot_read_the_environ_of_another_threads_process() {
    if !require_landlock() {
        return;
    }
    for mode in [Mode::Enforce, Mode::Off] {
        let tree = Tree::new();
        let launcher = tree.launcher(mode);
        let a = launcher.thread(tree.spec("a")).unwrap();
        let b = launcher.thread(tree.spec("b")).unwrap();
        let mut victim = tokio::process::Command::new("/bin/sleep");
        victim
            .arg("30")
            .env("B_SECRET", "b-api-key")
            .kill_on_drop(true);
        let (mut victim, _) = b.spawn(&mut victim).unwrap();
        let pid = victim.id().unwrap();
        let out = sh(&a, &format!("tr '\\0' '\\n' < /proc/{pid}/environ")).await;
        match mode {
            Mode::Enforce => assert!(
                !out.ok && !out.stdout.contains("b-api-key"),
                "read thread b's environ: {}",
                out.stdout
            ),
            _ => assert!(out.stdout.contains("B_SECRET=b-api-key"), "{}", out.stderr),
        }
        victim.kill().await.unwrap();
        b.close();
    }
}

#[tokio::test]
async fn cannot_signal_processes_outside_its_sandbox() {
    if !require_landlock() {
        return;
    }
    if landlock_abi().unwrap_or(0) < 6 {
        test_kit::skip_this_test("Landlock ABI < 6 has no signal scoping");
        return;
    }
    let tree = Tree::new();
    for mode in [Mode::Enforce, Mode::Off] {
        let mut victim = tokio::process::Command::new("/bin/sleep")
            .arg("30")
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = victim.id().unwrap() as i32;
        let a = tree.launcher(mode).thread(tree.spec("a")).unwrap();
        let out = sh(&a, &format!("kill -KILL {pid}")).await;
        match mode {
            Mode::Enforce => {
                assert!(!out.ok, "signalled the runner's child");
                assert!(alive(pid));
                victim.kill().await.unwrap();
            }
            _ => {
                assert!(out.ok, "{}", out.stderr);
                victim.wait().await.unwrap();
            }
        }
    }
}

/// A kernel with Landlock but no signal scoping (ABI 5, as the launcher
/// is told to use on this newer kernel): `enforce` refuses it unless agents
/// run as another uid, naming why; `best-effort` says so, and its agents
/// can indeed signal the runner's processes (the refusal is not for show).
#[tokio::test]
async fn below_abi_6_enforce_wants_an_agent_uid_and_best_effort_says_signals_are_unscoped() {
    if !require_landlock() {
        return;
    }
    if landlock_abi().unwrap_or(0) < 5 {
        test_kit::skip_this_test("Landlock ABI < 5 here; this test lowers the ABI to 5");
        return;
    }
    let abi5 = || agent_launcher::HostProbe {
        landlock: Ok(5),
        ..agent_launcher::probe_host()
    };
    let tree = Tree::new();
    let err = Launcher::with_probe(tree.config(Mode::Enforce), abi5()).unwrap_err();
    let why = err.to_string();
    assert!(
        matches!(
            err,
            agent_launcher::LaunchError::Unavailable {
                what: "signal scoping",
                ..
            }
        ),
        "{why}"
    );
    assert!(
        why.contains("Landlock ABI 5 < 6") && why.contains("--agent-uid"),
        "{why}"
    );
    if is_root() {
        let mut config = tree.config(Mode::Enforce);
        config.agent_user = Some(agent_launcher::AgentUser {
            uid: 65534,
            gid: 65534,
        });
        let launcher = Launcher::with_probe(config, abi5()).unwrap();
        assert!(
            launcher
                .status()
                .missing
                .iter()
                .any(|m| m.starts_with("landlock scoping") && m.contains("uid 65534")),
            "{:?}",
            launcher.status()
        );
    }

    let launcher = Launcher::with_probe(tree.config(Mode::BestEffort), abi5()).unwrap();
    let status = launcher.status();
    assert!(
        status
            .missing
            .iter()
            .any(|m| m.contains("signals are not scoped")),
        "{status:?}"
    );
    let a = launcher.thread(tree.spec("a")).unwrap();
    assert_eq!(a.applied().landlock_abi, Some(5));
    assert!(!a.applied().scoped, "{}", a.applied());
    let mut victim = tokio::process::Command::new("/bin/sleep")
        .arg("30")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = victim.id().unwrap() as i32;
    let out = sh(&a, &format!("kill -KILL {pid}")).await;
    assert!(out.ok, "ABI 5 has no signal scoping: {}", out.stderr);
    victim.wait().await.unwrap();
}

#[tokio::test]
async fn root_agents_hold_no_capability() {
    if !require_landlock() || !is_root() {
        test_kit::skip_this_test("needs root");
        return;
    }
    let tree = Tree::new();
    let a = tree.launcher(Mode::Enforce).thread(tree.spec("a")).unwrap();
    let out = sh(&a, "cat /proc/self/status").await;
    assert!(out.ok && out.applied.capabilities_dropped);
    let caps = CapSets::parse(&out.stdout);
    assert!(caps.is_empty(), "{caps:?}");
    assert!(out.stdout.contains("NoNewPrivs:\t1"));

    let a_off = tree.launcher(Mode::Off).thread(tree.spec("a")).unwrap();
    let out = sh(&a_off, "cat /proc/self/status").await;
    assert!(!CapSets::parse(&out.stdout).is_empty());
}

#[tokio::test]
async fn runs_as_the_agent_uid() {
    if !require_landlock() || !is_root() {
        test_kit::skip_this_test("needs root");
        return;
    }
    let tree = Tree::new();
    let mut config = tree.config(Mode::Enforce);
    config.agent_user = Some("65534:65534".parse().unwrap());
    let launcher = Launcher::new(config).unwrap();
    let ws = tree.path("threads/a/ws");
    std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).unwrap();
    let a = launcher.thread(tree.spec("a")).unwrap();
    let out = sh(&a, "id -u; id -g; id -G; echo x > \"$HOME/h\" && echo y > \"$TMPDIR/t\" && echo z > ws-file && cat /proc/self/status").await;
    assert!(out.ok, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(&lines[..3], &["65534", "65534", "65534"]);
    assert!(CapSets::parse(&out.stdout).is_empty());
}

#[tokio::test]
async fn environment_holds_only_the_allowlist() {
    // Present in this test process (cargo sets it), absent from children.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let tree = Tree::new();
    for mode in [Mode::Enforce, Mode::BestEffort, Mode::Off] {
        if mode == Mode::Enforce && landlock_abi().is_none() {
            continue;
        }
        let a = tree.launcher(mode).thread(tree.spec("a")).unwrap();
        let mut cmd = tokio::process::Command::new("/usr/bin/env");
        cmd.env("SDK_VAR", "given");
        let out = support::run(&a, cmd).await;
        assert!(out.ok, "{}", out.stderr);
        let mut names: Vec<&str> = out
            .stdout
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        names.sort_unstable();
        let allowed = [
            "AGENT_LAUNCHER_TAG",
            "HOME",
            "LANG",
            "LANGUAGE",
            "LC_ALL",
            "LC_CTYPE",
            "PATH",
            "SDK_VAR",
            "TERM",
            "TMPDIR",
            "TZ",
        ];
        for n in &names {
            assert!(allowed.contains(n), "{mode}: unexpected variable {n}");
        }
        for must in ["AGENT_LAUNCHER_TAG", "HOME", "PATH", "SDK_VAR", "TMPDIR"] {
            assert!(names.contains(&must), "{mode}: missing {must}");
        }
        assert!(
            out.stdout
                .contains(&format!("HOME={}", tree.path("threads/a/home").display()))
        );
        let mut applied = out.applied.env.clone();
        applied.sort_unstable();
        assert_eq!(applied, names);
    }
}

fn limit(limits: &str, name: &str) -> String {
    limits
        .lines()
        .find(|l| l.starts_with(name))
        .map(|l| {
            l[name.len()..]
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn rlimits_are_in_effect() {
    let tree = Tree::new();
    let mut config = tree.config(Mode::BestEffort);
    config.rlimits = Rlimits {
        nofile: Some(123),
        fsize: Some(1 << 20),
        ..Rlimits::default()
    };
    let a = Launcher::new(config)
        .unwrap()
        .thread(tree.spec("a"))
        .unwrap();
    let out = sh(&a, "cat /proc/self/limits").await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(limit(&out.stdout, "Max open files"), "123 123");
    assert_eq!(limit(&out.stdout, "Max file size"), "1048576 1048576");
    assert_eq!(limit(&out.stdout, "Max core file size"), "0 0");
    // Writing past the file size limit fails.
    let big = sh(&a, "head -c 2000000 /dev/zero > \"$TMPDIR/big\"").await;
    assert!(!big.ok);
    let len = std::fs::metadata(tree.path("threads/a/tmp/big"))
        .unwrap()
        .len();
    assert!(len <= 1 << 20, "{len}");
}

#[tokio::test]
async fn tcp_connect_is_limited_to_configured_ports() {
    if landlock_abi().unwrap_or(0) < 4 || !std::path::Path::new("/usr/bin/bash").exists() {
        test_kit::skip_this_test("needs Landlock ABI >= 4 and bash");
        return;
    }
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let denied = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (pa, pd) = (
        allowed.local_addr().unwrap().port(),
        denied.local_addr().unwrap().port(),
    );
    let tree = Tree::new();
    let mut config = tree.config(Mode::Enforce);
    config.net = Some(NetRules {
        bind: vec![],
        connect: vec![pa],
    });
    let a = Launcher::new(config)
        .unwrap()
        .thread(tree.spec("a"))
        .unwrap();
    assert!(a.applied().net_restricted);
    let connect = |port: u16| {
        let mut cmd = tokio::process::Command::new("/usr/bin/bash");
        cmd.arg("-c")
            .arg(format!("exec 3<>/dev/tcp/127.0.0.1/{port}"));
        cmd
    };
    assert!(support::run(&a, connect(pa)).await.ok);
    assert!(!support::run(&a, connect(pd)).await.ok);
    // Without TCP rules the second port is reachable.
    let b = tree.launcher(Mode::Enforce).thread(tree.spec("b")).unwrap();
    assert!(support::run(&b, connect(pd)).await.ok);
}

#[tokio::test]
async fn spawn_site_variables_pass_but_home_is_forced() {
    let tree = Tree::new();
    let a = tree
        .launcher(Mode::BestEffort)
        .thread(tree.spec("a"))
        .unwrap();
    let out = sh_with(
        &a,
        "echo \"$GIT_X|$HOME\"",
        &[("GIT_X", "1"), ("HOME", "/root")],
    )
    .await;
    assert_eq!(
        out.stdout.trim(),
        format!("1|{}", tree.path("threads/a/home").display())
    );
}
