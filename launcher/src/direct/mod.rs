//! Starting a process straight into its thread's cgroup.
//!
//! [`ThreadSandbox::spawn`] forks and lets the child join the thread's
//! cgroup by writing `cgroup.procs` before exec. That write is a cgroup
//! migration, which waits for an RCU grace period: 8–16 ms on this kind of
//! host, more than everything else a short shell command costs. A process
//! that runs once per tool call (the engine's `bash`, cron jobs) pays it
//! every time.
//!
//! [`ThreadSandbox::launch`] creates the child with
//! `clone3(CLONE_INTO_CGROUP | CLONE_PIDFD)`: it is born in the cgroup, no
//! migration, and the parent waits for it on the pidfd. Everything else the
//! child does before exec is the same [`ChildPlan`] the forking path runs.
//! Where `clone3` is refused (a seccomp profile that answers `ENOSYS`, a
//! kernel before 5.7) the launch falls back to the forking path once and
//! for all, with the same result.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::unix::AsyncFd;

use crate::child_setup::ChildPlan;
use crate::error::LaunchError;
use crate::report::Applied;
use crate::sandbox::ThreadSandbox;
use crate::vfork;

mod child;
use child::{child_main, read_child_error};

/// `CLONE_INTO_CGROUP` (Linux 5.7).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// `CLONE_PIDFD` (Linux 5.2).
const CLONE_PIDFD: u64 = 0x1000;

/// Set once `clone3` was refused: every later launch forks.
static CLONE3_REFUSED: AtomicBool = AtomicBool::new(false);
/// Set once `clone3` refused `CLONE_VM`: every later launch copies the
/// address space (still born in the cgroup).
static VM_REFUSED: AtomicBool = AtomicBool::new(false);

/// `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// What to start: program, arguments, the caller's environment variables
/// (added to the sandbox's own), working directory (default: the
/// workspace) and standard streams (default: `/dev/null`).
#[derive(Debug)]
pub struct Launch {
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    stdio: [Option<OwnedFd>; 3],
}

impl Launch {
    /// Runs `program` (a path, or a name looked up on the child's `PATH`).
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Launch {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            stdio: [None, None, None],
        }
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// Adds environment variables (the sandbox's policy still applies).
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.env.extend(
            vars.into_iter()
                .map(|(k, v)| (k.as_ref().to_os_string(), v.as_ref().to_os_string())),
        );
        self
    }

    /// The working directory.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Standard input.
    pub fn stdin(mut self, fd: impl Into<OwnedFd>) -> Self {
        self.stdio[0] = Some(fd.into());
        self
    }

    /// Standard output.
    pub fn stdout(mut self, fd: impl Into<OwnedFd>) -> Self {
        self.stdio[1] = Some(fd.into());
        self
    }

    /// Standard error.
    pub fn stderr(mut self, fd: impl Into<OwnedFd>) -> Self {
        self.stdio[2] = Some(fd.into());
        self
    }

    /// The same launch as a tokio command, for the forking path.
    fn into_command(self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args).envs(self.env).kill_on_drop(true);
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        let [stdin, stdout, stderr] = self.stdio;
        let stdio = |fd: Option<OwnedFd>| fd.map_or_else(Stdio::null, Stdio::from);
        cmd.stdin(stdio(stdin))
            .stdout(stdio(stdout))
            .stderr(stdio(stderr));
        cmd
    }
}

/// A process started by [`ThreadSandbox::launch`]. Dropping it before it
/// was waited for kills it (SIGKILL) and reaps it in the background.
#[derive(Debug)]
pub struct SandboxChild {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    /// Born in its cgroup; waited for on its pidfd.
    Direct(Direct),
    /// Forked (`clone3` refused here).
    Forked(tokio::process::Child),
}

#[derive(Debug)]
struct Direct {
    pid: libc::pid_t,
    /// `None` once reaped.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

impl SandboxChild {
    /// Its process id (also its process group and session id).
    pub fn id(&self) -> u32 {
        match &self.inner {
            Inner::Direct(d) => d.pid as u32,
            Inner::Forked(c) => c.id().unwrap_or(0),
        }
    }

    /// Waits until it exits and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.inner {
            Inner::Direct(d) => d.wait().await,
            Inner::Forked(c) => c.wait().await,
        }
    }

    /// Sends SIGKILL (to this process only, not its group); does not wait.
    pub fn start_kill(&mut self) -> io::Result<()> {
        match &mut self.inner {
            Inner::Direct(d) => d.kill(),
            Inner::Forked(c) => c.start_kill(),
        }
    }
}

