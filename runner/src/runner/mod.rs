//! A whole runner, started and stopped as one value: what `agent-runner run`
//! and the in-process demo both use: start-up ([`startup_pages`] touches
//! the allocator's pages early), restoring persisted agents and threads
//! ([`restore`]), the tasks every runner holds, and the ordered shutdown.

pub mod restore;
mod startup_pages;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::RunConfig;
use crate::delivery::journal::Journal;
use crate::delivery::outbox::Outbox;
use crate::delivery::sending::Sending;
use crate::host::credentials::{
    Capabilities, CredentialServer, GitEnv, ServerOptions, ThreadCheck,
};
use crate::host::sandbox::AgentSandboxes;
use crate::host::store::Store;
use crate::host::workspace::Workspaces;
use crate::link::{Link, LinkState, Refused};
use crate::ops::health::{self, HealthServer};
use crate::tasks::context::{Runtime, RuntimeParts};
use crate::tasks::mailboxes::Mailboxes;
use crate::tasks::sdks::Sdks;

/// When the SDKs still to be probed are probed although the runner has not
/// registered yet (see `sdk_probe::probe_pending`).
const PROBE_UNREGISTERED_AFTER: Duration = Duration::from_secs(2);

/// How long an idle thread of the async runtime's blocking pool lives
/// (tokio's default, named here because [`STARTUP_SETTLE`] depends on it).
pub const BLOCKING_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// How long after start-up (connected, no probe running) its pages are
/// released: past start-up's tail (the first updates and timers) and past
/// the exit of the blocking threads start-up used (name resolution, SDK
/// probes), whose exit runs code of its own.
const STARTUP_SETTLE: Duration = BLOCKING_THREAD_KEEP_ALIVE.saturating_add(Duration::from_secs(1));

/// How long shutdown waits for queued updates to reach the control plane.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// A started runner.
pub struct Runner {
    /// Its runtime.
    pub rt: Arc<Runtime>,
    /// What its link is doing.
    pub link_state: watch::Receiver<LinkState>,
    close: CancellationToken,
    /// What was sent and not yet settled.
    sending: Arc<Sending>,
    link: JoinHandle<Result<(), Refused>>,
    health: Option<HealthServer>,
    credentials: CredentialServer,
}

/// How long a sent terminal update is kept for a re-send when the control
/// plane does not acknowledge: twice what keepalive needs to notice a dead
/// connection, at least 10 s.
fn legacy_settle(config: &RunConfig) -> Duration {
    (2 * (config.keepalive_interval + config.keepalive_timeout)).max(Duration::from_secs(10))
}

/// The git credential socket for agents (it answers only the holder of a
/// live thread's capability), and the environment that points their git at
/// it (issuing each thread's capability).
fn start_credentials(
    mailboxes: &Arc<Mailboxes>,
    config: &RunConfig,
    broker: crate::host::github::TokenBroker,
) -> anyhow::Result<(CredentialServer, GitEnv)> {
    let weak = Arc::downgrade(mailboxes);
    let threads: ThreadCheck =
        Arc::new(move |id: &str| weak.upgrade().is_some_and(|m| m.has_thread(id)));
    // With `--agent-uid` the agents' helper runs as that uid: it must reach
    // the socket and read its capability file (the capability, not the
    // uid, is what authenticates it). Mode `off` runs agents as the runner.
    let agent_uid: Option<u32> = match config.sandbox.mode {
        agent_launcher::Mode::Off => None,
        _ => config.sandbox.agent_user.map(|u| u.uid),
    };
    let capabilities = Arc::new(Capabilities::new(agent_uid));
    let options = ServerOptions {
        extra_peer_uid: agent_uid,
        ..ServerOptions::default()
    };
    let server = CredentialServer::start(
        &config.state_dir,
        Arc::new(broker),
        threads,
        capabilities.clone(),
        options,
    )?;
    let exe = std::env::current_exe()
        .context("finding this agent-runner binary for the git credential helper")?;
    let env = GitEnv::new(exe, server.path().to_owned(), capabilities);
    Ok((server, env))
}

