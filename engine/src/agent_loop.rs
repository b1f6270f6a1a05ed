//! The agent loop of one generation: call the model, run the tool calls it
//! asks for, feed the results back, until the model stops, the step limit
//! is reached or the generation is cancelled. Steering messages join at the
//! next step boundary; a paused session waits there. Everything the client
//! sees goes through a bounded channel of `GenerateChunk`s (see `chunks`);
//! a client that goes away cancels the generation.

use std::path::PathBuf;
use std::sync::Arc;

use code_agent_proto::agent_event::EventType;
use code_agent_proto::{GenerateChunk, ToolCall};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::chunks;
use crate::context;
use crate::engine::EngineInner;
use crate::lanes;
use crate::llm::{LlmError, Usage};
use crate::model::{self, Delta, TurnModel};
use crate::prompt;
use crate::session::Session;
use crate::session::generation::Lease;
use crate::session::message::StoredMessage;
use crate::tool_call::{self, CallEnv};
use crate::tools::ToolOutput;

/// Where chunks go (bounded).
pub type Sink = mpsc::Sender<Result<GenerateChunk, Status>>;

/// `finish_reason` of a cancelled generation.
pub const CANCELLED: &str = "cancelled";

/// One generation, ready to run.
pub struct Turn {
    pub engine: Arc<EngineInner>,
    pub session: Arc<Session>,
    pub lease: Lease,
    pub input: Vec<StoredMessage>,
    pub reasoning_effort: Option<String>,
    pub sink: Sink,
}

struct Running<'a> {
    engine: &'a Arc<EngineInner>,
    session: &'a Arc<Session>,
    workspace: PathBuf,
    model: TurnModel,
    cancel: CancellationToken,
    sink: &'a Sink,
    total: Usage,
}

impl Running<'_> {
    /// Sends a chunk; a client that is gone cancels the generation.
    async fn send(&self, chunk: GenerateChunk) {
        if self.sink.send(Ok(chunk)).await.is_err() {
            self.cancel.cancel();
        }
    }

    fn emit<const N: usize>(&self, kind: EventType, message: &str, data: [(&str, String); N]) {
        self.engine
            .events
            .emit(kind, Some(&self.session.id), message, data);
    }
}

/// The text the model reads for a tool's result.
pub fn model_text(output: &ToolOutput) -> String {
    match (&output.error, output.success) {
        (Some(error), false) if output.output.is_empty() || output.output == *error => {
            format!("error: {error}")
        }
        (Some(error), false) => format!("error: {error}\n{}", output.output),
        _ => output.output.clone(),
    }
}

/// Runs the generation to its end; the last thing sent is `done` or an error.
pub async fn run(turn: Turn) {
    let Turn {
        engine,
        session,
        mut lease,
        input,
        reasoning_effort,
        sink,
    } = turn;
    let prepared = engine.workspace_of(&session).and_then(|workspace| {
        let llm = session.read(|d| d.config.llm.clone());
        let model = engine.models.for_session(&engine.providers, llm.as_ref())?;
        Ok((workspace, model))
    });
    let (workspace, model) = match prepared {
        Ok(ok) => ok,
        Err(status) => {
            drop(lease);
            let _ = sink.send(Err(status)).await;
            return;
        }
    };
    session.update(|d| d.failed = false);
    session.append(input);
    engine.persist_soon(&session);
    let mut running = Running {
        engine: &engine,
        session: &session,
        workspace,
        model,
        cancel: lease.cancel.clone(),
        sink: &sink,
        total: Usage::default(),
    };
    running.emit(
        EventType::GenerationStarted,
        "generation started",
        [
            ("provider", running.model.provider.clone()),
            ("model", running.model.model.clone()),
        ],
    );
    // Steps save in the background (see `steps`); the turn's one awaited
    // save is here, so the file holds the final history before the client
    // hears that the generation ended.
    let outcome = steps(&mut running, &mut lease, reasoning_effort).await;
    drop(lease);
    if outcome.is_err() {
        session.update(|d| d.failed = true);
    }
    engine.persist_or_report(&session).await;
    let total = running.total;
    match outcome {
        Ok(finish_reason) => {
            running.emit(
                EventType::GenerationCompleted,
                "generation completed",
                [
                    ("finish_reason", finish_reason.clone()),
                    ("prompt_tokens", total.prompt_tokens.to_string()),
                    ("completion_tokens", total.completion_tokens.to_string()),
                    ("total_tokens", total.total_tokens.to_string()),
                ],
            );
            let _ = sink
                .send(Ok(chunks::done(&session.id, &finish_reason, &total)))
                .await;
        }
        Err(status) => {
            running.emit(
                EventType::Error,
                &format!("generation failed: {}", status.message()),
                [("code", format!("{:?}", status.code()))],
            );
            let _ = sink.send(Err(status)).await;
        }
    }
}

