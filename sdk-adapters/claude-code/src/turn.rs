//! The turn task: turns Claude Code's stream-json output for one turn into
//! [`TurnEvent`]s.
//!
//! Event shapes:
//! - The user's message is the first item (`UserMessage`); a steering
//!   message gives `Steered{tag}` and its own `UserMessage` item where it was
//!   written.
//! - Item ids are `<turn id>-item-<n>` (n from 1, in order).
//! - An `assistant` line's `text` blocks → `AgentMessage`, `thinking` →
//!   `Reasoning` (RUNNING then COMPLETED at once: stream-json delivers whole
//!   blocks); `tool_use` → the tool's item RUNNING (module `tools`),
//!   COMPLETED when the matching `tool_result` arrives in a `user` line.
//! - `system`/`init` is checked for the session id; `system`/
//!   `compact_boundary` → a `ContextCompaction` item.
//! - `result` → [`TurnEvent::Usage`] (this result's usage as `last`, the
//!   thread's running sum as `total`, the largest `contextWindow` of its
//!   `modelUsage`), then: after an interrupt → Interrupted; `is_error` or a
//!   subtype other than `success` → Failed (its `result` text, `errors`, or
//!   the subtype); otherwise the messages it answered are settled and the
//!   turn completes once none is pending (module `control`).
//! - The process going away → Failed (Interrupted if an interrupt was asked).
//! - A permission prompt handed to the turn (module `permission`) →
//!   [`TurnEvent::Approval`], gating the tool's item; the answer goes back
//!   to claude when it comes.
//! - Tool items still RUNNING when the turn ends are reported COMPLETED.
//! - After the turn, the session's title in its transcript (the last
//!   `custom-title`, else the last `summary` entry) → [`TurnEvent::ThreadNamed`]
//!   when it differs from the one reported before (this runner's lifetime).
//! - Other lines (`stream_event`, `rate_limit_event`, new types) are logged
//!   at debug and skipped.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use sdk_adapter::{
    Gone, ItemKind, ItemStatus, TokenUsage, TokenUsageBreakdown, TurnEvent, TurnOutcome,
    finish_turn,
};
use sdk_process::{Next, TurnInbox};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::ThreadShared;
use crate::control::{AfterResult, ClaudeControl};
use crate::protocol::result_text;
use crate::session::TurnMsg;
use crate::tools::{self, ToolItem};

pub(crate) struct TurnTask {
    pub turn_id: String,
    pub session_id: String,
    pub text: String,
    pub cwd: String,
    pub events: mpsc::Sender<TurnEvent>,
    pub inbox: TurnInbox<TurnMsg>,
    pub control: Arc<ClaudeControl>,
    pub shared: Arc<ThreadShared>,
    /// The thread's HOME (the sandbox's): its config dir holds the
    /// session's transcript (its title).
    pub home: std::path::PathBuf,
}

#[derive(Default)]
struct Run {
    items: u64,
    /// Tool calls waiting for their result: tool_use id → (item id, item).
    tools: HashMap<String, (String, ToolItem)>,
    tool_order: Vec<String>,
    last_error: Option<String>,
}

impl TurnTask {
    pub(crate) async fn run(mut self) {
        let mut run = Run::default();
        let outcome = self.drive(&mut run).await;
        self.control.end();
        self.inbox.stop_listening();
        let closing = close_open_tools(&mut run);
        if let Some(title) = self.new_title().await {
            // Fails only if nobody listens any more.
            let _ = self.events.send(TurnEvent::ThreadNamed(Some(title))).await;
        }
        finish_turn(&self.events, outcome, closing, &*self.control).await;
    }

    /// Claude Code's title for the session, read from its transcript after
    /// the turn, when it differs from the last one reported.
    async fn new_title(&self) -> Option<String> {
        let (home, session) = (self.home.clone(), self.session_id.clone());
        let shared = self.shared.clone();
        let title = tokio::task::spawn_blocking(move || {
            shared
                .title_scan
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .title(&home, &session)
        })
        .await
        .ok()
        .flatten()?;
        let mut last = self
            .shared
            .title
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.as_deref() == Some(title.as_str()) {
            return None;
        }
        *last = Some(title.clone());
        Some(title)
    }

    async fn drive(&mut self, run: &mut Run) -> Result<TurnOutcome, Gone> {
        let text = self.text.clone();
        self.text_item(run, ItemKind::UserMessage, Some(text))
            .await?;
        loop {
            match self.inbox.next(&self.events, None).await? {
                Next::Message(msg) => {
                    if let Some(outcome) = self.handle(run, msg).await? {
                        return Ok(outcome);
                    }
                }
                Next::Tick => {}
                Next::Ended(outcome) => return Ok(outcome),
            }
        }
    }

