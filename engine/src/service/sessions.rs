//! Session RPCs: create, destroy, list, get, configure, and the paged
//! message history.

use std::sync::Arc;

use code_agent_proto::agent_event::EventType;
use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::session::message::StoredMessage;
use crate::session::{Session, canonical_dir_off_worker};
use crate::store::validate_session_id;

/// The shown stand-in for a stored API key.
const REDACTED: &str = "***";

impl Service {
    /// Checks the storage type and resolves the workspace of `config`.
    async fn prepare_config(
        &self,
        mut config: SessionConfig,
    ) -> Result<(SessionConfig, Option<std::path::PathBuf>), Status> {
        let storage = StorageType::try_from(config.storage_type).map_err(|_| {
            Status::invalid_argument(format!(
                "config.storage_type: unknown value {}",
                config.storage_type
            ))
        })?;
        if storage == StorageType::Unspecified {
            config.storage_type = StorageType::Memory as i32;
        }
        if storage == StorageType::File && self.engine.store.is_none() {
            return Err(Status::failed_precondition(
                "config.storage_type: FILE sessions need the engine to have a state dir (--state-dir)",
            ));
        }
        if config.workspace.is_empty() {
            return Ok((config, self.engine.default_workspace()));
        }
        let path = canonical_dir_off_worker("config.workspace", config.workspace.clone())
            .await
            .map_err(Status::invalid_argument)?;
        self.engine.confine("config.workspace", &path)?;
        config.workspace = path.display().to_string();
        Ok((config, Some(path)))
    }

    pub(super) async fn create_session(
        &self,
        request: CreateSessionRequest,
    ) -> Result<CreateSessionResponse, Status> {
        let id = match request.session_id.filter(|id| !id.is_empty()) {
            Some(id) => {
                validate_session_id(&id).map_err(Status::invalid_argument)?;
                id
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        let (config, workspace) = self
            .prepare_config(request.config.unwrap_or_default())
            .await?;
        let messages = request
            .initial_context
            .iter()
            .enumerate()
            .map(|(i, m)| StoredMessage::from_request(m, &format!("initial_context[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Status::invalid_argument)?;
        let session = Arc::new(
            Session::new(id.clone(), config, workspace, messages).map_err(Status::internal)?,
        );
        self.engine.insert(session.clone())?;
        if let Err(status) = self.engine.persist(&session).await {
            let _ = self.engine.remove(&id).await;
            return Err(status);
        }
        self.engine.events.emit(
            EventType::SessionCreated,
            Some(&id),
            "session created",
            [("session_id", id.clone())],
        );
        Ok(CreateSessionResponse {
            session_id: id,
            session: Some(session.to_proto()),
        })
    }

    pub(super) async fn destroy_session(
        &self,
        request: DestroySessionRequest,
    ) -> Result<DestroySessionResponse, Status> {
        self.session(&request.session_id)?;
        // Its memories, plans, MCP servers and cron jobs go with it.
        let gone = self.engine.remove(&request.session_id).await?;
        // The Initialize env of a workspace no session uses any more goes
        // too, so the registry only holds live workspaces.
        if let Some(workspace) = gone.read(|d| d.workspace.clone()) {
            let in_use = self
                .engine
                .session_list()
                .iter()
                .any(|s| s.read(|d| d.workspace.as_deref() == Some(workspace.as_path())));
            if !in_use {
                self.engine.env.unregister(&workspace);
            }
        }
        self.engine.events.emit(
            EventType::SessionDestroyed,
            Some(&request.session_id),
            "session destroyed",
            [("session_id", request.session_id.clone())],
        );
        Ok(DestroySessionResponse { success: true })
    }

    pub(super) async fn list_sessions(
        &self,
        _request: ListSessionsRequest,
    ) -> Result<ListSessionsResponse, Status> {
        Ok(ListSessionsResponse {
            sessions: self
                .engine
                .session_list()
                .iter()
                .map(|s| s.to_proto())
                .collect(),
        })
    }

    pub(super) async fn get_session(
        &self,
        request: GetSessionRequest,
    ) -> Result<GetSessionResponse, Status> {
        Ok(GetSessionResponse {
            session: Some(self.session(&request.session_id)?.to_proto()),
        })
    }

    pub(super) async fn configure_session(
        &self,
        request: ConfigureSessionRequest,
    ) -> Result<ConfigureSessionResponse, Status> {
        let session = self.session(&request.session_id)?;
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("config: required"))?;
        let (mut config, workspace) = self.prepare_config(config).await?;
        let was_file = session.is_file_backed();
        session.update(|d| {
            // A key shown redacted (or left out) keeps the one set before.
            if let (Some(new), Some(old)) = (&mut config.llm, &d.config.llm)
                && (new.api_key.is_empty() || new.api_key == REDACTED)
            {
                new.api_key = old.api_key.clone();
            }
            d.config = config;
            d.workspace = workspace;
        });
        if was_file && !session.is_file_backed() {
            self.engine.delete_file(&session).await?;
        }
        if was_file != session.is_file_backed() {
            // The session's memories follow it to disk or into memory.
            let (engine, id, file) = (
                self.engine.clone(),
                session.id.clone(),
                session.is_file_backed(),
            );
            tokio::task::spawn_blocking(move || {
                engine.plans.storage_changed(&id, file);
                engine.memory.storage_changed(&id, file)
            })
            .await
            .map_err(|e| Status::internal(format!("moving the memories: {e}")))?
            .map_err(|e| Status::internal(e.to_string()))?;
        }
        self.engine.persist(&session).await?;
        Ok(ConfigureSessionResponse {
            session: Some(session.to_proto()),
        })
    }

    pub(super) async fn get_messages(
        &self,
        request: GetMessagesRequest,
    ) -> Result<GetMessagesResponse, Status> {
        let session = self.session(&request.session_id)?;
        let offset = request.offset.unwrap_or(0) as usize;
        Ok(session.read(|d| {
            let total = d.messages.len();
            let start = offset.min(total);
            let end = match request.limit {
                Some(limit) => start.saturating_add(limit as usize).min(total),
                None => total,
            };
            GetMessagesResponse {
                messages: d.messages[start..end]
                    .iter()
                    .map(StoredMessage::to_conversation)
                    .collect(),
                total_count: u32::try_from(total).unwrap_or(u32::MAX),
                has_more: end < total,
            }
        }))
    }
}
