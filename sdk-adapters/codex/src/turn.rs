//! The turn task: turns the app-server's notifications for one turn into
//! [`TurnEvent`]s, until `turn/completed`, the process going away, or nobody
//! listening any more.
//!
//! Event shapes:
//! - Item ids are `<codex turn id>-<codex item id>` (codex reuses item ids
//!   such as `msg_1` across turns).
//! - `item/started` → the item RUNNING; `item/completed` → COMPLETED with
//!   the final content (text accumulated from deltas is kept when the final
//!   item carries none, as reasoning often does).
//! - Deltas (`item/agentMessage/delta`, `item/reasoning/summaryTextDelta`,
//!   `item/reasoning/textDelta`, `item/plan/delta`,
//!   `item/commandExecution/outputDelta`) grow the item; its RUNNING snapshot
//!   goes out at most once per `coalesce` interval (the latest state; the
//!   COMPLETED one supersedes anything pending).
//! - A steer's `Steered{tag}` precedes the `userMessage` item of its text
//!   (module `control`).
//! - `thread/tokenUsage/updated` → [`TurnEvent::Usage`].
//! - `thread/name/updated` → [`TurnEvent::ThreadNamed`] (a blank or absent
//!   name clears it). Codex names threads while a turn runs; a name set
//!   between turns is not seen (nothing listens then).

//! - `error` with `willRetry` is ignored; without it, its message becomes the
//!   failure text if the turn then fails without an error of its own.
//! - `turn/completed` → `Finished`: `completed` → Completed, `interrupted` →
//!   Interrupted, `failed` → Failed(the turn's error message).
//! - The process going away → Failed (Interrupted if an interrupt was asked).
//! - Items still RUNNING when the turn ends are reported COMPLETED with what
//!   they have, so none dangles.
//! - Notifications for another turn, unknown methods and unknown item types
//!   are logged at debug and skipped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sdk_adapter::{
    CommandInfo, Gone, ItemEvent, ItemKind, ItemStatus, TokenUsage, TokenUsageBreakdown, TurnEvent,
    TurnOutcome, finish_turn,
};
use sdk_process::{CappedText, Next, OUTPUT_CAP_BYTES, TurnInbox};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::control::CodexControl;
use crate::items::{self, is_text_kind};
use crate::server::TurnMsg;

#[derive(Debug)]
struct Item {
    kind: ItemKind,
    text: Option<String>,
    command: Option<CommandInfo>,
    /// Output streamed by deltas (commands).
    output: Option<CappedText>,
    completed: bool,
    last_emit: Option<Instant>,
    dirty: bool,
}

impl Item {
    fn new(kind: ItemKind) -> Self {
        Self {
            kind,
            text: is_text_kind(kind).then(String::new),
            command: (kind == ItemKind::CommandExecution).then(|| CommandInfo {
                command: String::new(),
                cwd: String::new(),
                process_id: String::new(),
                output: None,
                exit_code: None,
                ..Default::default()
            }),
            output: None,
            completed: false,
            last_emit: None,
            dirty: false,
        }
    }

    fn snapshot(&self, item_id: String, status: ItemStatus) -> ItemEvent {
        let command = self.command.clone().map(|mut info| {
            if let Some(streamed) = &self.output
                && info.output.is_none()
            {
                info.output = Some(streamed.text());
            }
            info
        });
        ItemEvent {
            item_id,
            kind: self.kind,
            status,
            text: self.text.clone(),
            command,
        }
    }
}

pub(crate) struct TurnTask {
    pub turn_id: String,
    pub events: mpsc::Sender<TurnEvent>,
    pub inbox: TurnInbox<TurnMsg>,
    pub control: Arc<CodexControl>,
    pub coalesce: Duration,
}

struct Run {
    items: HashMap<String, Item>,
    /// Codex item ids in the order they appeared.
    order: Vec<String>,
    last_error: Option<String>,
    /// `turn/completed` arrived while a steer was in flight.
    deferred: Option<TurnOutcome>,
    /// Steer tags already reported.
    announced: Vec<u64>,
}

impl TurnTask {
    pub(crate) async fn run(mut self) {
        let mut run = Run {
            items: HashMap::new(),
            order: Vec::new(),
            last_error: None,
            deferred: None,
            announced: Vec::new(),
        };
        let outcome = self.drive(&mut run).await;
        self.control.gate().end();
        self.inbox.stop_listening();
        let closing = self.close_open_items(&mut run);
        finish_turn(&self.events, outcome, closing, &*self.control).await;
    }

    async fn drive(&mut self, run: &mut Run) -> Result<TurnOutcome, Gone> {
        loop {
            let flush_at = run
                .items
                .values()
                .filter(|item| item.dirty)
                .filter_map(|item| item.last_emit)
                .min()
                .map(|at| at + self.coalesce);
            match self.inbox.next(&self.events, flush_at).await? {
                Next::Message(msg) => {
                    if let Some(outcome) = self.handle(run, msg).await? {
                        return Ok(outcome);
                    }
                }
                Next::Tick => self.flush_due(run).await?,
                Next::Ended(outcome) => return Ok(outcome),
            }
        }
    }