/// The loop itself; the finish reason, or the error that ended it.
async fn steps(
    run: &mut Running<'_>,
    lease: &mut Lease,
    reasoning_effort: Option<String>,
) -> Result<String, Status> {
    let max_steps = run.engine.config.max_steps.max(1);
    let mut step = 0u32;
    loop {
        if step >= max_steps {
            run.emit(
                EventType::Warning,
                &format!("stopped after {max_steps} model calls (step limit)"),
                [("max_steps", max_steps.to_string())],
            );
            return Ok("length".into());
        }
        if run.session.paused() {
            run.emit(
                EventType::Info,
                "paused at a step boundary",
                [("kind", "paused".to_string()), ("step", step.to_string())],
            );
            if !run.session.wait_unpaused(&run.cancel).await {
                return Ok(CANCELLED.into());
            }
            run.emit(
                EventType::Info,
                "resumed",
                [("kind", "resumed".to_string()), ("step", step.to_string())],
            );
        }
        if run.cancel.is_cancelled() {
            return Ok(CANCELLED.into());
        }
        join_steering(run, lease.take_steered()).await;
        context::auto_compact(run.engine, run.session, &run.model, &run.cancel).await;

        let (system, history) = prompt::conversation(run.session, &run.workspace);
        let mut request_messages = vec![crate::llm::ChatMessage::system(system)];
        request_messages.extend(history);
        // The built-in tools (with the LSP tools while a language server
        // runs), then the session's MCP servers' tools.
        let mut specs = run.engine.tool_specs();
        specs.extend(crate::mcp::specs(&run.engine.mcp, &run.session.id));
        let request = run
            .model
            .request(request_messages, specs, reasoning_effort.clone(), None);
        let session_id = run.session.id.clone();
        let (sink, cancel) = (run.sink.clone(), run.cancel.clone());
        let completion = model::complete(&run.model, request, &run.cancel, |delta| {
            let chunk = match delta {
                Delta::Content(text) => chunks::content(&session_id, text),
                Delta::Reasoning(text) => chunks::reasoning(&session_id, text),
            };
            let (sink, cancel) = (sink.clone(), cancel.clone());
            async move {
                if sink.send(Ok(chunk)).await.is_err() {
                    cancel.cancel();
                }
            }
        })
        .await;
        let completion = match completion {
            Ok(c) => c,
            Err(LlmError::Cancelled) => return Ok(CANCELLED.into()),
            Err(e) if run.cancel.is_cancelled() => {
                tracing::debug!(error = %e, "model call ended by cancellation");
                return Ok(CANCELLED.into());
            }
            Err(e) => return Err(Status::from(e)),
        };
        step += 1;
        if let Some(usage) = completion.usage {
            run.session.update(|d| {
                d.usage.prompt_tokens = usage.prompt_tokens;
                d.usage.completion_tokens = usage.completion_tokens;
            });
            run.total.prompt_tokens += usage.prompt_tokens;
            run.total.completion_tokens += usage.completion_tokens;
            run.total.total_tokens += usage.total_tokens;
            run.total.cache_read_tokens += usage.cache_read_tokens;
            run.total.cache_write_tokens += usage.cache_write_tokens;
            run.send(chunks::usage(&run.session.id, &usage)).await;
        }
        run.session
            .append([StoredMessage::from_assistant(&completion.message)]);

        if completion.message.tool_calls.is_empty() {
            if run.cancel.is_cancelled() {
                return Ok(CANCELLED.into());
            }
            match lease.finish_or_steered() {
                Some(late) => {
                    join_steering(run, late).await;
                    continue;
                }
                None => {
                    let reason = if completion.finish_reason.is_empty() {
                        "stop".to_string()
                    } else {
                        completion.finish_reason
                    };
                    return Ok(reason);
                }
            }
        }
        for call in &completion.message.tool_calls {
            let output = if run.cancel.is_cancelled() {
                ToolOutput::err("cancelled before it ran")
            } else {
                let env = CallEnv {
                    engine: run.engine,
                    session: run.session,
                    workspace: &run.workspace,
                    cancel: &run.cancel,
                };
                let lane = tool_call::lane_of(&env, &call.name);
                let wire = ToolCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    result: None,
                };
                run.send(chunks::tool_call(
                    &run.session.id,
                    wire,
                    lanes::lane_name(lane),
                ))
                .await;
                tool_call::execute(&env, call).await
            };
            let result = chunks::tool_result_of(&call.id, &call.name, &output);
            run.send(chunks::tool_result(&run.session.id, result)).await;
            run.session.append([StoredMessage::tool_result(
                &call.id,
                &call.name,
                model_text(&output),
                !output.success,
            )]);
        }
        // One write per step: the reply and all its tool results together,
        // in the background while the next model call goes out.
        run.engine.persist_soon(run.session);
        if run.cancel.is_cancelled() {
            return Ok(CANCELLED.into());
        }
    }
}

async fn join_steering(run: &Running<'_>, steered: Vec<StoredMessage>) {
    if steered.is_empty() {
        return;
    }
    let count = steered.len();
    run.session.append(steered);
    run.engine.persist_soon(run.session);
    run.emit(
        EventType::Info,
        "steering messages joined the generation",
        [
            ("kind", "steered".to_string()),
            ("messages", count.to_string()),
        ],
    );
}
