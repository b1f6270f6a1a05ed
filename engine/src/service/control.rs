//! Control RPCs: the event subscription, cancel, pause and resume.

use code_agent_proto::agent_event::EventType;
use code_agent_proto::*;
use futures::StreamExt;
use tonic::Status;

use super::{EventStream, Service};
use crate::events::EventFilter;
use crate::store::validate_session_id;

impl Service {
    /// A `session_id` filter needs a well-formed id, not an existing
    /// session: a client may subscribe before it creates the session.
    pub(super) async fn subscribe_events(
        &self,
        request: SubscribeEventsRequest,
    ) -> Result<EventStream, Status> {
        if let Some(id) = request.session_id.as_deref().filter(|id| !id.is_empty()) {
            validate_session_id(id).map_err(Status::invalid_argument)?;
        }
        let filter = EventFilter::parse(request.session_id, &request.event_types)
            .map_err(Status::invalid_argument)?;
        let shutdown = self.engine.shutdown.clone().cancelled_owned();
        let stream = self
            .engine
            .events
            .subscribe(filter)
            .map(Ok)
            .take_until(shutdown);
        Ok(Box::pin(stream))
    }

    pub(super) async fn cancel(&self, request: CancelRequest) -> Result<CancelResponse, Status> {
        let session = self.session(&request.session_id)?;
        let cancelled = session.generation.cancel();
        self.engine.events.emit(
            EventType::Info,
            Some(&session.id),
            "cancel requested",
            [
                ("kind", "cancel".to_string()),
                ("was_running", cancelled.to_string()),
            ],
        );
        Ok(CancelResponse { success: true })
    }

    pub(super) async fn pause(&self, request: PauseRequest) -> Result<PauseResponse, Status> {
        let session = self.session(&request.session_id)?;
        session.set_paused(true);
        Ok(PauseResponse { success: true })
    }

    pub(super) async fn resume(&self, request: ResumeRequest) -> Result<ResumeResponse, Status> {
        let session = self.session(&request.session_id)?;
        session.set_paused(false);
        Ok(ResumeResponse { success: true })
    }
}
