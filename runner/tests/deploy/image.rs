//! The real image: `deploy/Dockerfile`, unmodified, built with
//! podman and run the way `deploy/README.md` tells operators to run it, next
//! to the mock control plane's image on loopback.
//!
//! The other deploy checks read the Dockerfile and imitate the container;
//! this one builds and runs it, so a broken package list, a missing file in
//! the image, a HEALTHCHECK that cannot run or a runner that cannot start
//! read-only as uid 10001 fails here. What it needs and where it comes from
//! (the recipe in `deploy/README.md`, "The image in CI"):
//!
//! - podman, runc and mmdebstrap: Debian packages, installed with apt when
//!   the test runs as root and they are missing. Without root and without
//!   podman it cannot run at all and says so (SKIPPED).
//! - the binaries this test build already made, not a second (release)
//!   build of the whole tree: this target's own `agent-runner` (debug
//!   profile, `CARGO_BIN_EXE_agent-runner`) and `mock-control-plane` linked
//!   beside it from the library the tests built (`cargo build -p
//!   mock-control-plane`, same profile), handed to the Dockerfile as its
//!   `build` stage with `--build-context build=DIR`, so nothing compiles
//!   inside the image build and no Rust image is pulled. (Without
//!   `--build-context` the Dockerfile still compiles them from source.)
//! - the `debian:bookworm-slim` base: bootstrapped with mmdebstrap from the
//!   mirror this machine's apt uses (read from its sources), cached as a tar
//!   under `target/image-test/`, and `podman import`ed.
//! - podman's settings: `containers.conf` and `storage.conf` of its own under
//!   `target/image-test/` (through `CONTAINERS_CONF`/`CONTAINERS_STORAGE_CONF`,
//!   nothing in /etc), storage kept there between runs so a warm run takes
//!   seconds. One run at a time holds that directory (a file lock).

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use podman::{DirLock, Podman, base_image, build_image, run_ok, text, tools};
use test_kit::{free_port, target_dir};

use crate::support::{is_root, repo_root, runner_bin, skip};

mod podman;

/// The image's user (the Dockerfile's `USER`; `dockerfile.rs` checks it).
const IMAGE_UID: u32 = 10001;
/// Building a cold base and image takes minutes; nothing asserts a timing.
const LONG: Duration = Duration::from_secs(300);
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
const BASE_IMAGE: &str = "docker.io/library/debian:bookworm-slim";
const RUNNER_IMAGE: &str = "localhost/agent-runner:image-test";
const MOCK_IMAGE: &str = "localhost/agent-runner-mock-control-plane:image-test";

/// The cargo profile that built `bin` (`target/<dir>/bin`): `dev` for
/// `debug`, else the directory's name.
fn profile_of(bin: &Path) -> String {
    let dir = bin
        .parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .unwrap_or("debug");
    if dir == "debug" { "dev" } else { dir }.to_owned()
}

/// The binaries of this test build in `DIR/build-context/out/`, the
/// Dockerfile's `build` stage: this target's `agent-runner`, and
/// `mock-control-plane` built beside it in the same profile (only linked:
/// its library is already built for the tests; a no-op once fresh).
fn prebuilt_binaries(dir: &Path) -> PathBuf {
    let runner = PathBuf::from(runner_bin());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_ok(
        Command::new(cargo)
            .current_dir(repo_root())
            .args(["build", "--quiet", "--locked", "--profile"])
            .arg(profile_of(&runner))
            .args(["-p", "mock-control-plane", "--bin", "mock-control-plane"]),
        "cargo build -p mock-control-plane",
    );
    let context = dir.join("build-context");
    let out = context.join("out");
    std::fs::create_dir_all(&out).unwrap();
    for from in [runner.clone(), runner.with_file_name("mock-control-plane")] {
        assert!(from.exists(), "{} was not built", from.display());
        let to = out.join(from.file_name().unwrap());
        // Copied only when changed, so buildah's cache holds.
        let same = std::fs::read(&to).ok() == std::fs::read(&from).ok();
        if !same {
            std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        }
    }
    context
}

/// The mock control plane's container, driven through `--stdio`.
struct Mock {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<String>>,
}

