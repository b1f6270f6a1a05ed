//! The turn task: runs a message's steps in order and reports each as
//! [`TurnEvent`]s, until the script ends, fails, is interrupted, or nobody
//! listens any more.
//!
//! Event shapes:
//! - Every item is reported twice, RUNNING then COMPLETED, with ids
//!   `<sdk_turn_id>-item-<n>` (n from 1, in order).
//! - The message itself is the first item (`UserMessage`, the whole text).
//! - Text items carry their full text in both events. A command item has no
//!   text; RUNNING carries command, cwd and pid, COMPLETED adds the capped
//!   output and the exit code (128 + signal when killed).
//! - `usage` reports `last` = that line's counts and `total` = the sum of every
//!   `usage` line so far in this turn (steering included), so the numbers
//!   depend on the script alone, never on earlier turns or a restart.
//! - A steering message, where it joins, gives `Steered{tag}` and then its own
//!   `UserMessage` item.
//! - The last event is always `Finished`, unless the receiver was dropped; in
//!   that case the task stops at once (killing a running command).

use std::path::PathBuf;
use std::sync::Arc;

use sdk_adapter::{
    ApprovalAnswer, ApprovalAsk, ApprovalKind, CommandInfo, ItemEvent, ItemKind, ItemStatus,
    McpServer, Sandbox, TURN_EVENT_BUFFER, TokenUsage, TokenUsageBreakdown, Turn, TurnEvent,
    TurnOutcome,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::command;
use crate::control::{Next, ScriptedControl};
use crate::plan::{Entry, Plan};
use crate::script::Step;

/// Start a turn running `text` in `workspace`, its commands launched through
/// `sandbox` with `env` added to their environment; the script runs on a
/// spawned task (so this must be called inside a tokio runtime).
pub(crate) fn start(
    workspace: PathBuf,
    env: Vec<(String, String)>,
    sandbox: Sandbox,
    instructions: Option<String>,
    mcp_servers: Arc<[McpServer]>,
    text: String,
) -> Turn {
    let turn_id = format!("turn-{}", uuid::Uuid::new_v4());
    let (events, receiver) = mpsc::channel(TURN_EVENT_BUFFER);
    let control = Arc::new(ScriptedControl::default());
    let task = TurnTask {
        turn_id: turn_id.clone(),
        cwd: workspace.to_string_lossy().into_owned(),
        workspace,
        env,
        sandbox,
        instructions,
        mcp: crate::mcp::Connections::new(mcp_servers),
        events,
        control: control.clone(),
        items: 0,
        usage: TokenUsageBreakdown::default(),
    };
    tokio::spawn(task.run(text));
    Turn {
        sdk_turn_id: turn_id,
        events: receiver,
        control,
    }
}

/// The receiver was dropped: nobody reads this turn's events any more.
struct Gone;

/// What to do after a step.
enum Flow {
    Continue,
    Finish(TurnOutcome),
}

struct TurnTask {
    turn_id: String,
    workspace: PathBuf,
    /// `workspace` as reported in command items.
    cwd: String,
    /// Extra environment of every command (`ThreadSpec::env`).
    env: Vec<(String, String)>,
    /// Every command is launched through the thread's sandbox.
    sandbox: Sandbox,
    /// The thread's additional model instructions (`ThreadSpec::instructions`).
    instructions: Option<String>,
    /// The thread's MCP servers and this turn's connections to them.
    mcp: crate::mcp::Connections,
    events: mpsc::Sender<TurnEvent>,
    control: Arc<ScriptedControl>,
    /// Items created so far.
    items: u64,
    /// Sum of this turn's `usage` lines.
    usage: TokenUsageBreakdown,
}

impl TurnTask {
    async fn run(mut self, text: String) {
        let outcome = self.drive(text).await;
        self.control.end();
        Box::pin(self.mcp.close()).await;
        if let Ok(outcome) = outcome {
            // Fails only if the receiver is gone, and then nobody cares.
            let _ = self.events.send(TurnEvent::Finished(outcome)).await;
        }
    }

    async fn drive(&mut self, text: String) -> Result<TurnOutcome, Gone> {
        let mut plan = Plan::from_message(&text);
        self.text_item(ItemKind::UserMessage, text).await?;
        loop {
            if self.events.is_closed() {
                return Err(Gone);
            }
            let entry = match self.control.next(&mut plan) {
                Next::Run(entry) => entry,
                Next::Completed => return Ok(TurnOutcome::Completed),
                Next::Interrupted => return Ok(TurnOutcome::Interrupted),
            };
            match entry {
                Entry::Steering(steering) => {
                    self.send(TurnEvent::Steered { tag: steering.tag }).await?;
                    self.text_item(ItemKind::UserMessage, steering.text).await?;
                }
                Entry::Step {
                    step: Err(error),
                    steered,
                } => {
                    let origin = if steered { "steering message, " } else { "" };
                    return Ok(TurnOutcome::Failed(format!("{origin}{error}")));
                }
                Entry::Step { step: Ok(step), .. } => {
                    if let Flow::Finish(outcome) = self.step(step).await? {
                        return Ok(outcome);
                    }
                }
            }
        }
    }

    async fn step(&mut self, step: Step) -> Result<Flow, Gone> {
        match step {
            Step::Say(text) => self.text_item(ItemKind::AgentMessage, text).await?,
            Step::Think(text) => self.text_item(ItemKind::Reasoning, text).await?,
            Step::Name(name) => self.send(TurnEvent::ThreadNamed(Some(name))).await?,
            Step::Instructions => {
                let text = self
                    .instructions
                    .clone()
                    .unwrap_or_else(|| "(no instructions)".to_owned());
                self.text_item(ItemKind::AgentMessage, text).await?
            }
            Step::Echo(line) => {
                self.text_item(ItemKind::AgentMessage, format!("echo: {line}"))
                    .await?;
            }
            Step::Sleep(duration) => {
                // Either way the next boundary sees an interrupt or a gone
                // receiver.
                tokio::select! {
                    () = tokio::time::sleep(duration) => {}
                    () = stopped(self.control.cancel_token(), &self.events) => {}
                }
            }
            Step::Usage { input, output } => self.usage(input, output).await?,
            Step::Fail(text) => return Ok(Flow::Finish(TurnOutcome::Failed(text))),
            // Boxed: these two futures (a child process, an MCP session) are
            // several KiB; inline, they would size every turn's task, and
            // 10,000 turns waiting in `sleep` would each carry them.
            Step::Run(command) => {
                let item_id = self.next_item_id();
                return Box::pin(self.run_command(item_id, command)).await;
            }
            Step::Approve(command) => return Box::pin(self.approve(command)).await,
            Step::Ask(question) => Box::pin(self.ask(question)).await?,
            Step::Mcp {
                server,
                tool,
                arguments,
            } => Box::pin(self.mcp_call(server, tool, arguments)).await?,
        }
        Ok(Flow::Continue)
    }

    /// `approve COMMAND`: asks, then runs it or reports it `[denied]`.
    /// An interrupt while it waits stops waiting (the runner denies it).
    async fn approve(&mut self, command: String) -> Result<Flow, Gone> {
        let item_id = self.next_item_id();
        let mut ask = ApprovalAsk::new(ApprovalKind::CommandExecution, format!("run `{command}`"));
        ask.command = Some(command.clone());
        ask.cwd = Some(self.cwd.clone());
        ask.reason = Some("the script asks to run it".to_owned());
        ask.item_id = Some(item_id.clone());
        let answer = tokio::select! {
            answer = sdk_adapter::ask_approval(&self.events, ask) => answer.map_err(|_| Gone)?,
            () = stopped(self.control.cancel_token(), &self.events) => {
                ApprovalAnswer::deny("the turn was interrupted")
            }
        };
        if answer.approved() {
            return self.run_command(item_id, command).await;
        }
        let output = match answer.message {
            Some(message) => format!("[denied] {message}"),
            None => "[denied]".to_owned(),
        };
        let info = CommandInfo {
            command,
            cwd: self.cwd.clone(),
            process_id: item_id.clone(),
            output: Some(output),
            ..Default::default()
        };
        self.send(command_item(&item_id, ItemStatus::Running, info.clone()))
            .await?;
        self.send(command_item(&item_id, ItemStatus::Completed, info))
            .await?;
        Ok(Flow::Continue)
    }

    /// `ask TEXT`: the answer (or `(no answer)`) as an agent message.
    async fn ask(&mut self, question: String) -> Result<(), Gone> {
        let ask = ApprovalAsk::new(ApprovalKind::Question, question);
        let answer = tokio::select! {
            answer = sdk_adapter::ask_approval(&self.events, ask) => answer.map_err(|_| Gone)?,
            () = stopped(self.control.cancel_token(), &self.events) => {
                ApprovalAnswer::deny("the turn was interrupted")
            }
        };
        let text = answer
            .answer
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "(no answer)".to_owned());
        self.text_item(ItemKind::AgentMessage, text).await
    }

    async fn run_command(&mut self, item_id: String, command: String) -> Result<Flow, Gone> {
        let spawned = self
            .sandbox
            .get()
            .map_err(|e| e.to_string())
            .and_then(|sandbox| {
                command::spawn(&command, &self.workspace, &self.env, sandbox)
                    .map_err(|e| e.to_string())
            });
        let running = match spawned {
            Ok(running) => running,
            Err(error) => {
                return Ok(Flow::Finish(TurnOutcome::Failed(format!(
                    "could not start `{command}` in {}: {error}",
                    self.cwd
                ))));
            }
        };
        let mut info = CommandInfo {
            command,
            cwd: self.cwd.clone(),
            process_id: running.pid().to_string(),
            output: None,
            exit_code: None,
            ..Default::default()
        };
        // If the receiver is gone, `running` drops here and its group dies.
        self.send(command_item(&item_id, ItemStatus::Running, info.clone()))
            .await?;
        let result = running
            .wait(stopped(self.control.cancel_token(), &self.events))
            .await;
        let flow = match result {
            Ok(result) => {
                info.output = Some(result.output);
                info.exit_code = result.exit_code;
                info.signal = result.signal;
                info.interrupted = result.interrupted;
                Flow::Continue
            }
            Err(error) => Flow::Finish(TurnOutcome::Failed(format!(
                "running `{}` failed: {error}",
                info.command
            ))),
        };
        self.send(command_item(&item_id, ItemStatus::Completed, info))
            .await?;
        Ok(flow)
    }

    async fn mcp_call(
        &mut self,
        server: String,
        tool: String,
        arguments: serde_json::Value,
    ) -> Result<(), Gone> {
        let mut item = ItemEvent {
            item_id: self.next_item_id(),
            kind: ItemKind::McpToolCall,
            status: ItemStatus::Running,
            text: Some(format!("{server}/{tool} {arguments}")),
            command: None,
        };
        self.send(TurnEvent::item(item.clone())).await?;
        let call = self.mcp.call(
            &server,
            &tool,
            arguments,
            self.sandbox.get().ok().map(|s| &**s),
        );
        let outcome = tokio::select! {
            outcome = call => outcome,
            () = stopped(self.control.cancel_token(), &self.events) => {
                Err("interrupted".to_owned())
            }
        };
        let line = match outcome {
            Ok(result) if result.is_error => format!("error: {}", result.text),
            Ok(result) => result.text,
            Err(error) => format!("error: {error}"),
        };
        let head = item.text.take().unwrap_or_default();
        item.text = Some(sdk_adapter::cap::cap_text(
            &format!("{head}\n{line}"),
            sdk_adapter::cap::OUTPUT_CAP_BYTES,
        ));
        item.status = ItemStatus::Completed;
        self.send(TurnEvent::item(item)).await
    }

    async fn usage(&mut self, input: i64, output: i64) -> Result<(), Gone> {
        let last = TokenUsageBreakdown {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input.saturating_add(output),
            ..TokenUsageBreakdown::default()
        };
        let total = &mut self.usage;
        total.input_tokens = total.input_tokens.saturating_add(last.input_tokens);
        total.output_tokens = total.output_tokens.saturating_add(last.output_tokens);
        total.total_tokens = total.total_tokens.saturating_add(last.total_tokens);
        let usage = TokenUsage {
            total: *total,
            last,
            model_context_window: None,
        };
        self.send(TurnEvent::usage(usage)).await
    }

    /// An item whose whole content is `text`, RUNNING then COMPLETED.
    async fn text_item(&mut self, kind: ItemKind, text: String) -> Result<(), Gone> {
        let mut item = ItemEvent {
            item_id: self.next_item_id(),
            kind,
            status: ItemStatus::Running,
            text: Some(text),
            command: None,
        };
        self.send(TurnEvent::item(item.clone())).await?;
        item.status = ItemStatus::Completed;
        self.send(TurnEvent::item(item)).await
    }

    fn next_item_id(&mut self) -> String {
        use std::fmt::Write as _;
        self.items += 1;
        // Sized up front: `format!` guesses from the literal parts only and
        // grew the string twice per item (2 % of the runner's CPU in the
        // throughput bench, which streams scripted items). 20: the most
        // digits a u64 has.
        let mut id = String::with_capacity(self.turn_id.len() + "-item-".len() + 20);
        let _ = write!(id, "{}-item-{}", self.turn_id, self.items);
        id
    }

    async fn send(&self, event: TurnEvent) -> Result<(), Gone> {
        self.events.send(event).await.map_err(|_| Gone)
    }
}

fn command_item(item_id: &str, status: ItemStatus, info: CommandInfo) -> TurnEvent {
    TurnEvent::item(ItemEvent {
        item_id: item_id.to_owned(),
        kind: ItemKind::CommandExecution,
        status,
        text: None,
        command: Some(info),
    })
}

/// Resolves when the turn was interrupted or its receiver dropped.
async fn stopped(cancel: &CancellationToken, events: &mpsc::Sender<TurnEvent>) {
    tokio::select! {
        () = cancel.cancelled() => {}
        () = events.closed() => {}
    }
}
