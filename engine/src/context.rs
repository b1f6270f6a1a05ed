//! Context management: usage from the token counts the model reported,
//! compaction (older messages summarised through the model into one
//! message, the last turns kept intact), automatic compaction when the last
//! call came close to `max_context_length`, and clearing.

use code_agent_proto::ContextUsage;
use code_agent_proto::agent_event::EventType;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::engine::EngineInner;
use crate::llm::{ChatMessage, LlmError};
use crate::model::{self, TurnModel};
use crate::session::Session;
use crate::session::message::{MessageRole, StoredMessage};
use crate::session::record::UsageRecord;

/// User turns kept word for word by a compaction.
pub const KEEP_TURNS: usize = 2;
/// Auto-compaction starts above this share of `max_context_length`.
pub const AUTO_COMPACT_RATIO: f64 = 0.8;
/// Characters of one message kept in the transcript sent for summary.
const MAX_MESSAGE_CHARS: usize = 4_000;
/// Characters of the whole transcript (the oldest part is cut first).
const MAX_TRANSCRIPT_CHARS: usize = 200_000;

/// The instruction of a summary call.
pub const SUMMARY_PROMPT: &str = "You compact the history of a coding-agent conversation. \
Summarise the transcript below so the agent can continue the work without it: the user's goals \
and constraints, decisions taken, files read or changed (with paths), commands run and their \
outcomes, open problems and next steps. Be factual and concise; do not invent anything.";

/// Before and after one compaction.
#[derive(Debug, Clone)]
pub struct Compaction {
    pub before: ContextUsage,
    pub after: ContextUsage,
    /// False when there was nothing old enough to summarise.
    pub compacted: bool,
}

/// Where the kept part starts: the `KEEP_TURNS`-th last user message.
fn split_point(messages: &[StoredMessage]) -> Option<usize> {
    let users: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == MessageRole::User && !is_summary(m))
        .map(|(i, _)| i)
        .collect();
    let cut = *users.get(users.len().checked_sub(KEEP_TURNS)?)?;
    let old_conversation = messages[..cut]
        .iter()
        .any(|m| m.role != MessageRole::System && !is_summary(m));
    old_conversation.then_some(cut)
}

fn is_summary(message: &StoredMessage) -> bool {
    message.metadata.get("kind").is_some_and(|k| k == "summary")
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head} […]")
}

/// The transcript a summary call reads.
pub fn transcript(messages: &[StoredMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        match m.role {
            MessageRole::Tool => {
                let tool = m.metadata.get("tool").map(String::as_str).unwrap_or("tool");
                let status = if m.is_error { "error" } else { "result" };
                out.push_str(&format!(
                    "[{tool} {status}]\n{}\n\n",
                    clip(&m.content, MAX_MESSAGE_CHARS)
                ));
            }
            role => {
                if !m.content.is_empty() {
                    out.push_str(&format!(
                        "[{}]\n{}\n\n",
                        role.as_str(),
                        clip(&m.content, MAX_MESSAGE_CHARS)
                    ));
                }
                for call in &m.tool_calls {
                    out.push_str(&format!(
                        "[assistant calls {}] {}\n\n",
                        call.name,
                        clip(&call.arguments, MAX_MESSAGE_CHARS)
                    ));
                }
            }
        }
    }
    let len = out.chars().count();
    if len > MAX_TRANSCRIPT_CHARS {
        out = out.chars().skip(len - MAX_TRANSCRIPT_CHARS).collect();
    }
    out
}

fn char_count(messages: &[StoredMessage]) -> u64 {
    messages
        .iter()
        .map(|m| {
            (m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.arguments.len())
                    .sum::<usize>()) as u64
        })
        .sum()
}

