//! LSP RPCs: start/stop/list language servers and ask them about
//! the code. Positions are 0-based as in the proto; a `file_path` is a
//! `file://` URI, an absolute path, or a path relative to a running
//! server's root, and must be inside the engine's workspace root.

use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::lsp::{LspServerStatus, convert};

fn info(status: LspServerStatus) -> LspServerInfo {
    LspServerInfo {
        language: status.language,
        name: status.name,
        version: status.version,
        running: status.running,
    }
}

impl Service {
    /// A client's `file_path`, resolved and confined.
    fn lsp_path(&self, field: &str, requested: &str) -> Result<std::path::PathBuf, Status> {
        if requested.is_empty() {
            return Err(Status::invalid_argument(format!("{field}: required")));
        }
        let path = self
            .engine
            .lsp
            .resolve_path(requested)
            .map_err(|e| Status::invalid_argument(format!("{field}: {e}")))?;
        self.engine.confine(field, &path)?;
        Ok(path)
    }

    pub(super) async fn start_lsp_server(
        &self,
        request: StartLspServerRequest,
    ) -> Result<StartLspServerResponse, Status> {
        if request.language.trim().is_empty() {
            return Err(Status::invalid_argument("language: required"));
        }
        let root = if request.root_uri.is_empty() {
            self.engine.default_workspace().ok_or_else(|| {
                Status::invalid_argument("root_uri: required (the engine has no default workspace)")
            })?
        } else {
            let path = match request.root_uri.strip_prefix("file://") {
                Some(_) => lsp_types::Url::parse(&request.root_uri)
                    .ok()
                    .and_then(|u| u.to_file_path().ok())
                    .ok_or_else(|| Status::invalid_argument("root_uri: not a valid file:// URI"))?,
                None => std::path::PathBuf::from(&request.root_uri),
            };
            if !path.is_absolute() {
                return Err(Status::invalid_argument(
                    "root_uri: must be a file:// URI or an absolute path",
                ));
            }
            std::fs::canonicalize(&path).map_err(|e| {
                Status::invalid_argument(format!("root_uri: {}: {e}", path.display()))
            })?
        };
        if !root.is_dir() {
            return Err(Status::invalid_argument(format!(
                "root_uri: {} is not a directory",
                root.display()
            )));
        }
        self.engine.confine("root_uri", &root)?;
        let env = self.engine.env.env_for(&root);
        match self.engine.lsp.start(&request.language, &root, &env).await {
            Ok((status, started)) => Ok(StartLspServerResponse {
                success: true,
                message: if started {
                    format!("{} started for {}", status.name, root.display())
                } else {
                    format!("{} was already running for {}", status.name, root.display())
                },
                server_info: Some(info(status)),
            }),
            Err(error) if error.starts_with("language:") => Err(Status::invalid_argument(error)),
            // A server that is not installed or fails to start is an answer,
            // not a transport error: success = false with the reason.
            Err(error) => Ok(StartLspServerResponse {
                success: false,
                message: error,
                server_info: None,
            }),
        }
    }

    pub(super) async fn stop_lsp_server(
        &self,
        request: StopLspServerRequest,
    ) -> Result<StopLspServerResponse, Status> {
        if request.language.trim().is_empty() {
            return Err(Status::invalid_argument("language: required"));
        }
        Ok(StopLspServerResponse {
            success: self.engine.lsp.stop(&request.language).await,
        })
    }

    pub(super) async fn list_lsp_servers(
        &self,
        _request: ListLspServersRequest,
    ) -> Result<ListLspServersResponse, Status> {
        Ok(ListLspServersResponse {
            servers: self.engine.lsp.list().into_iter().map(info).collect(),
        })
    }

    pub(super) async fn lsp_hover(
        &self,
        request: LspHoverRequest,
    ) -> Result<LspHoverResponse, Status> {
        let path = self.lsp_path("file_path", &request.file_path)?;
        let hover = self
            .engine
            .lsp
            .hover(&path, request.line, request.column)
            .await
            .map_err(failed)?;
        Ok(match hover {
            Some(hover) => LspHoverResponse {
                found: true,
                content: convert::hover_text(&hover),
                range: hover.range.map(convert::range),
            },
            None => LspHoverResponse::default(),
        })
    }

    pub(super) async fn lsp_definition(
        &self,
        request: LspDefinitionRequest,
    ) -> Result<LspDefinitionResponse, Status> {
        let path = self.lsp_path("file_path", &request.file_path)?;
        let locations = self
            .engine
            .lsp
            .definition(&path, request.line, request.column)
            .await
            .map_err(failed)?;
        Ok(LspDefinitionResponse {
            locations: locations.into_iter().map(convert::location).collect(),
        })
    }

    pub(super) async fn lsp_references(
        &self,
        request: LspReferencesRequest,
    ) -> Result<LspReferencesResponse, Status> {
        let path = self.lsp_path("file_path", &request.file_path)?;
        let locations = self
            .engine
            .lsp
            .references(
                &path,
                request.line,
                request.column,
                request.include_declaration,
            )
            .await
            .map_err(failed)?;
        Ok(LspReferencesResponse {
            locations: locations.into_iter().map(convert::location).collect(),
        })
    }

    pub(super) async fn lsp_symbols(
        &self,
        request: LspSymbolsRequest,
    ) -> Result<LspSymbolsResponse, Status> {
        let limit = match request.limit {
            0 => 20,
            n => n.min(1000) as usize,
        };
        let symbols = self
            .engine
            .lsp
            .symbols(&request.query, limit, None)
            .await
            .map_err(failed)?;
        Ok(LspSymbolsResponse {
            symbols: symbols.into_iter().map(convert::symbol).collect(),
        })
    }

    pub(super) async fn lsp_diagnostics(
        &self,
        request: LspDiagnosticsRequest,
    ) -> Result<LspDiagnosticsResponse, Status> {
        let all = match request.file_path.as_deref() {
            Some(requested) if !requested.is_empty() => {
                let path = self.lsp_path("file_path", requested)?;
                let list = self
                    .engine
                    .lsp
                    .fresh_diagnostics(&path, crate::lsp::DIAGNOSTICS_WAIT)
                    .await
                    .map_err(failed)?
                    .unwrap_or_default();
                let uri = lsp_types::Url::from_file_path(&path)
                    .map_err(|()| Status::invalid_argument("file_path: not absolute"))?;
                vec![(uri, list)]
            }
            _ => self.engine.lsp.diagnostics(None).map_err(failed)?,
        };
        Ok(LspDiagnosticsResponse {
            diagnostics: all
                .into_iter()
                .flat_map(|(uri, list)| {
                    list.into_iter()
                        .map(move |d| convert::diagnostic(&uri, d))
                        .collect::<Vec<_>>()
                })
                .collect(),
        })
    }
}

/// A server-side failure: no server for the file (or none at all) is
/// FAILED_PRECONDITION, anything else (timeout, crash, bad answer)
/// UNAVAILABLE.
fn failed(error: String) -> Status {
    if error.starts_with("no running language server handles") {
        Status::failed_precondition(format!("file_path: {error}"))
    } else if error.starts_with("no running language server") {
        Status::failed_precondition(error)
    } else {
        Status::unavailable(error)
    }
}
