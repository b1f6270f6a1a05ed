//! One language server for one language and root: started through the
//! workspace's sandbox (the one launcher), initialized, kept in sync with
//! the files it is asked about (`didOpen`, then full-text `didChange` when
//! the file changed on disk, and `didSave`), and stopped with
//! `shutdown`/`exit` then its process group killed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agent_launcher::ThreadSandbox;
use lsp_types::{
    ClientCapabilities, Diagnostic, DocumentSymbolResponse, GotoDefinitionResponse, Hover,
    InitializeParams, InitializeResult, Location, ServerCapabilities, SymbolInformation, Url,
    WorkspaceFolder, WorkspaceSymbolResponse,
};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use super::client::LspClient;
use super::table::{LspServerSpec, resolve};
use crate::tools::child_env;
use crate::tools::process_group::{TERM_GRACE, kill_group, signal_group};

/// Timeout of one request to a server.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `initialize` may take (servers index on start).
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(60);
/// Documents kept open per server at most (the oldest is closed beyond).
const MAX_OPEN_DOCUMENTS: usize = 256;
/// Largest file sent to a server.
const MAX_DOCUMENT_BYTES: u64 = 4 * 1024 * 1024;

struct OpenDocument {
    version: i32,
    text: String,
    opened_at: u64,
}

/// A running server.
pub(crate) struct LspServer {
    /// The language it was started for.
    pub language: String,
    /// Canonical root directory.
    pub root: PathBuf,
    /// `serverInfo.name` from `initialize`, else the program's file name.
    pub name: String,
    /// `serverInfo.version` from `initialize`.
    pub version: Option<String>,
    spec: LspServerSpec,
    capabilities: ServerCapabilities,
    client: LspClient,
    child: tokio::sync::Mutex<Child>,
    pgid: Option<i32>,
    /// Open documents and a use clock; held across the notifications of one
    /// sync so that a document's versions reach the server in order.
    documents: tokio::sync::Mutex<(HashMap<Url, OpenDocument>, u64)>,
}

impl LspServer {
    /// Starts the server of `language` for `root` in `sandbox`, with `env`
    /// (the workspace's registered env; secrets are removed) plus the
    /// spec's own, and initializes it.
    pub(crate) async fn start(
        language: &str,
        spec: &LspServerSpec,
        root: &Path,
        sandbox: &ThreadSandbox,
        env: &[(String, String)],
    ) -> Result<Self, String> {
        let (program, args) = resolve(language, spec, std::env::var_os("PATH").as_deref())?;
        let mut env = env.to_vec();
        env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut cmd = Command::new(&program);
        cmd.args(&args)
            .current_dir(root)
            .envs(child_env(std::iter::empty(), &env))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let (mut child, applied) = sandbox
            .spawn(&mut cmd)
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        tracing::info!(language, program = %program.display(), root = %root.display(), %applied, "language server started");
        let pgid = child.id().map(|pid| pid as i32);
        let client = LspClient::connect(&mut child, REQUEST_TIMEOUT)?;
        let mut server = Self {
            language: language.to_string(),
            root: root.to_path_buf(),
            name: program
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            version: None,
            spec: spec.clone(),
            capabilities: ServerCapabilities::default(),
            client,
            child: tokio::sync::Mutex::new(child),
            pgid,
            documents: tokio::sync::Mutex::new((HashMap::new(), 0)),
        };
        if let Err(error) = server.initialize().await {
            server.stop().await;
            return Err(error);
        }
        Ok(server)
    }

