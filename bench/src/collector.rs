//! One task that follows the mock control plane's timeline and timestamps
//! what the runner sends: the first reply to each request, the end of each
//! turn, counts of item updates, and when streams (re)connect.
//!
//! One reader for everything keeps the measuring side cheap: waiting with
//! `wait_for_after` from thousands of tasks would make the mock re-scan its
//! log once per waiter on every message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::{ClientMessage, TurnStatus, server_message::Request};
use anyhow::{Context as _, Result, bail};
use mock_control_plane::{MockControlPlane, TimelineEvent, TimelineRef};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// How long any one request may take before the benchmark gives up.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// What a request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The first message carrying its request id.
    FirstReply,
    /// A `TurnUpdate COMPLETED` carrying its request id.
    TurnCompleted,
}

struct Pending {
    until: Until,
    first: Option<oneshot::Sender<(Instant, ClientMessage)>>,
    done: Option<oneshot::Sender<Result<Instant, String>>>,
}

#[derive(Default)]
struct Inner {
    pending: HashMap<String, Pending>,
    received: u64,
    item_updates: u64,
    last_received: Option<Instant>,
    connected: Vec<Instant>,
    /// For each entry of `connected`, when the first message after it came.
    first_after_connect: Vec<Instant>,
}

/// Handles to one registered request.
pub struct Waiting {
    pub first: oneshot::Receiver<(Instant, ClientMessage)>,
    pub done: oneshot::Receiver<Result<Instant, String>>,
}

pub struct Collector {
    pub cp: Arc<MockControlPlane>,
    inner: Arc<Mutex<Inner>>,
    count: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Collector {
    pub fn start(cp: Arc<MockControlPlane>) -> Self {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let (count_tx, count) = watch::channel(0u64);
        let task = tokio::spawn(follow(cp.clone(), inner.clone(), count_tx));
        Collector {
            cp,
            inner,
            count,
            task,
        }
    }

    /// Register interest in `rid` (before sending it).
    pub fn register(&self, rid: &str, until: Until) -> Waiting {
        let (first_tx, first) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        lock(&self.inner).pending.insert(
            rid.to_owned(),
            Pending {
                until,
                first: Some(first_tx),
                done: Some(done_tx),
            },
        );
        Waiting { first, done }
    }

    /// Send a request and wait for what `until` says; returns the first
    /// reply, the send instant and the instant the wait ended.
    pub async fn request(
        &self,
        rid: &str,
        request: Request,
        until: Until,
    ) -> Result<(ClientMessage, Instant, Instant, Instant)> {
        let waiting = self.register(rid, until);
        let sent = Instant::now();
        self.cp.send_request(rid, request).await?;
        let (first_at, first) = tokio::time::timeout(PATIENCE, waiting.first)
            .await
            .with_context(|| format!("no reply to {rid}"))?
            .context("collector stopped")?;
        let done = tokio::time::timeout(PATIENCE, waiting.done)
            .await
            .with_context(|| format!("{rid} did not finish"))?
            .context("collector stopped")?;
        match done {
            Ok(done_at) => Ok((first, sent, first_at, done_at)),
            Err(e) => bail!("{rid}: {e}"),
        }
    }

    pub fn received(&self) -> u64 {
        lock(&self.inner).received
    }

    pub fn item_updates(&self) -> u64 {
        lock(&self.inner).item_updates
    }

    /// When ControlChannel streams became live, in order.
    pub fn connected(&self) -> Vec<Instant> {
        lock(&self.inner).connected.clone()
    }

    /// When the first message came after the `n`th (re)connection.
    pub fn first_after_connect(&self, n: usize) -> Option<Instant> {
        lock(&self.inner).first_after_connect.get(n).copied()
    }

    /// Wait until `n` messages were received in all.
    pub async fn wait_received(&self, n: u64) -> Result<Instant> {
        let mut count = self.count.clone();
        tokio::time::timeout(PATIENCE, count.wait_for(|c| *c >= n))
            .await
            .with_context(|| format!("{n} messages did not arrive"))?
            .context("collector stopped")?;
        lock(&self.inner)
            .last_received
            .context("no message was received")
    }

    /// Stops following the timeline and waits until the task has let go of
    /// the mock control plane.
    pub async fn close(&mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn follow(cp: Arc<MockControlPlane>, inner: Arc<Mutex<Inner>>, count: watch::Sender<u64>) {
    let mut cursor = 0;
    loop {
        // Each event seen in place, under the mock's lock: no copy of every
        // message (the bare floor's server copies none either).
        let mut received = None;
        cursor = cp
            .visit_timeline(cursor, None, |event| {
                let now = Instant::now();
                let mut g = lock(&inner);
                match event {
                    TimelineRef::Received { message, .. } => on_message(&mut g, now, message),
                    TimelineRef::Other(TimelineEvent::Connected { .. }) => g.connected.push(now),
                    TimelineRef::Other(_) => {}
                }
                received = Some(g.received);
            })
            .await;
        if let Some(received) = received {
            count.send_replace(received);
        }
    }
}

fn on_message(g: &mut Inner, now: Instant, message: &ClientMessage) {
    g.received += 1;
    if g.first_after_connect.len() < g.connected.len() {
        let missed = g.connected.len() - g.first_after_connect.len();
        g.first_after_connect
            .extend(std::iter::repeat_n(now, missed));
    }
    g.last_received = Some(now);
    if matches!(message.payload, Some(Payload::ItemUpdate(_))) {
        g.item_updates += 1;
    }
    let Some(rid) = message.request_id.as_deref() else {
        return;
    };
    let Some(p) = g.pending.get_mut(rid) else {
        return;
    };
    let error = match &message.payload {
        Some(Payload::RequestError(e)) => Some(e.error_message.clone()),
        _ => None,
    };
    let completed = matches!(&message.payload,
        Some(Payload::TurnUpdate(t)) if t.status == TurnStatus::Completed as i32);
    if let Some(first) = p.first.take() {
        let _ = first.send((now, message.clone()));
    }
    let finished = match (p.until, &error) {
        (_, Some(e)) => Some(Err(e.clone())),
        (Until::FirstReply, None) => Some(Ok(now)),
        (Until::TurnCompleted, None) => completed.then_some(Ok(now)),
    };
    if let Some(result) = finished {
        if let Some(done) = p.done.take() {
            let _ = done.send(result);
        }
        g.pending.remove(rid);
    }
}
