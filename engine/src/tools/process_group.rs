//! Ending a child's whole process group: SIGTERM, a short grace, SIGKILL,
//! then waiting until no live member is left.
//!
//! `bash` runs each command as the leader of its own group, so `kill(-pgid)`
//! reaches everything it started (`sleep 30 &` included) unless a process
//! deliberately left the group with `setsid`.

use std::time::Duration;

use tokio::time::{Instant, sleep};

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
