//! One running language server: a child process (started by the caller
//! through the sandbox) spoken to over stdio with JSON-RPC 2.0.
//!
//! A writer task owns stdin and drains a bounded queue ([`OUTGOING_QUEUE`]
//! messages; a sender waits for room within the request timeout, then
//! fails). A reader task owns stdout: responses complete their request by
//! id, `textDocument/publishDiagnostics` notifications fill the diagnostics
//! store (at most [`MAX_DIAGNOSTIC_FILES`] files; further files are ignored
//! with a warning), and requests from the server get a minimal answer
//! (`workspace/configuration` → nulls, everything else → null) so that no
//! server waits on us. stderr keeps its last lines for error messages.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lsp_types::{Diagnostic, PublishDiagnosticsParams, Url};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot, watch};

use super::framing::{read_message, write_message};

/// Messages queued for the server's stdin at most.
pub(crate) const OUTGOING_QUEUE: usize = 64;
/// Files whose diagnostics are kept at most.
pub(crate) const MAX_DIAGNOSTIC_FILES: usize = 4096;
/// Lines of stderr kept for error messages.
const STDERR_LINES: usize = 20;

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Result<Value, String>>>>>;

/// What the server published, by document.
#[derive(Debug, Default)]
pub(crate) struct DiagnosticStore {
    /// The latest diagnostics of each file and how many times it was published.
    pub files: HashMap<Url, (Vec<Diagnostic>, u64)>,
}

/// A connection to a running server.
pub(crate) struct LspClient {
    outgoing: mpsc::Sender<Value>,
    pending: Pending,
    next_id: AtomicI64,
    diagnostics: Arc<Mutex<DiagnosticStore>>,
    /// Bumped at each `publishDiagnostics` (waiters watch it).
    published: watch::Receiver<u64>,
    alive: Arc<AtomicBool>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    request_timeout: Duration,
}

impl LspClient {
    /// Wires the child's pipes to the reader/writer tasks. The child itself
    /// stays with the caller (it owns the process lifetime).
    pub(crate) fn connect(child: &mut Child, request_timeout: Duration) -> Result<Self, String> {
        let stdin = child.stdin.take().ok_or("the server has no stdin pipe")?;
        let stdout = child.stdout.take().ok_or("the server has no stdout pipe")?;
        let stderr = child.stderr.take();
        let (outgoing, queue) = mpsc::channel(OUTGOING_QUEUE);
        let pending: Pending = Arc::default();
        let diagnostics: Arc<Mutex<DiagnosticStore>> = Arc::default();
        let (bump, published) = watch::channel(0u64);
        let alive = Arc::new(AtomicBool::new(true));
        let stderr_tail: Arc<Mutex<VecDeque<String>>> = Arc::default();
        tokio::spawn(write_loop(stdin, queue, alive.clone()));
        tokio::spawn(read_loop(
            stdout,
            outgoing.clone(),
            pending.clone(),
            diagnostics.clone(),
            bump,
            alive.clone(),
        ));
        if let Some(stderr) = stderr {
            tokio::spawn(keep_stderr(stderr, stderr_tail.clone()));
        }
        Ok(Self {
            outgoing,
            pending,
            next_id: AtomicI64::new(1),
            diagnostics,
            published,
            alive,
            stderr_tail,
            request_timeout,
        })
    }

