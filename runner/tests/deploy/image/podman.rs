//! podman for the image test, set up on this machine: installed with apt
//! when missing, its own settings and storage under the target directory,
//! the `debian:bookworm-slim` base bootstrapped locally, and `podman build`
//! of a Dockerfile target with the prebuilt binaries as its `build` stage.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use test_kit::target_dir;

use super::BASE_IMAGE;
use crate::support::{have, is_root, repo_root};

pub(super) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `cmd`, panic with its output unless it succeeds. The message ends
/// with the free space where this test writes, since a full disk is the
/// likeliest cause of a failure that is nobody's bug.
pub(super) fn run_ok(cmd: &mut Command, what: &str) -> Output {
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
pub(super) fn tools() -> Result<(), String> {
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
pub(super) struct DirLock {
    _file: std::fs::File,
}

impl DirLock {
    pub(super) fn take(path: &Path) -> Self {
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
pub(super) struct Podman {
    conf: PathBuf,
    storage_conf: PathBuf,
}

impl Podman {
    pub(super) fn setup(dir: &Path) -> Self {
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

    pub(super) fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", &self.conf)
            .env("CONTAINERS_STORAGE_CONF", &self.storage_conf)
            .stdin(Stdio::null());
        c
    }

    pub(super) fn run(&self, args: &[&str]) -> Output {
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
pub(super) fn base_image(podman: &Podman, dir: &Path) {
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

pub(super) fn build_image(podman: &Podman, context: &Path, target: &str, tag: &str) {
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
