//! The `GenerateChunk`s a `StreamGenerate` client sees, built in one place
//! so their shape stays what the README documents:
//! `content` (text delta), `metadata` kind=reasoning (content = delta),
//! `metadata` kind=usage (one per model call), `tool_call` (metadata lane),
//! `tool_result` (metadata tool_call_id, tool, and the tool's metadata) and
//! `done` (finish_reason; prompt/completion/total tokens of the generation).

use std::collections::HashMap;

use code_agent_proto::{GenerateChunk, ToolCall, ToolResult};

use crate::llm::Usage;
use crate::tools::ToolOutput;

fn chunk(kind: &str, session_id: &str) -> GenerateChunk {
    GenerateChunk {
        r#type: kind.to_string(),
        session_id: session_id.to_string(),
        ..Default::default()
    }
}

fn usage_metadata(usage: &Usage) -> HashMap<String, String> {
    let mut metadata = HashMap::from([
        ("prompt_tokens".to_string(), usage.prompt_tokens.to_string()),
        (
            "completion_tokens".to_string(),
            usage.completion_tokens.to_string(),
        ),
        ("total_tokens".to_string(), usage.total_tokens.to_string()),
    ]);
    // Prompt-cache counts, when the provider reports them (Anthropic).
    for (key, value) in [
        ("cache_read_tokens", usage.cache_read_tokens),
        ("cache_write_tokens", usage.cache_write_tokens),
    ] {
        if value > 0 {
            metadata.insert(key.to_string(), value.to_string());
        }
    }
    metadata
}

pub fn content(session_id: &str, delta: String) -> GenerateChunk {
    GenerateChunk {
        content: delta,
        ..chunk("content", session_id)
    }
}

pub fn reasoning(session_id: &str, delta: String) -> GenerateChunk {
    GenerateChunk {
        content: delta,
        metadata: HashMap::from([("kind".to_string(), "reasoning".to_string())]),
        ..chunk("metadata", session_id)
    }
}

pub fn usage(session_id: &str, usage: &Usage) -> GenerateChunk {
    let mut metadata = usage_metadata(usage);
    metadata.insert("kind".into(), "usage".into());
    GenerateChunk {
        metadata,
        ..chunk("metadata", session_id)
    }
}

pub fn tool_call(session_id: &str, call: ToolCall, lane: &str) -> GenerateChunk {
    GenerateChunk {
        tool_call: Some(call),
        metadata: HashMap::from([("lane".to_string(), lane.to_string())]),
        ..chunk("tool_call", session_id)
    }
}

/// The wire form of a tool's result.
pub fn tool_result_of(call_id: &str, tool: &str, output: &ToolOutput) -> ToolResult {
    let mut metadata: HashMap<String, String> = output
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    metadata.insert("tool_call_id".into(), call_id.to_string());
    metadata.insert("tool".into(), tool.to_string());
    ToolResult {
        success: output.success,
        output: output.output.clone(),
        error: output.error.clone().unwrap_or_default(),
        metadata,
    }
}

pub fn tool_result(session_id: &str, result: ToolResult) -> GenerateChunk {
    let metadata = HashMap::from([
        (
            "tool_call_id".to_string(),
            result
                .metadata
                .get("tool_call_id")
                .cloned()
                .unwrap_or_default(),
        ),
        (
            "tool".to_string(),
            result.metadata.get("tool").cloned().unwrap_or_default(),
        ),
    ]);
    GenerateChunk {
        tool_result: Some(result),
        metadata,
        ..chunk("tool_result", session_id)
    }
}

pub fn done(session_id: &str, finish_reason: &str, usage: &Usage) -> GenerateChunk {
    GenerateChunk {
        finish_reason: finish_reason.to_string(),
        metadata: usage_metadata(usage),
        ..chunk("done", session_id)
    }
}

/// The answer to a steering request.
pub fn steered(session_id: &str) -> GenerateChunk {
    GenerateChunk {
        finish_reason: "stop".into(),
        metadata: HashMap::from([("steered".to_string(), "true".to_string())]),
        ..chunk("done", session_id)
    }
}