impl Direct {
    async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            let Some(fd) = &self.pidfd else {
                return Err(io::Error::other("the process was already reaped"));
            };
            let mut ready = fd.readable().await?;
            match try_reap(self.pid)? {
                Some(status) => {
                    self.status = Some(status);
                    self.pidfd = None;
                }
                None => ready.clear_ready(),
            }
        }
    }

    fn kill(&self) -> io::Result<()> {
        match (&self.pidfd, self.status) {
            (Some(fd), None) => kill_by_pidfd(fd.get_ref().as_raw_fd()),
            _ => Ok(()),
        }
    }
}

/// SIGKILL through a pidfd, which names exactly its process even after its
/// pid was reused; one that has exited already (a zombie) is no error.
fn kill_by_pidfd(pidfd: RawFd) -> io::Result<()> {
    // SAFETY: pidfd_send_signal with no siginfo on a descriptor the caller owns.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    Ok(())
}

impl Drop for Direct {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let _ = self.kill();
        let (pid, pidfd) = (self.pid, self.pidfd.take());
        let reap = async move {
            if let Some(fd) = pidfd {
                while let Ok(mut ready) = fd.readable().await {
                    match try_reap(pid) {
                        Ok(None) => ready.clear_ready(),
                        _ => break,
                    }
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn(reap)),
            // SAFETY: waitpid on our own child, which was just SIGKILLed.
            Err(_) => unsafe {
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            },
        }
    }
}

/// `waitpid(pid, WNOHANG)`: its status once it has exited.
fn try_reap(pid: libc::pid_t) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    // SAFETY: waitpid on our own child with a valid out pointer.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    match rc {
        0 => Ok(None),
        rc if rc == pid => Ok(Some(ExitStatus::from_raw(status))),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

impl ThreadSandbox {
    /// Starts `launch` in this thread's sandbox: the same environment,
    /// confinement and report as [`ThreadSandbox::spawn`], but born in the
    /// thread's cgroup instead of moved there (see the module's doc). Needs
    /// a tokio runtime.
    pub fn launch(&self, launch: Launch) -> Result<(SandboxChild, Applied), LaunchError> {
        let program = launch.program.display().to_string();
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(LaunchError::io(
                format!("spawn {program}"),
                io::Error::other("no tokio runtime to wait for the process on"),
            ));
        }
        if CLONE3_REFUSED.load(Ordering::Relaxed) {
            return self.launch_forked(launch);
        }
        let env = self.child_env(&launch.env);
        let mut applied = self.applied().clone();
        applied.env = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        let workspace = &self.spec().workspace;
        let grants = self.for_launch(
            &launch.program,
            &env,
            launch.cwd.as_deref().unwrap_or(workspace),
        );
        applied.granted = grants.granted.clone();
        let plan = self.plan_for(&grants);
        let prepared = Prepared::new(&launch, &env, workspace)
            .map_err(|e| LaunchError::io(format!("spawn {program}"), e))?;
        match self.clone_into_cgroup(&prepared, &plan) {
            Ok(direct) => Ok((
                SandboxChild {
                    inner: Inner::Direct(direct),
                },
                applied,
            )),
            Err(Clone3::Refused(e)) => {
                tracing::debug!(error = %e, "clone3 refused; launches fork and migrate from now on");
                CLONE3_REFUSED.store(true, Ordering::Relaxed);
                drop(prepared);
                self.launch_forked(launch)
            }
            Err(Clone3::Failed(e)) => Err(self.spawn_error(&program, &grants, e)),
        }
    }

    fn launch_forked(&self, launch: Launch) -> Result<(SandboxChild, Applied), LaunchError> {
        let mut cmd = launch.into_command();
        let (child, applied) = self.spawn(&mut cmd)?;
        Ok((
            SandboxChild {
                inner: Inner::Forked(child),
            },
            applied,
        ))
    }

    fn clone_into_cgroup(&self, p: &Prepared, plan: &ChildPlan) -> Result<Direct, Clone3> {
        let cgroup = match self.cgroup() {
            Some(cg) => Some(open_dir(cg.dir()).map_err(Clone3::Failed)?),
            None => None,
        };
        let (err_r, err_w) = cloexec_pipe().map_err(Clone3::Failed)?;
        let mut pidfd: RawFd = -1;
        let mut args = CloneArgs {
            flags: CLONE_PIDFD,
            pidfd: &mut pidfd as *mut RawFd as u64,
            exit_signal: libc::SIGCHLD as u64,
            ..CloneArgs::default()
        };
        if let Some(dir) = &cgroup {
            args.flags |= CLONE_INTO_CGROUP;
            args.cgroup = dir.as_raw_fd() as u64;
        }
        let pid = if vfork::available() && !VM_REFUSED.load(Ordering::Relaxed) {
            match clone_vm(&mut args, p, plan, err_w.as_raw_fd()) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::debug!(error = %e, "clone3 with CLONE_VM refused; launches copy the address space from now on");
                    VM_REFUSED.store(true, Ordering::Relaxed);
                    args.stack = 0;
                    args.stack_size = 0;
                    // SAFETY: as below.
                    unsafe { clone_copy(&mut args, p, plan, err_w.as_raw_fd()) }
                }
                Err(e) => -(e.raw_os_error().unwrap_or(libc::EINVAL) as i64),
                Ok(pid) => pid,
            }
        } else {
            // SAFETY: see `clone_copy`.
            unsafe { clone_copy(&mut args, p, plan, err_w.as_raw_fd()) }
        };
        if pid < 0 {
            let e = io::Error::from_raw_os_error(-pid as i32);
            return Err(match e.raw_os_error() {
                Some(libc::ENOSYS | libc::EPERM | libc::E2BIG) => Clone3::Refused(e),
                _ => Clone3::Failed(e),
            });
        }
        let pid = pid as libc::pid_t;
        drop(err_w);
        // SAFETY: clone3 stored a new pidfd (close-on-exec) that we now own.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        if let Some(e) = read_child_error(&err_r) {
            // SAFETY: reaping our own child, which has _exit()ed or will.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            return Err(Clone3::Failed(e));
        }
        // SAFETY: an OwnedFd keeps its descriptor open and the same for as
        // long as the AsyncFd owns it.
        let pidfd =
            unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
                .map_err(|e| {
                    let (pidfd, e) = e.into_parts();
                    // Not waitable asynchronously: end it rather than leak it.
                    let _ = kill_by_pidfd(pidfd.as_raw_fd());
                    // SAFETY: reaping our own child, just SIGKILLed.
                    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                    Clone3::Failed(e)
                })?;
        Ok(Direct {
            pid,
            pidfd: Some(pidfd),
            status: None,
        })
    }
}