    async fn handle(&mut self, run: &mut Run, msg: TurnMsg) -> Result<Option<TurnOutcome>, Gone> {
        match msg {
            TurnMsg::Notification { method, params } => {
                self.notification(run, &method, params).await
            }
            TurnMsg::Steered(tag) => {
                if !run.announced.contains(&tag) {
                    run.announced.push(tag);
                    self.send(TurnEvent::Steered { tag }).await?;
                }
                Ok(None)
            }
            TurnMsg::SteerSettled => {
                if run.deferred.is_some() && self.control.gate().try_end() {
                    return Ok(run.deferred.take());
                }
                Ok(None)
            }
            TurnMsg::Interrupting => {
                self.inbox.interrupting();
                Ok(None)
            }
            TurnMsg::Exited(reason) => {
                let interrupted = self.control.gate().is_interrupted();
                Ok(Some(self.inbox.exited(interrupted, &reason)))
            }
            TurnMsg::Approval {
                id,
                method,
                params,
                rpc,
            } => {
                // Asked in order with the turn's items; the answer is awaited
                // on a task of its own, so the turn goes on reading codex.
                let ask = crate::approvals::ask_for(&method, &params);
                let (event, answer) = sdk_adapter::approval_event(ask);
                self.send(event).await?;
                tokio::spawn(async move {
                    let answer = answer.await;
                    let result = crate::approvals::decided(&method, &params, &answer);
                    if let Err(e) = rpc.respond(id, result).await {
                        tracing::debug!(error = %e, %method, "could not answer an approval request");
                    }
                });
                Ok(None)
            }
        }
    }

    async fn notification(
        &mut self,
        run: &mut Run,
        method: &str,
        params: Value,
    ) -> Result<Option<TurnOutcome>, Gone> {
        let turn_id = params
            .get("turnId")
            .or_else(|| params.get("turn").and_then(|t| t.get("id")))
            .and_then(Value::as_str);
        if let Some(turn_id) = turn_id
            && turn_id != self.turn_id
        {
            tracing::debug!(%method, other = turn_id, "notification for another turn");
            return Ok(None);
        }
        match method {
            "item/started" | "item/completed" => {
                let completed = method == "item/completed";
                match params.get("item").map(items::parse) {
                    Some(Ok(parsed)) => self.item(run, parsed, completed).await?,
                    Some(Err(kind)) => {
                        tracing::debug!(%method, item_type = %kind, "skipping an item type the runner does not show")
                    }
                    None => tracing::debug!(%method, "item notification without an item"),
                }
            }
            "item/agentMessage/delta" => self.delta(run, &params, ItemKind::AgentMessage).await?,
            "item/plan/delta" => self.delta(run, &params, ItemKind::Plan).await?,
            "item/reasoning/summaryTextDelta" | "item/reasoning/textDelta" => {
                self.delta(run, &params, ItemKind::Reasoning).await?;
            }
            "item/reasoning/summaryPartAdded" => {
                if let Some(item) = item_id(&params).and_then(|id| run.items.get_mut(id))
                    && let Some(text) = item.text.as_mut()
                    && !text.is_empty()
                {
                    text.push_str("\n\n");
                }
            }
            "item/commandExecution/outputDelta" => {
                self.delta(run, &params, ItemKind::CommandExecution).await?;
            }
            "thread/tokenUsage/updated" => {
                if let Some(usage) = params.get("tokenUsage").map(token_usage) {
                    self.send(TurnEvent::usage(usage)).await?;
                }
            }
            "thread/name/updated" => {
                let name = params
                    .get("threadName")
                    .and_then(Value::as_str)
                    .filter(|n| !n.trim().is_empty())
                    .map(str::to_owned);
                self.send(TurnEvent::ThreadNamed(name)).await?;
            }
            "error" => {
                let message = params
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("codex reported an error");
                if params.get("willRetry").and_then(Value::as_bool) == Some(true) {
                    tracing::debug!(codex_message = %message, "codex error, it will retry");
                } else {
                    run.last_error = Some(message.to_owned());
                }
            }
            "turn/completed" => {
                let outcome = self.outcome(run, &params);
                if self.control.gate().try_end() {
                    return Ok(Some(outcome));
                }
                run.deferred = Some(outcome);
            }
            other => tracing::debug!(method = %other, "skipping a notification"),
        }
        Ok(None)
    }

