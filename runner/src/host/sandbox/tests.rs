//! The sandboxes' tests: the sweep before any sandbox, shutdown's close,
//! mode `enforce` without Landlock, thread directories, the scope.

use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::host::workspace::Workspaces;

/// The start-up sweep runs on its own thread; a thread's sandbox is
/// handed out only once it is over (the sweep kills by scope).
#[test]
fn no_sandbox_before_the_sweep_is_over() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspaces::new(dir.path().join("ws")).unwrap();
    ws.create_thread("a", "t").unwrap();
    let mut config = LauncherConfig::new(Mode::Off, "runner-test-sweep");
    config.cgroups = false;
    let mut sandboxes = AgentSandboxes::with_probe(config, agent_launcher::probe_host()).unwrap();
    let over = Arc::new(AtomicBool::new(false));
    let flag = over.clone();
    *sandboxes.sweep.get_mut().unwrap() = Some(std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        flag.store(true, Ordering::SeqCst);
    }));
    let sandbox = sandboxes.thread(&ws, "a", "t");
    assert!(over.load(Ordering::SeqCst), "handed out during the sweep");
    sandbox.get().unwrap();
}

/// Shutdown closes every sandbox; one asked for after that (the SDK
/// probe or a turn still starting) is refused, not made and left.
#[test]
fn no_sandbox_is_made_after_close_everything() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspaces::new(dir.path().join("ws")).unwrap();
    ws.create_thread("a", "t").unwrap();
    ws.create_thread("a", "u").unwrap();
    let mut config = LauncherConfig::new(Mode::Off, "runner-test-closed");
    config.cgroups = false;
    let sandboxes = AgentSandboxes::with_probe(config, agent_launcher::probe_host()).unwrap();
    sandboxes.thread(&ws, "a", "t").get().unwrap();
    sandboxes.close_everything();
    assert!(
        sandboxes.thread_tag("t").is_none(),
        "closed sandboxes are forgotten"
    );
    for late in [sandboxes.thread(&ws, "a", "u"), sandboxes.probe(&ws)] {
        let err = late.get().unwrap_err().to_string();
        assert!(err.contains("shutting down"), "{err}");
    }
    assert!(sandboxes.thread_tag("u").is_none());
}

/// The second signal's close exits the process when it returns: it
/// must not return while the shutdown's close is still killing and
/// removing cgroups.
#[test]
fn a_second_close_waits_for_the_first() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut config = LauncherConfig::new(Mode::Off, "runner-test-twice");
    config.cgroups = false;
    let sandboxes =
        Arc::new(AgentSandboxes::with_probe(config, agent_launcher::probe_host()).unwrap());
    // The first close, still at work.
    let first = sandboxes.closing.lock().unwrap();
    let returned = Arc::new(AtomicBool::new(false));
    let second = std::thread::spawn({
        let (sandboxes, returned) = (sandboxes.clone(), returned.clone());
        move || {
            sandboxes.close_everything();
            returned.store(true, Ordering::SeqCst);
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        !returned.load(Ordering::SeqCst),
        "returned during the first close"
    );
    drop(first);
    second.join().unwrap();
    assert!(returned.load(Ordering::SeqCst));
}

fn probe_without_landlock() -> HostProbe {
    let mut probe = agent_launcher::probe_host();
    probe.landlock = Err("kernel built without Landlock (ENOSYS)".into());
    probe
}

#[test]
fn enforce_without_landlock_refuses_every_thread_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspaces::new(dir.path().join("ws")).unwrap();
    ws.create_thread("a", "t").unwrap();
    let mut config = LauncherConfig::new(Mode::Enforce, "runner-test");
    config.cgroups = false;
    let sandboxes = AgentSandboxes::with_probe(config, probe_without_landlock()).unwrap();
    let refused = sandboxes.status().refused.clone().unwrap();
    assert!(refused.contains("Landlock"), "{refused}");
    let sandbox = sandboxes.thread(&ws, "a", "t");
    let err = sandbox.get().unwrap_err().to_string();
    assert!(err.contains("enforce") && err.contains("Landlock"), "{err}");
}

