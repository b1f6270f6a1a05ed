//! The mock's `AgentRunnerControlService` in protocol 0.7 (thread-only):
//! the tonic service built from `agent_runner_proto::runner_v07`, so what the
//! runner sends is decoded and validated as a 0.7 control plane would
//! (`crate::versions`), then handled exactly as 0.2's (`crate::server`):
//! the same log, faults, acknowledgements and runners. 0.7 has no GitHub
//! RPCs.

use agent_runner_proto::runner_v07 as v07;
use agent_runner_proto::runner_v07::agent_runner_control_service_server::AgentRunnerControlService;
use tonic::{Request, Response, Status, Streaming};

use crate::server::{MockService, OutboundStream, metadata_map, runner_of};
use crate::versions::{self, Outgoing, Protocol};

/// [`MockService`], speaking 0.7.
#[derive(Clone)]
pub(crate) struct MockServiceV07(pub(crate) MockService);

#[tonic::async_trait]
impl AgentRunnerControlService for MockServiceV07 {
    async fn register_runner(
        &self,
        request: Request<v07::RegisterRunnerRequest>,
    ) -> Result<Response<v07::RegisterRunnerResponse>, Status> {
        let r = runner_of(&request);
        let metadata = metadata_map(request.metadata());
        let (request, violations) = versions::registration_from_v07(&request.into_inner());
        let response = self.0.register(r, metadata, request, violations)?;
        Ok(Response::new(v07::RegisterRunnerResponse {
            features: response.features,
            acked_sequence: response.acked_sequence,
        }))
    }

    type ControlChannelStream = OutboundStream<v07::ServerMessage>;

    async fn control_channel(
        &self,
        request: Request<Streaming<v07::ClientMessage>>,
    ) -> Result<Response<Self::ControlChannelStream>, Status> {
        let r = runner_of(&request);
        self.0
            .open_channel(
                r,
                Protocol::V07,
                request.into_inner(),
                |m| versions::client_from_v07(&m),
                Outgoing::v07,
            )
            .await
            .map(Response::new)
    }
}
