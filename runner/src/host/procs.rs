//! The runner's process tree, as `/proc` shows it: how many processes the
//! runner's agents keep alive (a metric and a `/status` field), and the
//! PID-1 check.
//!
//! Reaping: the runner does not reap orphans itself. A blanket
//! `waitpid(-1)` loop would race tokio's own reaping of the children it
//! spawned (and steal their exit statuses), so the container image runs the
//! runner under `tini` (`deploy/Dockerfile`), which reaps every orphan.
//! [`warn_if_pid1`] says so when the runner is started as PID 1 anyway.

use std::collections::HashMap;
use std::path::Path;

/// Live (non-zombie) processes descended from this one; `None` where
/// `/proc` cannot tell (not Linux, or not mounted).
pub fn live_descendants() -> Option<usize> {
    // `/proc/self` names this process as the mounted procfs numbers it,
    // which is right even when the runner sits in another pid namespace.
    let me: u32 = std::fs::read_link("/proc/self")
        .ok()?
        .to_str()?
        .parse()
        .ok()?;
    let table = process_table(Path::new("/proc"))?;
    Some(count_descendants(&table, me))
}

/// One process: its parent and whether it is a zombie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcEntry {
    /// Its parent's pid.
    pub ppid: u32,
    /// Whether it has exited and awaits reaping.
    pub zombie: bool,
}

/// Every process in `proc_root` (a procfs mount), by pid.
pub fn process_table(proc_root: &Path) -> Option<HashMap<u32, ProcEntry>> {
    let mut table = HashMap::new();
    for entry in std::fs::read_dir(proc_root).ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // A process may exit between the listing and the read: skip it.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(parsed) = parse_stat(&stat) {
            table.insert(pid, parsed);
        }
    }
    Some(table)
}

/// `pid (comm) state ppid …`; `comm` may hold spaces and parentheses, so
/// the fields are read after the last `)`.
pub fn parse_stat(stat: &str) -> Option<ProcEntry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(ProcEntry {
        ppid,
        zombie: state == "Z" || state == "X",
    })
}

/// Live processes below `root` in `table`.
pub fn count_descendants(table: &HashMap<u32, ProcEntry>, root: u32) -> usize {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, entry) in table {
        children.entry(entry.ppid).or_default().push(*pid);
    }
    let mut count = 0;
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if *child == root {
                continue;
            }
            if table.get(child).is_some_and(|e| !e.zombie) {
                count += 1;
            }
            stack.push(*child);
        }
    }
    count
}

/// Warn when the runner is PID 1 (of its pid namespace) without an init.
pub fn warn_if_pid1() {
    if std::process::id() == 1 {
        tracing::warn!(
            "running as PID 1: orphaned processes that agents leave behind will not be reaped; \
             run the runner under an init such as tini (the container image does: \
             ENTRYPOINT [\"tini\", \"--\", \"agent-runner\"])"
        );
    }
}

/// What `describe` needs to turn `/proc` clock ticks into seconds: the
/// ticks per second and the system's uptime in seconds.
pub fn boot_clock() -> Option<(u64, f64)> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    (ticks > 0).then_some((ticks as u64, uptime))
}

/// One live (non-zombie) process for `agent-runner ps`: pid, parent,
/// command line, CPU seconds, resident memory (KiB) and age (seconds).
pub fn describe(pid: u32, clock: Option<(u64, f64)>) -> Option<serde_json::Value> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // Field n of proc(5)'s stat is fields[n - 3] here.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    if fields.first() == Some(&"Z") {
        return None;
    }
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_owned()
        })
        .unwrap_or_default();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let (cpu_s, age_s) = match clock {
        Some((ticks, uptime)) => (
            Some((field(14)? + field(15)?) as f64 / ticks as f64),
            Some((uptime - field(22)? as f64 / ticks as f64).max(0.0)),
        ),
        None => (None, None),
    };
    Some(serde_json::json!({
        "pid": pid,
        "ppid": field(4),
        "command": command,
        "cpu_s": cpu_s,
        "rss_kib": field(24).map(|p| p * page / 1024),
        "age_s": age_s,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_comm() {
        let e = parse_stat("42 (a) b (c)) S 7 42 42 0 -1").unwrap();
        assert_eq!(
            e,
            ProcEntry {
                ppid: 7,
                zombie: false
            }
        );
        assert!(parse_stat("43 (sh) Z 1 0").unwrap().zombie);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn counts_live_descendants_only() {
        let table: HashMap<u32, ProcEntry> = [
            (10, (1, false)),
            (11, (10, false)),
            (12, (11, false)),
            (13, (11, true)),
            (14, (1, false)),
        ]
        .into_iter()
        .map(|(pid, (ppid, zombie))| (pid, ProcEntry { ppid, zombie }))
        .collect();
        assert_eq!(count_descendants(&table, 10), 2);
        assert_eq!(count_descendants(&table, 14), 0);
    }

    #[test]
    fn this_process_is_counted_from_proc() {
        if !Path::new("/proc/self/stat").exists() {
            eprintln!("skipped: no /proc");
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let during = live_descendants().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        // Other tests' children may come and go; ours is alive right now.
        assert!(during >= 1, "{during}");
    }
}
