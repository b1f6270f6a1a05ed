//! One runner's view of a mock serving several ([`crate::MockConfig::runners`]):
//! its registrations, its live stream, what it sent and what went to it,
//! its sequence check. Replicas of a runner each have their own secret;
//! a test of replicas asks the mock about each one through this view (the
//! [`MockControlPlane`] methods see all runners at once).

use std::time::Duration;

use agent_runner_proto::runner::{ClientMessage, ServerMessage, server_message};
use anyhow::{Result, anyhow};
use tonic::Status;

use crate::MockControlPlane;
use crate::acks::SequenceReport;
use crate::state::{DroppedMessage, Registration};

/// One runner of a mock, by name ([`MockControlPlane::runner`]). Borrows
/// the mock; every method is about this runner only.
#[derive(Clone, Copy)]
pub struct RunnerView<'a> {
    plane: &'a MockControlPlane,
    /// Its position among the mock's runners.
    index: usize,
}

impl MockControlPlane {
    /// The runner named `name` (see [`crate::MockConfig::runners`]; an
    /// unnamed mock's only runner is [`crate::DEFAULT_RUNNER`]). Fails for
    /// a name the mock was not configured with.
    pub fn runner(&self, name: &str) -> Result<RunnerView<'_>> {
        let names = self.identities.names();
        let index = names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| anyhow!("no runner {name:?} (this mock knows {names:?})"))?;
        Ok(RunnerView { plane: self, index })
    }

    /// The names of the runners the mock tells apart, in configuration order.
    pub fn runner_names(&self) -> Vec<String> {
        self.identities.names().to_vec()
    }

    /// Which runner sent the received message at `index` (a position in
    /// [`MockControlPlane::received`]).
    pub fn runner_of(&self, index: usize) -> Option<String> {
        let inner = self.state.lock();
        let r = inner.received.get(index)?.runner;
        inner.runners.get(r).map(|runner| runner.name.clone())
    }

    /// Every received message, with the name of the runner that sent it,
    /// in arrival order.
    pub fn received_by_runner(&self) -> Vec<(String, ClientMessage)> {
        let inner = self.state.lock();
        inner
            .received
            .iter()
            .map(|r| (inner.runners[r.runner].name.clone(), r.message.clone()))
            .collect()
    }

    /// Every message received but not processed (duplicates of what a runner
    /// already sent), of every runner, in order.
    pub fn dropped(&self) -> Vec<DroppedMessage> {
        self.state.lock().dropped.clone()
    }
}

