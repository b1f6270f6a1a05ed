//! Language servers: the engine's view of the code through real
//! LSP servers over stdio.
//!
//! [`LspManager`] holds at most one running server per language (the RPCs
//! `StartLspServer`/`StopLspServer` name only a language), each for one root
//! directory. A file is served by the running server whose root contains it
//! and whose extensions include its own. Servers are started through the
//! workspace's sandbox like every agent process (`server.rs`); the JSON-RPC
//! connection is `client.rs` over the framing of `framing.rs`; the table of
//! commands is `table.rs`; the model's tools are `tools.rs`.

mod client;
pub(crate) mod convert;
mod framing;
mod server;
mod table;
mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lsp_types::{Diagnostic, Hover, Location, SymbolInformation, Url};

use crate::sandboxes::Sandboxes;

pub use convert::{severity_name, symbol_kind_name};
pub use table::{LspServerSpec, LspTable};
pub use tools::LSP_TOOL_NAMES;
pub(crate) use tools::lsp_tools;

use server::LspServer;

/// Default wait for fresh diagnostics after `write`/`edit`.
pub const DIAGNOSTICS_WAIT: Duration = Duration::from_secs(5);
/// Files a symbol search falls back to reading at most (servers without
/// `workspace/symbol`).
const SYMBOL_FALLBACK_FILES: usize = 200;

/// What `ListLspServers` shows of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LspServerStatus {
    /// The language it serves.
    pub language: String,
    /// Its `serverInfo.name` (else its program name).
    pub name: String,
    /// Its `serverInfo.version`, when it gave one.
    pub version: Option<String>,
    /// Whether its process still answers.
    pub running: bool,
    /// Its root directory.
    pub root: PathBuf,
}

/// The engine's language servers (a cheap handle).
#[derive(Clone)]
pub struct LspManager {
    inner: Arc<Inner>,
}

struct Inner {
    table: LspTable,
    sandboxes: Sandboxes,
    servers: Mutex<BTreeMap<String, Arc<LspServer>>>,
    /// Serialises starts and stops (one server per language).
    lifecycle: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for LspManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LspManager")
            .field("languages", &self.inner.table.languages())
            .finish_non_exhaustive()
    }
}

impl LspManager {
    /// A manager starting servers from `table` in `sandboxes`.
    pub(crate) fn new(table: LspTable, sandboxes: Sandboxes) -> Self {
        Self {
            inner: Arc::new(Inner {
                table,
                sandboxes,
                servers: Mutex::default(),
                lifecycle: tokio::sync::Mutex::new(()),
            }),
        }
    }

