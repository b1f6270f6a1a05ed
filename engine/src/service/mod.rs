//! The tonic `CodeAgentService` of the engine: all 77 RPCs. Each area's
//! handlers live in their own file as inherent methods of [`Service`]; the
//! trait impl below only unwraps requests and wraps responses (the MCP and
//! cron handlers get the whole request: its metadata scopes them to a
//! session, see [`Service::scoped_session`]).

mod context;
mod control;
mod cron;
mod generate;
mod hitl;
mod lifecycle;
mod lsp;
mod mcp;
mod memory;
mod planning;
mod policy;
mod providers;
mod sessions;
mod skills;

use std::pin::Pin;
use std::sync::Arc;

use code_agent_proto::code_agent_service_server::{CodeAgentService, CodeAgentServiceServer};
use code_agent_proto::*;
use futures::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::engine::{Engine, EngineInner};
use crate::session::Session;

/// The service (a cheap handle on the engine).
#[derive(Clone, Debug)]
pub struct Service {
    engine: Arc<EngineInner>,
}

impl Service {
    pub(crate) fn new(engine: Engine) -> Self {
        Self {
            engine: engine.inner,
        }
    }

    fn session(&self, id: &str) -> Result<Arc<Session>, Status> {
        if id.is_empty() {
            return Err(Status::invalid_argument("session_id: required"));
        }
        self.engine.session(id)
    }