/// What start-up creates on disk (the two databases, the workspace root,
/// the transcripts dir), being made on the blocking pool while
/// [`Runner::start`] builds the launcher: start-up waits for the longest
/// of them, not their sum. Each file created costs a journal entry of the
/// filesystem, 0.1 ms on a quiet disk and about 2 ms on a busy one
/// (docs/performance.md).
struct Opening {
    store: JoinHandle<Result<Store, crate::host::store::StoreError>>,
    journal: JoinHandle<
        Result<
            (Journal, crate::delivery::journal::Recovered),
            crate::delivery::journal::JournalError,
        >,
    >,
    workspaces: JoinHandle<std::io::Result<Workspaces>>,
    transcripts: JoinHandle<std::io::Result<crate::delivery::transcript::Transcripts>>,
    transcripts_dir: std::path::PathBuf,
}

impl Opening {
    /// One runner per state dir: takes its lock (else fails at once), then
    /// starts making the rest.
    fn start(config: &RunConfig) -> anyhow::Result<Self> {
        let lock = Store::lock(&config.state_dir)
            .with_context(|| format!("state_dir {}", config.state_dir.display()))?;
        let state_dir = config.state_dir.clone();
        let store = tokio::task::spawn_blocking(move || Store::open_locked(&state_dir, lock));
        let state_dir = config.state_dir.clone();
        let journal = tokio::task::spawn_blocking(move || Journal::open(&state_dir));
        let root = config.workspace_root.clone();
        let workspaces = tokio::task::spawn_blocking(move || Workspaces::new(root));
        let transcripts_dir = crate::delivery::transcript::dir(&config.state_dir);
        let transcripts = tokio::task::spawn_blocking({
            let dir = transcripts_dir.clone();
            move || crate::delivery::transcript::Transcripts::start(dir)
        });
        Ok(Self {
            store,
            journal,
            workspaces,
            transcripts,
            transcripts_dir,
        })
    }
}

/// The GitHub token broker: control-plane tokens go through `service`'s
/// client (which connects lazily).
fn token_broker(
    config: &RunConfig,
    service: &crate::host::client::Service,
) -> anyhow::Result<crate::host::github::TokenBroker> {
    let redactor = crate::util::redact::Redactor::process();
    // Protocol 0.7 has no GitHub RPCs: the runner's own App, or nothing.
    let github = match config.protocol {
        crate::config::Protocol::V02 => crate::host::github::broker(
            &config.github,
            Some(crate::host::client::rpc(service.clone())),
            redactor,
            &config.proxy,
        ),
        crate::config::Protocol::V07 => crate::host::github::broker_without_control_plane(
            &config.github,
            redactor,
            &config.proxy,
        ),
    }
    .context("github")?;
    tracing::info!(
        source = %github.describe_source(),
        git_host = github.git_host(),
        "GitHub installation tokens"
    );
    Ok(github)
}

/// Slow SDK probes start once the registration is sent (the link does
/// it), or after a while if the control plane cannot be reached, so that
/// `/status` does not say "being probed" forever.
fn spawn_unregistered_probe(
    rt: Arc<Runtime>,
    mut link_state: watch::Receiver<LinkState>,
    close: CancellationToken,
) {
    tokio::spawn(async move {
        let registered =
            link_state.wait_for(|s| matches!(s, LinkState::Registered | LinkState::Connected));
        tokio::select! {
            () = tokio::time::sleep(PROBE_UNREGISTERED_AFTER) => {
                crate::tasks::sdk_probe::probe_pending(&rt);
            }
            // The link probed them itself.
            _ = registered => {}
            () = close.cancelled() => {}
        }
    });
}

/// Held through [`Runner::start`] once the launcher exists: a start-up
/// that fails after it made its cgroup removes that cgroup (empty: no
/// thread exists yet), or every failed start with a new state dir would
/// leave one behind. Disarmed (`None`) when start-up succeeds.
struct ReleaseUnlessStarted(Option<Arc<AgentSandboxes>>);

impl Drop for ReleaseUnlessStarted {
    fn drop(&mut self) {
        if let Some(sandboxes) = self.0.take() {
            sandboxes.release_launcher();
        }
    }
}

