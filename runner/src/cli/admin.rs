//! `agent-runner ps`, `threads` and `kill THREAD [--tree]`: clients of the
//! running runner's admin socket (`crate::ops::admin`) in its state dir.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Where the running runner is and how to print.
#[derive(Debug, clap::Args)]
pub struct AdminArgs {
    /// Print the runner's JSON answer as is.
    #[arg(long)]
    json: bool,
    /// The runner's state dir (its admin socket is `admin.sock` there).
    /// Default: ~/.agent-runner/state.
    #[arg(long, env = "AGENT_RUNNER_STATE_DIR")]
    state_dir: Option<PathBuf>,
}

/// Flags of `agent-runner kill`.
#[derive(Debug, clap::Args)]
pub struct KillArgs {
    /// The thread whose running turn is interrupted.
    thread: String,
    /// Also kill every process of the thread.
    #[arg(long)]
    tree: bool,
    #[command(flatten)]
    admin: AdminArgs,
}

async fn ask(args: &AdminArgs, request: Value) -> anyhow::Result<Value> {
    let state_dir = args.state_dir.clone().unwrap_or_else(|| {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."))
            .join(".agent-runner/state")
    });
    let path = crate::ops::admin::socket_path(&state_dir);
    let mut stream = tokio::net::UnixStream::connect(&path).await.map_err(|e| {
        anyhow::anyhow!(
            "{}: {e} (is the runner running with this state dir? set --state-dir or AGENT_RUNNER_STATE_DIR)",
            path.display()
        )
    })?;
    let mut line = request.to_string();
    line.push('\n');
    stream.write_all(line.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let value: Value = serde_json::from_str(answer.trim())
        .map_err(|e| anyhow::anyhow!("the runner's answer is not JSON: {e}"))?;
    if let Some(err) = value["error"].as_str() {
        anyhow::bail!("{err}");
    }
    Ok(value)
}

/// `agent-runner ps`.
pub async fn ps(args: AdminArgs) -> anyhow::Result<()> {
    let answer = ask(&args, json!({"cmd": "ps"})).await?;
    if args.json {
        println!("{answer}");
        return Ok(());
    }
    for t in answer["threads"].as_array().into_iter().flatten() {
        let turn = match &t["turn"] {
            Value::Null => "no turn running".to_owned(),
            turn => format!(
                "turn {} running for {}s",
                turn["turn_id"].as_str().unwrap_or("?"),
                turn["running_for_s"]
            ),
        };
        println!(
            "thread {}  agent {}  sdk {}  {turn}",
            t["thread_id"].as_str().unwrap_or("?"),
            t["agent_id"].as_str().unwrap_or("?"),
            t["sdk"].as_str().unwrap_or("?")
        );
        let procs: Vec<&Value> = t["processes"].as_array().into_iter().flatten().collect();
        if procs.is_empty() {
            continue;
        }
        println!(
            "  {:>7} {:>8} {:>9} {:>8}  COMMAND",
            "PID", "CPU(s)", "RSS(KiB)", "AGE(s)"
        );
        let pids: Vec<u64> = procs.iter().filter_map(|p| p["pid"].as_u64()).collect();
        let mut children: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
        let mut roots = Vec::new();
        for p in &procs {
            match p["ppid"].as_u64() {
                Some(pp) if pids.contains(&pp) => children.entry(pp).or_default().push(p),
                _ => roots.push(*p),
            }
        }
        fn show(p: &Value, depth: usize, children: &BTreeMap<u64, Vec<&Value>>) {
            println!(
                "  {:>7} {:>8.2} {:>9} {:>8.0}  {}{}",
                p["pid"],
                p["cpu_s"].as_f64().unwrap_or(0.0),
                p["rss_kib"],
                p["age_s"].as_f64().unwrap_or(0.0),
                "  ".repeat(depth),
                p["command"].as_str().unwrap_or("")
            );
            let pid = p["pid"].as_u64().unwrap_or(0);
            for c in children.get(&pid).into_iter().flatten() {
                show(c, depth + 1, children);
            }
        }
        for r in roots {
            show(r, 0, &children);
        }
    }
    Ok(())
}

/// `agent-runner threads`.
pub async fn threads(args: AdminArgs) -> anyhow::Result<()> {
    let answer = ask(&args, json!({"cmd": "threads"})).await?;
    if args.json {
        println!("{answer}");
        return Ok(());
    }
    for a in answer["agents"].as_array().into_iter().flatten() {
        println!(
            "agent {}  sdk {}",
            a["agent_id"].as_str().unwrap_or("?"),
            a["sdk"].as_str().unwrap_or("?")
        );
        for t in a["threads"].as_array().into_iter().flatten() {
            let state = t["state"].as_str().unwrap_or("?");
            let extra = match t["turn_id"].as_str() {
                Some(turn) => format!("  turn {turn} for {}s", t["running_for_s"]),
                None => String::new(),
            };
            println!(
                "  thread {}  model {}  {state}{extra}",
                t["thread_id"].as_str().unwrap_or("?"),
                t["model"].as_str().unwrap_or("?")
            );
        }
    }
    Ok(())
}

/// `agent-runner kill THREAD [--tree]`.
pub async fn kill(args: KillArgs) -> anyhow::Result<()> {
    let answer = ask(
        &args.admin,
        json!({"cmd": "kill", "thread": args.thread, "tree": args.tree}),
    )
    .await?;
    if args.admin.json {
        println!("{answer}");
    } else {
        let interrupted = answer["interrupted"].as_bool().unwrap_or(false);
        println!(
            "thread {}: {}{}",
            args.thread,
            if interrupted {
                "running turn interrupted"
            } else {
                "no turn was running"
            },
            if args.tree {
                "; every process of the thread killed"
            } else {
                ""
            }
        );
    }
    Ok(())
}