    async fn handle(&mut self, run: &mut Run, msg: TurnMsg) -> Result<Option<TurnOutcome>, Gone> {
        match msg {
            TurnMsg::Line(line) => self.line(run, line).await,
            TurnMsg::Steered { tag, text } => {
                self.send(TurnEvent::Steered { tag }).await?;
                self.text_item(run, ItemKind::UserMessage, Some(text))
                    .await?;
                Ok(None)
            }
            TurnMsg::Interrupting => {
                self.inbox.interrupting();
                Ok(None)
            }
            TurnMsg::Exited(reason) => {
                Ok(Some(self.inbox.exited(self.control.interrupted(), &reason)))
            }
            TurnMsg::Permission {
                id,
                request,
                handle,
            } => {
                self.permission(run, id, request, handle).await?;
                Ok(None)
            }
        }
    }

    /// Asks the runner about a permission prompt, in order with the
    /// turn's items; the answer is awaited on a task of its own, so the
    /// turn goes on reading claude.
    async fn permission(
        &mut self,
        run: &Run,
        id: Value,
        request: Value,
        handle: sdk_process::ChildHandle,
    ) -> Result<(), Gone> {
        let mut ask = crate::permission::ask_for(&request, &self.cwd);
        let tool_use = request.get("tool_use_id").and_then(Value::as_str);
        ask.item_id = tool_use
            .and_then(|t| run.tools.get(t))
            .map(|(item_id, _)| item_id.clone());
        let (event, answer) = sdk_adapter::approval_event(ask);
        self.send(event).await?;
        tokio::spawn(async move {
            let answer = answer.await;
            let result = crate::permission::decided(&request, &answer);
            let tool = request
                .get("tool_name")
                .and_then(Value::as_str)
                .unwrap_or("");
            tracing::info!(%tool, allowed = answer.approved(), "answered a permission prompt");
            let line = crate::protocol::control_success(&id, result);
            if let Err(e) = handle.send(&line).await {
                tracing::debug!(error = %e, "could not answer a permission prompt");
            }
        });
        Ok(())
    }

    async fn line(&mut self, run: &mut Run, line: Value) -> Result<Option<TurnOutcome>, Gone> {
        let kind = line.get("type").and_then(Value::as_str).unwrap_or("");
        let subtype = line.get("subtype").and_then(Value::as_str).unwrap_or("");
        match (kind, subtype) {
            ("system", "init") => {
                let reported = line.get("session_id").and_then(Value::as_str);
                if reported.is_some_and(|id| id != self.session_id) {
                    tracing::warn!(expected = %self.session_id, reported = ?reported, "claude reports another session id");
                }
            }
            ("system", "compact_boundary") => {
                self.text_item(run, ItemKind::ContextCompaction, None)
                    .await?;
            }
            ("assistant", _) => self.assistant(run, &line).await?,
            ("user", _) => self.tool_results(run, &line).await?,
            ("result", _) => return self.result(run, &line).await,
            _ => tracing::debug!(%kind, %subtype, "skipping a line"),
        }
        Ok(None)
    }

    async fn assistant(&mut self, run: &mut Run, line: &Value) -> Result<(), Gone> {
        let blocks = line
            .get("message")
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(error) = line.get("error").and_then(Value::as_str) {
            let text: Vec<&str> = blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            run.last_error = Some(if text.is_empty() {
                error.to_owned()
            } else {
                format!("{}: {error}", text.join(" "))
            });
        }
        for block in blocks {
            match block.get("type").and_then(Value::as_str).unwrap_or("") {
                "text" => {
                    let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                    if !text.is_empty() {
                        self.text_item(run, ItemKind::AgentMessage, Some(text.to_owned()))
                            .await?;
                    }
                }
                "thinking" => {
                    let text = block.get("thinking").and_then(Value::as_str).unwrap_or("");
                    self.text_item(run, ItemKind::Reasoning, Some(text.to_owned()))
                        .await?;
                }
                "redacted_thinking" => self.text_item(run, ItemKind::Reasoning, None).await?,
                "tool_use" => {
                    let id = block
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                    let input = block.get("input").cloned().unwrap_or(Value::Null);
                    let item = tools::classify(name, &input, &self.cwd);
                    let item_id = self.next_item_id(run);
                    self.send(item.event(&item_id, ItemStatus::Running)).await?;
                    run.tool_order.push(id.clone());
                    run.tools.insert(id, (item_id, item));
                }
                other => tracing::debug!(block = %other, "skipping an assistant block"),
            }
        }
        Ok(())
    }

