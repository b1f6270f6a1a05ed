//! The `bash` tool: one shell command in the workspace, started through the
//! session's sandbox (the launcher every process starts through: confined
//! to the workspace, HOME and TMPDIR, a clean environment, its own session
//! and process group), with a timeout, an output cap and the whole group
//! killed on timeout or cancel. Without a sandbox no shell starts.
//!
//! stdout and stderr share one pipe so their lines interleave as a terminal
//! would show them. When the shell exits, whatever it left running in its
//! group (`server &`) is ended too, so a call never leaks processes; a
//! process that left the group with `setsid` is beyond reach, and reading
//! its output stops after a short wait.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_launcher::{Launch, SandboxChild, ThreadSandbox};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::args::{object, object_schema, optional_u64, required_str};
use super::child_env::child_env;
use super::process_group::{Ended, drain, read_capped, wait_group};
use super::{Lane, Tool, ToolContext, ToolInfo, ToolOutput};

/// Longest timeout a call may ask for.
const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// `bash`: runs a shell command in the workspace, in its own process group, with a timeout and a capped output.
pub struct BashTool;

static INFO: ToolInfo = ToolInfo {
    name: "bash",
    description: "Run a shell command in the workspace (cwd = workspace root). Returns combined \
                  stdout and stderr (long output keeps its start and end) and the exit code. \
                  The command is killed with everything it started when it times out \
                  (timeout_ms, default 120000) or the turn is cancelled; background processes \
                  do not outlive the call.",
    lane: Lane::Execute,
    parameters,
};

fn parameters() -> Value {
    object_schema(
        json!({
            "command": {"type": "string", "description": "The shell command to run."},
            "timeout_ms": {"type": "integer", "minimum": 1, "description": "Timeout in milliseconds (default 120000, at most 3600000)."}
        }),
        &["command"],
    )
}

#[async_trait]
impl Tool for BashTool {
    fn info(&self) -> &'static ToolInfo {
        &INFO
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let command = match object(&args).and_then(|()| required_str(&args, "command")) {
            Ok(command) => command.to_string(),
            Err(err) => return ToolOutput::err(err),
        };
        if command.trim().is_empty() {
            return ToolOutput::err("argument `command` is empty");
        }
        let timeout = match optional_u64(&args, "timeout_ms") {
            Ok(Some(0)) => return ToolOutput::err("argument `timeout_ms` must be at least 1"),
            Ok(Some(ms)) => Duration::from_millis(ms).min(MAX_TIMEOUT),
            Ok(None) => ctx.bash_timeout,
            Err(err) => return ToolOutput::err(err),
        };
        run_command(&command, timeout, ctx).await
    }
}

async fn run_command(command: &str, timeout: Duration, ctx: &ToolContext) -> ToolOutput {
    let cwd = ctx.workspace.display().to_string();
    let base = |output: ToolOutput| output.with("command", command).with("cwd", cwd.as_str());
    let (reader, writer) = match std::io::pipe() {
        Ok(pair) => pair,
        Err(err) => return base(ToolOutput::err(format!("cannot create a pipe: {err}"))),
    };
    let sandbox = match &ctx.sandbox {
        Ok(sandbox) => sandbox,
        Err(why) => return base(ToolOutput::err(format!("cannot start the shell: {why}"))),
    };
    let spawned = spawn(command, &ctx.workspace, &ctx.env, sandbox, writer);
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => return base(ToolOutput::err(format!("cannot start the shell: {err}"))),
    };
    let pid = child.id();
    let reading = tokio::spawn(read_capped(reader, ctx.output_cap));
    let ended = wait_group(&mut child, pid as i32, timeout, &ctx.cancel).await;
    let output = drain(reading).await;
    finish(base, output, pid, ended, timeout)
}

