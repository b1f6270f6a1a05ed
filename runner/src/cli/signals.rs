//! `run`'s signals. The first SIGTERM or SIGINT drains: its log line says
//! for how long (`--drain-timeout`) and that a second signal forces. The
//! second kills every agent process and exits 130 at once; its lines go
//! through the log (so `--log-format json` holds for them too) and say how
//! many agent processes were really killed.

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::ops::human;
use crate::tasks::context::Runtime;

/// The signals `run` stops on, installed before the runner starts.
pub struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    /// Catch SIGTERM and SIGINT from now on.
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next SIGTERM or SIGINT; its name.
    pub async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// The line of the first signal (or of `--exit-when-idle`): what happens
/// now, for how long, and how to cut it short.
pub fn log_draining(cause: &str, drain_timeout: Duration) {
    let deadline = human::duration(drain_timeout);
    tracing::info!(
        cause,
        drain_timeout = %deadline,
        "{cause}: draining: running turns get up to {deadline} (--drain-timeout) before they are interrupted; a second SIGTERM or SIGINT kills every agent process and exits at once"
    );
}

/// From now on, the next signal kills every agent process of `rt` and
/// exits 130 (agents run in sessions of their own: the terminal's signal
/// never reached them, and nothing of theirs may outlive the runner).
pub fn force_on_next(mut signals: Signals, rt: Arc<Runtime>) {
    tokio::spawn(async move {
        let signal = signals.next().await;
        tracing::warn!(
            signal,
            "second signal ({signal}): killing every agent process and exiting"
        );
        let killed = tokio::task::spawn_blocking(move || rt.sandboxes.close_everything()).await;
        match killed {
            Ok(killed) => tracing::warn!(
                killed,
                "killed {killed} agent {}; exiting (130)",
                if killed == 1 { "process" } else { "processes" }
            ),
            Err(e) => {
                tracing::error!(error = %e, "killing the agent processes failed; exiting (130)")
            }
        }
        std::process::exit(130);
    });
}