impl Mock {
    fn start(podman: &Podman, name: &str) -> Self {
        let mut child = podman
            .cmd()
            .args(["run", "-i", "--rm", "--name", name, "--network", "host"])
            .args(["--read-only", "--cap-drop=ALL"])
            .args(["--security-opt", "no-new-privileges"])
            .arg(MOCK_IMAGE)
            .args(["serve", "--listen", "127.0.0.1:0", "--stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("podman run the mock control plane");
        let events = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().expect("piped");
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        let err = child.stderr.take().expect("piped");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            events,
            stderr,
        }
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The first event matching `pred`, waiting up to `within`.
    fn wait_for(&self, within: Duration, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(v) = self.events.lock().unwrap().iter().find(|v| pred(v)) {
                return v.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {what} from the mock within {within:?}; events:\n{:#?}\nstderr:\n{}",
                self.events.lock().unwrap(),
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(POLL);
        }
    }

    /// The runner's message answering `request_id` with a turn in `status`.
    fn wait_turn(&self, request_id: &str, status: &str) -> Value {
        self.wait_for(WAIT, &format!("{request_id} {status}"), |v| {
            v["event"] == "message"
                && v["message"]["requestId"] == request_id
                && v["message"]["turnUpdate"]["status"] == status
        })
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        // Closing stdin ends `--stdio`; the container goes with --rm.
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(POLL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes the named containers when the test ends, however it ends.
struct Containers<'a> {
    podman: &'a Podman,
    names: Vec<String>,
}

impl Drop for Containers<'_> {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = self.podman.run(&["rm", "-f", "-t", "0", name]);
        }
    }
}

/// The two volumes (state, workspaces) in a temporary directory, owned by
/// the image's user, as the README says.
fn volumes() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let volumes = tempfile::tempdir().unwrap();
    std::fs::set_permissions(volumes.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = volumes.path().join("state");
    let workspaces = volumes.path().join("workspaces");
    for d in [&state, &workspaces] {
        std::fs::create_dir(d).unwrap();
        if is_root() {
            std::os::unix::fs::chown(d, Some(IMAGE_UID), Some(IMAGE_UID)).unwrap();
        } else {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
    }
    (volumes, state, workspaces)
}

/// `podman run` of the runner image, hardened as the README says, against
/// the control plane at `url`, health endpoints on a free loopback port.
fn run_runner(podman: &Podman, name: &str, url: &str, state: &Path, workspaces: &Path) {
    let health = format!("127.0.0.1:{}", free_port());
    run_ok(
        podman
            .cmd()
            .args(["run", "-d", "--name", name, "--network", "host"])
            .args([
                "--read-only",
                "--tmpfs",
                "/tmp",
                "--tmpfs",
                "/home/agent-runner",
            ])
            .args(["--cap-drop=ALL", "--security-opt", "no-new-privileges"])
            .args(["--health-interval", "disable", "--stop-timeout", "90"])
            .arg("-v")
            .arg(format!("{}:/var/lib/agent-runner", state.display()))
            .arg("-v")
            .arg(format!("{}:/workspaces", workspaces.display()))
            .arg("-e")
            .arg(format!("AGENT_RUNNER_CONTROL_PLANE_URL={url}"))
            .arg("-e")
            .arg(format!("AGENT_RUNNER_HEALTH_ADDR={health}"))
            .arg(RUNNER_IMAGE),
        "podman run the runner image",
    );
}

/// PID 1 is tini; the runner is uid 10001 with no capabilities.
fn check_processes(podman: &Podman, name: &str) {
    let ps = podman.run(&[
        "exec",
        name,
        "sh",
        "-c",
        "cat /proc/1/comm; for p in /proc/[0-9]*; do \
         [ \"$(cat $p/comm 2>/dev/null)\" = agent-runner ] && grep -E '^(Uid|CapEff):' $p/status; \
         done; true",
    ]);
    let ps = text(&ps);
    assert!(ps.starts_with("tini\n"), "PID 1 is not tini:\n{ps}");
    assert!(
        ps.contains(&format!(
            "Uid:\t{IMAGE_UID}\t{IMAGE_UID}\t{IMAGE_UID}\t{IMAGE_UID}"
        )),
        "the runner is not uid {IMAGE_UID}:\n{ps}"
    );
    assert!(
        ps.contains("CapEff:\t0000000000000000"),
        "capabilities left:\n{ps}"
    );
}

/// `agent-runner status` works inside, and shows the sandbox active.
fn check_status(podman: &Podman, name: &str) {
    let status = podman.run(&["exec", name, "agent-runner", "status"]);
    assert!(status.status.success(), "status:\n{}", text(&status));
    assert!(text(&status).contains("connected"), "{}", text(&status));
    let json_status = podman.run(&["exec", name, "agent-runner", "status", "--json"]);
    assert!(json_status.status.success(), "{}", text(&json_status));
    let doc: Value = serde_json::from_slice(&json_status.stdout).unwrap();
    let sandbox = &doc["sandbox"];
    assert_ne!(sandbox["mode"], "off", "{sandbox:#}");
    assert!(sandbox["refused"].is_null(), "{sandbox:#}");
    assert!(
        sandbox["host"].as_array().is_some_and(|h| h
            .iter()
            .any(|f| f.as_str().is_some_and(|f| f.starts_with("landlock: ABI")))),
        "Landlock not active inside the container: {sandbox:#}"
    );
}

#[test]
fn the_real_image_registers_works_is_healthy_sandboxed_and_drains() {
    if let Err(why) = tools() {
        skip(&format!("the real image: {why}"));
        return;
    }
    let started = Instant::now();
    let dir = target_dir().join("image-test");
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let _lock = DirLock::take(&dir.join("lock"));
    let podman = Podman::setup(&dir);

    base_image(&podman, &dir);
    let context = prebuilt_binaries(&dir);
    build_image(&podman, &context, "mock-control-plane", MOCK_IMAGE);
    build_image(&podman, &context, "runtime", RUNNER_IMAGE);
    let built = started.elapsed();

    // Unique names: other runs of the suite share the host network and
    // podman's runtime dirs.
    let suffix = format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
    let runner_name = format!("agent-runner-{suffix}");
    let mock_name = format!("mock-cp-{suffix}");
    let _cleanup = Containers {
        podman: &podman,
        names: vec![runner_name.clone(), mock_name.clone()],
    };

    let mut mock = Mock::start(&podman, &mock_name);
    let listening = mock.wait_for(LONG, "listening", |v| v["event"] == "listening");
    let url = listening["url"].as_str().expect("url").to_owned();

    let (_volumes, state, workspaces) = volumes();
    run_runner(&podman, &runner_name, &url, &state, &workspaces);
    let logs = || text(&podman.run(&["logs", &runner_name]));

    // It registers and opens its ControlChannel.
    mock.wait_for(WAIT, "registered", |v| v["event"] == "registered");
    mock.wait_for(WAIT, "connected", |v| v["event"] == "connected");

    // tini is PID 1; the runner is uid 10001 with no capabilities.
    check_processes(&podman, &runner_name);

    // The image's HEALTHCHECK, run once (no systemd here to schedule it).
    let check = podman.run(&["healthcheck", "run", &runner_name]);
    assert!(
        check.status.success(),
        "HEALTHCHECK failed:\n{}\n{}",
        text(&check),
        logs()
    );

    // A scripted turn writes into the workspace volume.
    mock.send(
        json!({"requestId": "a", "createAgentRequest": {"agentId": "a", "agentSdk": "scripted"}}),
    );
    mock.send(json!({"requestId": "t", "createThreadRequest": {"agentId": "a", "model": "scripted-fast"}}));
    let thread = mock.wait_for(WAIT, "thread", |v| {
        v["event"] == "message"
            && v["message"]["requestId"] == "t"
            && v["message"]["threadUpdate"]["threadId"].is_string()
    });
    let thread_id = thread["message"]["threadUpdate"]["threadId"]
        .as_str()
        .unwrap()
        .to_owned();
    mock.send(json!({"requestId": "m", "createUserMessageRequest": {
        "agentId": "a", "threadId": thread_id, "text": "run echo written > made-here && cat made-here"}}));
    mock.wait_turn("m", "TURN_STATUS_COMPLETED");
    let made = workspaces
        .join("a/threads")
        .join(&thread_id)
        .join("made-here");
    assert_eq!(
        std::fs::read_to_string(&made).unwrap_or_else(|e| panic!(
            "{}: {e}\n{}",
            made.display(),
            logs()
        )),
        "written\n"
    );
    assert!(
        state.join("state.db").exists(),
        "no state on the state volume"
    );

    // `agent-runner status` works inside, and shows the sandbox active.
    check_status(&podman, &runner_name);

    // SIGTERM (podman stop → tini → runner) drains a running turn: it
    // finishes, then the runner exits 0.
    mock.send(json!({"requestId": "d", "createUserMessageRequest": {
        "agentId": "a", "threadId": thread_id,
        "text": "run sleep 3 && echo drained > drained-here"}}));
    mock.wait_for(WAIT, "the drained turn running", |v| {
        v["event"] == "message"
            && v["message"]["requestId"] == "d"
            && v["message"]["turnUpdate"]["status"] == "TURN_STATUS_RUNNING"
    });
    run_ok(
        podman.cmd().args(["stop", "-t", "90", &runner_name]),
        "podman stop",
    );
    mock.wait_turn("d", "TURN_STATUS_COMPLETED");
    let code = podman.run(&["inspect", &runner_name, "--format", "{{.State.ExitCode}}"]);
    assert_eq!(
        String::from_utf8_lossy(&code.stdout).trim(),
        "0",
        "exit code after SIGTERM:\n{}",
        logs()
    );
    assert!(
        workspaces
            .join("a/threads")
            .join(&thread_id)
            .join("drained-here")
            .exists(),
        "the running turn did not finish before exit:\n{}",
        logs()
    );
    eprintln!(
        "checked the real image: built in {built:?}, whole test {:?}",
        started.elapsed()
    );
}