fn finish(
    base: impl Fn(ToolOutput) -> ToolOutput,
    output: String,
    pid: u32,
    ended: Ended,
    timeout: Duration,
) -> ToolOutput {
    let Ended {
        status,
        timed_out,
        cancelled,
    } = ended;
    let (exit_code, signal) = match &status {
        Ok(status) => (status.code(), status.signal()),
        Err(_) => (None, None),
    };
    let error = if timed_out {
        Some(format!(
            "command timed out after {} ms",
            timeout.as_millis()
        ))
    } else if cancelled {
        Some("command cancelled".to_string())
    } else {
        match (&status, exit_code, signal) {
            (Err(err), _, _) => Some(format!("cannot wait for the shell: {err}")),
            (_, Some(0), _) => None,
            (_, Some(code), _) => Some(format!("command exited with code {code}")),
            (_, None, Some(signal)) => Some(format!("command killed by signal {signal}")),
            (_, None, None) => Some("command ended without an exit status".to_string()),
        }
    };
    let mut result = ToolOutput {
        success: error.is_none(),
        output,
        error,
        metadata: Default::default(),
    };
    result = base(result)
        .with("pid", pid.to_string())
        .with("timed_out", timed_out.to_string())
        .with("cancelled", cancelled.to_string());
    if let Some(code) = exit_code {
        result = result.with("exit_code", code.to_string());
    }
    if let Some(signal) = signal {
        result = result.with("signal", signal.to_string());
    }
    result
}

fn spawn(
    command: &str,
    workspace: &Path,
    extra_env: &[(String, String)],
    sandbox: &ThreadSandbox,
    writer: std::io::PipeWriter,
) -> std::io::Result<SandboxChild> {
    let stderr = writer.try_clone()?;
    // The sandbox starts from an empty environment plus its allowlist; the
    // session's variables (minus secrets) are added on top. `launch` starts
    // the shell inside the thread's cgroup rather than moving it there: a
    // cgroup migration per call would cost more than the call.
    let launch = Launch::new(shell())
        .arg("-c")
        .arg(command)
        .current_dir(workspace)
        .envs(child_env(std::iter::empty(), extra_env))
        .stdout(writer)
        .stderr(stderr);
    // `launch` owns the write ends and closes them once the child has
    // them, so the pipe reaches EOF once the group has closed its copies.
    let (child, applied) = sandbox.launch(launch).map_err(std::io::Error::other)?;
    tracing::debug!(%applied, "bash launched");
    Ok(child)
}