    /// Whether the connection is still up.
    pub(crate) fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The last lines the server wrote to stderr.
    pub(crate) fn stderr_tail(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Sends a request and waits for its result (within the request timeout).
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, String> {
        self.request_within(method, params, self.request_timeout)
            .await
    }

    /// Like [`request`](Self::request) with its own timeout.
    pub(crate) async fn request_within(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        if !self.alive() {
            return Err(self.gone());
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let outcome = tokio::time::timeout(timeout, async {
            self.outgoing.send(message).await.map_err(|_| self.gone())?;
            rx.await.map_err(|_| self.gone())?
        })
        .await;
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        match outcome {
            Ok(result) => result.map_err(|e| format!("{method}: {e}")),
            Err(_) => Err(format!(
                "{method}: the language server did not answer within {} ms",
                timeout.as_millis()
            )),
        }
    }

    /// Sends a notification (waits for queue room within the request timeout).
    pub(crate) async fn notify(&self, method: &str, params: Value) -> Result<(), String> {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        match tokio::time::timeout(self.request_timeout, self.outgoing.send(message)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.gone()),
            Err(_) => Err(format!(
                "{method}: the language server's input queue stayed full"
            )),
        }
    }

    fn gone(&self) -> String {
        let tail = self.stderr_tail();
        if tail.is_empty() {
            "the language server has exited".to_string()
        } else {
            format!("the language server has exited; its last output: {tail}")
        }
    }

    /// How many times `uri`'s diagnostics were published so far.
    pub(crate) fn publish_count(&self, uri: &Url) -> u64 {
        let store = self.diagnostics.lock().unwrap_or_else(|e| e.into_inner());
        store.files.get(uri).map_or(0, |(_, count)| *count)
    }

    /// Waits until `uri`'s diagnostics were published more than `seen`
    /// times, or `wait` passes; the latest diagnostics either way (None when
    /// none were ever published).
    pub(crate) async fn wait_diagnostics(
        &self,
        uri: &Url,
        seen: u64,
        wait: Duration,
    ) -> Option<Vec<Diagnostic>> {
        let mut published = self.published.clone();
        let _ = tokio::time::timeout(wait, async {
            loop {
                if self.publish_count(uri) > seen || !self.alive() {
                    return;
                }
                if published.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        self.diagnostics_of(uri)
    }

    /// The latest diagnostics of `uri`.
    pub(crate) fn diagnostics_of(&self, uri: &Url) -> Option<Vec<Diagnostic>> {
        let store = self.diagnostics.lock().unwrap_or_else(|e| e.into_inner());
        store.files.get(uri).map(|(list, _)| list.clone())
    }

    /// Every file's latest diagnostics.
    pub(crate) fn all_diagnostics(&self) -> Vec<(Url, Vec<Diagnostic>)> {
        let store = self.diagnostics.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = store
            .files
            .iter()
            .map(|(uri, (list, _))| (uri.clone(), list.clone()))
            .collect();
        all.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        all
    }
}

async fn write_loop(
    mut stdin: ChildStdin,
    mut queue: mpsc::Receiver<Value>,
    alive: Arc<AtomicBool>,
) {
    while let Some(message) = queue.recv().await {
        if let Err(error) = write_message(&mut stdin, &message).await {
            tracing::debug!(%error, "language server stdin closed");
            break;
        }
    }
    alive.store(false, Ordering::SeqCst);
}

async fn read_loop(
    stdout: ChildStdout,
    outgoing: mpsc::Sender<Value>,
    pending: Pending,
    diagnostics: Arc<Mutex<DiagnosticStore>>,
    bump: watch::Sender<u64>,
    alive: Arc<AtomicBool>,
) {
    let mut reader = BufReader::new(stdout);
    loop {
        let message = match read_message(&mut reader).await {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(error) => {
                tracing::warn!(%error, "language server sent a malformed message; disconnecting");
                break;
            }
        };
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").filter(|id| !id.is_null());
        match (method, id) {
            (None, Some(id)) => complete(&pending, id, &message),
            (Some(method), Some(id)) => {
                let result = answer_server_request(method, message.get("params"));
                let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
                // Never block the reader on a full queue: a server that
                // floods us with requests gets no answer to some of them.
                if outgoing.try_send(reply).is_err() {
                    tracing::debug!(
                        method,
                        "dropped the answer to a server request (queue full)"
                    );
                }
            }
            (Some("textDocument/publishDiagnostics"), None) => {
                if let Some(params) = message.get("params").cloned()
                    && let Ok(params) = serde_json::from_value::<PublishDiagnosticsParams>(params)
                {
                    store(&diagnostics, params);
                    bump.send_modify(|n| *n += 1);
                }
            }
            _ => {}
        }
    }
    alive.store(false, Ordering::SeqCst);
    // Every waiting request learns the server is gone.
    pending.lock().unwrap_or_else(|e| e.into_inner()).clear();
    bump.send_modify(|n| *n += 1);
}

fn complete(pending: &Pending, id: &Value, message: &Value) {
    let Some(id) = id.as_i64() else {
        return;
    };
    let Some(tx) = pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id)
    else {
        return;
    };
    let outcome = match message.get("error") {
        Some(error) => Err(format!(
            "the language server answered error {}: {}",
            error.get("code").cloned().unwrap_or(Value::Null),
            error.get("message").and_then(Value::as_str).unwrap_or("")
        )),
        None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
    };
    let _ = tx.send(outcome);
}

/// What we answer a request the server sends us.
fn answer_server_request(method: &str, params: Option<&Value>) -> Value {
    match method {
        // One null (= "use your defaults") per item asked for.
        "workspace/configuration" => {
            let items = params
                .and_then(|p| p.get("items"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            Value::Array(vec![Value::Null; items])
        }
        _ => Value::Null,
    }
}

fn store(diagnostics: &Mutex<DiagnosticStore>, params: PublishDiagnosticsParams) {
    let mut store = diagnostics.lock().unwrap_or_else(|e| e.into_inner());
    let full = store.files.len() >= MAX_DIAGNOSTIC_FILES;
    match store.files.get_mut(&params.uri) {
        Some((list, count)) => {
            *list = params.diagnostics;
            *count += 1;
        }
        None if full => {
            tracing::warn!(uri = %params.uri, "diagnostics of more than {MAX_DIAGNOSTIC_FILES} files: ignoring this one");
        }
        None => {
            store.files.insert(params.uri, (params.diagnostics, 1));
        }
    }
}

async fn keep_stderr(stderr: ChildStderr, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line: String = line.chars().take(500).collect();
        tracing::debug!(line = %line, "language server stderr");
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        if tail.len() >= STDERR_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_configuration_with_one_null_per_item() {
        let params = json!({"items": [{"section": "a"}, {"section": "b"}]});
        assert_eq!(
            answer_server_request("workspace/configuration", Some(&params)),
            json!([null, null])
        );
        assert_eq!(
            answer_server_request("window/workDoneProgress/create", None),
            Value::Null
        );
    }
}
