//! The Anthropic Messages API request body made from a provider-neutral
//! [`ChatRequest`]: system messages joined into `system`, tool results as
//! `tool_result` blocks of a user turn, tool calls as `tool_use` blocks,
//! consecutive same-role turns merged (the API wants them alternating), and
//! prompt caching (`cache_control: ephemeral`) on the system prompt and the
//! last tool, so the stable prefix of every step of a loop is read from the
//! cache.

use serde_json::{Value, json};

use super::types::{ChatMessage, ChatRequest, Role};

/// `max_tokens` when the request sets none (the API requires one).
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The thinking budget for a `reasoning_effort`, if thinking is asked for.
fn thinking_budget(effort: Option<&str>) -> Option<u32> {
    match effort? {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(16384),
        _ => None,
    }
}

/// The JSON body of `POST /v1/messages` (streaming).
pub(crate) fn request_body(request: &ChatRequest) -> Value {
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .filter(|text| !text.trim().is_empty())
        .collect();
    let messages = messages(&request.messages);
    // Extended thinking only when this call starts a new turn (the last
    // message is the user's): the engine does not keep thinking signatures,
    // and the API refuses a tool loop's continuation with thinking enabled
    // whose earlier tool_use turn lacks its thinking block.
    let continues_tool_loop = request
        .messages
        .last()
        .is_some_and(|m| m.role == Role::Tool);
    let budget =
        thinking_budget(request.reasoning_effort.as_deref()).filter(|_| !continues_tool_loop);
    let mut max_tokens = request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = json!([{
            "type": "text",
            "text": system.join("\n\n"),
            "cache_control": {"type": "ephemeral"}
        }]);
    }
    if !request.tools.is_empty() {
        let count = request.tools.len();
        let tools: Vec<Value> = request
            .tools
            .iter()
            .enumerate()
            .map(|(i, tool)| {
                let mut spec = json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                });
                if i + 1 == count {
                    spec["cache_control"] = json!({"type": "ephemeral"});
                }
                spec
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    match budget {
        Some(budget) => {
            // The budget must stay below max_tokens; temperature must be unset.
            max_tokens = max_tokens.max(budget + 4096);
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        None => {
            if let Some(t) = request.temperature {
                body["temperature"] = json!(t);
            }
        }
    }
    body["max_tokens"] = json!(max_tokens);
    body
}

/// The conversation as alternating `user`/`assistant` turns of blocks.
fn messages(history: &[ChatMessage]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in history {
        let (role, blocks) = match message.role {
            Role::System => continue,
            Role::User => ("user", text_block(&message.content).into_iter().collect()),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.clone().unwrap_or_default(),
                    "content": if message.content.is_empty() { "(no output)" } else { message.content.as_str() },
                })],
            ),
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&message.content).into_iter().collect();
                for call in &message.tool_calls {
                    let input: Value = serde_json::from_str(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": input,
                    }));
                }
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => {
                // Tool results come first in a user turn, as the API wants.
                existing.extend(blocks);
            }
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::types::{ToolCallRequest, ToolSpec};

    #[test]
    fn maps_a_tool_loop_with_caching_and_alternation() {
        let mut assistant = ChatMessage::assistant("let me look");
        assistant.tool_calls = vec![
            ToolCallRequest {
                id: "t1".into(),
                name: "read".into(),
                arguments: r#"{"path":"a"}"#.into(),
            },
            ToolCallRequest {
                id: "t2".into(),
                name: "ls".into(),
                arguments: "not json".into(),
            },
        ];
        let request = ChatRequest {
            model: "claude-x".into(),
            messages: vec![
                ChatMessage::system("be brief"),
                ChatMessage::user("hi"),
                assistant,
                ChatMessage::tool("t1", "content of a"),
                ChatMessage::tool("t2", ""),
            ],
            tools: vec![
                ToolSpec {
                    name: "read".into(),
                    description: "r".into(),
                    parameters: json!({"type": "object"}),
                },
                ToolSpec {
                    name: "ls".into(),
                    description: "l".into(),
                    parameters: json!({"type": "object"}),
                },
            ],
            temperature: Some(0.5),
            reasoning_effort: Some("high".into()),
            ..ChatRequest::default()
        };
        let body = request_body(&request);
        assert_eq!(body["system"][0]["text"], "be brief");
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert!(body["tools"][0].get("cache_control").is_none());
        assert_eq!(body["tools"][1]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["tools"][1]["input_schema"]["type"], "object");
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][1]["input"]["path"], "a");
        assert_eq!(messages[1]["content"][2]["input"], json!({}));
        assert_eq!(messages[2]["role"], "user");
        assert_eq!(messages[2]["content"][0]["tool_use_id"], "t1");
        assert_eq!(messages[2]["content"][1]["content"], "(no output)");
        // A tool loop's continuation: no thinking, so temperature goes.
        assert!(body.get("thinking").is_none());
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);

        let fresh = ChatRequest {
            messages: vec![ChatMessage::user("think")],
            ..request
        };
        let body = request_body(&fresh);
        assert_eq!(body["thinking"]["budget_tokens"], 16384);
        assert!(body.get("temperature").is_none());
        assert_eq!(body["max_tokens"], 16384 + 4096);
    }
}
