//! The real image (issue 15): `deploy/Dockerfile`, unmodified, built with
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
//! - the release binaries: `cargo build --release --locked -p agent-runner
//!   -p mock-control-plane` on the host (fresh after the first run), handed to
//!   the Dockerfile as its `build` stage with `--build-context build=DIR`, so
//!   nothing compiles inside the image build and no Rust image is pulled.
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
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{have, is_root, repo_root, skip};

/// The image's user (the Dockerfile's `USER`; `dockerfile.rs` checks it).
const IMAGE_UID: u32 = 10001;
/// Building a cold base and image takes minutes; nothing asserts a timing.
const LONG: Duration = Duration::from_secs(300);
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
const BASE_IMAGE: &str = "docker.io/library/debian:bookworm-slim";
const RUNNER_IMAGE: &str = "localhost/agent-runner:image-test";
const MOCK_IMAGE: &str = "localhost/agent-runner-mock-control-plane:image-test";

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `cmd`, panic with its output unless it succeeds. The message ends
/// with the free space where this test writes, since a full disk is the
/// likeliest cause of a failure that is nobody's bug.
fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\nfree space:\n{}",
        text(&out),
        free_space()
    );
    out
}

/// `df -h` of the target dir and the system's temporary directory.
fn free_space() -> String {
    Command::new("df")
        .arg("-h")
        .arg(target_dir())
        .arg(std::env::temp_dir())
        .output()
        .map(|out| text(&out))
        .unwrap_or_else(|e| format!("df: {e}"))
}

/// podman, runc and mmdebstrap, installed with apt when root and missing.
/// `Err` says why the image cannot be built and run here at all.
fn tools() -> Result<(), String> {
    let missing: Vec<&str> = ["podman", "runc", "mmdebstrap"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        return Err(format!(
            "{} not installed and not root (cannot apt-get install them)",
            missing.join(", ")
        ));
    }
    if !have("apt-get") {
        return Err(format!(
            "{} not installed and no apt-get",
            missing.join(", ")
        ));
    }
    // Other tests may run apt at the same time: wait for dpkg's lock.
    let lock = "DPkg::Lock::Timeout=600";
    let update = Command::new("apt-get")
        .args(["-o", lock, "update", "-qq"])
        .output()
        .map_err(|e| format!("apt-get update: {e}"))?;
    if !update.status.success() {
        return Err(format!("apt-get update failed:\n{}", text(&update)));
    }
    let install = Command::new("apt-get")
        .args([
            "-o",
            lock,
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
        ])
        .args(["podman", "runc", "mmdebstrap"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("apt-get install: {e}"))?;
    // A failed install is a failure, not a skip: root with apt should work.
    assert!(
        install.status.success(),
        "apt-get install podman runc mmdebstrap failed:\n{}",
        text(&install)
    );
    Ok(())
}

/// An exclusive lock on `path`, held until dropped: one run at a time uses
/// the shared podman storage.
struct DirLock {
    _file: std::fs::File,
}

impl DirLock {
    fn take(path: &Path) -> Self {
        use std::os::fd::AsRawFd as _;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // SAFETY: flock on a descriptor we own; blocks until the lock is ours.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock {}", path.display());
        Self { _file: file }
    }
}

/// The `deb URI SUITE COMPONENTS` lines of this machine's apt sources
/// (deb822 `.sources` files and one-line `sources.list`), so the base image
/// comes from the mirror apt is configured for, whatever host that is.
fn apt_mirror_lines() -> Vec<String> {
    let mut lines = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir("/etc/apt/sources.list.d")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for file in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "sources"))
    {
        let Ok(content) = std::fs::read_to_string(file) else {
            continue;
        };
        for stanza in content.split("\n\n") {
            let field = |name: &str| -> Vec<String> {
                stanza
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .find_map(|l| l.strip_prefix(&format!("{name}:")))
                    .map(|v| v.split_whitespace().map(str::to_owned).collect())
                    .unwrap_or_default()
            };
            if !field("Types").iter().any(|t| t == "deb") {
                continue;
            }
            let components = field("Components").join(" ");
            for uri in field("URIs") {
                for suite in field("Suites") {
                    lines.push(format!("deb {uri} {suite} {components}"));
                }
            }
        }
    }
    for file in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "list"))
        .chain(std::iter::once(&PathBuf::from("/etc/apt/sources.list")))
    {
        let Ok(content) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in content.lines().map(str::trim) {
            if line.starts_with("deb ") {
                lines.push(line.to_owned());
            }
        }
    }
    lines
}

/// podman with this test's own settings and storage.
struct Podman {
    conf: PathBuf,
    storage_conf: PathBuf,
}