    fn outcome(&self, run: &Run, params: &Value) -> TurnOutcome {
        let turn = params.get("turn").unwrap_or(&Value::Null);
        match turn.get("status").and_then(Value::as_str) {
            Some("completed") => TurnOutcome::Completed,
            Some("interrupted") => TurnOutcome::Interrupted,
            status => {
                let error = turn.get("error").unwrap_or(&Value::Null);
                let mut text = error
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| run.last_error.clone())
                    .unwrap_or_else(|| match status {
                        Some(other) => format!("codex ended the turn with status {other:?}"),
                        None => "codex ended the turn without a status".to_owned(),
                    });
                if let Some(details) = error
                    .get("additionalDetails")
                    .and_then(Value::as_str)
                    .filter(|d| !d.is_empty())
                {
                    text.push_str(": ");
                    text.push_str(details);
                }
                TurnOutcome::Failed(text)
            }
        }
    }

    async fn item(
        &mut self,
        run: &mut Run,
        parsed: items::Parsed,
        completed: bool,
    ) -> Result<(), Gone> {
        let id = parsed.id.clone();
        if !completed
            && parsed.kind == ItemKind::UserMessage
            && !run.items.contains_key(&id)
            && let Some(tag) = parsed
                .text
                .as_deref()
                .and_then(|t| self.control.claim_steer(t))
        {
            run.announced.push(tag);
            self.send(TurnEvent::Steered { tag }).await?;
        }
        let item = run.items.entry(id.clone()).or_insert_with(|| {
            run.order.push(id.clone());
            Item::new(parsed.kind)
        });
        if item.completed {
            return Ok(());
        }
        item.kind = parsed.kind;
        // The final text wins, unless it is empty and deltas brought some.
        match parsed.text {
            Some(text) if !text.is_empty() || item.text.as_ref().is_none_or(String::is_empty) => {
                item.text = Some(text);
            }
            Some(_) => {}
            None if !is_text_kind(parsed.kind) => item.text = None,
            None => {}
        }
        if let Some(info) = parsed.command {
            item.command = Some(info);
        }
        item.dirty = false;
        item.last_emit = Some(Instant::now());
        let status = if completed {
            item.completed = true;
            ItemStatus::Completed
        } else {
            ItemStatus::Running
        };
        let event = item.snapshot(self.item_id(&id), status);
        self.send(TurnEvent::item(event)).await
    }

    async fn delta(&mut self, run: &mut Run, params: &Value, kind: ItemKind) -> Result<(), Gone> {
        let (Some(id), Some(delta)) =
            (item_id(params), params.get("delta").and_then(Value::as_str))
        else {
            tracing::debug!(?kind, "delta without itemId or delta");
            return Ok(());
        };
        let item = run.items.entry(id.to_owned()).or_insert_with(|| {
            run.order.push(id.to_owned());
            Item::new(kind)
        });
        if item.completed {
            return Ok(());
        }
        if kind == ItemKind::CommandExecution {
            item.output
                .get_or_insert_with(|| CappedText::new(OUTPUT_CAP_BYTES))
                .push(delta);
        } else {
            item.text.get_or_insert_with(String::new).push_str(delta);
        }
        let now = Instant::now();
        if item.last_emit.is_none_or(|at| now >= at + self.coalesce) {
            item.last_emit = Some(now);
            item.dirty = false;
            let event = item.snapshot(self.item_id(id), ItemStatus::Running);
            self.send(TurnEvent::item(event)).await?;
        } else {
            item.dirty = true;
        }
        Ok(())
    }

    /// Send the latest RUNNING snapshot of every item whose interval is up.
    async fn flush_due(&mut self, run: &mut Run) -> Result<(), Gone> {
        let now = Instant::now();
        for id in &run.order {
            let Some(item) = run.items.get_mut(id) else {
                continue;
            };
            if item.dirty && item.last_emit.is_none_or(|at| now >= at + self.coalesce) {
                item.dirty = false;
                item.last_emit = Some(now);
                let event = item.snapshot(self.item_id(id), ItemStatus::Running);
                self.send(TurnEvent::item(event)).await?;
            }
        }
        Ok(())
    }

    /// COMPLETED snapshots of the items still RUNNING, so none dangles.
    fn close_open_items(&self, run: &mut Run) -> Vec<TurnEvent> {
        let mut closing = Vec::new();
        for id in &run.order {
            if let Some(item) = run.items.get_mut(id)
                && !item.completed
            {
                item.completed = true;
                let event = item.snapshot(self.item_id(id), ItemStatus::Completed);
                closing.push(TurnEvent::item(event));
            }
        }
        closing
    }

    fn item_id(&self, codex_id: &str) -> String {
        format!("{}-{codex_id}", self.turn_id)
    }

    async fn send(&self, event: TurnEvent) -> Result<(), Gone> {
        self.events.send(event).await.map_err(|_| Gone)
    }
}

fn item_id(params: &Value) -> Option<&str> {
    params.get("itemId").and_then(Value::as_str)
}

fn breakdown(value: &Value) -> TokenUsageBreakdown {
    let get = |key: &str| value.get(key).and_then(Value::as_i64).unwrap_or(0);
    TokenUsageBreakdown {
        input_tokens: get("inputTokens"),
        cached_input_tokens: get("cachedInputTokens"),
        output_tokens: get("outputTokens"),
        reasoning_output_tokens: get("reasoningOutputTokens"),
        total_tokens: get("totalTokens"),
    }
}

fn token_usage(value: &Value) -> TokenUsage {
    TokenUsage {
        total: value.get("total").map(breakdown).unwrap_or_default(),
        last: value.get("last").map(breakdown).unwrap_or_default(),
        model_context_window: value.get("modelContextWindow").and_then(Value::as_i64),
    }
}