impl Runner {
    /// Open state, re-open known agents and threads, and start the link and
    /// the health endpoints.
    pub async fn start(config: &RunConfig) -> anyhow::Result<Self> {
        // Listen first: a health_addr that is taken stops us before anything runs.
        let listener = match config.health {
            Some(listen) => health::bind(listen).await?,
            None => {
                tracing::info!("health endpoints off (health_addr is empty)");
                None
            }
        };
        let Opening {
            store,
            journal,
            workspaces,
            transcripts,
            transcripts_dir,
        } = Opening::start(config)?;
        // The one launcher, before any agent process can exist: probes the
        // host; kills what a previous run left behind on a thread of its
        // own, which every sandbox waits for.
        let sandboxes = Arc::new(AgentSandboxes::start(config)?);
        let mut unstarted = ReleaseUnlessStarted(Some(sandboxes.clone()));
        let workspaces = workspaces
            .await
            .context("creating the workspace root")?
            .with_context(|| format!("workspace_root {}", config.workspace_root.display()))?;
        let store = store
            .await
            .context("opening the state store")?
            .with_context(|| format!("state_dir {}", config.state_dir.display()))?;
        let mut sdk_options = config.sdk_options.clone();
        // Made when codex's probe first needs it (in the background).
        let (probe_sandboxes, probe_workspaces) = (sandboxes.clone(), workspaces.clone());
        sdk_options.codex.probe_sandbox =
            sdk_adapter::Sandbox::later(move || probe_sandboxes.probe(&probe_workspaces));
        let sdks = Sdks::with_options(&config.sdks, &sdk_options).map_err(anyhow::Error::msg)?;
        // Start-up in dependency order: the control-plane client (it
        // connects lazily) → the token broker (control-plane tokens go
        // through that client) → the git credential socket → the runtime,
        // complete → what the store knows → the link.
        let service = crate::host::client::service(config)?;
        let github = token_broker(config, &service)?;
        let mailboxes = Arc::new(Mailboxes::new(config.max_queued_requests));
        let (credentials, git_env) = start_credentials(&mailboxes, config, github.clone())?;
        // The outbox journal: what a previous run produced and did not get
        // delivered is sent first.
        let (journal, mut recovered) = journal
            .await
            .context("opening the outbox journal")?
            .with_context(|| format!("state_dir {}", config.state_dir.display()))?;
        if config.protocol == crate::config::Protocol::V07 {
            crate::link::v07::drop_unspeakable(&mut recovered, &journal);
        }
        let outbox = Arc::new(Outbox::journaled(
            config.outbox_capacity,
            journal.clone(),
            crate::util::redact::Redactor::process(),
        ));
        let sending = Arc::new(Sending::new(
            outbox.clone(),
            Some(journal),
            recovered,
            legacy_settle(config),
        ));
        let rt = Runtime::new(RuntimeParts {
            sdks,
            store,
            workspaces,
            outbox,
            mailboxes,
            max_turns: config.max_concurrent_turns,
            skills: crate::host::skills::SkillSettings::new(
                config.skill_max_bytes,
                &config.skills,
                github.git_host(),
            ),
            git_env: Some(git_env),
            github: Some(github),
            sandboxes,
        });
        rt.approvals
            .configure(config.approval_timeout, config.approval_policy);
        // Per-thread transcripts (`agent-runner logs`), written off the hot path.
        // Recorded, masked, where updates enter the outbox (every reply and
        // update naming a thread, and a thread's request errors).
        let transcripts = transcripts
            .await
            .context("starting the transcript writer")?
            .with_context(|| format!("transcripts dir {}", transcripts_dir.display()))?;
        rt.outbox.set_transcripts(transcripts.clone());
        let _ = rt.transcripts.set(transcripts);
        if config.protocol == crate::config::Protocol::V07 {
            let _ = rt
                .thread_only
                .set(crate::tasks::thread_only::ThreadOnly::new(config));
        }
        crate::observe::metrics::sdks_enabled(&rt.sdks.names());
        crate::runner::restore::restore(&rt, &sending.pending_turn_ends())
            .await
            .context("restoring state")?;
        if rt.thread_only().is_some() {
            crate::tasks::thread_only::ensure_agents(&rt)
                .await
                .context("protocol 0.7: the SDKs' implicit agents")?;
        }
        tracing::info!(
            protocol = config.protocol.as_str(),
            "control-plane protocol"
        );
        let link = Link::new(rt.clone(), service, config, sending.clone());
        let link_state = link.state();
        let link_report = link.report();
        let close = CancellationToken::new();
        let token = close.clone();
        let link = tokio::spawn(async move { link.run(token).await });
        crate::tasks::sdk_probe::spawn(rt.clone(), config.sdk_probe_interval, close.clone());
        spawn_unregistered_probe(rt.clone(), link_state.clone(), close.clone());
        tokio::spawn(release_startup_pages(
            rt.clone(),
            link_state.clone(),
            close.clone(),
        ));
        let health = match listener {
            Some(l) => Some(
                HealthServer::start(l, rt.clone(), link_state.clone(), link_report)
                    .context("health endpoints")?,
            ),
            None => None,
        };
        unstarted.0 = None;
        Ok(Self {
            rt,
            link_state,
            close,
            sending,
            link,
            health,
            credentials,
        })
    }