    async fn initialize(&mut self) -> Result<(), String> {
        let root_uri = Url::from_directory_path(&self.root)
            .map_err(|()| format!("root {} is not an absolute path", self.root.display()))?;
        let capabilities: ClientCapabilities = serde_json::from_value(json!({
            "textDocument": {
                "synchronization": {"didSave": true, "dynamicRegistration": false},
                "hover": {"contentFormat": ["markdown", "plaintext"]},
                "definition": {"linkSupport": false},
                "references": {},
                "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
                "publishDiagnostics": {"relatedInformation": false, "versionSupport": true}
            },
            "workspace": {"symbol": {}, "configuration": true, "workspaceFolders": true}
        }))
        .map_err(|e| format!("client capabilities: {e}"))?;
        #[allow(deprecated)] // root_uri/root_path: older servers still read them.
        let params = InitializeParams {
            process_id: Some(std::process::id()),
            root_uri: Some(root_uri.clone()),
            capabilities,
            workspace_folders: Some(vec![WorkspaceFolder {
                uri: root_uri,
                name: self
                    .root
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "root".into()),
            }]),
            client_info: Some(lsp_types::ClientInfo {
                name: "code-agent".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            ..InitializeParams::default()
        };
        let params = serde_json::to_value(params).map_err(|e| e.to_string())?;
        let result = self
            .client
            .request_within("initialize", params, INITIALIZE_TIMEOUT)
            .await
            .map_err(|e| self.with_stderr(e))?;
        let result: InitializeResult = serde_json::from_value(result)
            .map_err(|e| format!("initialize: unexpected answer: {e}"))?;
        if let Some(info) = result.server_info {
            self.name = info.name;
            self.version = info.version;
        }
        self.capabilities = result.capabilities;
        self.client.notify("initialized", json!({})).await
    }

    fn with_stderr(&self, error: String) -> String {
        let tail = self.client.stderr_tail();
        if tail.is_empty() || error.contains(&tail) {
            error
        } else {
            format!("{error} (server stderr: {tail})")
        }
    }

    /// Whether the process still answers.
    pub(crate) fn running(&self) -> bool {
        let alive = self.client.alive();
        if !alive && let Ok(mut child) = self.child.try_lock() {
            // A server that died is reaped here (no zombie until Stop).
            let _ = child.try_wait();
        }
        alive
    }

    /// Whether `path` (canonical) is under this server's root and has one of
    /// its extensions (any file under the root when it lists none).
    pub(crate) fn handles(&self, path: &Path) -> bool {
        if !path.starts_with(&self.root) {
            return false;
        }
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        self.spec.extensions.is_empty()
            || ext.is_some_and(|ext| self.spec.extensions.contains(&ext))
    }

    /// The document URI of `path`.
    pub(crate) fn uri(path: &Path) -> Result<Url, String> {
        Url::from_file_path(path)
            .map_err(|()| format!("{} is not an absolute path", path.display()))
    }

    /// Makes the server see `path`'s current content; returns its URI.
    pub(crate) async fn sync(&self, path: &Path) -> Result<Url, String> {
        self.sync_changed(path).await.map(|(uri, _)| uri)
    }

    /// Like [`sync`](Self::sync), also saying whether anything was sent
    /// (false: the server already had this content).
    async fn sync_changed(&self, path: &Path) -> Result<(Url, bool), String> {
        let uri = Self::uri(path)?;
        // Opened beneath the root's fd (openat2 RESOLVE_BENEATH), so a
        // symlink swapped in after the path was checked cannot lead out.
        let bytes = crate::tools::beneath::read_under(&self.root, path, MAX_DOCUMENT_BYTES)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        enum Step {
            Unchanged,
            Open(Option<Url>),
            Change(i32),
        }
        let mut guard = self.documents.lock().await;
        let step = {
            let (docs, clock) = &mut *guard;
            *clock += 1;
            let now = *clock;
            match docs.get_mut(&uri) {
                Some(doc) if doc.text == text => {
                    doc.opened_at = now;
                    Step::Unchanged
                }
                Some(doc) => {
                    doc.version += 1;
                    doc.text = text.clone();
                    doc.opened_at = now;
                    Step::Change(doc.version)
                }
                None => {
                    let evicted = if docs.len() >= MAX_OPEN_DOCUMENTS {
                        let oldest = docs
                            .iter()
                            .min_by_key(|(_, d)| d.opened_at)
                            .map(|(u, _)| u.clone());
                        if let Some(oldest) = &oldest {
                            docs.remove(oldest);
                        }
                        oldest
                    } else {
                        None
                    };
                    docs.insert(
                        uri.clone(),
                        OpenDocument {
                            version: 1,
                            text: text.clone(),
                            opened_at: now,
                        },
                    );
                    Step::Open(evicted)
                }
            }
        };
        match step {
            Step::Unchanged => return Ok((uri, false)),
            Step::Open(evicted) => {
                if let Some(old) = evicted {
                    self.client
                        .notify(
                            "textDocument/didClose",
                            json!({"textDocument": {"uri": old}}),
                        )
                        .await?;
                }
                let language_id = self.spec.language_id.as_deref().unwrap_or(&self.language);
                self.client
                    .notify(
                        "textDocument/didOpen",
                        json!({"textDocument": {"uri": uri, "languageId": language_id, "version": 1, "text": text}}),
                    )
                    .await?;
            }
            Step::Change(version) => {
                self.client
                    .notify(
                        "textDocument/didChange",
                        json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
                    )
                    .await?;
                self.client
                    .notify(
                        "textDocument/didSave",
                        json!({"textDocument": {"uri": uri}, "text": text}),
                    )
                    .await?;
            }
        }
        drop(guard);
        Ok((uri, true))
    }

    /// `path`'s diagnostics after the server saw its current content,
    /// waiting at most `wait` for a fresh publication; `None` when the
    /// server published nothing for it.
    pub(crate) async fn fresh_diagnostics(
        &self,
        path: &Path,
        wait: Duration,
    ) -> Result<Option<Vec<Diagnostic>>, String> {
        let uri = Self::uri(path)?;
        let seen = self.client.publish_count(&uri);
        let (uri, changed) = self.sync_changed(path).await?;
        if !changed && let Some(known) = self.client.diagnostics_of(&uri) {
            // The server has this content and has published for it.
            return Ok(Some(known));
        }
        Ok(self.client.wait_diagnostics(&uri, seen, wait).await)
    }

    /// The latest diagnostics of one file, or of every file reported on.
    pub(crate) fn diagnostics(&self, uri: Option<&Url>) -> Vec<(Url, Vec<Diagnostic>)> {
        match uri {
            Some(uri) => self
                .client
                .diagnostics_of(uri)
                .map(|list| vec![(uri.clone(), list)])
                .unwrap_or_default(),
            None => self.client.all_diagnostics(),
        }
    }

    fn position_params(uri: &Url, line: u32, character: u32) -> Value {
        json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": character}})
    }

    /// `textDocument/hover`.
    pub(crate) async fn hover(
        &self,
        path: &Path,
        line: u32,
        character: u32,
    ) -> Result<Option<Hover>, String> {
        let uri = self.sync(path).await?;
        let result = self
            .client
            .request(
                "textDocument/hover",
                Self::position_params(&uri, line, character),
            )
            .await?;
        parse(result, "textDocument/hover")
    }

    /// `textDocument/definition`, links flattened to locations.
    pub(crate) async fn definition(
        &self,
        path: &Path,
        line: u32,
        character: u32,
    ) -> Result<Vec<Location>, String> {
        let uri = self.sync(path).await?;
        let result = self
            .client
            .request(
                "textDocument/definition",
                Self::position_params(&uri, line, character),
            )
            .await?;
        let response: Option<GotoDefinitionResponse> = parse(result, "textDocument/definition")?;
        Ok(match response {
            None => Vec::new(),
            Some(GotoDefinitionResponse::Scalar(location)) => vec![location],
            Some(GotoDefinitionResponse::Array(locations)) => locations,
            Some(GotoDefinitionResponse::Link(links)) => links
                .into_iter()
                .map(|link| Location {
                    uri: link.target_uri,
                    range: link.target_selection_range,
                })
                .collect(),
        })
    }

    /// `textDocument/references`.
    pub(crate) async fn references(
        &self,
        path: &Path,
        line: u32,
        character: u32,
        include_declaration: bool,
    ) -> Result<Vec<Location>, String> {
        let uri = self.sync(path).await?;
        let mut params = Self::position_params(&uri, line, character);
        params["context"] = json!({"includeDeclaration": include_declaration});
        let result = self
            .client
            .request("textDocument/references", params)
            .await?;
        let locations: Option<Vec<Location>> = parse(result, "textDocument/references")?;
        Ok(locations.unwrap_or_default())
    }

    /// Whether the server offers `workspace/symbol`.
    pub(crate) fn has_workspace_symbols(&self) -> bool {
        self.capabilities
            .workspace_symbol_provider
            .as_ref()
            .is_some_and(|p| !matches!(p, lsp_types::OneOf::Left(false)))
    }

    /// `workspace/symbol` for `query`.
    pub(crate) async fn workspace_symbols(
        &self,
        query: &str,
    ) -> Result<Vec<SymbolInformation>, String> {
        let result = self
            .client
            .request("workspace/symbol", json!({"query": query}))
            .await?;
        let response: Option<WorkspaceSymbolResponse> = parse(result, "workspace/symbol")?;
        Ok(match response {
            None => Vec::new(),
            Some(WorkspaceSymbolResponse::Flat(list)) => list,
            Some(WorkspaceSymbolResponse::Nested(list)) => list
                .into_iter()
                .filter_map(|symbol| match symbol.location {
                    lsp_types::OneOf::Left(location) =>
                    {
                        #[allow(deprecated)]
                        Some(SymbolInformation {
                            name: symbol.name,
                            kind: symbol.kind,
                            tags: symbol.tags,
                            deprecated: None,
                            location,
                            container_name: symbol.container_name,
                        })
                    }
                    lsp_types::OneOf::Right(_) => None,
                })
                .collect(),
        })
    }

    /// `textDocument/documentSymbol` of `path`, flattened (nested symbols
    /// carry their parent as container).
    pub(crate) async fn document_symbols(
        &self,
        path: &Path,
    ) -> Result<Vec<SymbolInformation>, String> {
        let uri = self.sync(path).await?;
        let result = self
            .client
            .request(
                "textDocument/documentSymbol",
                json!({"textDocument": {"uri": uri}}),
            )
            .await?;
        let response: Option<DocumentSymbolResponse> =
            parse(result, "textDocument/documentSymbol")?;
        Ok(match response {
            None => Vec::new(),
            Some(DocumentSymbolResponse::Flat(list)) => list,
            Some(DocumentSymbolResponse::Nested(list)) => {
                let mut flat = Vec::new();
                flatten(&uri, list, None, &mut flat);
                flat
            }
        })
    }

    /// The files of this server's languages under `dir` (its root or a
    /// directory inside it; gitignore respected), at most `limit`.
    pub(crate) fn source_files(&self, dir: &Path, limit: usize) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in ignore::WalkBuilder::new(dir).build().flatten() {
            if files.len() >= limit {
                break;
            }
            let path = entry.path();
            if entry.file_type().is_some_and(|t| t.is_file()) && self.handles(path) {
                files.push(path.to_path_buf());
            }
        }
        files
    }

