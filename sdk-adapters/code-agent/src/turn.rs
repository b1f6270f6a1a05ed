//! The turn task: turns one `StreamGenerate`'s chunks into [`TurnEvent`]s,
//! until the `done` chunk, the stream ending, an interrupt, or nobody
//! listening any more.
//!
//! Event shapes:
//! - Item ids are `<turn id>-item-<n>`, n from 1 in order.
//! - The user's message is the first item (`UserMessage`, RUNNING then
//!   COMPLETED); a steering text, where the engine took it, gives
//!   `Steered{tag}` and then its own `UserMessage` item.
//! - `content` deltas grow an `AgentMessage` item, `metadata` chunks of
//!   kind `reasoning` a `Reasoning` item: the first delta is reported at
//!   once, later ones as the text so far at most once per `coalesce`
//!   interval; the item is COMPLETED with its full text when anything else
//!   happens (another kind of text, a tool call, the end).
//! - `tool_call` starts an item (module `tools` picks the kind), its
//!   `tool_result` (matched by `metadata.tool_call_id`) completes it.
//! - `metadata` chunks of kind `usage` (one per model call) become
//!   [`TurnEvent::Usage`]: `last` is that call, `total` the thread's sum
//!   since the adapter started (kept in memory). If the engine sent none,
//!   the `done` chunk's usage is used.
//! - `done` ends the turn: Completed, or Failed when `finish_reason` is
//!   `error`; an error status ends it Failed with the engine's message.
//!   After an interrupt, any end is Interrupted; if the stream has not
//!   ended `interrupt_grace` after `Cancel`, the adapter stops reading it.
//! - Items still open when the turn ends are COMPLETED with what they have.
//! - The session's `CONFIRMATION_REQUIRED` events become
//!   [`TurnEvent::Approval`]s, in order with the items; each answer goes
//!   back to the engine from a task of its own (module `approvals`), so the
//!   turn goes on reading meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use code_agent_proto::{AgentEvent, GenerateChunk};
use sdk_adapter::{
    Gone, ItemContent, ItemEvent, ItemKind, ItemStatus, TokenUsage, TokenUsageBreakdown, TurnEvent,
    TurnOutcome, sleep_until,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::Streaming;

use crate::approvals;
use crate::connect::Client;
use crate::control::{CodeAgentControl, TurnMsg};
use crate::status_text;
use crate::tools::{self, ToolItem};

/// A text item that grows by deltas.
struct TextItem {
    id: String,
    kind: ItemKind,
    text: String,
    last_emit: Instant,
    dirty: bool,
}

pub(crate) struct TurnTask {
    pub turn_id: String,
    /// The thread's workspace, reported as a command's cwd until the engine
    /// says otherwise.
    pub cwd: String,
    pub user_text: String,
    /// The thread's name, sent after the user's message (first turn only).
    pub title: Option<String>,
    pub events: mpsc::Sender<TurnEvent>,
    pub stream: Streaming<GenerateChunk>,
    pub msgs: mpsc::Receiver<TurnMsg>,
    pub control: Arc<CodeAgentControl>,
    pub coalesce: Duration,
    pub interrupt_grace: Duration,
    /// The thread's cumulative usage (shared with its later turns).
    pub thread_usage: Arc<Mutex<TokenUsageBreakdown>>,
    pub context_window: Option<i64>,
    /// Where the engine's confirmation requests come from and go back to;
    /// `None` when the engine cannot stream them.
    pub confirmations: Option<Confirmations>,
}

/// A turn's confirmation requests (module `approvals`).
pub(crate) struct Confirmations {
    pub events: Streaming<AgentEvent>,
    pub client: Client,
    pub session_id: String,
    pub request_timeout: Duration,
}

#[derive(Default)]
struct Run {
    items: u64,
    text: Option<TextItem>,
    /// Open tool items by tool call id, with their item ids.
    tools: HashMap<String, (String, ToolItem)>,
    /// Tool call ids in the order they started.
    tool_order: Vec<String>,
    saw_usage: bool,
    stream_over: bool,
    deferred: Option<TurnOutcome>,
    interrupt_deadline: Option<Instant>,
}

impl TurnTask {
    pub(crate) async fn run(mut self) {
        let mut run = Run::default();
        let outcome = self.drive(&mut run).await;
        self.control.gate().end();
        let finished = match outcome {
            Ok(outcome) => self.finish(&mut run, outcome).await,
            Err(Gone) => Err(Gone),
        };
        if finished.is_err() && !self.control.gate().is_interrupted() {
            // Nobody reads this turn any more: stop the engine working on it.
            self.control.cancel_generation();
        }
    }

    async fn finish(&mut self, run: &mut Run, outcome: TurnOutcome) -> Result<(), Gone> {
        self.close_text(run).await?;
        // Steers the engine took but whose notice is still queued.
        while let Ok(msg) = self.msgs.try_recv() {
            if let TurnMsg::Steered { tag, text } = msg {
                self.steered(run, tag, text).await?;
            }
        }
        for call_id in std::mem::take(&mut run.tool_order) {
            if let Some((item_id, item)) = run.tools.remove(&call_id) {
                self.send(item.content.event(item_id, ItemStatus::Completed))
                    .await?;
            }
        }
        self.send(TurnEvent::Finished(outcome)).await
    }

    async fn drive(&mut self, run: &mut Run) -> Result<TurnOutcome, Gone> {
        let user_text = std::mem::take(&mut self.user_text);
        self.text_item(run, ItemKind::UserMessage, user_text)
            .await?;
        if let Some(title) = self.title.take() {
            self.send(TurnEvent::ThreadNamed(Some(title))).await?;
        }
        loop {
            let flush_at = run
                .text
                .as_ref()
                .filter(|t| t.dirty)
                .map(|t| t.last_emit + self.coalesce);
            let events = self.events.clone();
            let control = self.control.clone();
            tokio::select! {
                biased;
                () = events.closed() => return Err(Gone),
                msg = self.msgs.recv() => match msg {
                    Some(TurnMsg::Steered { tag, text }) => self.steered(run, tag, text).await?,
                    Some(TurnMsg::SteerSettled) | None => {
                        if run.deferred.is_some() && self.control.gate().try_end() {
                            return Ok(run.deferred.take().unwrap_or(TurnOutcome::Completed));
                        }
                    }
                },
                chunk = self.stream.message(), if !run.stream_over => {
                    let ended = match chunk {
                        Ok(Some(chunk)) => self.chunk(run, chunk).await?,
                        Ok(None) => Some(self.ended_without_done()),
                        Err(status) => Some(self.failed(&status)),
                    };
                    if let Some(outcome) = ended {
                        run.stream_over = true;
                        if self.control.gate().try_end() {
                            return Ok(outcome);
                        }
                        run.deferred = Some(outcome);
                    }
                }
                event = next_confirmation(&mut self.confirmations), if self.confirmations.is_some() => {
                    self.confirmation(event).await?;
                }
                () = control.gate().interrupted().cancelled(), if run.interrupt_deadline.is_none() => {
                    run.interrupt_deadline = Some(Instant::now() + self.interrupt_grace);
                }
                () = sleep_until(run.interrupt_deadline), if run.interrupt_deadline.is_some() => {
                    tracing::warn!(turn_id = %self.turn_id, "the code-agent engine did not end the cancelled generation in time; no longer waiting for it");
                    return Ok(TurnOutcome::Interrupted);
                }
                () = sleep_until(flush_at), if flush_at.is_some() => self.flush(run).await?,
            }
        }
    }

    fn interrupted(&self) -> bool {
        self.control.gate().is_interrupted()
    }

    fn ended_without_done(&self) -> TurnOutcome {
        if self.interrupted() {
            TurnOutcome::Interrupted
        } else {
            TurnOutcome::Failed(
                "code-agent: the engine ended the generation stream without a done chunk".into(),
            )
        }
    }

    fn failed(&self, status: &tonic::Status) -> TurnOutcome {
        if self.interrupted() || status.code() == tonic::Code::Cancelled {
            TurnOutcome::Interrupted
        } else {
            TurnOutcome::Failed(format!("code-agent: {}", status_text(status)))
        }
    }

    /// Handle one chunk; the outcome if it ends the turn.
    async fn chunk(
        &mut self,
        run: &mut Run,
        chunk: GenerateChunk,
    ) -> Result<Option<TurnOutcome>, Gone> {
        match chunk.r#type.as_str() {
            "content" => {
                self.delta(run, ItemKind::AgentMessage, &chunk.content)
                    .await?
            }
            "metadata" => match chunk.metadata.get("kind").map(String::as_str) {
                Some("reasoning") => self.delta(run, ItemKind::Reasoning, &chunk.content).await?,
                Some("usage") => {
                    run.saw_usage = true;
                    self.usage(&chunk).await?;
                }
                other => tracing::debug!(kind = ?other, "skipping a metadata chunk"),
            },
            "tool_call" => self.tool_call(run, &chunk).await?,
            "tool_result" => self.tool_result(run, &chunk).await?,
            "done" => {
                self.close_text(run).await?;
                if !run.saw_usage && chunk.metadata.contains_key("total_tokens") {
                    self.usage(&chunk).await?;
                }
                return Ok(Some(self.done_outcome(&chunk)));
            }
            other => tracing::debug!(chunk_type = %other, "skipping a chunk type"),
        }
        Ok(None)
    }

    fn done_outcome(&self, chunk: &GenerateChunk) -> TurnOutcome {
        if self.interrupted() {
            return TurnOutcome::Interrupted;
        }
        match chunk.finish_reason.as_str() {
            "error" => {
                let message = chunk
                    .metadata
                    .get("error")
                    .filter(|e| !e.is_empty())
                    .cloned()
                    .or_else(|| Some(chunk.content.clone()).filter(|c| !c.is_empty()))
                    .unwrap_or_else(|| "the engine reported an error".to_owned());
                TurnOutcome::Failed(format!("code-agent: {message}"))
            }
            "cancelled" => TurnOutcome::Interrupted,
            _ => TurnOutcome::Completed,
        }
    }

    async fn steered(&mut self, run: &mut Run, tag: u64, text: String) -> Result<(), Gone> {
        self.close_text(run).await?;
        self.send(TurnEvent::Steered { tag }).await?;
        self.text_item(run, ItemKind::UserMessage, text).await
    }

    async fn delta(&mut self, run: &mut Run, kind: ItemKind, delta: &str) -> Result<(), Gone> {
        if delta.is_empty() {
            return Ok(());
        }
        if run.text.as_ref().is_some_and(|t| t.kind != kind) {
            self.close_text(run).await?;
        }
        let now = Instant::now();
        match run.text.as_mut() {
            Some(item) => {
                item.text.push_str(delta);
                if now >= item.last_emit + self.coalesce {
                    item.last_emit = now;
                    item.dirty = false;
                    let event = text_event(item, ItemStatus::Running);
                    self.send(event).await?;
                } else {
                    item.dirty = true;
                }
            }
            None => {
                let item = TextItem {
                    id: next_id(&self.turn_id, run),
                    kind,
                    text: delta.to_owned(),
                    last_emit: now,
                    dirty: false,
                };
                let event = text_event(&item, ItemStatus::Running);
                run.text = Some(item);
                self.send(event).await?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self, run: &mut Run) -> Result<(), Gone> {
        if let Some(item) = run.text.as_mut()
            && item.dirty
        {
            item.dirty = false;
            item.last_emit = Instant::now();
            let event = text_event(item, ItemStatus::Running);
            self.send(event).await?;
        }
        Ok(())
    }

    async fn close_text(&mut self, run: &mut Run) -> Result<(), Gone> {
        match run.text.take() {
            Some(item) => self.send(text_event(&item, ItemStatus::Completed)).await,
            None => Ok(()),
        }
    }

    /// A whole text item at once (user messages).
    async fn text_item(&mut self, run: &mut Run, kind: ItemKind, text: String) -> Result<(), Gone> {
        let item_id = next_id(&self.turn_id, run);
        let content = ItemContent {
            kind,
            text: Some(text),
            command: None,
        };
        self.send(content.event(item_id.clone(), ItemStatus::Running))
            .await?;
        self.send(content.event(item_id, ItemStatus::Completed))
            .await
    }

    async fn tool_call(&mut self, run: &mut Run, chunk: &GenerateChunk) -> Result<(), Gone> {
        self.close_text(run).await?;
        let Some(call) = &chunk.tool_call else {
            tracing::debug!("tool_call chunk without a tool call");
            return Ok(());
        };
        let item_id = next_id(&self.turn_id, run);
        let call_id = if call.id.is_empty() {
            item_id.clone()
        } else {
            call.id.clone()
        };
        let item = tools::started(&call.name, &call.arguments, &self.cwd);
        let event = item.content.event(item_id.clone(), ItemStatus::Running);
        if run.tools.insert(call_id.clone(), (item_id, item)).is_none() {
            run.tool_order.push(call_id);
        }
        self.send(event).await
    }

    async fn tool_result(&mut self, run: &mut Run, chunk: &GenerateChunk) -> Result<(), Gone> {
        self.close_text(run).await?;
        let Some(result) = &chunk.tool_result else {
            tracing::debug!("tool_result chunk without a result");
            return Ok(());
        };
        let call_id = result
            .metadata
            .get("tool_call_id")
            .cloned()
            .unwrap_or_default();
        let (item_id, mut item) = match run.tools.remove(&call_id) {
            Some(open) => {
                run.tool_order.retain(|id| id != &call_id);
                open
            }
            None => {
                // A result without its call: report it all at once.
                let tool = result.metadata.get("tool").map_or("tool", String::as_str);
                let item_id = next_id(&self.turn_id, run);
                let item = tools::started(tool, "{}", &self.cwd);
                (item_id, item)
            }
        };
        tools::complete(&mut item, result);
        self.send(item.content.event(item_id, ItemStatus::Completed))
            .await
    }

    async fn usage(&mut self, chunk: &GenerateChunk) -> Result<(), Gone> {
        let last = usage_of(chunk);
        let total = {
            let mut sum = self
                .thread_usage
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            sum.accumulate(&last);
            *sum
        };
        self.send(TurnEvent::usage(TokenUsage {
            total,
            last,
            model_context_window: self.context_window,
        }))
        .await
    }

    /// One event of the confirmation stream: asks the runner, and answers
    /// the engine once it decided. A stream that ended is no longer read.
    async fn confirmation(
        &mut self,
        event: Result<Option<AgentEvent>, tonic::Status>,
    ) -> Result<(), Gone> {
        let event = match event {
            Ok(Some(event)) => event,
            Ok(None) | Err(_) => {
                if !self.interrupted() {
                    tracing::debug!(turn_id = %self.turn_id, "the engine's confirmation stream ended");
                }
                self.confirmations = None;
                return Ok(());
            }
        };
        let Some(confirmations) = self.confirmations.as_ref() else {
            return Ok(());
        };
        let Some((tool_id, ask)) = approvals::ask_for(&event, &self.cwd) else {
            return Ok(());
        };
        let (client, session_id, timeout) = (
            confirmations.client.clone(),
            confirmations.session_id.clone(),
            confirmations.request_timeout,
        );
        let (event, answer) = sdk_adapter::approval_event(ask);
        self.send(event).await?;
        tokio::spawn(async move {
            let answer = answer.await;
            let request = approvals::confirmation(&session_id, &tool_id, &answer);
            approvals::confirm(&client, request, timeout).await;
        });
        Ok(())
    }

    async fn send(&self, event: TurnEvent) -> Result<(), Gone> {
        self.events.send(event).await.map_err(|_| Gone)
    }
}

/// The next confirmation event (never, without a stream).
async fn next_confirmation(
    confirmations: &mut Option<Confirmations>,
) -> Result<Option<AgentEvent>, tonic::Status> {
    match confirmations {
        Some(c) => c.events.message().await,
        None => std::future::pending().await,
    }
}

/// One model call's usage from a chunk's metadata. The numbers come off
/// the wire: unparsable or negative ones count as 0, and sums saturate
/// rather than overflow.
fn usage_of(chunk: &GenerateChunk) -> TokenUsageBreakdown {
    let get = |key: &str| {
        chunk
            .metadata
            .get(key)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
            .max(0)
    };
    let input = get("prompt_tokens");
    let output = get("completion_tokens");
    let total = match get("total_tokens") {
        0 => input.saturating_add(output),
        total => total,
    };
    TokenUsageBreakdown {
        input_tokens: input,
        cached_input_tokens: get("cached_tokens"),
        output_tokens: output,
        reasoning_output_tokens: get("reasoning_tokens"),
        total_tokens: total,
    }
}

fn next_id(turn_id: &str, run: &mut Run) -> String {
    run.items += 1;
    format!("{turn_id}-item-{}", run.items)
}

fn text_event(item: &TextItem, status: ItemStatus) -> TurnEvent {
    TurnEvent::item(ItemEvent {
        item_id: item.id.clone(),
        kind: item.kind,
        status,
        text: Some(item.text.clone()),
        command: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_chunk(pairs: &[(&str, &str)]) -> GenerateChunk {
        GenerateChunk {
            r#type: "metadata".into(),
            metadata: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn usage_is_read_from_metadata_and_summed() {
        let last = usage_of(&usage_chunk(&[
            ("prompt_tokens", "10"),
            ("completion_tokens", "5"),
            ("cached_tokens", "2"),
            ("reasoning_tokens", "-3"),
            ("total_tokens", "x"),
        ]));
        assert_eq!(
            last,
            TokenUsageBreakdown {
                input_tokens: 10,
                cached_input_tokens: 2,
                output_tokens: 5,
                reasoning_output_tokens: 0,
                total_tokens: 15,
            }
        );
        let mut sum = last;
        sum.accumulate(&last);
        assert_eq!(sum.total_tokens, 30);
        assert_eq!(sum.input_tokens, 20);
    }

    /// Numbers off the wire near i64::MAX saturate instead of overflowing
    /// (a panic in debug builds, a negative count in release).
    #[test]
    fn huge_usage_numbers_saturate() {
        let max = i64::MAX.to_string();
        let last = usage_of(&usage_chunk(&[
            ("prompt_tokens", &max),
            ("completion_tokens", &max),
        ]));
        assert_eq!(last.total_tokens, i64::MAX);
        let mut sum = last;
        sum.accumulate(&last);
        assert_eq!(sum.input_tokens, i64::MAX);
        assert_eq!(sum.total_tokens, i64::MAX);
    }
}
