//! Generation RPCs: `StreamGenerate` (the agent loop streamed), `Generate`
//! (the same loop collected into one response), their steering extension
//! (metadata `steer = "true"` on the first message joins a running loop),
//! and the structured variants.

use std::collections::HashMap;

use code_agent_proto::*;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::Service;
use crate::agent_loop::{self, Turn};
use crate::chunks;
use crate::session::Session;
use crate::session::generation::{Lease, SteerRefused};
use crate::session::message::StoredMessage;
use crate::structured::{self, Schema};

/// Reasoning levels accepted in `metadata.reasoning_effort`.
const EFFORTS: [&str; 4] = ["minimal", "low", "medium", "high"];

/// A generate request's messages and per-turn options.
struct Input {
    messages: Vec<StoredMessage>,
    steer: bool,
    reasoning_effort: Option<String>,
}

fn parse_input(messages: &[Message]) -> Result<Input, Status> {
    let first = messages
        .first()
        .ok_or_else(|| Status::invalid_argument("messages: at least one message is required"))?;
    let steer = first
        .metadata
        .get("steer")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let reasoning_effort = match first.metadata.get("reasoning_effort").map(|e| e.trim()) {
        None | Some("") => None,
        Some(effort) => {
            let effort = effort.to_ascii_lowercase();
            if !EFFORTS.contains(&effort.as_str()) {
                return Err(Status::invalid_argument(format!(
                    "messages[0].metadata.reasoning_effort: one of {}, got {effort:?}",
                    EFFORTS.join(", ")
                )));
            }
            Some(effort)
        }
    };
    let messages = messages
        .iter()
        .enumerate()
        .map(|(i, m)| StoredMessage::from_request(m, &format!("messages[{i}]")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Status::invalid_argument)?;
    Ok(Input {
        messages,
        steer,
        reasoning_effort,
    })
}

fn busy(session: &Session, kind: &str) -> Status {
    Status::failed_precondition(format!(
        "session {} is busy: a {kind} is running; Cancel it, or send with metadata steer=\"true\" to steer a running generation",
        session.id
    ))
}

/// Either the loop was steered or a lease to run a new generation.
enum Start {
    Steered,
    Run(Lease),
}

/// Cancels `cancel` when the client behind `tx` goes away before `done`.
fn cancel_on_disconnect<T: Send + 'static>(
    tx: mpsc::Sender<T>,
    cancel: CancellationToken,
) -> CancellationToken {
    let done = CancellationToken::new();
    let finished = done.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = tx.closed() => cancel.cancel(),
            () = finished.cancelled() => {}
        }
    });
    done
}

impl Service {
    fn start(&self, session: &Session, input: &Input) -> Result<Start, Status> {
        if self.engine.shutdown.is_cancelled() {
            return Err(Status::unavailable("the engine is shutting down"));
        }
        if input.steer {
            match session.generation.steer(input.messages.clone()) {
                Ok(()) => return Ok(Start::Steered),
                // Steering text is meant for a loop that runs; starting a new
                // generation with it would answer a turn nobody is waiting for.
                Err(SteerRefused::Idle) => {
                    return Err(Status::failed_precondition(format!(
                        "session {}: no generation is running to steer",
                        session.id
                    )));
                }
                Err(SteerRefused::NotSteerable(kind)) => return Err(busy(session, kind)),
                Err(SteerRefused::Full) => {
                    return Err(Status::resource_exhausted(
                        "steering queue of the running generation is full",
                    ));
                }
            }
        }
        match session
            .generation
            .begin("generation", true, &self.engine.shutdown)
        {
            Ok(lease) => Ok(Start::Run(lease)),
            Err(kind) if input.steer => match session.generation.steer(input.messages.clone()) {
                Ok(()) => Ok(Start::Steered),
                Err(_) => Err(busy(session, kind)),
            },
            Err(kind) => Err(busy(session, kind)),
        }
    }

    /// Starts the loop; chunks arrive on the returned receiver.
    fn launch(
        &self,
        session: std::sync::Arc<Session>,
        lease: Lease,
        input: Input,
    ) -> mpsc::Receiver<Result<GenerateChunk, Status>> {
        let (tx, rx) = mpsc::channel(self.engine.config.chunk_buffer.max(1));
        let done = cancel_on_disconnect(tx.clone(), lease.cancel.clone());
        let turn = Turn {
            engine: self.engine.clone(),
            session,
            lease,
            input: input.messages,
            reasoning_effort: input.reasoning_effort,
            sink: tx,
        };
        tokio::spawn(async move {
            agent_loop::run(turn).await;
            done.cancel();
        });
        rx
    }

    pub(super) async fn stream_generate(
        &self,
        request: GenerateRequest,
    ) -> Result<ReceiverStream<Result<GenerateChunk, Status>>, Status> {
        let session = self.session(&request.session_id)?;
        let input = parse_input(&request.messages)?;
        match self.start(&session, &input)? {
            Start::Steered => {
                let (tx, rx) = mpsc::channel(1);
                let _ = tx.try_send(Ok(chunks::steered(&session.id)));
                Ok(ReceiverStream::new(rx))
            }
            Start::Run(lease) => Ok(ReceiverStream::new(self.launch(session, lease, input))),
        }
    }