/// Through the thread task: a turn on a thread whose sandbox is refused
/// gets a RequestError with the reason, and nothing runs.
#[tokio::test]
async fn enforce_without_landlock_refuses_turns_with_a_request_error() {
    use agent_runner_proto::runner::client_message::Payload;

    use crate::tasks::context::{Runtime, RuntimeParts};
    use crate::tasks::mail::{ThreadCmd, UserMessage};

    let dir = tempfile::tempdir().unwrap();
    let sdks = crate::tasks::sdks::Sdks::new(&["scripted".to_owned()]).unwrap();
    sdks.describe_all().await;
    let mut config = LauncherConfig::new(Mode::Enforce, "runner-test");
    config.cgroups = false;
    let sandboxes = Arc::new(AgentSandboxes::with_probe(config, probe_without_landlock()).unwrap());
    let rt = Runtime::new(RuntimeParts {
        sdks,
        store: crate::host::store::Store::open(&dir.path().join("state")).unwrap(),
        workspaces: Workspaces::new(dir.path().join("ws")).unwrap(),
        outbox: Arc::new(crate::delivery::outbox::Outbox::new(
            64,
            crate::util::redact::Redactor::new(),
        )),
        mailboxes: Arc::new(crate::tasks::mailboxes::Mailboxes::new(64)),
        max_turns: 4,
        skills: crate::host::skills::SkillSettings::with_max_bytes(1024),
        git_env: None,
        github: None,
        sandboxes,
    });
    let workspace = rt.workspaces.create_thread("a", "t").unwrap();
    let spec = sdk_adapter::ThreadSpec {
        agent_id: "a".into(),
        thread_id: "t".into(),
        workspace: workspace.clone(),
        model: "scripted-fast".into(),
        reasoning_level: None,
        sdk_thread_id: Some("s".into()),
        env: Vec::new(),
        sandbox: rt.thread_sandbox("a", "t"),
        instructions: None,
        mcp_servers: Default::default(),
    };
    crate::tasks::thread::start(&rt, "scripted".into(), spec, None);
    let _ = rt.mailboxes.send_thread(
        "a",
        "t",
        ThreadCmd::UserMessage(Box::new(UserMessage {
            text: "run touch ran".into(),
            allow_steer: false,
            model: None,
            reasoning_level: None,
            rid: Some("m1".into()),
        })),
    );
    let msg = tokio::time::timeout(std::time::Duration::from_secs(30), rt.outbox.pop())
        .await
        .unwrap();
    assert_eq!(msg.request_id.as_deref(), Some("m1"));
    let Some(Payload::RequestError(e)) = msg.payload else {
        panic!("expected a RequestError, got {msg:?}");
    };
    assert!(
        e.error_message
            .starts_with("agent sandbox: sandbox mode enforce: Landlock is unavailable"),
        "{}",
        e.error_message
    );
    assert!(!workspace.join("ran").exists());
    assert_eq!(rt.running_turns(), 0);
}

#[test]
fn best_effort_without_landlock_says_what_is_missing() {
    let mut config = LauncherConfig::new(Mode::BestEffort, "runner-test");
    config.cgroups = false;
    let sandboxes = AgentSandboxes::with_probe(config, probe_without_landlock()).unwrap();
    let status = sandboxes.status();
    assert_eq!(status.refused, None);
    assert!(
        status.missing.iter().any(|m| m.starts_with("Landlock:")),
        "{status:?}"
    );
    assert_eq!(feature_of(&status.missing[0]), "landlock");
    assert_eq!(
        feature_of("cgroup controller pids not offered by /sys/fs/cgroup/x (cgroup.controllers)"),
        "cgroup_pids"
    );
    assert_eq!(
        feature_of("capability bounding set drop: the runner lacks CAP_SETPCAP"),
        "capabilities"
    );
    let metrics = crate::observe::metrics::render(crate::observe::metrics::Scraped {
        outbox_depth: 0,
        delivery_unsettled: 0,
        child_processes: None,
    });
    assert!(
        metrics.contains("agent_runner_sandbox_missing{feature=\"landlock\"} 1"),
        "{metrics}"
    );
}

#[test]
fn thread_dirs_are_private_and_the_sandbox_is_reused() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspaces::new(dir.path().join("ws")).unwrap();
    ws.create_thread("a", "t").unwrap();
    let sandboxes = AgentSandboxes::unconfined("runner-test");
    let first = sandboxes.thread(&ws, "a", "t");
    let first = first.get().unwrap();
    let again = sandboxes.thread(&ws, "a", "t");
    assert_eq!(first.tag(), again.get().unwrap().tag());
    for d in [
        ws.thread_private("a", "t"),
        ws.thread_home("a", "t"),
        ws.thread_tmp("a", "t"),
    ] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    assert_eq!(first.spec().home_dir, ws.thread_home("a", "t"));
}

#[test]
fn scope_is_stable_per_state_dir() {
    let a = scope_for(Path::new("/var/lib/agent-runner/a"));
    assert_eq!(a, scope_for(Path::new("/var/lib/agent-runner/a")));
    assert_ne!(a, scope_for(Path::new("/var/lib/agent-runner/b")));
    assert_eq!(a.len(), "agent-runner-".len() + 12, "{a}");
}

/// Landlock without signal scoping (ABI 5): `enforce` refuses every thread
/// unless agents run as another uid, `best-effort` reports the gap with
/// its metric label; ABI 6 and later are silent about it.
#[test]
fn below_abi_6_enforce_refuses_and_best_effort_reports() {
    let abi = |n| HostProbe {
        landlock: Ok(n),
        ..agent_launcher::probe_host()
    };
    let config = |mode| LauncherConfig {
        cgroups: false,
        ..LauncherConfig::new(mode, "runner-test")
    };
    let enforce = AgentSandboxes::with_probe(config(Mode::Enforce), abi(5)).unwrap();
    let refused = enforce.status().refused.clone().unwrap();
    assert!(
        refused.contains("Landlock ABI 5 < 6") && refused.contains("--agent-uid"),
        "{refused}"
    );
    let best = AgentSandboxes::with_probe(config(Mode::BestEffort), abi(5)).unwrap();
    let line = best
        .status()
        .missing
        .iter()
        .find(|m| m.contains("signals are not scoped"))
        .cloned()
        .unwrap_or_else(|| panic!("{:?}", best.status()));
    assert_eq!(feature_of(&line), "landlock_scope");
    for n in [6, 7] {
        let s = AgentSandboxes::with_probe(config(Mode::Enforce), abi(n)).unwrap();
        assert!(s.status().refused.is_none(), "ABI {n}: {:?}", s.status());
        assert!(
            !s.status().missing.iter().any(|m| m.contains("scoping")),
            "ABI {n}: {:?}",
            s.status()
        );
    }
}