    async fn tool_results(&mut self, run: &mut Run, line: &Value) -> Result<(), Gone> {
        let Some(blocks) = line
            .get("message")
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
        else {
            return Ok(());
        };
        for block in blocks {
            if block.get("type").and_then(Value::as_str) != Some("tool_result") {
                continue;
            }
            let id = block
                .get("tool_use_id")
                .and_then(Value::as_str)
                .unwrap_or("");
            let Some((item_id, mut item)) = run.tools.remove(id) else {
                tracing::debug!(tool_use_id = %id, "result of an unknown tool call");
                continue;
            };
            let is_error = block.get("is_error").and_then(Value::as_bool) == Some(true);
            tools::complete(&mut item, &result_text(block.get("content")), is_error);
            self.send(item.event(&item_id, ItemStatus::Completed))
                .await?;
        }
        Ok(())
    }

    async fn result(&mut self, run: &mut Run, line: &Value) -> Result<Option<TurnOutcome>, Gone> {
        if let Some(usage) = line.get("usage") {
            let usage = self.usage(usage, line.get("modelUsage"));
            self.send(TurnEvent::usage(usage)).await?;
        }
        if self.control.interrupted() {
            return Ok(Some(TurnOutcome::Interrupted));
        }
        let subtype = line.get("subtype").and_then(Value::as_str).unwrap_or("");
        let is_error = line.get("is_error").and_then(Value::as_bool) == Some(true);
        if is_error || subtype != "success" {
            let errors: Vec<&str> = line
                .get("errors")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let text = line
                .get("result")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .or_else(|| (!errors.is_empty()).then(|| errors.join("; ")))
                .or_else(|| run.last_error.clone())
                .unwrap_or_else(|| format!("claude ended the turn with {subtype:?}"));
            return Ok(Some(TurnOutcome::Failed(text)));
        }
        let mut uuids: Vec<String> = line
            .get("user_message_uuids")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        if let Some(uuid) = line.get("user_message_uuid").and_then(Value::as_str)
            && !uuids.iter().any(|u| u == uuid)
        {
            uuids.push(uuid.to_owned());
        }
        Ok(match self.control.answered(&uuids) {
            AfterResult::Ended => Some(TurnOutcome::Completed),
            AfterResult::Continue => None,
        })
    }

    fn usage(&self, usage: &Value, model_usage: Option<&Value>) -> TokenUsage {
        let get = |key: &str| usage.get(key).and_then(Value::as_i64).unwrap_or(0);
        let cached = get("cache_read_input_tokens");
        let input = get("input_tokens")
            .saturating_add(cached)
            .saturating_add(get("cache_creation_input_tokens"));
        let output = get("output_tokens");
        let last = TokenUsageBreakdown {
            input_tokens: input,
            cached_input_tokens: cached,
            output_tokens: output,
            reasoning_output_tokens: 0,
            total_tokens: input.saturating_add(output),
        };
        let total = {
            let mut total = self
                .shared
                .usage
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            total.accumulate(&last);
            *total
        };
        let model_context_window = model_usage.and_then(Value::as_object).and_then(|models| {
            models
                .values()
                .filter_map(|m| m.get("contextWindow").and_then(Value::as_i64))
                .max()
        });
        TokenUsage {
            total,
            last,
            model_context_window,
        }
    }

    /// An item whose whole content is `text`, RUNNING then COMPLETED.
    async fn text_item(
        &mut self,
        run: &mut Run,
        kind: ItemKind,
        text: Option<String>,
    ) -> Result<(), Gone> {
        let item_id = self.next_item_id(run);
        let item = ToolItem {
            kind,
            text,
            command: None,
        };
        self.send(item.event(&item_id, ItemStatus::Running)).await?;
        self.send(item.event(&item_id, ItemStatus::Completed)).await
    }

    fn next_item_id(&self, run: &mut Run) -> String {
        run.items += 1;
        format!("{}-item-{}", self.turn_id, run.items)
    }

    async fn send(&self, event: TurnEvent) -> Result<(), Gone> {
        self.events.send(event).await.map_err(|_| Gone)
    }
}

/// COMPLETED snapshots of the tool items still RUNNING, so none dangles.
fn close_open_tools(run: &mut Run) -> Vec<TurnEvent> {
    std::mem::take(&mut run.tool_order)
        .into_iter()
        .filter_map(|id| run.tools.remove(&id))
        .map(|(item_id, item)| item.event(item_id, ItemStatus::Completed))
        .collect()
}
