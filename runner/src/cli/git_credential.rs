//! `agent-runner git-credential --socket PATH --thread ID <get|store|erase>`:
//! git's credential-helper protocol, answered by the running runner.
//!
//! Git starts it (configured by the runner through `GIT_CONFIG_*`, see
//! [`crate::credentials::GitEnv`]) with the operation as the last argument
//! and the credential's `key=value` lines on stdin. `get` asks the runner's
//! socket and prints `username=x-access-token` / `password=<token>`; `erase`
//! tells the runner git refused a token; `store` and unknown operations do
//! nothing. Whenever the runner has nothing (or cannot be reached) the
//! helper prints nothing and exits 0, so git tries its next helper or fails
//! cleanly with its own "Authentication failed"; the reason goes to stderr,
//! which git shows its user. The helper needs no secret of its own: the
//! socket path and the thread id are all it knows.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use clap::Args;

use crate::credentials::client::{ASK_TIMEOUT, ask};
use crate::credentials::protocol::{MAX_GIT_INPUT_BYTES, Op, Request, git_output, parse_git_input};

#[derive(Debug, Clone, Args)]
pub struct GitCredentialArgs {
    /// The runner's credential socket.
    #[arg(long)]
    pub socket: PathBuf,
    /// The thread whose agent runs git.
    #[arg(long)]
    pub thread: String,
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
    let request = Request {
        op,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_runner_gives_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let args = GitCredentialArgs {
            socket: dir.path().join("missing.sock"),
            thread: "thr-1".into(),
            operation: "get".into(),
        };
        let out = answer(
            &args,
            Op::Get,
            "protocol=https\nhost=github.com\npath=o/r\n\n",
        );
        assert_eq!(out, None);
    }
}