/// `bash` when it is on PATH, else `/bin/sh`.
fn shell() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join("bash"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| PathBuf::from("/bin/sh"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::process_group::group_alive;
    use std::sync::Arc;
    use std::time::Instant;

    /// A temporary workspace whose `bash` runs in a best-effort sandbox
    /// (HOME and TMPDIR in a second temporary directory).
    type Ctx = (tempfile::TempDir, tempfile::TempDir);

    fn ctx() -> (Ctx, ToolContext) {
        let (dir, ctx) = crate::tools::temp_context();
        let private = tempfile::tempdir().unwrap();
        let launcher = agent_launcher::Launcher::new(agent_launcher::LauncherConfig {
            cgroups: false,
            ..agent_launcher::LauncherConfig::new(agent_launcher::Mode::BestEffort, "engine-tests")
        })
        .unwrap();
        let sandbox = launcher
            .thread(agent_launcher::ThreadSpec {
                workspace: ctx.workspace.clone(),
                home_dir: private.path().join("home"),
                tmp_dir: private.path().join("tmp"),
                ..Default::default()
            })
            .unwrap();
        ((dir, private), ctx.with_sandbox(Arc::new(sandbox)))
    }

    /// No live process of the group remains now, and the group disappears
    /// entirely (zombies reaped) within a generous bound.
    async fn assert_group_gone(pgid: i32) {
        assert!(!group_alive(pgid), "a live process of group {pgid} remains");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // SAFETY: signal 0 only checks for existence.
            let rc = unsafe { libc::kill(-pgid, 0) };
            if rc != 0 {
                assert_eq!(
                    std::io::Error::last_os_error().raw_os_error(),
                    Some(libc::ESRCH)
                );
                return;
            }
            assert!(Instant::now() < deadline, "group {pgid} still exists");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn runs_in_the_workspace_and_reports_exit_code() {
        let (_dir, ctx) = ctx();
        std::fs::write(ctx.workspace.join("hello.txt"), "hi\n").unwrap();
        let out = BashTool
            .run(json!({"command": "cat hello.txt; echo err >&2; pwd"}), &ctx)
            .await;
        assert!(out.success, "{out:?}");
        assert_eq!(
            out.output,
            format!("hi\nerr\n{}\n", ctx.workspace.display())
        );
        assert_eq!(out.metadata["exit_code"], "0");
        assert_eq!(out.metadata["cwd"], ctx.workspace.display().to_string());
        assert_eq!(out.metadata["timed_out"], "false");
        assert!(out.metadata["pid"].parse::<u32>().unwrap() > 1);

        let failed = BashTool
            .run(json!({"command": "echo no; exit 3"}), &ctx)
            .await;
        assert!(!failed.success);
        assert_eq!(failed.output, "no\n");
        assert_eq!(failed.metadata["exit_code"], "3");
        assert!(failed.error.unwrap().contains("code 3"));
    }

    #[tokio::test]
    async fn bad_arguments_are_tool_errors() {
        let (_dir, ctx) = ctx();
        assert!(!BashTool.run(json!({}), &ctx).await.success);
        assert!(!BashTool.run(json!({"command": "  "}), &ctx).await.success);
        let out = BashTool
            .run(json!({"command": "true", "timeout_ms": "soon"}), &ctx)
            .await;
        assert!(out.error.unwrap().contains("timeout_ms"));
    }

    #[tokio::test]
    async fn output_is_capped_keeping_head_and_tail() {
        let (_dir, mut ctx) = ctx();
        ctx.output_cap = 100;
        let out = BashTool
            .run(
                json!({"command": "echo FIRST; seq 1 5000; echo LAST"}),
                &ctx,
            )
            .await;
        assert!(out.success);
        assert!(out.output.starts_with("FIRST\n"), "{}", out.output);
        assert!(out.output.ends_with("LAST\n"), "{}", out.output);
        assert!(out.output.contains("bytes of output omitted"));
        assert!(out.output.len() < 200);
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let (_dir, ctx) = ctx();
        let out = BashTool
            .run(
                json!({"command": "sh -c 'sleep 30 & sleep 30'", "timeout_ms": 300}),
                &ctx,
            )
            .await;
        assert!(!out.success);
        assert_eq!(out.metadata["timed_out"], "true");
        assert!(out.error.unwrap().contains("timed out"));
        let pgid: i32 = out.metadata["pid"].parse().unwrap();
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn cancel_kills_the_whole_group() {
        let (_dir, ctx) = ctx();
        std::fs::write(ctx.workspace.join("started"), "").unwrap();
        let cancel = ctx.cancel.clone();
        let marker = ctx.workspace.join("running");
        let run = BashTool.run(
            json!({"command": "sh -c 'sleep 30 & touch running; sleep 30'"}),
            &ctx,
        );
        let trigger = async {
            while !marker.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            cancel.cancel();
        };
        let (out, ()) = tokio::join!(run, trigger);
        assert!(!out.success);
        assert_eq!(out.metadata["cancelled"], "true");
        assert_eq!(out.metadata["timed_out"], "false");
        let pgid: i32 = out.metadata["pid"].parse().unwrap();
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn dropping_the_call_kills_the_group() {
        let (_dir, ctx) = ctx();
        let marker = ctx.workspace.join("running");
        let pid_file = ctx.workspace.join("pgid");
        let run = BashTool.run(
            json!({"command": "sh -c 'sleep 300 & echo $$ > pgid; touch running; sleep 300'"}),
            &ctx,
        );
        let wait_started = async {
            while !marker.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            _ = run => panic!("the command finished"),
            () = wait_started => {}
        }
        // The inner sh is in the tool's group; its pgid is the tool's pid.
        let inner: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let pgid = std::fs::read_to_string(format!("/proc/{inner}/stat"))
            .ok()
            .and_then(|stat| {
                let rest = stat.rsplit_once(')')?.1.to_string();
                rest.split_whitespace().nth(2)?.parse::<i32>().ok()
            })
            .unwrap_or(inner);
        let deadline = Instant::now() + Duration::from_secs(30);
        while group_alive(pgid) {
            assert!(Instant::now() < deadline, "group {pgid} survived the drop");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn background_jobs_do_not_outlive_the_call() {
        let (_dir, ctx) = ctx();
        let out = BashTool
            .run(json!({"command": "sleep 30 & echo started"}), &ctx)
            .await;
        assert!(out.success, "{out:?}");
        assert_eq!(out.output, "started\n");
        let pgid: i32 = out.metadata["pid"].parse().unwrap();
        assert_group_gone(pgid).await;
    }
}
