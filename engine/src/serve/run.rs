//! Running `code-agent serve` from its [`ServeArgs`]: the directories the
//! flags name (made if missing), the process hardened, the engine with its
//! own sandbox launcher, the listener, and serving until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use super::args::ServeArgs;
use super::grpc::serve_with;
use super::guard::ServeOptions;
use crate::engine::{Engine, EngineConfig};
use crate::sandboxes::EngineLauncher;

/// Serves as `args` say, guarded by [`ServeArgs::guard`], until SIGTERM or
/// SIGINT. Logging is the caller's to set up (`args.log_level`,
/// `args.log_format`).
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let guard = args.guard()?;
    run_with(args, guard).await
}

/// [`run`] with a guard the caller loaded (e.g. to hand the token to its
/// log redactor first).
pub async fn run_with(args: ServeArgs, guard: ServeOptions) -> anyhow::Result<()> {
    let addr: SocketAddr = args
        .listen
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("listen: {:?} is not IP:PORT", args.listen))?;
    if guard.token.is_none() {
        tracing::warn!(
            %addr,
            "serving WITHOUT authentication (--insecure-no-auth): whoever reaches this port can run commands in its workspaces"
        );
    }
    // Its own files, before `args` is taken apart: the sandboxes hide them.
    let secret_files = args.secret_files();
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let state_dir = args
        .state_dir
        .unwrap_or_else(|| home.join(".agent-runner/code-agent"));
    create_dir("state_dir", &state_dir).await?;
    let workspace_root = args
        .workspace_root
        .or_else(|| args.workspace.clone())
        .unwrap_or_else(|| home.join(".agent-runner/workspaces"));
    create_dir("workspace_root", &workspace_root).await?;
    // Not dumpable, no core files: `bash` cannot read our memory.
    agent_launcher::harden_runner().context("hardening the engine process")?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("listen: {addr}: {e}"))?;
    let engine = Engine::start(EngineConfig {
        state_dir: Some(state_dir),
        default_workspace: args.workspace,
        workspace_root: Some(workspace_root),
        max_steps: args.max_steps,
        launcher: EngineLauncher::Own {
            mode: args.sandbox,
            protected: secret_files,
            read_only: args.sandbox_read_only,
        },
        cron_utc_offset_seconds: args.cron_utc_offset,
        ..EngineConfig::default()
    })
    .await?;
    let local = listener.local_addr()?;
    println!("code-agent listening on {local}");
    let stop = CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    serve_with(engine, listener, guard, stop).await
}

/// `dir` and its parents, made if missing; the error names `setting`.
async fn create_dir(setting: &str, dir: &Path) -> anyhow::Result<()> {
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| anyhow::anyhow!("{setting}: {}: {e}", dir.display()))
}

/// Cancels `stop` on SIGTERM or SIGINT (Ctrl-C).
async fn stop_on_signal(stop: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("stop signal received");
    stop.cancel();
}