    /// Where the health endpoints listen (`None`: off).
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health.as_ref().map(HealthServer::addr)
    }

    /// Resolves if the link stops on its own (the control plane refused us).
    pub async fn refused(&mut self) -> anyhow::Result<()> {
        match (&mut self.link).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(refused)) => Err(refused.into()),
            Err(join) => Err(anyhow::anyhow!("control-plane link task failed: {join}")),
        }
    }

    /// Drain: refuse new turns (`/readyz` turns 503), give running ones
    /// `drain_timeout`, interrupt the rest, flush the outbox, close the
    /// channel cleanly, and only then stop the health endpoints.
    pub async fn shutdown(self, drain_timeout: Duration) -> anyhow::Result<()> {
        tracing::info!(
            running_turns = self.rt.running_turns(),
            "draining: new turns are refused"
        );
        self.rt.drain(drain_timeout).await;
        // Whatever the drained turns left running (a `setsid` daemon, an
        // agent CLI) goes now: no agent process outlives the runner.
        let sandboxes = self.rt.sandboxes.clone();
        if let Ok(killed) = tokio::task::spawn_blocking(move || sandboxes.kill_everything()).await
            && killed > 0
        {
            tracing::info!(killed, "killed the agents' remaining processes");
        }
        // Sent and, where the control plane acknowledges, acknowledged:
        // what is not stays journaled and goes first after the restart.
        let flushed = tokio::time::timeout(FLUSH_TIMEOUT, async {
            while !self.sending.flushed() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        if flushed.is_err() {
            tracing::warn!(
                queued = self.rt.outbox.stats().depth,
                unacknowledged = self.sending.unsettled(),
                "updates not delivered before shutdown; journaled ones are sent after the restart"
            );
        }
        self.close.cancel();
        let link = tokio::time::timeout(FLUSH_TIMEOUT, self.link).await;
        if let Some(health) = self.health {
            health.stop().await;
        }
        match link {
            Ok(Ok(Err(refused))) => return Err(refused.into()),
            Ok(_) => {}
            Err(_) => tracing::warn!("control channel did not close in time"),
        }
        self.credentials.stop().await;
        self.rt.tasks.close();
        // Nothing of the agents is left: their cgroups go too.
        let sandboxes = self.rt.sandboxes.clone();
        let _ = tokio::task::spawn_blocking(move || sandboxes.close_everything()).await;
        tracing::info!("runner stopped");
        Ok(())
    }
}

/// Start-up is over once the ControlChannel is open, no SDK probe runs and
/// [`STARTUP_SETTLE`] has passed: then the code pages that only start-up
/// used go back (see `startup_pages`). A runner that never connects keeps
/// them.
async fn release_startup_pages(
    rt: Arc<Runtime>,
    mut link: watch::Receiver<LinkState>,
    close: CancellationToken,
) {
    let over = async {
        if link.wait_for(|s| *s == LinkState::Connected).await.is_err() {
            return false;
        }
        rt.sdks.no_probe_running().await;
        tokio::time::sleep(STARTUP_SETTLE).await;
        true
    };
    tokio::select! {
        over = over => if over {
            crate::runner::startup_pages::release();
        },
        () = close.cancelled() => {}
    }
}