impl Podman {
    fn setup(dir: &Path) -> Self {
        // Root here lacks CAP_SYS_RESOURCE: podman's default nofile/nproc
        // (1048576) fail with "setrlimit: Operation not permitted", so ask for
        // no more than the hard limits allow.
        let hard = |resource| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes into the struct we pass.
            let rc = unsafe { libc::getrlimit(resource, &mut limit) };
            assert_eq!(rc, 0, "getrlimit");
            limit.rlim_max
        };
        let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4096);
        let nofile = hard(libc::RLIMIT_NOFILE).min(65536);
        let nproc = hard(libc::RLIMIT_NPROC).min(pid_max).min(65536);
        let conf = dir.join("containers.conf");
        std::fs::write(
            &conf,
            format!(
                "[containers]\n\
                 default_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
                 [engine]\n\
                 # crun refuses hybrid cgroups (\"cgroups in hybrid mode not supported\").\n\
                 runtime = \"runc\"\n\
                 cgroup_manager = \"cgroupfs\"\n\
                 events_logger = \"file\"\n\
                 tmp_dir = \"{tmp}\"\n",
                tmp = dir.join("tmp").display()
            ),
        )
        .unwrap();
        let storage_conf = dir.join("storage.conf");
        std::fs::write(
            &storage_conf,
            format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
                dir.join("storage").display(),
                dir.join("run").display()
            ),
        )
        .unwrap();
        Self { conf, storage_conf }
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", &self.conf)
            .env("CONTAINERS_STORAGE_CONF", &self.storage_conf)
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("podman {args:?}: {e}"))
    }

    fn image_exists(&self, name: &str) -> bool {
        self.run(&["image", "exists", name]).status.success()
    }
}

/// `debian:bookworm-slim` in podman's storage, from the cached tar or a
/// fresh mmdebstrap.
fn base_image(podman: &Podman, dir: &Path) {
    if podman.image_exists(BASE_IMAGE) {
        return;
    }
    let tar = dir.join("debian-bookworm-slim.tar");
    if !tar.exists() {
        let mirrors = apt_mirror_lines();
        assert!(
            !mirrors.is_empty(),
            "no deb lines in /etc/apt/sources.list(.d): cannot tell where Debian packages come from"
        );
        let partial = dir.join("debian-bookworm-slim.tar.partial");
        let mut cmd = Command::new("mmdebstrap");
        cmd.args([
            "--variant=minbase",
            if is_root() {
                "--mode=root"
            } else {
                "--mode=unshare"
            },
            "--format=tar",
            // Without it mmdebstrap pulls in perl (121 MB) for usrmerge.
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
            // As the slim images: no docs, man pages, info or locales.
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--dpkgopt=path-exclude=/usr/share/info/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            // A dated snapshot mirror has expired Release files.
            "--aptopt=Acquire::Check-Valid-Until \"false\"",
            "--quiet",
            "bookworm",
        ])
        .arg(&partial)
        .args(&mirrors)
        // Its chroot goes beside the tar, on the target dir's disk, not in
        // the system's /tmp, which may be small.
        .env("TMPDIR", dir.join("tmp"))
        .stdin(Stdio::null());
        run_ok(&mut cmd, "mmdebstrap of debian:bookworm-slim");
        std::fs::rename(&partial, &tar).unwrap();
    }
    run_ok(
        podman
            .cmd()
            .args([
                "import",
                "--change",
                "CMD [\"bash\"]",
                "--change",
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ])
            .arg(&tar)
            .arg(BASE_IMAGE),
        "podman import of the base tar",
    );
}

/// The release binaries in `DIR/out/`, the Dockerfile's `build` stage.
fn release_binaries(dir: &Path) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_ok(
        Command::new(cargo)
            .current_dir(repo_root())
            .args(["build", "--quiet", "--release", "--locked"])
            .args(["-p", "agent-runner", "-p", "mock-control-plane"]),
        "cargo build --release",
    );
    let context = dir.join("build-context");
    let out = context.join("out");
    std::fs::create_dir_all(&out).unwrap();
    for bin in ["agent-runner", "mock-control-plane"] {
        let from = target_dir().join("release").join(bin);
        let to = out.join(bin);
        // Copied only when changed, so buildah's cache holds.
        let same = std::fs::read(&to).ok() == std::fs::read(&from).ok();
        if !same {
            std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        }
    }
    context
}

fn build_image(podman: &Podman, context: &Path, target: &str, tag: &str) {
    run_ok(
        podman
            .cmd()
            .current_dir(repo_root())
            .args(["build", "--pull=never", "--network", "host"])
            // The OCI format drops HEALTHCHECK.
            .args(["--format", "docker", "--layers"])
            .arg("--build-context")
            .arg(format!("build={}", context.display()))
            .args([
                "-f",
                "deploy/Dockerfile",
                "--target",
                target,
                "-t",
                tag,
                ".",
            ]),
        &format!("podman build --target {target}"),
    );
}

/// A free TCP port on loopback (closed again; the runner binds it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    let context = release_binaries(&dir);
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

    // The two volumes, owned by the image's user, as the README says.
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
    let health = format!("127.0.0.1:{}", free_port());
    run_ok(
        podman
            .cmd()
            .args(["run", "-d", "--name", &runner_name, "--network", "host"])
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
    let logs = || text(&podman.run(&["logs", &runner_name]));

    // It registers and opens its ControlChannel.
    mock.wait_for(WAIT, "registered", |v| v["event"] == "registered");
    mock.wait_for(WAIT, "connected", |v| v["event"] == "connected");

    // tini is PID 1; the runner is uid 10001 with no capabilities.
    let ps = podman.run(&[
        "exec",
        &runner_name,
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
    let status = podman.run(&["exec", &runner_name, "agent-runner", "status"]);
    assert!(status.status.success(), "status:\n{}", text(&status));
    assert!(text(&status).contains("connected"), "{}", text(&status));
    let json_status = podman.run(&["exec", &runner_name, "agent-runner", "status", "--json"]);
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
