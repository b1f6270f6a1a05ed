//! What the deploy checks share: paths, the binary, its settings, the
//! Dockerfile parser, and a few HTTP and /proc helpers; starting processes,
//! skipping and the machine's tools come from the shared test kit
//! (`test-kit/`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use test_kit::{Logs, have, is_root, spawn_logged};

/// Generous: machines are shared and noisy; nothing here asserts timings.
pub const WAIT: Duration = test_kit::WAIT;
pub const POLL: Duration = Duration::from_millis(50);

pub fn repo_root() -> PathBuf {
    test_kit::workspace_root()
}

pub fn deploy_dir() -> PathBuf {
    repo_root().join("deploy")
}

pub fn runner_bin() -> &'static str {
    env!("CARGO_BIN_EXE_agent-runner")
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn yaml(path: &Path) -> serde_yaml::Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Say why (part of) the running check did not run: on stderr (visible
/// with `--nocapture` and in CI logs of failing runs) and in the skip
/// ledger `.ci/run` prints (see `test_kit::skip`).
pub fn skip(why: &str) {
    test_kit::skip_this_test(why);
}

/// Every `AGENT_RUNNER_*` variable `agent-runner run` reads, from its help.
pub fn run_env_names() -> BTreeSet<String> {
    let out = Command::new(runner_bin())
        .args(["run", "--help"])
        .output()
        .expect("agent-runner run --help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut names: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next())
        .map(str::to_owned)
        .collect();
    // Read by `main` itself, not a flag.
    names.insert("AGENT_RUNNER_SECRET".to_owned());
    assert!(names.contains("AGENT_RUNNER_HEALTH_ADDR"), "{help}");
    names
}

/// One Dockerfile instruction: keyword (upper case) and its arguments, with
/// continuation lines joined and comment lines dropped.
#[derive(Debug, Clone)]
pub struct Instruction {
    pub keyword: String,
    pub args: String,
    /// Index of the build stage it belongs to (0 = first FROM).
    pub stage: usize,
}

pub fn dockerfile() -> Vec<Instruction> {
    parse_dockerfile(&read(&deploy_dir().join("Dockerfile")))
}

pub fn parse_dockerfile(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut stage: Option<usize> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        let (part, continues) = match trimmed.strip_suffix('\\') {
            Some(p) => (p, true),
            None => (trimmed, false),
        };
        current.push_str(part);
        current.push(' ');
        if continues {
            continue;
        }
        let full = std::mem::take(&mut current);
        let full = full.trim();
        if full.is_empty() {
            continue;
        }
        let (keyword, args) = full.split_once(char::is_whitespace).unwrap_or((full, ""));
        let keyword = keyword.to_uppercase();
        if keyword == "FROM" {
            stage = Some(stage.map_or(0, |s| s + 1));
        }
        out.push(Instruction {
            keyword,
            args: args.trim().to_owned(),
            stage: stage.unwrap_or(0),
        });
    }
    out
}

/// The words of an exec-form (`["a", "b"]`) or shell-form argument list.
pub fn words(args: &str) -> Vec<String> {
    let args = args.trim();
    if args.starts_with('[') {
        serde_json::from_str(args).unwrap_or_else(|e| panic!("exec form {args}: {e}"))
    } else {
        args.split_whitespace().map(str::to_owned).collect()
    }
}

/// The `KEY=VALUE` pairs of `ENV` instructions in `stage`.
pub fn env_of(instructions: &[Instruction], stage: usize) -> Vec<(String, String)> {
    instructions
        .iter()
        .filter(|i| i.keyword == "ENV" && i.stage == stage)
        .flat_map(|i| words(&i.args))
        .map(|w| {
            let (k, v) = w.split_once('=').expect("ENV in KEY=VALUE form");
            (k.to_owned(), v.trim_matches('"').to_owned())
        })
        .collect()
}

pub fn last_stage(instructions: &[Instruction]) -> usize {
    instructions.iter().map(|i| i.stage).max().unwrap_or(0)
}

/// One `GET` over plain HTTP/1.0: status code and body.
pub async fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("not HTTP: {text}")))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status code: {head}")))?;
    Ok((code, body.to_owned()))
}

/// The health address a runner logged ("listening on http://ADDR"), with a
/// wildcard host turned into loopback.
pub fn logged_health_addr(logs: &str) -> Option<String> {
    let marker = "listening on http://";
    let at = logs.find(marker)?;
    let rest = &logs[at + marker.len()..];
    let end = rest.find(|c: char| c.is_whitespace() || c == '"' || c == '\\')?;
    let addr = &rest[..end];
    Some(
        addr.replace("0.0.0.0:", "127.0.0.1:")
            .replace("[::]:", "[::1]:"),
    )
}

/// Live processes below `root` (host pids), with their command lines.
pub fn descendants(root: u32) -> Vec<(u32, String, char)> {
    let mut parent = std::collections::HashMap::new();
    let mut info = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let mut fields = stat[close + 1..].split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let Some(ppid) = fields.next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        parent.insert(pid, ppid);
        info.insert(pid, (cmdline, state));
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for (child, pp) in &parent {
            if *pp == p && *child != root {
                let (cmd, state) = info.get(child).cloned().unwrap_or_default();
                out.push((*child, cmd, state));
                stack.push(*child);
            }
        }
    }
    out
}

/// `/proc/<pid>/stat`'s state letter, `None` once the pid is gone (reaped).
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    stat[close + 1..].split_whitespace().next()?.chars().next()
}