    /// The session the request's metadata [`crate::mcp::SESSION_METADATA`]
    /// names (it must exist), or `None` without it: the operator's scope,
    /// for the RPCs whose messages name no session (MCP, cron).
    fn scoped_session<T>(&self, request: &Request<T>) -> Result<Option<Arc<Session>>, Status> {
        match request.metadata().get(crate::mcp::SESSION_METADATA) {
            None => Ok(None),
            Some(value) => {
                let id = value.to_str().map_err(|_| {
                    Status::invalid_argument(format!(
                        "metadata {}: not a valid session id",
                        crate::mcp::SESSION_METADATA
                    ))
                })?;
                self.session(id).map(Some)
            }
        }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<AgentEvent, Status>> + Send + 'static>>;

macro_rules! code_agent_service {
    (
        handled { $( $method:ident : $req:ident => $resp:ident ; )* }
        with_metadata { $( $mmethod:ident : $mreq:ident => $mresp:ident ; )* }
    ) => {
        #[tonic::async_trait]
        impl CodeAgentService for Service {
            $(
                async fn $method(&self, request: Request<$req>) -> Result<Response<$resp>, Status> {
                    Service::$method(self, request.into_inner()).await.map(Response::new)
                }
            )*
            $(
                async fn $mmethod(&self, request: Request<$mreq>) -> Result<Response<$mresp>, Status> {
                    Service::$mmethod(self, request).await.map(Response::new)
                }
            )*

            type StreamGenerateStream = ReceiverStream<Result<GenerateChunk, Status>>;
            async fn stream_generate(
                &self,
                request: Request<GenerateRequest>,
            ) -> Result<Response<Self::StreamGenerateStream>, Status> {
                Service::stream_generate(self, request.into_inner()).await.map(Response::new)
            }

            type StreamGenerateStructuredStream = ReceiverStream<Result<GenerateStructuredChunk, Status>>;
            async fn stream_generate_structured(
                &self,
                request: Request<GenerateStructuredRequest>,
            ) -> Result<Response<Self::StreamGenerateStructuredStream>, Status> {
                Service::stream_generate_structured(self, request.into_inner()).await.map(Response::new)
            }

            type SubscribeEventsStream = EventStream;
            async fn subscribe_events(
                &self,
                request: Request<SubscribeEventsRequest>,
            ) -> Result<Response<Self::SubscribeEventsStream>, Status> {
                Service::subscribe_events(self, request.into_inner()).await.map(Response::new)
            }
        }
    };
}

code_agent_service! {
    handled {
        health_check: HealthCheckRequest => HealthCheckResponse;
        get_capabilities: GetCapabilitiesRequest => GetCapabilitiesResponse;
        initialize: InitializeRequest => InitializeResponse;
        shutdown: ShutdownRequest => ShutdownResponse;
        create_session: CreateSessionRequest => CreateSessionResponse;
        destroy_session: DestroySessionRequest => DestroySessionResponse;
        list_sessions: ListSessionsRequest => ListSessionsResponse;
        get_session: GetSessionRequest => GetSessionResponse;
        configure_session: ConfigureSessionRequest => ConfigureSessionResponse;
        get_messages: GetMessagesRequest => GetMessagesResponse;
        generate: GenerateRequest => GenerateResponse;
        generate_structured: GenerateStructuredRequest => GenerateStructuredResponse;
        load_skill: LoadSkillRequest => LoadSkillResponse;
        unload_skill: UnloadSkillRequest => UnloadSkillResponse;
        list_skills: ListSkillsRequest => ListSkillsResponse;
        get_claude_code_skills: GetClaudeCodeSkillsRequest => GetClaudeCodeSkillsResponse;
        get_context_usage: GetContextUsageRequest => GetContextUsageResponse;
        compact_context: CompactContextRequest => CompactContextResponse;
        clear_context: ClearContextRequest => ClearContextResponse;
        cancel: CancelRequest => CancelResponse;
        pause: PauseRequest => PauseResponse;
        resume: ResumeRequest => ResumeResponse;
        confirm_tool_execution: ConfirmToolExecutionRequest => ConfirmToolExecutionResponse;
        set_confirmation_policy: SetConfirmationPolicyRequest => SetConfirmationPolicyResponse;
        get_confirmation_policy: GetConfirmationPolicyRequest => GetConfirmationPolicyResponse;
        set_lane_handler: SetLaneHandlerRequest => SetLaneHandlerResponse;
        get_lane_handler: GetLaneHandlerRequest => GetLaneHandlerResponse;
        complete_external_task: CompleteExternalTaskRequest => CompleteExternalTaskResponse;
        list_pending_external_tasks: ListPendingExternalTasksRequest => ListPendingExternalTasksResponse;
        set_permission_policy: SetPermissionPolicyRequest => SetPermissionPolicyResponse;
        get_permission_policy: GetPermissionPolicyRequest => GetPermissionPolicyResponse;
        check_permission: CheckPermissionRequest => CheckPermissionResponse;
        add_permission_rule: AddPermissionRuleRequest => AddPermissionRuleResponse;
        get_todos: GetTodosRequest => GetTodosResponse;
        set_todos: SetTodosRequest => SetTodosResponse;
        list_providers: ListProvidersRequest => ListProvidersResponse;
        get_provider: GetProviderRequest => GetProviderResponse;
        add_provider: AddProviderRequest => AddProviderResponse;
        update_provider: UpdateProviderRequest => UpdateProviderResponse;
        remove_provider: RemoveProviderRequest => RemoveProviderResponse;
        set_default_model: SetDefaultModelRequest => SetDefaultModelResponse;
        get_default_model: GetDefaultModelRequest => GetDefaultModelResponse;
        store_memory: StoreMemoryRequest => StoreMemoryResponse;
        retrieve_memory: RetrieveMemoryRequest => RetrieveMemoryResponse;
        search_memories: SearchMemoriesRequest => SearchMemoriesResponse;
        get_memory_stats: GetMemoryStatsRequest => GetMemoryStatsResponse;
        clear_memories: ClearMemoriesRequest => ClearMemoriesResponse;
        create_plan: CreatePlanRequest => CreatePlanResponse;
        get_plan: GetPlanRequest => GetPlanResponse;
        extract_goal: ExtractGoalRequest => ExtractGoalResponse;
        check_goal_achievement: CheckGoalAchievementRequest => CheckGoalAchievementResponse;
        parse_cron_schedule: ParseCronScheduleRequest => ParseCronScheduleResponse;
        start_lsp_server: StartLspServerRequest => StartLspServerResponse;
        stop_lsp_server: StopLspServerRequest => StopLspServerResponse;
        list_lsp_servers: ListLspServersRequest => ListLspServersResponse;
        lsp_hover: LspHoverRequest => LspHoverResponse;
        lsp_definition: LspDefinitionRequest => LspDefinitionResponse;
        lsp_references: LspReferencesRequest => LspReferencesResponse;
        lsp_symbols: LspSymbolsRequest => LspSymbolsResponse;
        lsp_diagnostics: LspDiagnosticsRequest => LspDiagnosticsResponse;
    }
    // Handlers that read the request's metadata (the session scope).
    with_metadata {
        list_cron_jobs: ListCronJobsRequest => ListCronJobsResponse;
        create_cron_job: CreateCronJobRequest => CreateCronJobResponse;
        get_cron_job: GetCronJobRequest => GetCronJobResponse;
        update_cron_job: UpdateCronJobRequest => UpdateCronJobResponse;
        pause_cron_job: PauseCronJobRequest => PauseCronJobResponse;
        resume_cron_job: ResumeCronJobRequest => ResumeCronJobResponse;
        delete_cron_job: DeleteCronJobRequest => DeleteCronJobResponse;
        get_cron_history: GetCronHistoryRequest => GetCronHistoryResponse;
        run_cron_job: RunCronJobRequest => RunCronJobResponse;
        register_mcp_server: RegisterMcpServerRequest => RegisterMcpServerResponse;
        connect_mcp_server: ConnectMcpServerRequest => ConnectMcpServerResponse;
        disconnect_mcp_server: DisconnectMcpServerRequest => DisconnectMcpServerResponse;
        list_mcp_servers: ListMcpServersRequest => ListMcpServersResponse;
        get_mcp_tools: GetMcpToolsRequest => GetMcpToolsResponse;
    }
}

// The service is built on the engine, not the engine on the service: these
// constructors live here so that `engine` needs nothing of `service`.
impl Engine {
    /// The tonic service of this engine.
    pub fn grpc_service(&self) -> CodeAgentServiceServer<Service> {
        CodeAgentServiceServer::new(self.service())
            .max_decoding_message_size(32 * 1024 * 1024)
            .max_encoding_message_size(32 * 1024 * 1024)
    }

    /// The service itself, for in-process callers of the trait.
    pub fn service(&self) -> Service {
        Service::new(self.clone())
    }
}
