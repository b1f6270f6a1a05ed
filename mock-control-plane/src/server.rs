//! The tonic implementation of `AgentRunnerControlService`: records
//! registrations, turns each `ControlChannel` call into its runner's live
//! stream (reading the runner's messages into the log, writing what tests
//! send, acknowledging what it processed), honours injected faults, and
//! serves the configured GitHub installations. Which runner a call speaks
//! for comes from its secret ([`crate::auth`]).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use agent_runner_proto::runner::agent_runner_control_service_server::AgentRunnerControlService;
use agent_runner_proto::runner::{
    ClientMessage, GetGithubInstallationAccessTokenForRunnerRequest,
    GetGithubInstallationAccessTokenForRunnerResponse, GithubInstallation,
    GithubInstallationAccessTokenRequest, GithubInstallationAccessTokenResponse,
    GithubInstallationForRunner, ListGithubInstallationsForRunnerRequest,
    ListGithubInstallationsForRunnerResponse, ListGithubInstallationsRequest,
    ListGithubInstallationsResponse, RegisterRunnerRequest, RegisterRunnerResponse, ServerMessage,
};
use agent_runner_proto::{Validate, violations};
use futures::{FutureExt as _, Stream};
use tokio::sync::{mpsc, oneshot, watch};
use tonic::metadata::{KeyAndValueRef, MetadataMap};
use tonic::{Request, Response, Status, Streaming};

use crate::acks::AckMode;
use crate::auth::RunnerIndex;
use crate::config::{GithubInstallation as ConfiguredInstallation, GithubRpcNames};
use crate::state::{OpenedStream, Registration, State};
use crate::versions::{Outgoing, Protocol};

#[derive(Clone)]
pub(crate) struct MockService {
    state: Arc<State>,
    delay_headers: bool,
    github: GithubRpcs,
}

impl MockService {
    pub(crate) fn new(state: Arc<State>, delay_headers: bool) -> Self {
        MockService {
            state,
            delay_headers,
            github: GithubRpcs::new(GithubRpcNames::default()),
        }
    }

    /// Serve the GitHub RPCs as `github` says (and record calls there).
    pub(crate) fn with_github(mut self, github: GithubRpcs) -> Self {
        self.github = github;
        self
    }
}

/// Which names the GitHub RPCs are served under, and the log of calls
/// (shared by every incarnation of the server, so it survives restarts).
#[derive(Clone)]
pub(crate) struct GithubRpcs {
    names: GithubRpcNames,
    calls: Arc<std::sync::Mutex<Vec<String>>>,
}

impl GithubRpcs {
    pub(crate) fn new(names: GithubRpcNames) -> Self {
        Self {
            names,
            calls: Arc::default(),
        }
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records a call of `rpc`; `UNIMPLEMENTED` unless `served`.
    fn call(&self, rpc: &str, served: bool) -> Result<(), Status> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(rpc.to_owned());
        if served {
            Ok(())
        } else {
            Err(Status::unimplemented(format!(
                "this mock does not serve {rpc} (--github-rpc-names {:?})",
                self.names
            )))
        }
    }

    fn installations(&self, state: &State) -> Vec<i64> {
        state
            .lock()
            .github
            .iter()
            .map(|i| i.installation_id)
            .collect()
    }

    fn token(&self, state: &State, id: i64) -> Result<ConfiguredInstallation, Status> {
        let found = state.update(|inner| {
            inner.token_requests.push(id);
            inner
                .github
                .iter()
                .find(|i| i.installation_id == id)
                .cloned()
        });
        found.ok_or_else(|| {
            Status::not_found(format!(
                "no GitHub installation {id} is linked to this runner"
            ))
        })
    }
}

/// The call's ASCII metadata as a map; binary (`-bin`) entries are skipped.
pub(crate) fn metadata_map(metadata: &MetadataMap) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for entry in metadata.iter() {
        if let KeyAndValueRef::Ascii(key, value) = entry {
            let Ok(value) = value.to_str() else { continue };
            map.entry(key.as_str().to_owned())
                .and_modify(|v| {
                    v.push_str(", ");
                    v.push_str(value);
                })
                .or_insert_with(|| value.to_owned());
        }
    }
    map
}

fn check<T: Validate>(message: &T) -> Option<String> {
    message.validate().err().map(|e| violations(&e))
}

pub(crate) type OutboundStream<M = ServerMessage> =
    Pin<Box<dyn Stream<Item = Result<M, Status>> + Send>>;

