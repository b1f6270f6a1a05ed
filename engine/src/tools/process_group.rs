//! Ending a child's whole process group: SIGTERM, a short grace, SIGKILL,
//! then waiting until no live member is left.
//!
//! `bash` runs each command as the leader of its own group, so `kill(-pgid)`
//! reaches everything it started (`sleep 30 &` included) unless a process
//! deliberately left the group with `setsid`.
//!
//! [`wait_group`] and [`read_capped`]/[`drain`] are the run of one shell
//! command that `bash` and cron jobs share: wait for the leader under a
//! timeout and a cancel, end the group, collect capped output.

use std::process::ExitStatus;
use std::time::Duration;

use agent_launcher::SandboxChild;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::cap::HeadTail;

/// How long members get to exit after SIGTERM before SIGKILL.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the group to be gone after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);

/// Sends `signal` to every member of the group; false when it has none.
pub(crate) fn signal_group(pgid: i32, signal: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: killpg only sends a signal; pgid > 1 never targets init or
    // every process.
    unsafe { libc::killpg(pgid, signal) == 0 }
}

/// Whether the group still has a member that is not a zombie.
///
/// Zombies count as members for `kill(-pgid, 0)` until their parent reaps
/// them; orphans are reaped by PID 1, which in some containers does so only
/// now and then. They run no code any more, so they do not count here.
pub(crate) fn group_alive(pgid: i32) -> bool {
    if !signal_group(pgid, 0) {
        return false;
    }
    match live_members(pgid) {
        Some(count) => count > 0,
        None => true,
    }
}

/// Live (non-zombie) processes in the group, from /proc (None when /proc
/// cannot be read, e.g. not Linux).
fn live_members(pgid: i32) -> Option<usize> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut live = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command name: state ppid pgrp ...
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let group = fields.nth(1).and_then(|field| field.parse::<i32>().ok());
        if group == Some(pgid) && state != Some("Z") && state != Some("X") {
            live += 1;
        }
    }
    Some(live)
}

/// SIGTERM the group, SIGKILL whatever is left after `grace`, then wait
/// (bounded) until no live member remains. Returns whether it is gone.
pub(crate) async fn kill_group(pgid: i32, grace: Duration) -> bool {
    if !group_alive(pgid) {
        return true;
    }
    signal_group(pgid, libc::SIGTERM);
    if wait_gone(pgid, grace).await {
        return true;
    }
    signal_group(pgid, libc::SIGKILL);
    let gone = wait_gone(pgid, KILL_WAIT).await;
    if !gone {
        tracing::warn!(pgid, "process group still alive after SIGKILL");
    }
    gone
}

async fn wait_gone(pgid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(POLL).await;
    }
}

/// How the leader of a group ended under [`wait_group`].
pub(crate) struct Ended {
    /// Its exit status (after a kill, the kill's).
    pub status: std::io::Result<ExitStatus>,
    /// The timeout ran out; the group was killed.
    pub timed_out: bool,
    /// `cancel` fired; the group was killed.
    pub cancelled: bool,
}

/// Waits for `child`, the leader of group `pgid`, to exit; on `timeout` or
/// `cancel` kills the group first. Then ends whatever the leader left
/// running in its group. If this future is dropped midway (the caller
/// aborted instead of cancelling), the group is SIGKILLed, so no process
/// leaks.
pub(crate) async fn wait_group(
    child: &mut SandboxChild,
    pgid: i32,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Ended {
    let mut guard = GroupGuard(Some(pgid));
    let (mut timed_out, mut cancelled) = (false, false);
    let status = tokio::select! {
        status = child.wait() => status,
        () = sleep(timeout) => { timed_out = true; stop(child, pgid).await }
        () = cancel.cancelled() => { cancelled = true; stop(child, pgid).await }
    };
    if group_alive(pgid) {
        kill_group(pgid, TERM_GRACE).await;
    }
    guard.0 = None;
    Ended {
        status,
        timed_out,
        cancelled,
    }
}

/// SIGKILLs the group when dropped armed.
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            signal_group(pgid, libc::SIGKILL);
        }
    }
}

/// Kills the group and reaps its leader.
async fn stop(child: &mut SandboxChild, pgid: i32) -> std::io::Result<ExitStatus> {
    kill_group(pgid, TERM_GRACE).await;
    // The leader is dead (or was SIGKILLed with its group); reap it.
    let _ = child.start_kill();
    child.wait().await
}

/// How long to keep reading after the group is gone (a process outside the
/// group may still hold the pipe).
const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// Reads the pipe to EOF under `cap` (head and tail kept).
pub(crate) async fn read_capped(reader: std::io::PipeReader, cap: usize) -> String {
    let mut kept = HeadTail::new(cap);
    let fd = std::os::fd::OwnedFd::from(reader);
    let mut receiver = match pipe::Receiver::from_owned_fd(fd) {
        Ok(receiver) => receiver,
        Err(err) => return format!("[cannot read output: {err}]"),
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match receiver.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => kept.push(&buf[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                kept.push(format!("\n[output read failed: {err}]").as_bytes());
                break;
            }
        }
    }
    kept.text()
}

/// The text of a [`read_capped`] task, waiting at most [`DRAIN_WAIT`] once
/// the group is gone.
pub(crate) async fn drain(reading: JoinHandle<String>) -> String {
    match tokio::time::timeout(DRAIN_WAIT, reading).await {
        Ok(Ok(text)) => text,
        Ok(Err(err)) => format!("[output lost: {err}]"),
        Err(_) => "[output unavailable: a process outside the group kept the pipe open]".into(),
    }
}
