//! Tests of the mock over real loopback gRPC, with a tonic client playing the
//! runner, split by what they exercise: serving (auth, path prefix,
//! registration, stop/restart, TLS, GitHub RPCs), the live stream (its log,
//! fault injection), the drivers (stdio, scenarios), acknowledged delivery,
//! and several runners at once. Every server binds 127.0.0.1:0, so tests run
//! in parallel; waits end as soon as their condition holds. The helpers
//! shared by all of them live here.

use std::collections::BTreeMap;

use agent_runner_proto::runner::{
    AgentStatus, AgentUpdate, ClientMessage, GithubInstallationForRunner, HeartbeatRequest,
    HeartbeatResponse, ListGithubInstallationsForRunnerRequest, client_message, server_message,
};

use crate::test_runner::{Client, Stream, WAIT, client, reply, spawn_scripted_runner};
use crate::{MockConfig, MockControlPlane, scenario};

mod delivery;
mod drivers;
mod runners;
mod serving;
mod stream;
mod v07;

fn heartbeat(id: &str) -> ClientMessage {
    reply(
        id,
        client_message::Payload::HeartbeatResponse(HeartbeatResponse {}),
    )
}

fn agent_ready(id: &str, agent: &str) -> ClientMessage {
    reply(
        id,
        client_message::Payload::AgentUpdate(AgentUpdate {
            agent_id: agent.into(),
            status: AgentStatus::Ready as i32,
        }),
    )
}

fn is_heartbeat(m: &ClientMessage) -> bool {
    matches!(
        m.payload,
        Some(client_message::Payload::HeartbeatResponse(_))
    )
}

/// Asks the connected runner for a heartbeat, as request `id`.
async fn send_heartbeat(plane: &MockControlPlane, id: &str) -> anyhow::Result<()> {
    plane
        .send_request(
            id,
            server_message::Request::HeartbeatRequest(HeartbeatRequest {}),
        )
        .await
}

/// The installations the mock lists to `c`.
async fn installations(c: &mut Client) -> Vec<GithubInstallationForRunner> {
    c.list_github_installations_for_runner(ListGithubInstallationsForRunnerRequest {})
        .await
        .expect("lists")
        .into_inner()
        .installations
}

/// A plain mock with a scripted runner connected to it.
async fn with_scripted_runner() -> MockControlPlane {
    let plane = plain().await;
    spawn_scripted_runner(&plane.url()).await;
    plane
}

/// Runs the scenario `yaml` with `vars` against a scripted runner; how it
/// ended, and what it printed.
async fn run_scenario(
    yaml: &str,
    vars: BTreeMap<String, String>,
) -> (anyhow::Result<scenario::Outcome>, String) {
    let plane = with_scripted_runner().await;
    let scenario = scenario::parse(yaml).expect("parses");
    let mut out = Vec::new();
    let outcome = scenario::run(&plane, &scenario, vars, &mut out).await;
    (outcome, String::from_utf8_lossy(&out).into_owned())
}

async fn plain() -> MockControlPlane {
    MockControlPlane::start(MockConfig::default())
        .await
        .expect("starts")
}

/// A plain mock and a client of it.
async fn plain_with_client() -> (MockControlPlane, Client) {
    let plane = plain().await;
    let c = client(&plane.url()).await;
    (plane, c)
}

/// Opens a stream on `c`; waits until the mock has seen `count` streams in
/// all.
async fn open_stream(plane: &MockControlPlane, c: &mut Client, count: u64) -> Stream {
    let stream = Stream::open(c, None).await.expect("opens");
    plane
        .wait_for_connections(count, WAIT)
        .await
        .expect("connected");
    stream
}

async fn connected(plane: &MockControlPlane) -> Stream {
    let mut c = client(&plane.url()).await;
    let stream = Stream::open(&mut c, None).await.expect("opens");
    plane.wait_connected(WAIT).await.expect("connected");
    // The stream keeps the connection; the client handle may go.
    stream
}
