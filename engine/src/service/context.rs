//! Context RPCs: usage, compaction through the model, clearing.

use code_agent_proto::agent_event::EventType;
use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::context;

impl Service {
    pub(super) async fn get_context_usage(
        &self,
        request: GetContextUsageRequest,
    ) -> Result<GetContextUsageResponse, Status> {
        let session = self.session(&request.session_id)?;
        Ok(GetContextUsageResponse {
            usage: Some(session.read(|d| d.context_usage())),
        })
    }

    pub(super) async fn compact_context(
        &self,
        request: CompactContextRequest,
    ) -> Result<CompactContextResponse, Status> {
        let session = self.session(&request.session_id)?;
        let lease = session
            .generation
            .begin("compaction", false, &self.engine.shutdown)
            .map_err(|kind| {
                Status::failed_precondition(format!("session is busy: a {kind} is running"))
            })?;
        let guard = lease.cancel.clone().drop_guard();
        let llm = session.read(|d| d.config.llm.clone());
        let model = self
            .engine
            .models
            .for_session(&self.engine.providers, llm.as_ref())?;
        let result = context::compact(&session, &model, &lease.cancel).await;
        guard.disarm();
        drop(lease);
        let compaction = result?;
        self.engine.persist(&session).await?;
        if compaction.compacted {
            self.engine.events.emit(
                EventType::Info,
                Some(&session.id),
                "context compacted",
                [
                    ("kind", "compact".to_string()),
                    (
                        "before_messages",
                        compaction.before.message_count.to_string(),
                    ),
                    ("after_messages", compaction.after.message_count.to_string()),
                ],
            );
        }
        Ok(CompactContextResponse {
            success: true,
            before: Some(compaction.before),
            after: Some(compaction.after),
        })
    }

    pub(super) async fn clear_context(
        &self,
        request: ClearContextRequest,
    ) -> Result<ClearContextResponse, Status> {
        let session = self.session(&request.session_id)?;
        let lease = session
            .generation
            .begin("clear", false, &self.engine.shutdown)
            .map_err(|kind| {
                Status::failed_precondition(format!("session is busy: a {kind} is running"))
            })?;
        context::clear(&session);
        drop(lease);
        self.engine.persist(&session).await?;
        Ok(ClearContextResponse { success: true })
    }
}
