//! `agent-runner threads`, `ps`, `interrupt THREAD` and `kill THREAD`:
//! clients of the running runner's admin socket (`crate::ops::admin`) in
//! its state dir, found as `run` finds it ([`RunnerLocation`]).
//!
//! The roles, as kubectl and gh users expect them: `threads` lists threads
//! (agent, SDK, model, state — running, waiting for a turn slot, idle —
//! running turn); `ps` lists processes (every live agent process, by
//! thread, as trees); `interrupt` stops a thread's running turn (or cancels
//! its messages waiting for a slot); `kill` ends every process of a thread
//! (its running turn is interrupted first, so the control plane sees it
//! end).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::locate::RunnerLocation;
use super::table::{Align, Table};
use crate::ops::human;

/// Where the running runner is and how to print.
#[derive(Debug, clap::Args)]
pub struct AdminArgs {
    /// Print the runner's JSON answer as is.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    runner: RunnerLocation,
}

/// Flags of `agent-runner interrupt`.
#[derive(Debug, clap::Args)]
pub struct InterruptArgs {
    /// The thread whose running turn is interrupted.
    thread: String,
    #[command(flatten)]
    admin: AdminArgs,
}

/// Flags of `agent-runner kill`.
#[derive(Debug, clap::Args)]
pub struct KillArgs {
    /// The thread whose processes are killed.
    thread: String,
    /// Accepted for scripts written when `kill` only interrupted and
    /// `--tree` killed: `kill` always kills every process of the thread now.
    #[arg(long, hide = true)]
    tree: bool,
    #[command(flatten)]
    admin: AdminArgs,
}