/// The server→runner half: what tests send (as `pick` takes it out of an
/// [`Outgoing`] of the stream's version), until the stream is killed (the
/// kill status ends it as an error) or closed (the senders are dropped: it
/// ends cleanly).
pub(crate) fn outbound_stream<M: Send + 'static>(
    outbound: mpsc::Receiver<Outgoing>,
    kill: oneshot::Receiver<Status>,
    pick: fn(Outgoing) -> Option<M>,
) -> OutboundStream<M> {
    struct Halves<M> {
        outbound: mpsc::Receiver<Outgoing>,
        kill: oneshot::Receiver<Status>,
        pick: fn(Outgoing) -> Option<M>,
        done: bool,
    }
    let halves = Halves {
        outbound,
        kill,
        pick,
        done: false,
    };
    Box::pin(futures::stream::unfold(halves, |mut h| async move {
        if h.done {
            return None;
        }
        tokio::select! {
            biased;
            killed = &mut h.kill => match killed {
                Ok(status) => {
                    h.done = true;
                    Some((Err(status), h))
                }
                // The kill sender went away without a status: a clean end.
                Err(_) => None,
            },
            message = h.outbound.recv() => match message.map(h.pick) {
                None => None,
                Some(Some(m)) => Some((Ok(m), h)),
                // Sending converts into the mock's version: never another.
                Some(None) => {
                    h.done = true;
                    Some((Err(Status::internal("a message of the other protocol version")), h))
                }
            },
        }
    }))
}

/// The most messages [`read_inbound`] logs under one lock.
const READ_BATCH: usize = 256;

/// A received 0.2 message with what validation found wrong in it.
pub(crate) fn checked(message: ClientMessage) -> (ClientMessage, Option<String>) {
    let violations = check(&message);
    (message, violations)
}

/// Says what is wrong with a received message, if anything.
fn logged(read: (ClientMessage, Option<String>)) -> (ClientMessage, Option<String>) {
    if let Some(v) = &read.1 {
        tracing::warn!(violations = %v, "runner sent an invalid ClientMessage");
    }
    tracing::debug!(message = ?read.0, "received");
    read
}

/// The runner the request speaks for (the auth interceptor names it; an
/// untagged call can only come from an open mock's only runner).
pub(crate) fn runner_of<T>(request: &Request<T>) -> usize {
    request.extensions().get::<RunnerIndex>().map_or(0, |r| r.0)
}

/// The runner→server half of runner `r`'s stream: every message goes into
/// the log until the runner closes its side, the call breaks, or the mock
/// ends the stream.
async fn read_inbound<M>(
    state: Arc<State>,
    r: usize,
    mut inbound: Streaming<M>,
    read: fn(M) -> (ClientMessage, Option<String>),
    opened_id: u64,
    cancel: tokio_util::sync::CancellationToken,
) where
    M: prost::Message + Default + 'static,
{
    // A slow control plane: the delay owed, slept off a millisecond or more
    // at a time (timers are no finer).
    let read_as = read;
    let read_delay = state.lock().read_delay;
    let mut owed = std::time::Duration::ZERO;
    loop {
        if owed >= std::time::Duration::from_millis(1) {
            tokio::select! {
                _ = cancel.cancelled() => break,
                () = tokio::time::sleep(owed) => owed = std::time::Duration::ZERO,
            }
        }
        let first = tokio::select! {
            _ = cancel.cancelled() => break,
            next = inbound.message() => next,
        };
        // What else the stream already holds comes in the same batch (one
        // lock, one wake of the timeline's followers), unless each message
        // is to take its read delay.
        let mut batch = Vec::new();
        let mut next = Some(first);
        let mut ended = false;
        let rejects = state.rejects();
        let mut rejected = false;
        while let Some(read) = next.take() {
            let read = read.map(|m| m.map(|m| logged(read_as(m))));
            match read {
                Ok(Some((message, _))) if rejects.as_ref().is_some_and(|f| f(&message)) => {
                    // A control plane that cannot take it: the stream ends
                    // here, nothing after it processed.
                    tracing::info!(
                        stream = opened_id,
                        "rejecting a ClientMessage: stream ended"
                    );
                    ended = true;
                    rejected = true;
                }
                Ok(Some(message)) => {
                    owed += read_delay;
                    batch.push(message);
                    if read_delay.is_zero() && batch.len() < READ_BATCH {
                        next = inbound.message().now_or_never();
                    }
                }
                Ok(None) => {
                    tracing::debug!(
                        stream = opened_id,
                        "runner closed its half of ControlChannel"
                    );
                    ended = true;
                }
                Err(status) => {
                    tracing::debug!(stream = opened_id, %status, "ControlChannel read failed");
                    ended = true;
                }
            }
        }
        if !batch.is_empty() {
            state.record_received(r, batch);
        }
        if rejected {
            state.rejected(r);
        }
        if ended {
            break;
        }
    }
    state.close_stream(r, opened_id);
}

