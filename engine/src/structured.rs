//! `GenerateStructured`: the model answers with JSON that must validate
//! against the caller's JSON Schema. The schema goes both in the request's
//! `response_format` and in the prompt; invalid output is sent back once
//! with the validation errors, a second failure is an error. The streamed
//! variant forwards the raw text as it arrives and ends with the validated
//! document.

use std::sync::Arc;

use code_agent_proto::agent_event::EventType;
use code_agent_proto::{GenerateStructuredChunk, GenerateStructuredResponse, Usage};
use tokio::sync::mpsc;
use tonic::Status;

use crate::engine::EngineInner;
use crate::llm::{ChatMessage, LlmError};
use crate::model::{self, Delta};
use crate::prompt;
use crate::session::Session;
use crate::session::generation::Lease;
use crate::session::message::{MessageRole, StoredMessage};

/// Where partial output goes (bounded).
pub type PartialSink = mpsc::Sender<Result<GenerateStructuredChunk, Status>>;

/// A parsed, compiled schema.
pub struct Schema {
    text: String,
    value: serde_json::Value,
    validator: jsonschema::Validator,
}

impl Schema {
    /// InvalidArgument naming `schema` when it is not a usable JSON Schema.
    pub fn parse(text: &str) -> Result<Self, Status> {
        if text.trim().is_empty() {
            return Err(Status::invalid_argument("schema: required"));
        }
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Status::invalid_argument(format!("schema: not JSON: {e}")))?;
        let validator = jsonschema::validator_for(&value).map_err(|e| {
            Status::invalid_argument(format!("schema: not a valid JSON Schema: {e}"))
        })?;
        Ok(Self {
            text: text.to_string(),
            value,
            validator,
        })
    }

    /// The document in `answer`, or why it does not fit.
    pub fn check(&self, answer: &str) -> Result<serde_json::Value, Vec<String>> {
        let doc: serde_json::Value = serde_json::from_str(strip_fences(answer))
            .map_err(|e| vec![format!("the answer is not valid JSON: {e}")])?;
        let errors: Vec<String> = self
            .validator
            .iter_errors(&doc)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("at {path}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(doc)
        } else {
            Err(errors)
        }
    }
}

/// Drops a Markdown code fence around the answer, if any.
fn strip_fences(answer: &str) -> &str {
    let trimmed = answer.trim();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    let rest = rest.split_once('\n').map_or("", |(_, body)| body);
    rest.trim_end().strip_suffix("```").unwrap_or(rest).trim()
}

/// Runs a structured generation in `session` (its slot held by `lease`).
pub async fn run(
    engine: Arc<EngineInner>,
    session: Arc<Session>,
    lease: Lease,
    input: Vec<StoredMessage>,
    schema: Schema,
    partial: Option<PartialSink>,
) -> Result<GenerateStructuredResponse, Status> {
    let cancel = lease.cancel.clone();
    let workspace = engine.workspace_of(&session).ok();
    let llm = session.read(|d| d.config.llm.clone());
    let model = engine.models.for_session(&engine.providers, llm.as_ref())?;
    let (base, history) = prompt::conversation(
        &session,
        workspace.as_deref().unwrap_or(std::path::Path::new(".")),
    );
    let mut messages = vec![ChatMessage::system(format!(
        "{base}\n\nAnswer with one JSON document that validates against this JSON Schema, and nothing else:\n{}",
        schema.text
    ))];
    messages.extend(history);
    messages.extend(input.iter().map(StoredMessage::to_chat));
    engine.events.emit(
        EventType::GenerationStarted,
        Some(&session.id),
        "structured generation started",
        [("kind", "structured"), ("model", model.model.as_str())],
    );
    let mut total = Usage::default();
    let mut last_errors = Vec::new();
    for attempt in 1..=2u32 {
        let request = model.request(
            messages.clone(),
            Vec::new(),
            None,
            Some(schema.value.clone()),
        );
        let session_id = session.id.clone();
        let sink = partial.clone();
        let completion = model::complete(&model, request, &cancel, |delta| {
            let sink = sink.clone();
            let session_id = session_id.clone();
            async move {
                if let (Some(sink), Delta::Content(data)) = (sink, delta) {
                    let _ = sink
                        .send(Ok(GenerateStructuredChunk {
                            session_id,
                            data,
                            done: false,
                        }))
                        .await;
                }
            }
        })
        .await
        .map_err(|e| match e {
            LlmError::Cancelled => Status::cancelled("generation cancelled"),
            other => Status::from(other),
        })?;
        if let Some(usage) = completion.usage {
            total.prompt_tokens += usage.prompt_tokens;
            total.completion_tokens += usage.completion_tokens;
            total.total_tokens += usage.total_tokens;
            session.update(|d| {
                d.usage.prompt_tokens = usage.prompt_tokens;
                d.usage.completion_tokens = usage.completion_tokens;
            });
        }
        let answer = completion.message.content;
        match schema.check(&answer) {
            Ok(doc) => {
                let data = doc.to_string();
                let mut reply = StoredMessage::text(MessageRole::Assistant, data.clone());
                reply.metadata.insert("kind".into(), "structured".into());
                session.append(input.into_iter().chain([reply]));
                engine.persist_or_report(&session).await;
                drop(lease);
                engine.events.emit(
                    EventType::GenerationCompleted,
                    Some(&session.id),
                    "structured generation completed",
                    [
                        ("kind", "structured".to_string()),
                        ("attempts", attempt.to_string()),
                        ("total_tokens", total.total_tokens.to_string()),
                    ],
                );
                return Ok(GenerateStructuredResponse {
                    session_id: session.id.clone(),
                    data,
                    usage: Some(total),
                    metadata: [
                        ("attempts".to_string(), attempt.to_string()),
                        ("model".to_string(), model.model.clone()),
                    ]
                    .into_iter()
                    .collect(),
                });
            }
            Err(errors) => {
                messages.push(ChatMessage::assistant(answer));
                messages.push(ChatMessage::user(format!(
                    "Your answer does not validate against the schema:\n- {}\nAnswer again with only the corrected JSON document.",
                    errors.join("\n- ")
                )));
                last_errors = errors;
            }
        }
    }
    let message = format!(
        "the model's answer did not validate against the schema after a retry: {}",
        last_errors.join("; ")
    );
    engine.events.emit(
        EventType::Error,
        Some(&session.id),
        &message,
        [("kind", "structured")],
    );
    Err(Status::internal(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_checks_answers() {
        let schema = Schema::parse(
            r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#,
        )
        .unwrap();
        assert_eq!(schema.check("```json\n{\"n\": 3}\n```").unwrap()["n"], 3);
        let errors = schema.check(r#"{"n":"x"}"#).unwrap_err();
        assert!(errors[0].contains("/n"), "{errors:?}");
        assert!(schema.check("nope").unwrap_err()[0].contains("not valid JSON"));
        assert!(Schema::parse("{").is_err());
        assert!(Schema::parse(r#"{"type": 12}"#).is_err());
    }
}
