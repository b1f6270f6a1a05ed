//! One `codex app-server` process: started, initialized, and routed.
//!
//! The router task reads everything the process sends that is not a
//! response: server-to-client requests are answered at once (module
//! `approvals`), notifications go to the turn that is running (the
//! [`Sink`]), or are logged at debug when none is. When the process goes
//! away the running turn hears it as [`TurnMsg::Exited`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sdk_adapter::launcher::ThreadSandbox;
use sdk_process::{ChildError, ChildSpec, Inbound, JsonChild, TurnSink};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::CodexConfig;
use crate::approvals::{self, Answer};
use crate::rpc::{self, Incoming, Rpc, RpcError};

/// What the running turn's task hears.
#[derive(Debug)]
pub(crate) enum TurnMsg {
    Notification {
        method: String,
        params: Value,
    },
    /// A steer was accepted: `Steered{tag}` goes out here.
    Steered(u64),
    /// A steer finished (accepted or not).
    SteerSettled,
    /// `interrupt` was called.
    Interrupting,
    /// The process went away (the reason).
    Exited(String),
    /// An approval request (`method`, JSON-RPC `id`) the runner decides:
    /// the turn asks and answers it through `rpc` once decided.
    Approval {
        id: Value,
        method: String,
        params: Value,
        rpc: Arc<Rpc>,
    },
}

/// Where notifications go: the running turn, if any.
pub(crate) type Sink = TurnSink<TurnMsg>;

/// Why an app-server could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error(transparent)]
    Spawn(#[from] ChildError),
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// The runner's variables codex documents it reads (OpenAI credentials and
/// endpoint, logging), passed on top of the launcher's allowlist.
/// `CODEX_HOME` is not among them: [`AppServer::start`] always sets it (the
/// thread's own, or the operator's for the probe and a login).
pub(crate) const PASS_ENV: &[&str] = &[
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORGANIZATION",
    "OPENAI_PROJECT",
    "CODEX_API_KEY",
    "RUST_LOG",
];

/// The files of the operator's CODEX_HOME a thread's own CODEX_HOME starts
/// with (codex's settings and its login); the rest (sessions, logs) is the
/// thread's.
const SEEDED: &[&str] = &["config.toml", "auth.json"];

/// The operator's CODEX_HOME: the adapter's `CODEX_HOME`, else the
/// runner's, else `$HOME/.codex` of the runner. The runner gives the
/// describe probe's sandbox read-write access to the same directory
/// (`runner/src/sandbox.rs`, `sdk_homes`).
pub fn operator_codex_home(config: &CodexConfig) -> Option<std::path::PathBuf> {
    config
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "CODEX_HOME")
        .map(|(_, v)| v.into())
        .or_else(|| std::env::var_os("CODEX_HOME").map(Into::into))
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".codex")))
}