impl RunnerView<'_> {
    /// Its name.
    pub fn name(&self) -> String {
        self.plane.state.lock().runners[self.index].name.clone()
    }

    /// Its successful `RegisterRunner` calls, oldest first.
    pub fn registrations(&self) -> Vec<Registration> {
        let name = self.name();
        self.plane
            .registrations()
            .into_iter()
            .filter(|r| r.runner == name)
            .collect()
    }

    /// Waits until it registered at least `n` times; its registrations.
    pub async fn wait_for_registrations(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<Registration>> {
        let what = format!("{n} registration(s) of runner {:?}", self.name());
        self.wait(timeout, &what, |p| (p.registrations >= n).then_some(()))
            .await?;
        Ok(self.registrations())
    }

    /// Whether its `ControlChannel` stream is live.
    pub fn is_connected(&self) -> bool {
        self.plane.state.lock().runners[self.index].is_connected()
    }

    /// Waits until its stream is live.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<()> {
        let what = format!("a live ControlChannel stream of runner {:?}", self.name());
        self.wait(timeout, &what, |p| p.is_connected().then_some(()))
            .await
    }

    /// Waits, without a timeout, until its stream is live.
    pub(crate) async fn wait_connected_forever(&self) {
        let r = self.index;
        self.plane
            .state
            .wait_until(None, |inner| inner.runners[r].is_connected().then_some(()))
            .await;
    }

    /// Waits until its stream is not live.
    pub async fn wait_disconnected(&self, timeout: Duration) -> Result<()> {
        let what = format!("the stream of runner {:?} to end", self.name());
        self.wait(timeout, &what, |p| (!p.is_connected()).then_some(()))
            .await
    }

    /// How many of its streams were accepted so far.
    pub fn connection_count(&self) -> u64 {
        self.plane.state.lock().runners[self.index].streams_opened
    }

    /// Waits until at least `n` of its streams were accepted and one is
    /// live (`connection_count() + 1`: its reconnect).
    pub async fn wait_for_connections(&self, n: u64, timeout: Duration) -> Result<()> {
        let what = format!("stream #{n} of runner {:?}", self.name());
        self.wait(timeout, &what, |p| {
            (p.streams_opened >= n && p.is_connected()).then_some(())
        })
        .await
    }

    /// Pushes `message` into its live stream.
    pub async fn send(&self, message: impl Into<crate::Outgoing>) -> Result<()> {
        self.plane.send_to(Some(self.index), message.into()).await
    }

    /// `send(ServerMessage { request_id, request: Some(request) })`.
    pub async fn send_request(
        &self,
        request_id: impl Into<String>,
        request: server_message::Request,
    ) -> Result<()> {
        self.send(ServerMessage {
            request_id: request_id.into(),
            request: Some(request),
            acked_sequence: 0,
        })
        .await
    }

    /// Every `ServerMessage` handed to its streams so far.
    pub fn sent(&self) -> Vec<ServerMessage> {
        let inner = self.plane.state.lock();
        inner.runners[self.index]
            .sent
            .iter()
            .filter_map(|&i| inner.sent.get(i).map(|(_, m)| m.clone()))
            .collect()
    }

    /// Every message it sent that was processed, in order (its own log: a
    /// message's position here is its local index).
    pub fn received(&self) -> Vec<ClientMessage> {
        let inner = self.plane.state.lock();
        inner.runners[self.index]
            .received
            .iter()
            .filter_map(|&i| inner.received.get(i).map(|r| r.message.clone()))
            .collect()
    }

    /// How many of its messages were processed so far (the local index the
    /// next one gets).
    pub fn received_count(&self) -> usize {
        self.plane.state.lock().runners[self.index].received.len()
    }

    /// Its first message matching `pred`, waiting up to `timeout`.
    pub async fn wait_for(
        &self,
        pred: impl Fn(&ClientMessage) -> bool,
        timeout: Duration,
    ) -> Result<ClientMessage> {
        self.wait_for_after(0, pred, timeout)
            .await
            .map(|(_, message)| message)
    }

    /// Its first message at local index `>= index` matching `pred`, with
    /// that local index, waiting up to `timeout`.
    pub async fn wait_for_after(
        &self,
        index: usize,
        pred: impl Fn(&ClientMessage) -> bool,
        timeout: Duration,
    ) -> Result<(usize, ClientMessage)> {
        let r = self.index;
        let mut next = index;
        let what = format!(
            "a matching message of runner {:?} at index >= {index}",
            self.name()
        );
        self.plane
            .state
            .wait_until(Some(timeout), |inner| {
                let mine = &inner.runners[r].received;
                let found = mine
                    .iter()
                    .enumerate()
                    .skip(next)
                    .filter_map(|(local, &i)| inner.received.get(i).map(|m| (local, &m.message)))
                    .find(|(_, m)| pred(m))
                    .map(|(local, m)| (local, m.clone()));
                next = next.max(mine.len());
                found
            })
            .await
            .ok_or_else(|| self.plane.state.timeout_error(&what, timeout))
    }

    /// Waits until `n` of its messages match `pred`; returns the first `n`.
    pub async fn wait_for_count(
        &self,
        pred: impl Fn(&ClientMessage) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<ClientMessage>> {
        let r = self.index;
        let mut next = 0;
        let mut found = Vec::new();
        let what = format!("{n} matching message(s) of runner {:?}", self.name());
        self.plane
            .state
            .wait_until(Some(timeout), |inner| {
                let mine = &inner.runners[r].received;
                for &i in mine.iter().skip(next) {
                    if let Some(m) = inner.received.get(i)
                        && found.len() < n
                        && pred(&m.message)
                    {
                        found.push(m.message.clone());
                    }
                }
                next = next.max(mine.len());
                (found.len() >= n).then(|| found.clone())
            })
            .await
            .ok_or_else(|| self.plane.state.timeout_error(&what, timeout))
    }

    /// Its messages received but dropped (duplicates), in order.
    pub fn dropped(&self) -> Vec<DroppedMessage> {
        let name = self.name();
        self.plane
            .dropped()
            .into_iter()
            .filter(|d| d.runner == name)
            .collect()
    }

    /// What its sequence check saw (its numbers only).
    pub fn sequence_report(&self) -> SequenceReport {
        self.plane.state.lock().runners[self.index]
            .sequencing
            .report
            .clone()
    }

    /// Ends its live stream with `UNAVAILABLE` (the others' stay). Returns
    /// whether it had one.
    pub fn drop_stream(&self) -> bool {
        self.drop_stream_with(Status::unavailable(
            "stream dropped by the mock control plane",
        ))
    }

    /// Ends its live stream with `status`. Returns whether it had one.
    pub fn drop_stream_with(&self, status: Status) -> bool {
        self.plane.state.kill_stream(Some(self.index), status)
    }

    /// Waits until `check` of its state says `Some`, or fails naming `what`.
    async fn wait<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut check: impl FnMut(&crate::runners::RunnerState) -> Option<T>,
    ) -> Result<T> {
        let r = self.index;
        self.plane
            .state
            .wait_until(Some(timeout), |inner| check(&inner.runners[r]))
            .await
            .ok_or_else(|| self.plane.state.timeout_error(what, timeout))
    }
}

impl std::fmt::Debug for RunnerView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerView")
            .field("name", &self.name())
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}
