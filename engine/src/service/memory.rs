//! Memory RPCs: store, retrieve (counting the access), search, stats and
//! clear a session's memories (see `crate::memory`). Each emits the
//! proto's memory event.

use std::sync::Arc;

use code_agent_proto::agent_event::EventType;
use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::memory::{MemoryError, MemoryStore, Tier, input};
use crate::session::message::now_ms;

fn status(error: MemoryError) -> Status {
    match error {
        MemoryError::Full => Status::resource_exhausted(error.to_string()),
        other => Status::internal(other.to_string()),
    }
}

impl Service {
    /// The session's memory store (opened on first use).
    fn memories(&self, session_id: &str) -> Result<Arc<MemoryStore>, Status> {
        let session = self.session(session_id)?;
        self.engine
            .memory
            .for_session(&session.id, session.is_file_backed())
            .map_err(status)
    }

    /// Runs `f` on the session's store off the async workers.
    async fn with_memories<R: Send + 'static>(
        &self,
        session_id: &str,
        f: impl FnOnce(&MemoryStore) -> Result<R, MemoryError> + Send + 'static,
    ) -> Result<R, Status> {
        let store = self.memories(session_id)?;
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| Status::internal(format!("memory store: {e}")))?
            .map_err(status)
    }

    pub(super) async fn store_memory(
        &self,
        request: StoreMemoryRequest,
    ) -> Result<StoreMemoryResponse, Status> {
        let memory = request
            .memory
            .ok_or_else(|| Status::invalid_argument("memory: required"))?;
        let item = input::prepare(memory, now_ms(), "memory.").map_err(Status::invalid_argument)?;
        let kind = item.memory_type.to_string();
        let id = self
            .with_memories(&request.session_id, move |s| s.store(&item))
            .await?;
        self.engine.events.emit(
            EventType::MemoryStored,
            Some(&request.session_id),
            "memory stored",
            [("memory_id", id.clone()), ("memory_type", kind)],
        );
        Ok(StoreMemoryResponse {
            success: true,
            memory_id: id,
        })
    }

    pub(super) async fn retrieve_memory(
        &self,
        request: RetrieveMemoryRequest,
    ) -> Result<RetrieveMemoryResponse, Status> {
        if request.memory_id.is_empty() {
            return Err(Status::invalid_argument("memory_id: required"));
        }
        let id = request.memory_id.clone();
        let memory = self
            .with_memories(&request.session_id, move |s| s.retrieve(&id, now_ms()))
            .await?;
        if memory.is_some() {
            self.engine.events.emit(
                EventType::MemoryRecalled,
                Some(&request.session_id),
                "memory recalled",
                [("memory_id", request.memory_id.clone())],
            );
        }
        Ok(RetrieveMemoryResponse { memory })
    }

    pub(super) async fn search_memories(
        &self,
        request: SearchMemoriesRequest,
    ) -> Result<SearchMemoriesResponse, Status> {
        let query = input::query(
            request.query,
            request.tags,
            request.min_importance,
            request.recent_only,
            request.limit,
        )
        .map_err(Status::invalid_argument)?;
        let (memories, total_count) = self
            .with_memories(&request.session_id, move |s| s.search(&query, now_ms()))
            .await?;
        self.engine.events.emit(
            EventType::MemoriesSearched,
            Some(&request.session_id),
            "memories searched",
            [
                ("returned", memories.len().to_string()),
                ("total", total_count.to_string()),
            ],
        );
        Ok(SearchMemoriesResponse {
            memories,
            total_count,
        })
    }

    pub(super) async fn get_memory_stats(
        &self,
        request: GetMemoryStatsRequest,
    ) -> Result<GetMemoryStatsResponse, Status> {
        let stats = self
            .with_memories(&request.session_id, |s| s.stats())
            .await?;
        Ok(GetMemoryStatsResponse { stats: Some(stats) })
    }

    pub(super) async fn clear_memories(
        &self,
        request: ClearMemoriesRequest,
    ) -> Result<ClearMemoriesResponse, Status> {
        let tiers: Vec<Tier> = [
            (request.clear_long_term, Tier::LongTerm),
            (request.clear_short_term, Tier::ShortTerm),
            (request.clear_working, Tier::Working),
        ]
        .into_iter()
        .filter_map(|(on, tier)| on.then_some(tier))
        .collect();
        if tiers.is_empty() {
            return Err(Status::invalid_argument(
                "clear_long_term, clear_short_term, clear_working: set at least one",
            ));
        }
        let cleared_count = self
            .with_memories(&request.session_id, move |s| s.clear(&tiers))
            .await?;
        self.engine.events.emit(
            EventType::MemoryCleared,
            Some(&request.session_id),
            "memories cleared",
            [("cleared", cleared_count.to_string())],
        );
        Ok(ClearMemoriesResponse {
            success: true,
            cleared_count,
        })
    }
}