    pub(super) async fn generate(
        &self,
        request: GenerateRequest,
    ) -> Result<GenerateResponse, Status> {
        let session = self.session(&request.session_id)?;
        let input = parse_input(&request.messages)?;
        let lease = match self.start(&session, &input)? {
            Start::Steered => {
                return Ok(GenerateResponse {
                    session_id: session.id.clone(),
                    finish_reason: "stop".into(),
                    metadata: HashMap::from([("steered".to_string(), "true".to_string())]),
                    ..Default::default()
                });
            }
            Start::Run(lease) => lease,
        };
        // A client that goes away drops this future: stop the generation.
        let guard = lease.cancel.clone().drop_guard();
        let mut rx = self.launch(session.clone(), lease, input);
        let mut response = collect(&session.id, &mut rx).await;
        guard.disarm();
        if let Ok(r) = &mut response {
            r.session_id = session.id.clone();
        }
        response
    }

    fn structured_start(
        &self,
        request: &GenerateStructuredRequest,
    ) -> Result<(std::sync::Arc<Session>, Lease, Vec<StoredMessage>, Schema), Status> {
        let session = self.session(&request.session_id)?;
        let schema = Schema::parse(&request.schema)?;
        let input = parse_input(&request.messages)?;
        if self.engine.shutdown.is_cancelled() {
            return Err(Status::unavailable("the engine is shutting down"));
        }
        let lease = session
            .generation
            .begin("structured generation", false, &self.engine.shutdown)
            .map_err(|kind| busy(&session, kind))?;
        Ok((session, lease, input.messages, schema))
    }

    pub(super) async fn generate_structured(
        &self,
        request: GenerateStructuredRequest,
    ) -> Result<GenerateStructuredResponse, Status> {
        let (session, lease, messages, schema) = self.structured_start(&request)?;
        let guard = lease.cancel.clone().drop_guard();
        let result =
            structured::run(self.engine.clone(), session, lease, messages, schema, None).await;
        guard.disarm();
        result
    }

    pub(super) async fn stream_generate_structured(
        &self,
        request: GenerateStructuredRequest,
    ) -> Result<ReceiverStream<Result<GenerateStructuredChunk, Status>>, Status> {
        let (session, lease, messages, schema) = self.structured_start(&request)?;
        let (tx, rx) = mpsc::channel(self.engine.config.chunk_buffer.max(1));
        let done = cancel_on_disconnect(tx.clone(), lease.cancel.clone());
        let engine = self.engine.clone();
        tokio::spawn(async move {
            let id = session.id.clone();
            let result =
                structured::run(engine, session, lease, messages, schema, Some(tx.clone())).await;
            let last = result.map(|r| GenerateStructuredChunk {
                session_id: id,
                data: r.data,
                done: true,
            });
            let _ = tx.send(last).await;
            done.cancel();
        });
        Ok(ReceiverStream::new(rx))
    }
}

/// Folds a generation's chunks into one `GenerateResponse`.
async fn collect(
    session_id: &str,
    rx: &mut mpsc::Receiver<Result<GenerateChunk, Status>>,
) -> Result<GenerateResponse, Status> {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut response = GenerateResponse {
        session_id: session_id.to_string(),
        ..Default::default()
    };
    while let Some(chunk) = rx.recv().await {
        let chunk = chunk?;
        match chunk.r#type.as_str() {
            "content" => text.push_str(&chunk.content),
            "metadata" if chunk.metadata.get("kind").is_some_and(|k| k == "reasoning") => {
                reasoning.push_str(&chunk.content);
            }
            "tool_call" => calls.extend(chunk.tool_call),
            "tool_result" => {
                if let Some(result) = chunk.tool_result {
                    let id = result
                        .metadata
                        .get("tool_call_id")
                        .cloned()
                        .unwrap_or_default();
                    if let Some(call) = calls.iter_mut().rev().find(|c| c.id == id) {
                        call.result = Some(result);
                    }
                }
            }
            "done" => {
                let count = |key: &str| {
                    chunk
                        .metadata
                        .get(key)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0)
                };
                response.usage = Some(Usage {
                    prompt_tokens: count("prompt_tokens"),
                    completion_tokens: count("completion_tokens"),
                    total_tokens: count("total_tokens"),
                });
                response.finish_reason = chunk.finish_reason;
            }
            _ => {}
        }
    }
    if response.finish_reason.is_empty() {
        return Err(Status::internal("the generation ended without finishing"));
    }
    if !reasoning.is_empty() {
        response.metadata.insert("reasoning".into(), reasoning);
    }
    response.message = Some(Message {
        role: "assistant".into(),
        content: text,
        metadata: HashMap::new(),
    });
    response.tool_calls = calls;
    Ok(response)
}