    fn servers(&self) -> Vec<Arc<LspServer>> {
        self.inner
            .servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Whether any server is running (the model gets the LSP tools then).
    pub fn any_running(&self) -> bool {
        self.servers().iter().any(|s| s.running())
    }

    /// Starts the server of `language` for `root` (canonical directory)
    /// with `env`. A server of that language already running for the same
    /// root is kept (`false` = it was already running); one for another
    /// root is stopped first.
    pub async fn start(
        &self,
        language: &str,
        root: &Path,
        env: &[(String, String)],
    ) -> Result<(LspServerStatus, bool), String> {
        let language = language.trim().to_ascii_lowercase();
        let spec = self.inner.table.get(&language).cloned().ok_or_else(|| {
            format!(
                "language: no language server is configured for {language:?} (known: {}; add one with CODE_AGENT_LSP_SERVERS)",
                self.inner.table.languages().join(", ")
            )
        })?;
        let _guard = self.inner.lifecycle.lock().await;
        let existing = self
            .inner
            .servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&language)
            .cloned();
        if let Some(existing) = existing {
            if existing.root == root && existing.running() {
                return Ok((status(&existing), false));
            }
            self.inner
                .servers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&language);
            existing.stop().await;
        }
        let sandbox = self.inner.sandboxes.for_workspace(root)?;
        let server = LspServer::start(&language, &spec, root, &sandbox, env).await?;
        let server = Arc::new(server);
        self.inner
            .servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(language, server.clone());
        Ok((status(&server), true))
    }

    /// Stops the server of `language`; false when none was started.
    pub async fn stop(&self, language: &str) -> bool {
        let language = language.trim().to_ascii_lowercase();
        let _guard = self.inner.lifecycle.lock().await;
        let removed = self
            .inner
            .servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&language);
        match removed {
            Some(server) => {
                server.stop().await;
                true
            }
            None => false,
        }
    }

    /// Stops every server (engine shutdown).
    pub async fn stop_all(&self) {
        let _guard = self.inner.lifecycle.lock().await;
        let all: Vec<_> =
            std::mem::take(&mut *self.inner.servers.lock().unwrap_or_else(|e| e.into_inner()))
                .into_values()
                .collect();
        for server in all {
            server.stop().await;
        }
    }

    /// Every started server (a crashed one shows `running = false` until it
    /// is stopped or started again).
    pub fn list(&self) -> Vec<LspServerStatus> {
        self.servers().iter().map(|s| status(s)).collect()
    }

    /// The running server for `path` (canonical): the one whose root
    /// contains it and that handles its extension.
    fn server_for(&self, path: &Path) -> Result<Arc<LspServer>, String> {
        self.servers()
            .into_iter()
            .filter(|s| s.running() && s.handles(path))
            .max_by_key(|s| s.root.components().count())
            .ok_or_else(|| {
                format!(
                    "no running language server handles {} (StartLspServer for its language and a root containing it)",
                    path.display()
                )
            })
    }

    /// Resolves a path a client named: a `file://` URI, an absolute path,
    /// or a path relative to a running server's root; canonical.
    pub fn resolve_path(&self, requested: &str) -> Result<PathBuf, String> {
        let path = if let Some(rest) = requested.strip_prefix("file://") {
            Url::parse(&format!("file://{rest}"))
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .ok_or_else(|| format!("{requested:?} is not a valid file URI"))?
        } else {
            PathBuf::from(requested)
        };
        if path.is_absolute() {
            return std::fs::canonicalize(&path).map_err(|e| format!("{}: {e}", path.display()));
        }
        for server in self.servers() {
            if let Ok(found) = std::fs::canonicalize(server.root.join(&path))
                && found.starts_with(&server.root)
            {
                return Ok(found);
            }
        }
        Err(format!(
            "{requested:?} is relative and under no running language server's root"
        ))
    }

    /// Hover at a 0-based position of `path` (canonical).
    pub async fn hover(
        &self,
        path: &Path,
        line: u32,
        column: u32,
    ) -> Result<Option<Hover>, String> {
        self.server_for(path)?.hover(path, line, column).await
    }

    /// Definitions of the symbol at a 0-based position.
    pub async fn definition(
        &self,
        path: &Path,
        line: u32,
        column: u32,
    ) -> Result<Vec<Location>, String> {
        self.server_for(path)?.definition(path, line, column).await
    }

    /// References to the symbol at a 0-based position.
    pub async fn references(
        &self,
        path: &Path,
        line: u32,
        column: u32,
        include_declaration: bool,
    ) -> Result<Vec<Location>, String> {
        self.server_for(path)?
            .references(path, line, column, include_declaration)
            .await
    }

    /// Symbols whose name contains `query` (case-insensitive; empty = all),
    /// at most `limit`: each running server's `workspace/symbol`, or, for a
    /// server without it, the document symbols of its files (at most
    /// [`SYMBOL_FALLBACK_FILES`] files under its root). With `within` (a
    /// session's workspace), only symbols defined in files under it.
    pub async fn symbols(
        &self,
        query: &str,
        limit: usize,
        within: Option<&Path>,
    ) -> Result<Vec<SymbolInformation>, String> {
        let needle = query.to_lowercase();
        let wanted = |s: &SymbolInformation| {
            s.name.to_lowercase().contains(&needle)
                && within.is_none_or(|dir| {
                    s.location
                        .uri
                        .to_file_path()
                        .is_ok_and(|path| path.starts_with(dir))
                })
        };
        let mut found = Vec::new();
        let mut errors = Vec::new();
        let running: Vec<_> = self.servers().into_iter().filter(|s| s.running()).collect();
        if running.is_empty() {
            return Err(
                "no running language server (StartLspServer for a language first)".to_string(),
            );
        }
        for server in running {
            if found.len() >= limit {
                break;
            }
            // Where this server's files of interest are: its root, or
            // `within` when that is inside it; nothing when they are apart.
            let scope = match within {
                None => server.root.clone(),
                Some(dir) if dir.starts_with(&server.root) => dir.to_path_buf(),
                Some(dir) if server.root.starts_with(dir) => server.root.clone(),
                Some(_) => continue,
            };
            let mut list = if server.has_workspace_symbols() {
                match server.workspace_symbols(query).await {
                    Ok(list) => list,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                }
            } else {
                let mut list = Vec::new();
                for file in server.source_files(&scope, SYMBOL_FALLBACK_FILES) {
                    match server.document_symbols(&file).await {
                        Ok(mut symbols) => {
                            symbols.retain(&wanted);
                            list.extend(symbols);
                        }
                        Err(e) => errors.push(e),
                    }
                    if list.len() >= limit {
                        break;
                    }
                }
                list
            };
            list.retain(&wanted);
            found.extend(list);
        }
        found.truncate(limit);
        if found.is_empty()
            && let Some(error) = errors.into_iter().next()
        {
            return Err(error);
        }
        Ok(found)
    }

    /// Like [`diagnostics`](Self::diagnostics) for every file, keeping only
    /// files under `within` (a session's workspace).
    pub fn diagnostics_within(&self, within: &Path) -> Vec<(Url, Vec<Diagnostic>)> {
        self.servers()
            .iter()
            .flat_map(|s| s.diagnostics(None))
            .filter(|(uri, _)| uri.to_file_path().is_ok_and(|p| p.starts_with(within)))
            .collect()
    }

    /// The diagnostics of `path` (canonical) as last published, or of every
    /// file any running server has reported on.
    pub fn diagnostics(&self, path: Option<&Path>) -> Result<Vec<(Url, Vec<Diagnostic>)>, String> {
        match path {
            Some(path) => {
                let server = self.server_for(path)?;
                let uri = Url::from_file_path(path)
                    .map_err(|()| format!("{} is not an absolute path", path.display()))?;
                Ok(server.diagnostics(Some(&uri)))
            }
            None => Ok(self
                .servers()
                .iter()
                .flat_map(|s| s.diagnostics(None))
                .collect()),
        }
    }

    /// Like [`diagnostics`](Self::diagnostics) for one file, after making the
    /// server read it (opening it on first use): waits up to `wait` for the
    /// server to publish.
    pub async fn fresh_diagnostics(
        &self,
        path: &Path,
        wait: Duration,
    ) -> Result<Option<Vec<Diagnostic>>, String> {
        self.server_for(path)?.fresh_diagnostics(path, wait).await
    }

    /// After `write`/`edit` changed `path`: its new diagnostics, rendered
    /// for the model, when a running server handles it (`None` otherwise).
    pub(crate) async fn after_change(
        &self,
        path: &Path,
        wait: Duration,
    ) -> Option<(String, usize)> {
        let server = self.server_for(path).ok()?;
        let shown = path
            .strip_prefix(&server.root)
            .unwrap_or(path)
            .display()
            .to_string();
        match server.fresh_diagnostics(path, wait).await {
            Ok(Some(list)) => Some((
                convert::render_diagnostics(&server.name, &shown, &list),
                list.len(),
            )),
            Ok(None) => Some((
                format!(
                    "\n\n[{}: no diagnostics for {shown} within {} ms]",
                    server.name,
                    wait.as_millis()
                ),
                0,
            )),
            Err(error) => Some((format!("\n\n[{}: {error}]", server.name), 0)),
        }
    }
}

/// `output` of tool `tool`, with the changed file's diagnostics appended
/// (and `metadata.diagnostics` = their count) when it is a successful
/// `write`/`edit` of a file a running server handles; unchanged otherwise.
pub(crate) async fn with_diagnostics(
    lsp: &LspManager,
    tool: &str,
    workspace: &Path,
    mut output: crate::tools::ToolOutput,
) -> crate::tools::ToolOutput {
    if !matches!(tool, "write" | "edit") || !output.success || !lsp.any_running() {
        return output;
    }
    let Some(shown) = output.metadata.get("path") else {
        return output;
    };
    let Ok(path) = std::fs::canonicalize(workspace.join(shown)) else {
        return output;
    };
    if let Some((text, count)) = lsp.after_change(&path, DIAGNOSTICS_WAIT).await {
        output.output.push_str(&text);
        output = output.with("diagnostics", count.to_string());
    }
    output
}

fn status(server: &LspServer) -> LspServerStatus {
    LspServerStatus {
        language: server.language.clone(),
        name: server.name.clone(),
        version: server.version.clone(),
        running: server.running(),
        root: server.root.clone(),
    }
}