/// The operator's CODEX_HOME, created if missing (the probe's and the
/// login's home).
fn operator_home_dir(config: &CodexConfig) -> std::io::Result<std::path::PathBuf> {
    let dir = operator_codex_home(config).ok_or_else(|| {
        std::io::Error::other("neither CODEX_HOME nor HOME is set in the runner's environment")
    })?;
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// `<home>/.codex` (0700, owned like `home`), with the [`SEEDED`] files
/// copied from the operator's CODEX_HOME at each start of the app-server.
/// The agent can write `home`, so everything here goes through
/// [`sdk_adapter::beneath`]: a link planted at `.codex` or at a seeded name
/// is replaced, never followed.
fn thread_codex_home(config: &CodexConfig, home: &Path) -> std::io::Result<std::path::PathBuf> {
    use sdk_adapter::beneath;
    let dir = home.join(".codex");
    let root = beneath::open_root(home)?;
    let owner = beneath::owner_of(&root)?;
    let dir_fd = beneath::ensure_dir(&root, ".codex", Some(0o700), Some(owner))?;
    let Some(source) = operator_codex_home(config) else {
        return Ok(dir);
    };
    if source == dir {
        return Ok(dir);
    }
    for name in SEEDED {
        let from = source.join(name);
        if !from.is_file() {
            continue;
        }
        let bytes = std::fs::read(&from)?;
        beneath::write_file(&dir_fd, name, &bytes, 0o600, Some(owner))?;
    }
    Ok(dir)
}

/// A running, initialized app-server. Dropping it kills its process tree.
#[derive(Debug)]
pub(crate) struct AppServer {
    child: JsonChild,
    rpc: Arc<Rpc>,
    sink: Arc<Sink>,
    router: JoinHandle<()>,
}

impl Drop for AppServer {
    fn drop(&mut self) {
        self.router.abort();
        // `child` drops next and kills the process group.
    }
}

impl AppServer {
    /// Start `codex app-server` (in `cwd`, if given) and initialize it;
    /// each request may take up to `timeout`. Its environment is the
    /// sandbox's allowlist, plus the runner's variables codex documents
    /// ([`PASS_ENV`]), plus `config.env`, plus `thread_env` (a thread's
    /// `ThreadSpec::env`, which wins), plus `CODEX_HOME`, so every command
    /// codex runs inherits them.
    pub(crate) async fn start(
        config: &CodexConfig,
        label: String,
        cwd: Option<&Path>,
        thread_env: &[(String, String)],
        sandbox: &ThreadSandbox,
        timeout: Duration,
    ) -> Result<Self, StartError> {
        let mut spec = ChildSpec::new(label, &config.bin).arg("app-server");
        if let Some(cwd) = cwd {
            spec = spec.cwd(cwd);
        }
        let documented = sdk_process::runner_env(PASS_ENV, &[]);
        for (key, value) in documented.iter().chain(&config.env).chain(thread_env) {
            spec = spec.env(key, value);
        }
        // codex reads and writes its home. A thread's app-server (one with
        // a workspace) gets a CODEX_HOME of its own in the thread's HOME,
        // seeded with the operator's config and login, so threads share
        // nothing. The describe probe and a login (no workspace) work on the
        // operator's CODEX_HOME itself (their sandbox may write it): a login
        // lands where every later thread is seeded from.
        let home = match cwd {
            Some(_) => thread_codex_home(config, &sandbox.spec().home_dir),
            None => operator_home_dir(config),
        }
        .map_err(|e| ChildError::Spawn {
            program: config.bin.display().to_string(),
            message: format!("preparing CODEX_HOME: {e}"),
        })?;
        spec = spec.env("CODEX_HOME", home);
        let (child, inbound) = JsonChild::spawn(spec, sandbox, rpc::response_key())?;
        let rpc = Arc::new(Rpc::new(child.handle(), config.request_timeout));
        let sink = Arc::new(Sink::default());
        let router = tokio::spawn(route(
            inbound,
            rpc.clone(),
            sink.clone(),
            config.accepts_approvals(),
        ));
        let server = Self {
            child,
            rpc,
            sink,
            router,
        };
        let params = json!({
            "clientInfo": {
                "name": "agent-runner",
                "title": "agent-runner",
                "version": env!("CARGO_PKG_VERSION"),
            },
            "capabilities": {"experimentalApi": false, "requestAttestation": false},
        });
        server
            .rpc
            .call_within("initialize", params, timeout)
            .await?;
        server
            .rpc
            .notify("initialized", None)
            .await
            .map_err(|source| RpcError::Child {
                method: "initialized".to_owned(),
                source,
            })?;
        Ok(server)
    }

    pub(crate) fn rpc(&self) -> &Arc<Rpc> {
        &self.rpc
    }

    pub(crate) fn sink(&self) -> &Arc<Sink> {
        &self.sink
    }

    pub(crate) fn is_alive(&self) -> bool {
        !self.child.is_gone()
    }
}

async fn route(mut inbound: Inbound, rpc: Arc<Rpc>, sink: Arc<Sink>, accept: bool) {
    let label = rpc.handle().label().to_owned();
    while let Some(value) = inbound.recv().await {
        match rpc::classify(value) {
            Incoming::Request { id, method, params } => {
                // Asked through the running turn when the runner decides
                // (approval policy other than `never`).
                if !accept
                    && approvals::asks(&method)
                    && sink.send(TurnMsg::Approval {
                        id: id.clone(),
                        method: method.clone(),
                        params: params.clone(),
                        rpc: rpc.clone(),
                    })
                {
                    continue;
                }
                let sent = match approvals::answer(&method, &params, accept) {
                    Answer::Result(result) => {
                        if method.contains("pproval") {
                            tracing::info!(
                                child = %label,
                                %method,
                                subject = %approvals::subject(&params),
                                accepted = accept,
                                reason = if accept { "approval policy is never" } else { approvals::DECLINE_REASON },
                                "answered an approval request"
                            );
                        } else {
                            tracing::debug!(child = %label, %method, "answered a server request");
                        }
                        rpc.respond(id, result).await
                    }
                    Answer::Error { code, message } => {
                        tracing::debug!(child = %label, %method, "refused an unknown server request");
                        rpc.respond_error(id, code, &message).await
                    }
                };
                if let Err(e) = sent {
                    tracing::debug!(child = %label, error = %e, "could not answer a server request");
                }
            }
            Incoming::Notification { method, params } => {
                if !sink.send(TurnMsg::Notification {
                    method: method.clone(),
                    params,
                }) {
                    tracing::debug!(child = %label, %method, "notification outside a turn");
                }
            }
            Incoming::Other(value) => {
                let shown: String = value.to_string().chars().take(200).collect();
                tracing::debug!(child = %label, line = %shown, "ignoring a line that is not JSON-RPC");
            }
        }
    }
    let reason = rpc
        .handle()
        .exit_reason()
        .unwrap_or_else(|| "it went away".to_owned());
    sink.send(TurnMsg::Exited(reason));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agent ran `ln -sf <outside> ~/.codex/auth.json` (and linked
    /// `config.toml` too): the next start replaces the links, the outside
    /// files stay as they were.
    #[test]
    fn seeding_replaces_planted_links_instead_of_writing_through_them() {
        let tmp = tempfile::tempdir().unwrap();
        let operator = tmp.path().join("operator");
        std::fs::create_dir(&operator).unwrap();
        std::fs::write(operator.join("auth.json"), b"{\"token\":1}").unwrap();
        std::fs::write(operator.join("config.toml"), b"model = \"x\"").unwrap();
        let outside = tmp.path().join("state.db");
        std::fs::write(&outside, b"precious").unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join(".codex")).unwrap();
        std::os::unix::fs::symlink(&outside, home.join(".codex/auth.json")).unwrap();
        std::os::unix::fs::symlink(&outside, home.join(".codex/config.toml")).unwrap();
        let config = CodexConfig {
            env: vec![("CODEX_HOME".into(), operator.display().to_string())],
            ..CodexConfig::default()
        };
        let dir = thread_codex_home(&config, &home).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
        assert_eq!(
            std::fs::read(dir.join("auth.json")).unwrap(),
            b"{\"token\":1}"
        );
        assert_eq!(
            std::fs::read(dir.join("config.toml")).unwrap(),
            b"model = \"x\""
        );
        assert!(!dir.join("auth.json").is_symlink());
    }

    /// `~/.codex` itself linked to a directory outside: replaced by a
    /// directory of its own; nothing lands outside.
    #[test]
    fn seeding_replaces_a_planted_codex_home_link() {
        let tmp = tempfile::tempdir().unwrap();
        let operator = tmp.path().join("operator");
        std::fs::create_dir(&operator).unwrap();
        std::fs::write(operator.join("auth.json"), b"a").unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::symlink(&elsewhere, home.join(".codex")).unwrap();
        let config = CodexConfig {
            env: vec![("CODEX_HOME".into(), operator.display().to_string())],
            ..CodexConfig::default()
        };
        let dir = thread_codex_home(&config, &home).unwrap();
        assert!(!elsewhere.join("auth.json").exists());
        assert!(!dir.is_symlink());
        assert_eq!(std::fs::read(dir.join("auth.json")).unwrap(), b"a");
    }

    /// The agent races the seeding: it keeps swapping `~/.codex` with a
    /// link to a directory outside while the runner seeds it over and
    /// over. Nothing is ever written, chmodded or chowned outside.
    #[test]
    fn seeding_holds_while_the_agent_swaps_the_codex_home_for_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let operator = tmp.path().join("operator");
        std::fs::create_dir(&operator).unwrap();
        std::fs::write(operator.join("auth.json"), b"{\"token\":1}").unwrap();
        std::fs::write(operator.join("config.toml"), b"model = \"x\"").unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("state.db"), b"precious").unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join(".codex")).unwrap();
        let config = CodexConfig {
            env: vec![("CODEX_HOME".into(), operator.display().to_string())],
            ..CodexConfig::default()
        };
        let outcome = sdk_adapter::testing::race::race(&home.join(".codex"), &outside, || {
            thread_codex_home(&config, &home).map(drop)
        });
        eprintln!("{outcome:?}");
    }
}