    /// Ends the server: `shutdown` and `exit` (2 s each at most), then the
    /// process group is killed and the process reaped.
    pub(crate) async fn stop(&self) {
        if self.client.alive() {
            let polite = self
                .client
                .request_within("shutdown", Value::Null, Duration::from_secs(2))
                .await;
            if polite.is_ok() {
                let _ = self.client.notify("exit", Value::Null).await;
            }
        }
        let mut child = self.child.lock().await;
        let exited = tokio::time::timeout(Duration::from_secs(2), child.wait())
            .await
            .is_ok();
        if let Some(pgid) = self.pgid {
            if exited {
                // The leader is gone; whatever it left in its group goes too.
                signal_group(pgid, libc::SIGKILL);
            } else {
                kill_group(pgid, TERM_GRACE).await;
            }
        }
        let _ = child.start_kill();
        let _ = child.wait().await;
        tracing::info!(language = %self.language, name = %self.name, "language server stopped");
    }
}

fn parse<T: serde::de::DeserializeOwned>(value: Value, method: &str) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| format!("{method}: unexpected answer: {e}"))
}

fn flatten(
    uri: &Url,
    symbols: Vec<lsp_types::DocumentSymbol>,
    container: Option<&str>,
    out: &mut Vec<SymbolInformation>,
) {
    for symbol in symbols {
        #[allow(deprecated)]
        out.push(SymbolInformation {
            name: symbol.name.clone(),
            kind: symbol.kind,
            tags: symbol.tags.clone(),
            deprecated: None,
            location: Location {
                uri: uri.clone(),
                range: symbol.selection_range,
            },
            container_name: container.map(str::to_string),
        });
        if let Some(children) = symbol.children {
            flatten(uri, children, Some(&symbol.name), out);
        }
    }
}