/// Summarises everything before the last [`KEEP_TURNS`] turns into one
/// message. The caller holds the session's generation slot.
pub async fn compact(
    session: &Session,
    model: &TurnModel,
    cancel: &CancellationToken,
) -> Result<Compaction, Status> {
    let (messages, before) = session.read(|d| (d.messages.clone(), d.context_usage()));
    let Some(cut) = split_point(&messages) else {
        return Ok(Compaction {
            after: before,
            before,
            compacted: false,
        });
    };
    let (old, kept) = messages.split_at(cut);
    let (old_system, old_conversation): (Vec<_>, Vec<_>) = old
        .iter()
        .cloned()
        .partition(|m| m.role == MessageRole::System);
    let request = model.request(
        vec![
            ChatMessage::system(SUMMARY_PROMPT),
            ChatMessage::user(transcript(&old_conversation)),
        ],
        Vec::new(),
        None,
        None,
    );
    let completion = model::complete(model, request, cancel, |_| async {})
        .await
        .map_err(|e| match e {
            LlmError::Cancelled => Status::cancelled("compaction cancelled"),
            other => Status::from(other),
        })?;
    let summary_text = completion.message.content.trim().to_string();
    if summary_text.is_empty() {
        return Err(Status::internal("the model returned an empty summary"));
    }
    let mut summary = StoredMessage::text(
        MessageRole::User,
        format!("[Summary of the earlier conversation]\n{summary_text}"),
    );
    summary.metadata.insert("kind".into(), "summary".into());
    summary.metadata.insert(
        "summarized_messages".into(),
        old_conversation.len().to_string(),
    );
    let mut new_messages = old_system;
    new_messages.push(summary);
    new_messages.extend_from_slice(kept);
    // No real count exists until the next call: scale the last one by size.
    let (before_chars, after_chars) = (char_count(&messages).max(1), char_count(&new_messages));
    let estimate = u64::from(before.total_tokens) * after_chars / before_chars;
    let after = session.update(|d| {
        d.messages = new_messages;
        d.history_epoch += 1;
        d.usage = UsageRecord {
            prompt_tokens: u32::try_from(estimate).unwrap_or(u32::MAX),
            completion_tokens: 0,
        };
        d.context_usage()
    });
    Ok(Compaction {
        before,
        after,
        compacted: true,
    })
}

/// Whether the last call used more than [`AUTO_COMPACT_RATIO`] of the
/// session's `max_context_length` (with `auto_compact` on).
pub fn wants_auto_compact(session: &Session) -> bool {
    session.read(|d| {
        let max = d.config.max_context_length;
        let used = d
            .usage
            .prompt_tokens
            .saturating_add(d.usage.completion_tokens);
        d.config.auto_compact && max > 0 && f64::from(used) > f64::from(max) * AUTO_COMPACT_RATIO
    })
}

/// Compacts when [`wants_auto_compact`]; failures become a WARNING event.
pub async fn auto_compact(
    engine: &EngineInner,
    session: &Session,
    model: &TurnModel,
    cancel: &CancellationToken,
) {
    if !wants_auto_compact(session) {
        return;
    }
    match compact(session, model, cancel).await {
        Ok(c) if c.compacted => {
            engine.persist_or_report(session).await;
            engine.events.emit(
                EventType::Info,
                Some(&session.id),
                "context compacted automatically",
                [
                    ("kind", "auto_compact".to_string()),
                    ("before_tokens", c.before.total_tokens.to_string()),
                    ("after_tokens", c.after.total_tokens.to_string()),
                    ("before_messages", c.before.message_count.to_string()),
                    ("after_messages", c.after.message_count.to_string()),
                ],
            );
        }
        Ok(_) => {}
        Err(status) => engine.events.emit(
            EventType::Warning,
            Some(&session.id),
            &format!("automatic compaction failed: {}", status.message()),
            [("kind", "auto_compact")],
        ),
    }
}

/// Empties the history and the usage.
pub fn clear(session: &Session) {
    session.update(|d| {
        d.messages.clear();
        d.history_epoch += 1;
        d.usage = UsageRecord::default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: MessageRole, text: &str) -> StoredMessage {
        StoredMessage::text(role, text)
    }

    #[test]
    fn split_keeps_the_last_turns() {
        use MessageRole::*;
        let history = vec![
            msg(System, "sys"),
            msg(User, "u1"),
            msg(Assistant, "a1"),
            msg(User, "u2"),
            msg(Assistant, "a2"),
            msg(User, "u3"),
            msg(Assistant, "a3"),
        ];
        assert_eq!(split_point(&history), Some(3));
        assert_eq!(
            split_point(&history[..5]),
            None,
            "only two turns: nothing old"
        );
        let t = transcript(&history[1..3]);
        assert!(
            t.contains("[user]\nu1") && t.contains("[assistant]\na1"),
            "{t}"
        );
    }
}