/// Sends acknowledgement-only `ServerMessage`s into one stream of runner
/// `r` as its processed mark rises (cumulative: a burst gets few), at once
/// or late as the ack mode says, until the stream ends.
async fn acknowledge(
    state: Arc<State>,
    r: usize,
    protocol: Protocol,
    tx: mpsc::Sender<Outgoing>,
    mut processed: watch::Receiver<u64>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let mut acked = 0;
    loop {
        let (mode, session_acked) = {
            let inner = state.lock();
            let sequencing = &inner.runners[r].sequencing;
            (sequencing.mode, sequencing.session_acked)
        };
        let mark = *processed.borrow_and_update();
        if session_acked && mark != acked && matches!(mode, AckMode::Immediate | AckMode::Late(_)) {
            let mut mark = mark;
            if let AckMode::Late(delay) = mode {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = cancel.cancelled() => return,
                }
                mark = *processed.borrow_and_update();
            }
            if tx.send(Outgoing::ack(protocol, mark)).await.is_err() {
                return;
            }
            acked = mark;
            state.update(|inner| inner.runners[r].sequencing.report.acks_sent += 1);
            continue;
        }
        tokio::select! {
            changed = processed.changed() => if changed.is_err() { return },
            () = cancel.cancelled() => return,
        }
    }
}

impl MockService {
    /// `RegisterRunner` of either version, given in 0.2's form with what the
    /// version's rules found wrong in it: a configured failure, or the
    /// registration recorded and the features and acknowledgement answered.
    pub(crate) fn register(
        &self,
        r: usize,
        metadata: BTreeMap<String, String>,
        request: RegisterRunnerRequest,
        violations: Option<String>,
    ) -> Result<RegisterRunnerResponse, Status> {
        let failure = self.state.lock().fail_register.clone();
        if let Some(status) = failure {
            tracing::info!(%status, "failing RegisterRunner as configured");
            return Err(status);
        }
        let sdks: Vec<&str> = request.agent_sdks.iter().map(|s| s.name.as_str()).collect();
        let (features, acked_sequence, runner) = self.state.update(|inner| {
            let runner = &mut inner.runners[r];
            let (mut features, acked) = runner.sequencing.registration(&request.features);
            crate::approvals::accepted(inner.approvals, &request.features, &mut features);
            (features, acked, runner.name.clone())
        });
        tracing::info!(?sdks, %runner, "runner registered");
        self.state.record_registration(
            r,
            Registration {
                request,
                metadata,
                violations,
                runner,
            },
        );
        Ok(RegisterRunnerResponse {
            features,
            acked_sequence,
        })
    }

    /// `ControlChannel` of either version: the runner's messages read with
    /// `read` into the log, what tests send taken out with `pick`.
    pub(crate) async fn open_channel<I, O>(
        &self,
        r: usize,
        protocol: Protocol,
        inbound: Streaming<I>,
        read: fn(I) -> (ClientMessage, Option<String>),
        pick: fn(Outgoing) -> Option<O>,
    ) -> Result<OutboundStream<O>, Status>
    where
        I: prost::Message + Default + 'static,
        O: Send + 'static,
    {
        let failure = self.state.lock().fail_stream.clone();
        if let Some(status) = failure {
            tracing::info!(%status, "rejecting ControlChannel as configured");
            return Err(status);
        }
        let OpenedStream {
            id,
            tx,
            outbound,
            kill,
            cancel,
            processed,
            runner,
        } = self.state.open_stream(r);
        tracing::info!(stream = id, %runner, %protocol, "runner connected its ControlChannel");
        tokio::spawn(acknowledge(
            self.state.clone(),
            r,
            protocol,
            tx,
            processed,
            cancel.clone(),
        ));
        tokio::spawn(read_inbound(
            self.state.clone(),
            r,
            inbound,
            read,
            id,
            cancel,
        ));
        if self.delay_headers {
            // Like grpc-go and grpcio servers: no response headers until
            // there is a first message to send with them.
            let mut outbound = outbound;
            let Some(first) = outbound.recv().await else {
                return Err(Status::unavailable("mock stopped"));
            };
            let rest = outbound_stream(outbound, kill, pick);
            let first =
                pick(first).ok_or_else(|| Status::internal("a message of the other version"));
            return Ok(Box::pin(futures::StreamExt::chain(
                futures::stream::iter([first]),
                rest,
            )));
        }
        Ok(outbound_stream(outbound, kill, pick))
    }
}