async fn ask(args: &AdminArgs, request: Value) -> anyhow::Result<Value> {
    let state_dir = args.runner.state_dir()?;
    let path = crate::ops::admin::socket_path(&state_dir);
    let mut stream = tokio::net::UnixStream::connect(&path).await.map_err(|e| {
        anyhow::anyhow!(
            "{}: {e} (is the runner running with this state dir? set --state-dir, --config or AGENT_RUNNER_STATE_DIR as for `run`)",
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

/// `agent-runner ps`: every live agent process, by thread.
pub async fn ps(args: AdminArgs) -> anyhow::Result<()> {
    let answer = ask(&args, json!({"cmd": "ps"})).await?;
    if args.json {
        println!("{answer}");
        return Ok(());
    }
    print!("{}", render_ps(&answer));
    Ok(())
}

fn render_ps(answer: &Value) -> String {
    let mut table = Table::new(&[
        ("THREAD", Align::Left),
        ("PID", Align::Right),
        ("CPU", Align::Right),
        ("RSS", Align::Right),
        ("AGE", Align::Right),
        ("COMMAND", Align::Left),
    ]);
    let threads: Vec<&Value> = answer["threads"].as_array().into_iter().flatten().collect();
    for t in &threads {
        let thread = t["thread_id"].as_str().unwrap_or("?");
        let procs: Vec<&Value> = t["processes"].as_array().into_iter().flatten().collect();
        let pids: Vec<u64> = procs.iter().filter_map(|p| p["pid"].as_u64()).collect();
        let mut children: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
        let mut roots = Vec::new();
        for p in &procs {
            match p["ppid"].as_u64() {
                Some(pp) if pids.contains(&pp) => children.entry(pp).or_default().push(p),
                _ => roots.push(*p),
            }
        }
        let mut ordered = Vec::new();
        for r in roots {
            tree_order(r, 0, &children, &mut ordered);
        }
        for (p, depth) in ordered {
            table.row(vec![
                thread.to_owned(),
                p["pid"].to_string(),
                p["cpu_s"].as_f64().map(human::seconds).unwrap_or_default(),
                p["rss_kib"].as_u64().map(human::kib).unwrap_or_default(),
                p["age_s"].as_f64().map(human::seconds).unwrap_or_default(),
                format!(
                    "{}{}",
                    "  ".repeat(depth),
                    p["command"].as_str().unwrap_or("")
                ),
            ]);
        }
    }
    let asking: String = threads
        .iter()
        .filter_map(|t| {
            approvals_waiting(t)
                .map(|a| format!("{}: {a}\n", t["thread_id"].as_str().unwrap_or("?")))
        })
        .collect();
    if table.is_empty() {
        return format!(
            "no agent processes ({} threads; `agent-runner threads` lists them)\n{asking}",
            threads.len()
        );
    }
    format!("{}{asking}", table.render())
}

/// `awaiting 2 approvals (oldest 3m 2s)` for a thread whose agent waits
/// for the control plane's decisions; `None` when it waits for none.
fn approvals_waiting(thread: &Value) -> Option<String> {
    let list: Vec<&Value> = thread["approvals"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let oldest = list
        .iter()
        .filter_map(|a| a["waiting_for_ms"].as_u64())
        .max()?;
    let age = human::duration(std::time::Duration::from_millis(oldest));
    Some(match list.as_slice() {
        [one] => format!(
            "awaiting approval {} ({}, {age})",
            one["approval_id"].as_str().unwrap_or("?"),
            one["kind"].as_str().unwrap_or("?")
        ),
        many => format!("awaiting {} approvals (oldest {age})", many.len()),
    })
}

/// `p` and its descendants, depth first, with their depth.
fn tree_order<'a>(
    p: &'a Value,
    depth: usize,
    children: &BTreeMap<u64, Vec<&'a Value>>,
    out: &mut Vec<(&'a Value, usize)>,
) {
    out.push((p, depth));
    // A pid loop cannot happen in /proc, but the depth is bounded anyway.
    if depth > 64 {
        return;
    }
    let pid = p["pid"].as_u64().unwrap_or(0);
    for c in children.get(&pid).into_iter().flatten() {
        tree_order(c, depth + 1, children, out);
    }
}

/// `agent-runner threads`: agents and their threads with their state.
pub async fn threads(args: AdminArgs) -> anyhow::Result<()> {
    let answer = ask(&args, json!({"cmd": "threads"})).await?;
    if args.json {
        println!("{answer}");
        return Ok(());
    }
    print!("{}", render_threads(&answer));
    Ok(())
}

fn render_threads(answer: &Value) -> String {
    let mut table = Table::new(&[
        ("AGENT", Align::Left),
        ("SDK", Align::Left),
        ("THREAD", Align::Left),
        ("STATE", Align::Left),
        ("TURN", Align::Left),
        ("FOR", Align::Right),
        ("MODEL", Align::Left),
    ]);
    let s = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    for a in answer["agents"].as_array().into_iter().flatten() {
        let threads: Vec<&Value> = a["threads"].as_array().into_iter().flatten().collect();
        if threads.is_empty() {
            table.row(vec![
                s(&a["agent_id"]),
                s(&a["sdk"]),
                "-".into(),
                "no threads".into(),
            ]);
        }
        for t in threads {
            // How long the turn has run, or waited for a slot.
            let running_for = t["running_for_ms"]
                .as_u64()
                .or_else(|| t["waiting"]["waiting_for_ms"].as_u64())
                .map(|ms| human::duration(std::time::Duration::from_millis(ms)))
                .unwrap_or_else(|| "-".to_owned());
            let state = match t["waiting"]["messages"].as_u64() {
                Some(n) if n > 1 => format!("{} ({n} messages)", s(&t["state"])),
                _ => s(&t["state"]),
            };
            let state = match approvals_waiting(t) {
                Some(asking) => format!("{state}, {asking}"),
                None => state,
            };
            table.row(vec![
                s(&a["agent_id"]),
                s(&a["sdk"]),
                s(&t["thread_id"]),
                state,
                s(&t["turn_id"]),
                running_for,
                s(&t["model"]),
            ]);
        }
    }
    if table.is_empty() {
        return "no agents\n".to_owned();
    }
    table.render()
}

/// `agent-runner interrupt THREAD`.
pub async fn interrupt(args: InterruptArgs) -> anyhow::Result<()> {
    let answer = ask(
        &args.admin,
        json!({"cmd": "interrupt", "thread": args.thread}),
    )
    .await?;
    if args.admin.json {
        println!("{answer}");
    } else {
        println!("thread {}: {}", args.thread, interrupted(&answer));
    }
    Ok(())
}

/// `agent-runner kill THREAD`.
pub async fn kill(args: KillArgs) -> anyhow::Result<()> {
    // `tree` for a runner of an earlier version, where it was optional.
    let answer = ask(
        &args.admin,
        json!({"cmd": "kill", "thread": args.thread, "tree": true}),
    )
    .await?;
    if args.admin.json {
        println!("{answer}");
        return Ok(());
    }
    let killed = match answer["killed"].as_u64() {
        Some(0) => "no process was running".to_owned(),
        Some(1) => "1 process killed".to_owned(),
        Some(n) => format!("{n} processes killed"),
        None => "every process of the thread killed".to_owned(),
    };
    println!("thread {}: {}; {killed}", args.thread, interrupted(&answer));
    Ok(())
}

fn interrupted(answer: &Value) -> &'static str {
    let said = |key: &str| answer[key].as_bool().unwrap_or(false);
    if said("interrupted") {
        "running turn interrupted"
    } else if said("cancelled_waiting") {
        "messages waiting for a turn slot cancelled"
    } else {
        "no turn was running"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_lists_processes_as_aligned_trees() {
        let answer = json!({"threads": [
            {"thread_id": "t1", "processes": [
                {"pid": 10, "ppid": 1, "cpu_s": 5.013, "rss_kib": 2048, "age_s": 192.4, "command": "sh -c sleep 300"},
                {"pid": 123456, "ppid": 10, "cpu_s": 0.0, "rss_kib": 800, "age_s": 7265.0, "command": "sleep 300"},
            ]},
            {"thread_id": "idle-thread", "processes": []},
        ]});
        assert_eq!(
            render_ps(&answer),
            "THREAD     PID   CPU   RSS     AGE  COMMAND\n\
             t1          10  5.0s  2.0M  3m 12s  sh -c sleep 300\n\
             t1      123456   0ms  800K   2h 1m    sleep 300\n"
        );
        let none = json!({"threads": [{"thread_id": "t", "processes": []}]});
        assert!(render_ps(&none).starts_with("no agent processes (1 threads"));
    }

    #[test]
    fn threads_lists_threads_with_their_turns() {
        let answer = json!({"agents": [
            {"agent_id": "a", "sdk": "scripted", "threads": [
                {"thread_id": "t1", "model": "scripted-fast", "state": "running", "turn_id": "turn-9", "running_for_ms": 5013},
                {"thread_id": "t22", "model": "m", "state": "idle", "turn_id": null},
                {"thread_id": "t3", "model": "m", "state": "waiting", "turn_id": null,
                 "waiting": {"messages": 2, "waiting_for_ms": 1200}},
            ]},
            {"agent_id": "b", "sdk": "codex", "threads": []},
        ]});
        assert_eq!(
            render_threads(&answer),
            "AGENT  SDK       THREAD  STATE                 TURN     FOR  MODEL\n\
             a      scripted  t1      running               turn-9  5.0s  scripted-fast\n\
             a      scripted  t22     idle                  -          -  m\n\
             a      scripted  t3      waiting (2 messages)  -       1.2s  m\n\
             b      codex     -       no threads\n"
        );
        assert_eq!(render_threads(&json!({"agents": []})), "no agents\n");
    }

    #[test]
    fn waiting_approvals_show_with_their_age() {
        let one = json!([{"approval_id": "apr-1-1", "kind": "command_execution", "waiting_for_ms": 62000}]);
        let answer = json!({"agents": [{"agent_id": "a", "sdk": "scripted", "threads": [
            {"thread_id": "t1", "model": "m", "state": "running", "turn_id": "turn-9",
             "running_for_ms": 63000, "approvals": one},
        ]}]});
        let shown = render_threads(&answer);
        assert!(
            shown.contains("running, awaiting approval apr-1-1 (command_execution, 1m 2s)"),
            "{shown}"
        );
        let two = json!({"threads": [{"thread_id": "t1", "processes": [], "approvals": [
            {"approval_id": "x", "kind": "question", "waiting_for_ms": 1000},
            {"approval_id": "y", "kind": "question", "waiting_for_ms": 3000},
        ]}]});
        let shown = render_ps(&two);
        assert!(
            shown.ends_with("t1: awaiting 2 approvals (oldest 3.0s)\n"),
            "{shown}"
        );
    }

    #[test]
    fn kill_takes_the_old_tree_flag_and_interrupt_is_its_own_verb() {
        use clap::Parser as _;
        let parse = |argv: &[&str]| crate::cli::Cli::try_parse_from(argv).map(|_| ());
        parse(&["agent-runner", "kill", "t1"]).unwrap();
        parse(&["agent-runner", "kill", "t1", "--tree"]).unwrap();
        parse(&["agent-runner", "interrupt", "t1", "--json"]).unwrap();
        assert!(parse(&["agent-runner", "interrupt", "t1", "--tree"]).is_err());
        for listing in ["ps", "threads"] {
            parse(&["agent-runner", listing, "--json", "--config", "r.toml"]).unwrap();
        }
    }
}
