//! Percentiles and the machine description that go with every figure.

use std::time::Duration;

use serde::Serialize;

/// A latency distribution, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub n: usize,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Self {
        let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let pick = |q: f64| -> f64 {
            if n == 0 {
                return 0.0;
            }
            // Nearest rank: the smallest sample with at least q of them at or below it.
            let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
            us[rank - 1]
        };
        Summary {
            n,
            p50_us: pick(0.50),
            p90_us: pick(0.90),
            p99_us: pick(0.99),
            max_us: us.last().copied().unwrap_or(0.0),
            mean_us: if n == 0 {
                0.0
            } else {
                us.iter().sum::<f64>() / n as f64
            },
        }
    }
}

/// What the figures were measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub mem_total_kib: u64,
    pub kernel: String,
}

impl Machine {
    pub fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_total_kib = kib_field(&meminfo, "MemTotal:").unwrap_or(0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        Machine {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            mem_total_kib,
            kernel,
        }
    }
}

/// `Field:   1234 kB` → 1234.
pub fn kib_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Resident set size of a process, in bytes (`VmRSS` of /proc/PID/status).
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    kib_field(&status, "VmRSS:")
        .map(|kib| kib * 1024)
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/{pid}/status"))
}

/// Proportional set size of `pid` and every process below it, in bytes
/// (the sum of `Pss:` in each one's /proc/PID/smaps_rollup): what a process
/// tree costs the machine, shared pages split between their users rather
/// than counted once per process as RSS would. Processes that exit while
/// being read are skipped.
pub fn tree_pss_bytes(pid: u32) -> anyhow::Result<u64> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // The parent pid is the second field after the parenthesised name.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((p, ppid));
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parent_of
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    let mut total = 0;
    for p in tree {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")) {
            total += kib_field(&text, "Pss:").unwrap_or(0) * 1024;
        }
    }
    if total == 0 {
        anyhow::bail!("no Pss readable for process {pid}");
    }
    Ok(total)
}

/// CPU time (user + system) a process used so far, in seconds, from
/// /proc/PID/stat.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&stat)
        .map(|(_, s)| s)
        .ok_or_else(|| anyhow::anyhow!("malformed /proc/{pid}/stat"))
}

/// CPU time (seconds) of each of a process's live threads so far, summed
/// by thread name (tokio's workers share one), from
/// /proc/PID/task/*/schedstat: nanoseconds on a CPU, where `stat` counts
/// 10 ms ticks (too coarse for a run of a few milliseconds); `stat`'s
/// ticks where the kernel has no schedstat. A thread that exited is not
/// counted.
pub fn cpu_by_thread(pid: u32) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
    let mut by = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let dir = task?.path();
        // A thread that exited meanwhile has nothing left to read.
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        let Some((name, ticks)) = parse_stat(&stat) else {
            continue;
        };
        let ran = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| parse_schedstat(&s))
            .unwrap_or(ticks);
        *by.entry(name.to_owned()).or_insert(0.0) += ran;
    }
    Ok(by)
}

/// [`cpu_by_thread`] summed: the process's live threads' CPU time.
pub fn live_threads_cpu(pid: u32) -> anyhow::Result<f64> {
    Ok(cpu_by_thread(pid)?.values().sum())
}

/// A `schedstat` line's time on a CPU (its first field, nanoseconds), in
/// seconds.
fn parse_schedstat(line: &str) -> Option<f64> {
    let ns: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// A `stat` line's command name and its CPU time (utime + stime, clock
/// ticks of USER_HZ, 100 on Linux) in seconds.
fn parse_stat(stat: &str) -> Option<(&str, f64)> {
    // The name is in parentheses and may itself hold spaces or ')'.
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let tick = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((stat.get(open + 1..close)?, (tick(11)? + tick(12)?) / 100.0))
}

/// The median of `values` (the lower middle one of an even count; 0 when
/// there are none).
pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let s = Summary::of(&samples);
        assert_eq!(s.n, 100);
        assert_eq!(s.p50_us, 50.0);
        assert_eq!(s.p99_us, 99.0);
        assert_eq!(s.max_us, 100.0);
        assert_eq!(Summary::of(&[]).n, 0);
    }

    #[test]
    fn reads_kib_fields() {
        let text = "Name:\tx\nVmRSS:\t   1234 kB\n";
        assert_eq!(kib_field(text, "VmRSS:"), Some(1234));
        assert_eq!(kib_field(text, "VmHWM:"), None);
    }

    #[test]
    fn a_tree_counts_its_children() {
        let me = std::process::id();
        let alone = tree_pss_bytes(me).expect("own smaps_rollup");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        // The child's pages are counted once it has exec'd.
        std::thread::sleep(Duration::from_millis(200));
        let with_child = tree_pss_bytes(me).expect("tree");
        let _ = child.kill();
        let _ = child.wait();
        assert!(with_child > alone, "{with_child} <= {alone}");
        assert!(tree_pss_bytes(u32::MAX).is_err());
    }

    #[test]
    fn a_stat_line_gives_its_name_and_cpu_time() {
        let line = "42 (tokio (rt) worker) S 1 42 42 0 -1 4194368 1 0 0 0 250 70 0 0 20 0 3";
        assert_eq!(parse_stat(line), Some(("tokio (rt) worker", 3.2)));
        assert_eq!(parse_stat("42 (short) S 1"), None);
    }

    #[test]
    fn a_schedstat_line_gives_its_time_on_a_cpu() {
        assert_eq!(parse_schedstat("1500000000 3103131 2\n"), Some(1.5));
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn reads_own_threads_cpu_time() {
        std::thread::Builder::new()
            .name("stats-spin".to_owned())
            .spawn(|| {
                let by = cpu_by_thread(std::process::id()).expect("own tasks");
                assert!(by.contains_key("stats-spin"), "{by:?}");
                assert!(by.values().all(|&s| s >= 0.0));
            })
            .expect("spawn")
            .join()
            .expect("join");
    }

    #[test]
    fn reads_own_cpu_time() {
        let cpu = cpu_seconds(std::process::id()).expect("own stat");
        assert!(cpu >= 0.0);
    }
}