/// clone3 without `CLONE_VM`: a fork. Returns the pid or `-errno`.
///
/// # Safety
/// The child gets a copy of this process with one thread. It runs
/// `child_main`, which only makes raw system calls on memory prepared
/// before, and never returns.
unsafe fn clone_copy(args: &mut CloneArgs, p: &Prepared, plan: &ChildPlan, err: RawFd) -> i64 {
    // SAFETY: see above.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        // SAFETY: see above; this is the child.
        unsafe { child_main(p, plan, err) }
    }
    if pid < 0 {
        return -(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL) as i64);
    }
    pid
}

/// What the `CLONE_VM` child reads, on the parent's memory.
struct VmChild<'a> {
    prepared: &'a Prepared,
    plan: &'a ChildPlan,
    err: RawFd,
}

/// clone3 with `CLONE_VM | CLONE_VFORK` (see [`vfork`]): returns once the
/// child has exec'd or exited, with its pid or `-errno`; `Err` when the
/// stack or the signal mask could not be set up, or the kernel refused
/// the flags (`EINVAL`).
fn clone_vm(args: &mut CloneArgs, p: &Prepared, plan: &ChildPlan, err: RawFd) -> io::Result<i64> {
    let stack = vfork::Stack::new()?;
    let (base, size) = stack.region();
    args.flags |= vfork::CLONE_VM | vfork::CLONE_VFORK;
    args.stack = base;
    args.stack_size = size;
    let mut child = VmChild {
        prepared: p,
        plan,
        err,
    };
    let blocked = vfork::SignalsBlocked::new()?;
    // SAFETY: `args` is a whole clone_args with a stack of ours; the child
    // runs `vm_child_main` on `child`, which outlives the call because the
    // parent is suspended until the child has exec'd or exited.
    let pid = unsafe {
        vfork::clone3_vm(
            (args as *mut CloneArgs).cast(),
            std::mem::size_of::<CloneArgs>(),
            vm_child_main,
            (&mut child as *mut VmChild<'_>).cast(),
        )
    };
    drop(blocked);
    args.flags &= !(vfork::CLONE_VM | vfork::CLONE_VFORK);
    if pid == -(libc::EINVAL as i64) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(pid)
}

/// The `CLONE_VM` child's entry: the runner's handlers off, then the same
/// steps as the forked child.
///
/// # Safety
/// Only as the entry of [`vfork::clone3_vm`], with a `VmChild`.
unsafe extern "C" fn vm_child_main(ctx: *mut std::ffi::c_void) -> ! {
    // SAFETY: the parent passed a live VmChild and is suspended.
    unsafe {
        let child = &*(ctx as *const VmChild<'_>);
        vfork::reset_caught_signals();
        child_main(child.prepared, child.plan, child.err)
    }
}

enum Clone3 {
    /// clone3 (or one of its flags) is not available here.
    Refused(io::Error),
    /// The launch itself failed.
    Failed(io::Error),
}

/// Everything the child needs, allocated before the clone.
struct Prepared {
    program: CString,
    /// Owns what `argv_ptrs` points to.
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    /// Owns what `envp_ptrs` points to.
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    cwd: CString,
    /// Standard streams, each on a descriptor >= 3 so that installing one
    /// cannot overwrite another.
    stdio: [OwnedFd; 3],
}

impl Prepared {
    fn new(launch: &Launch, env: &[(OsString, OsString)], workspace: &Path) -> io::Result<Self> {
        let program = resolve(&launch.program, env)?;
        let program = c_string(program.as_os_str())?;
        let mut argv = vec![c_string(launch.program.as_os_str())?];
        for arg in &launch.args {
            argv.push(c_string(arg)?);
        }
        let mut envp = Vec::with_capacity(env.len());
        for (k, v) in env {
            let mut pair = k.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(v.as_bytes());
            envp.push(
                CString::new(pair).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            );
        }
        let argv_ptrs = null_terminated(&argv);
        let envp_ptrs = null_terminated(&envp);
        let cwd = c_string(launch.cwd.as_deref().unwrap_or(workspace).as_os_str())?;
        let mut stdio = Vec::with_capacity(3);
        for fd in &launch.stdio {
            stdio.push(match fd {
                Some(fd) => above_stdio(fd.as_raw_fd())?,
                None => {
                    let null = std::fs::File::open("/dev/null")?;
                    above_stdio(null.as_raw_fd())?
                }
            });
        }
        let stdio: [OwnedFd; 3] = stdio
            .try_into()
            .map_err(|_| io::Error::other("three standard streams"))?;
        Ok(Prepared {
            program,
            _argv: argv,
            argv_ptrs,
            _envp: envp,
            envp_ptrs,
            cwd,
            stdio,
        })
    }
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The program's path: as given when it names a path, else the first match
/// on the child's `PATH`.
fn resolve(program: &Path, env: &[(OsString, OsString)]) -> io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not found on PATH"))
}

/// A close-on-exec duplicate of `fd` numbered 3 or above.
fn above_stdio(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC creates a new descriptor we then own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let path = c_string(dir.as_os_str())?;
    // SAFETY: open with a valid C string; the result is owned below.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills the two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two fresh descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Launcher, LauncherConfig, Mode, ThreadSpec};
    use std::io::Read as _;

    /// The path taken where `clone3` is refused gives the same child.
    #[tokio::test]
    async fn the_forking_path_runs_the_same_launch() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let launcher = Launcher::new(LauncherConfig {
            cgroups: false,
            ..LauncherConfig::new(Mode::BestEffort, format!("unit{}", std::process::id()))
        })
        .unwrap();
        let sandbox = launcher
            .thread(ThreadSpec {
                workspace: dir.path().join("ws"),
                home_dir: dir.path().join("home"),
                tmp_dir: dir.path().join("tmp"),
                ..ThreadSpec::default()
            })
            .unwrap();
        let (mut reader, writer) = std::io::pipe().unwrap();
        let launch = Launch::new("sh")
            .arg("-c")
            .arg("echo \"$SITE $PWD\"; exit 4")
            .envs([("SITE", "site")])
            .stdout(writer);
        let (mut child, applied) = sandbox.launch_forked(launch).unwrap();
        assert!(matches!(child.inner, Inner::Forked(_)));
        assert!(applied.env.iter().any(|name| name == "SITE"));
        assert_eq!(child.wait().await.unwrap().code(), Some(4));
        let mut out = String::new();
        reader.read_to_string(&mut out).unwrap();
        assert_eq!(out, format!("site {}\n", dir.path().join("ws").display()));
    }
}
