//! `bare-client URL`: the floor for the runner's idle memory —
//! a bare tonic client that registers with the control plane at `URL` and
//! holds one `ControlChannel` open, reading whatever comes, doing nothing
//! else. The benchmark reads its RSS from /proc beside the runner's.
//! Prints `connected` once the stream is open.

use agent_runner_proto::runner::agent_runner_control_service_client::AgentRunnerControlServiceClient;
use agent_runner_proto::runner::{ClientMessage, RegisterRunnerRequest};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: bare-client URL"))?;
    let mut client = AgentRunnerControlServiceClient::connect(url).await?;
    client
        .register_runner(RegisterRunnerRequest::default())
        .await?;
    // An outbound half that never sends (and never ends).
    let outbound = futures::stream::pending::<ClientMessage>();
    let mut inbound = client.control_channel(outbound).await?.into_inner();
    println!("connected");
    while inbound.message().await?.is_some() {}
    Ok(())
}