#[tonic::async_trait]
impl AgentRunnerControlService for MockService {
    async fn register_runner(
        &self,
        request: Request<RegisterRunnerRequest>,
    ) -> Result<Response<RegisterRunnerResponse>, Status> {
        let r = runner_of(&request);
        let metadata = metadata_map(request.metadata());
        let request = request.into_inner();
        let violations = check(&request);
        self.register(r, metadata, request, violations)
            .map(Response::new)
    }

    type ControlChannelStream = OutboundStream;

    async fn control_channel(
        &self,
        request: Request<Streaming<ClientMessage>>,
    ) -> Result<Response<Self::ControlChannelStream>, Status> {
        let r = runner_of(&request);
        self.open_channel(
            r,
            Protocol::V02,
            request.into_inner(),
            checked,
            Outgoing::v02,
        )
        .await
        .map(Response::new)
    }

    async fn list_github_installations_for_runner(
        &self,
        _request: Request<ListGithubInstallationsForRunnerRequest>,
    ) -> Result<Response<ListGithubInstallationsForRunnerResponse>, Status> {
        self.github.call(
            "ListGithubInstallationsForRunner",
            self.github.names.serves_for_runner(),
        )?;
        let installations = self
            .github
            .installations(&self.state)
            .into_iter()
            .map(|installation_id| GithubInstallationForRunner { installation_id })
            .collect();
        Ok(Response::new(ListGithubInstallationsForRunnerResponse {
            installations,
        }))
    }

    async fn get_github_installation_access_token_for_runner(
        &self,
        request: Request<GetGithubInstallationAccessTokenForRunnerRequest>,
    ) -> Result<Response<GetGithubInstallationAccessTokenForRunnerResponse>, Status> {
        self.github.call(
            "GetGithubInstallationAccessTokenForRunner",
            self.github.names.serves_for_runner(),
        )?;
        let i = self
            .github
            .token(&self.state, request.into_inner().installation_id)?;
        Ok(Response::new(
            GetGithubInstallationAccessTokenForRunnerResponse {
                installation_id: i.installation_id,
                access_token: i.access_token,
                access_token_expires_unix_time_ms: i.expires_unix_ms,
                repositories: i.repositories,
            },
        ))
    }

    async fn list_github_installations(
        &self,
        _request: Request<ListGithubInstallationsRequest>,
    ) -> Result<Response<ListGithubInstallationsResponse>, Status> {
        self.github
            .call("ListGithubInstallations", self.github.names.serves_later())?;
        let installations = self
            .github
            .installations(&self.state)
            .into_iter()
            .map(|installation_id| GithubInstallation { installation_id })
            .collect();
        Ok(Response::new(ListGithubInstallationsResponse {
            installations,
        }))
    }

    async fn github_installation_access_token(
        &self,
        request: Request<GithubInstallationAccessTokenRequest>,
    ) -> Result<Response<GithubInstallationAccessTokenResponse>, Status> {
        self.github.call(
            "GithubInstallationAccessToken",
            self.github.names.serves_later(),
        )?;
        let i = self
            .github
            .token(&self.state, request.into_inner().installation_id)?;
        Ok(Response::new(GithubInstallationAccessTokenResponse {
            installation_id: i.installation_id,
            access_token: i.access_token,
            access_token_expires_unix_time_ms: i.expires_unix_ms,
            repositories: i.repositories,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_keeps_ascii_and_joins_repeats() {
        let mut md = MetadataMap::new();
        md.append("x-a", "1".parse().expect("ascii"));
        md.append("x-a", "2".parse().expect("ascii"));
        md.insert("x-b", "v".parse().expect("ascii"));
        md.insert_bin(
            "x-c-bin",
            tonic::metadata::MetadataValue::from_bytes(b"\x00"),
        );
        let map = metadata_map(&md);
        assert_eq!(map.get("x-a").map(String::as_str), Some("1, 2"));
        assert_eq!(map.get("x-b").map(String::as_str), Some("v"));
        assert!(!map.contains_key("x-c-bin"));
    }
}
