//! A CPU profile of the runner while the bench drives it: `perf
//! record` attached to the runner's pid, rendered as a flame graph SVG by
//! inferno (`inferno-collapse-perf` + `inferno-flamegraph`, installed into
//! `target/bench-tools` by `bench/run.sh`), plus the functions that take
//! the most samples themselves, for the README.
//!
//! Where `perf` cannot record (not installed, `perf_event_paranoid`, a
//! container without the syscall) or inferno is missing, the bench says so
//! and goes on without the SVG.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context as _, Result, bail};
use tokio::io::AsyncWriteExt as _;
use tokio::process::{Child, Command};

/// A `perf record` running against the runner.
pub struct Recording {
    perf: Child,
    data: PathBuf,
}

/// Starts sampling `pid` (DWARF call stacks, 999 Hz) into `<out>/perf.data`;
/// `None`, said on stderr, when perf is not available.
pub async fn start(pid: u32, out: &Path) -> Option<Recording> {
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!(
            "  profile: cannot create {}: {e}; no profile",
            out.display()
        );
        return None;
    }
    let data = out.join("perf.data");
    let spawned = Command::new("perf")
        // DWARF unwinding: a release build has no frame pointers, and
        // frame-pointer stacks stop at the first function without one.
        .args([
            "record",
            "-F",
            "999",
            "--call-graph",
            "dwarf,16384",
            "-q",
            "-o",
        ])
        .arg(&data)
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    match spawned {
        Ok(perf) => {
            // perf needs a moment to attach; an early exit means it cannot.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let mut rec = Recording { perf, data };
            match rec.perf.try_wait() {
                Ok(Some(status)) => {
                    let err = match rec.perf.stderr.take() {
                        Some(mut s) => {
                            let mut text = String::new();
                            let _ =
                                tokio::io::AsyncReadExt::read_to_string(&mut s, &mut text).await;
                            text
                        }
                        None => String::new(),
                    };
                    eprintln!(
                        "  profile: perf record exited ({status}): {}; no profile SVG",
                        err.trim()
                    );
                    None
                }
                _ => Some(rec),
            }
        }
        Err(e) => {
            eprintln!(
                "  profile: cannot run perf ({e}); no profile SVG (Debian: apt-get install linux-perf)"
            );
            None
        }
    }
}

/// What the profile shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Profile {
    /// The flame graph.
    pub svg: PathBuf,
    /// The summed sample weight (perf's period: nanoseconds of CPU time
    /// when perf samples `cpu-clock`, as in a VM without hardware counters).
    pub weight: u64,
    /// The functions with the most samples of their own, with their share.
    pub top_self: Vec<(String, f64)>,
}

/// Stops the recording and renders `svg`; `None` (said on stderr) when
/// something needed is missing.
pub async fn finish(rec: Option<Recording>, svg: &Path) -> Option<Profile> {
    let mut rec = rec?;
    match render(&mut rec, svg).await {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("  profile: {e:#}; no profile SVG");
            None
        }
    }
}

async fn render(rec: &mut Recording, svg: &Path) -> Result<Profile> {
    if let Some(pid) = rec.perf.id() {
        // SIGINT: perf writes its data and exits.
        interrupt(pid)?;
    }
    rec.perf.wait().await.context("waiting for perf record")?;
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(&rec.data)
        .stderr(Stdio::null())
        .output()
        .await
        .context("perf script")?;
    if !script.status.success() {
        bail!("perf script failed ({})", script.status);
    }
    let folded = pipe(&tool("inferno-collapse-perf"), &[], &script.stdout)
        .await
        .context("inferno-collapse-perf (bench/run.sh installs it into target/bench-tools)")?;
    let image = pipe(
        &tool("inferno-flamegraph"),
        &["--title", "agent-runner during update throughput runs"],
        &folded,
    )
    .await
    .context("inferno-flamegraph")?;
    std::fs::write(svg, &image).with_context(|| format!("writing {}", svg.display()))?;
    // The folded stacks too: greppable, and what the top list is made of.
    let folded_path = svg.with_extension("folded");
    std::fs::write(&folded_path, &folded)
        .with_context(|| format!("writing {}", folded_path.display()))?;
    let _ = std::fs::remove_file(&rec.data);
    let (weight, top_self) = top_self(&String::from_utf8_lossy(&folded), 12);
    Ok(Profile {
        svg: svg.to_owned(),
        weight,
        top_self,
    })
}

/// Sends SIGINT through `kill(1)` (the bench has no libc binding).
fn interrupt(pid: u32) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .context("kill -INT perf")?;
    if !status.success() {
        bail!("kill -INT {pid} failed");
    }
    Ok(())
}

/// `name` in `target/bench-tools/bin` if it is there, else on PATH.
fn tool(name: &str) -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| "target".into(), PathBuf::from);
    let local = target.join("bench-tools/bin").join(name);
    if local.exists() { local } else { name.into() }
}

/// Runs `bin args` with `input` on stdin; its stdout.
async fn pipe(bin: &Path, args: &[&str], input: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("running {}", bin.display()))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let input = input.to_vec();
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&input).await;
    });
    let out = child.wait_with_output().await?;
    let _ = writer.await;
    if !out.status.success() {
        bail!("{} failed ({})", bin.display(), out.status);
    }
    Ok(out.stdout)
}

/// From folded stacks (`a;b;c 12`): total samples and the `n` leaf
/// functions with the largest share.
fn top_self(folded: &str, n: usize) -> (u64, Vec<(String, f64)>) {
    let mut by_leaf: HashMap<&str, u64> = HashMap::new();
    let mut total = 0;
    for line in folded.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue;
        };
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        *by_leaf.entry(leaf).or_default() += count;
        total += count;
    }
    let mut top: Vec<(String, f64)> = by_leaf
        .into_iter()
        .map(|(f, c)| (f.to_owned(), c as f64 / total.max(1) as f64))
        .collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    top.truncate(n);
    (total, top)
}
