//! `agent-runner git-credential --socket PATH --thread ID --capability-file
//! FILE <get|store|erase>`:
//! git's credential-helper protocol, answered by the running runner.
//!
//! Git starts it (configured by the runner through `GIT_CONFIG_*`, see
//! [`crate::host::credentials::GitEnv`]) with the operation as the last argument
//! and the credential's `key=value` lines on stdin. `get` asks the runner's
//! socket and prints `username=x-access-token` / `password=<token>`; `erase`
//! tells the runner git refused a token; `store` and unknown operations do
//! nothing. Whenever the runner has nothing (or cannot be reached) the
//! helper prints nothing and exits 0, so git tries its next helper or fails
//! cleanly with its own "Authentication failed"; the reason goes to stderr,
//! which git shows its user. The helper holds no secret in its arguments:
//! it reads the thread's capability from `--capability-file` (a file in the
//! thread's private home that only the thread's own processes can read)
//! and presents it; the runner answers for that capability's thread only.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use clap::Args;

use crate::host::credentials::client::{ASK_TIMEOUT, ask};
use crate::host::credentials::protocol::{
    MAX_GIT_INPUT_BYTES, Op, Request, git_output, parse_git_input,
};

#[derive(Debug, Clone, Args)]
pub struct GitCredentialArgs {
    /// The runner's credential socket.
    #[arg(long)]
    pub socket: PathBuf,
    /// The thread whose agent runs git (informative: the runner answers
    /// for the capability's thread, and only if this names the same one).
    #[arg(long, default_value = "")]
    pub thread: String,
    /// The file holding the thread's credential capability.
    #[arg(long)]
    pub capability_file: Option<PathBuf>,
    /// What git asks: get, store or erase.
    pub operation: String,
}

/// Run the helper with git's input on stdin and the answer on stdout.
pub fn run(args: &GitCredentialArgs) -> anyhow::Result<()> {
    let op = match args.operation.as_str() {
        "get" => Op::Get,
        "erase" => Op::Erase,
        // `store` (we keep nothing) and anything a newer git may add.
        _ => return Ok(()),
    };
    let mut input = Vec::new();
    let limit = u64::try_from(MAX_GIT_INPUT_BYTES).unwrap_or(u64::MAX);
    io::stdin().take(limit).read_to_end(&mut input)?;
    let out = answer(args, op, &String::from_utf8_lossy(&input));
    if let Some(out) = out {
        let mut stdout = io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()?;
    }
    Ok(())
}

/// What to print for git, if anything; reasons go to stderr.
fn answer(args: &GitCredentialArgs, op: Op, git_input: &str) -> Option<String> {
    let input = parse_git_input(git_input);
    let capability = match &args.capability_file {
        None => {
            eprintln!(
                "agent-runner git-credential: no --capability-file; the runner answers only a thread's capability"
            );
            return None;
        }
        Some(file) => match read_capability(file) {
            Ok(capability) => capability,
            Err(e) => {
                eprintln!(
                    "agent-runner git-credential: reading the thread's capability {}: {e}",
                    file.display()
                );
                return None;
            }
        },
    };
    let request = Request {
        op,
        capability,
        thread: args.thread.clone(),
        protocol: input.protocol,
        host: input.host,
        path: input.path,
        password: match op {
            Op::Erase => input.password,
            Op::Get => None,
        },
    };
    let answer = match ask(&args.socket, &request, ASK_TIMEOUT) {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!(
                "agent-runner git-credential: the runner at {} did not answer: {e}",
                args.socket.display()
            );
            return None;
        }
    };
    if op == Op::Erase {
        return None;
    }
    match (answer.username, answer.password) {
        (Some(user), Some(password)) => {
            let out = git_output(&user, &password);
            if out.is_none() {
                eprintln!("agent-runner git-credential: the runner's answer is not usable");
            }
            out
        }
        _ => {
            if let Some(note) = answer.note {
                eprintln!("agent-runner git-credential: no credentials: {note}");
            }
            None
        }
    }
}

/// The capability in `file`: at most 1 KiB, whitespace trimmed.
fn read_capability(file: &std::path::Path) -> io::Result<String> {
    let mut text = String::new();
    std::fs::File::open(file)?
        .take(1024)
        .read_to_string(&mut text)?;
    Ok(text.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_runner_gives_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let args = GitCredentialArgs {
            socket: dir.path().join("missing.sock"),
            thread: "thr-1".into(),
            capability_file: Some(dir.path().join("cap")),
            operation: "get".into(),
        };
        std::fs::write(dir.path().join("cap"), "abc").unwrap();
        let out = answer(
            &args,
            Op::Get,
            "protocol=https\nhost=github.com\npath=o/r\n\n",
        );
        assert_eq!(out, None);
    }
}
