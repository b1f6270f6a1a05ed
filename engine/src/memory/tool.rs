//! The model's memory tools: `memory_store` saves a memory in the session's
//! store, `memory_search` finds memories ranked as `SearchMemories` does.
//! Both run on the query lane (they touch neither the workspace nor any
//! process) and go through permissions and confirmation like every tool.

use std::sync::Arc;

use async_trait::async_trait;
use code_agent_proto::{MemoryItem, MemoryType};
use serde_json::{Value, json};

use super::{MemoryStore, SessionMemory, input};
use crate::tools::args::{object, object_schema, optional_str, optional_u64};
use crate::tools::{Lane, Tool, ToolContext, ToolInfo, ToolOutput};

/// `memory_store`: remembers something for later turns of this session.
pub struct MemoryStoreTool;
/// `memory_search`: finds remembered things.
pub struct MemorySearchTool;

static STORE_INFO: ToolInfo = ToolInfo {
    name: "memory_store",
    description: "Remember something for later in this session (facts about the project, how to \
                  do a task, what happened, or notes for the task at hand). Returns the memory id.",
    lane: Lane::Query,
    parameters: store_parameters,
};

static SEARCH_INFO: ToolInfo = ToolInfo {
    name: "memory_search",
    description: "Search this session's memories by words and/or tags; the best matches \
                  (relevance, importance, recency) come first.",
    lane: Lane::Query,
    parameters: search_parameters,
};

fn store_parameters() -> Value {
    object_schema(
        json!({
            "content": {"type": "string", "description": "What to remember."},
            "memory_type": {"type": "string", "enum": ["episodic", "semantic", "procedural", "working"],
                            "description": "episodic = what happened, semantic = facts, procedural = how to, working = the task at hand (default episodic)."},
            "importance": {"type": "number", "minimum": 0, "maximum": 1, "description": "0..1 (default 0.5)."},
            "tags": {"type": "array", "items": {"type": "string"}}
        }),
        &["content"],
    )
}

fn search_parameters() -> Value {
    object_schema(
        json!({
            "query": {"type": "string", "description": "Words to look for."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Memories must carry all of these tags."},
            "min_importance": {"type": "number", "minimum": 0, "maximum": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Default 10."}
        }),
        &[],
    )
}

fn store_of(ctx: &ToolContext) -> Result<Arc<MemoryStore>, String> {
    ctx.extensions
        .get::<SessionMemory>()
        .ok_or_else(|| "memory is not available in this session".to_string())?
        .store()
        .map_err(|e| e.to_string())
}

fn tags(args: &Value) -> Result<Vec<String>, String> {
    match args.get("tags") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("argument `tags[{i}]` must be a string"))
            })
            .collect(),
        Some(_) => Err("argument `tags` must be an array of strings".into()),
    }
}

fn number(args: &Value, key: &str) -> Result<Option<f32>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|n| Some(n as f32))
            .ok_or_else(|| format!("argument `{key}` must be a number")),
    }
}

#[async_trait]
impl Tool for MemoryStoreTool {
    fn info(&self) -> &'static ToolInfo {
        &STORE_INFO
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let item = (|| {
            object(&args)?;
            let content = crate::tools::args::required_str(&args, "content")?.to_string();
            let memory_type = match optional_str(&args, "memory_type")? {
                Some(name) => {
                    input::memory_type(name).map_err(|e| format!("invalid argument: {e}"))?
                }
                None => MemoryType::Episodic,
            };
            let item = MemoryItem {
                content,
                memory_type: memory_type as i32,
                importance: number(&args, "importance")?.unwrap_or(0.5),
                tags: tags(&args)?,
                ..Default::default()
            };
            input::prepare(item, crate::session::message::now_ms(), "argument ")
        })();
        let (item, store) = match (item, store_of(ctx)) {
            (Ok(item), Ok(store)) => (item, store),
            (Err(e), _) | (_, Err(e)) => return ToolOutput::err(e),
        };
        let id = item.id.clone();
        match tokio::task::spawn_blocking(move || store.store(&item)).await {
            Ok(Ok(id)) => ToolOutput::ok(format!("stored memory {id}")).with("memory_id", id),
            Ok(Err(e)) => ToolOutput::err(e.to_string()).with("memory_id", id),
            Err(e) => ToolOutput::err(format!("memory store failed: {e}")),
        }
    }
}

#[async_trait]
impl Tool for MemorySearchTool {
    fn info(&self) -> &'static ToolInfo {
        &SEARCH_INFO
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let query = (|| {
            object(&args)?;
            let limit = optional_u64(&args, "limit")?.unwrap_or(10).min(100) as u32;
            input::query(
                optional_str(&args, "query")?.map(str::to_string),
                tags(&args)?,
                number(&args, "min_importance")?,
                false,
                limit,
            )
            .map_err(|e| format!("invalid argument: {e}"))
        })();
        let (query, store) = match (query, store_of(ctx)) {
            (Ok(query), Ok(store)) => (query, store),
            (Err(e), _) | (_, Err(e)) => return ToolOutput::err(e),
        };
        let now = crate::session::message::now_ms();
        match tokio::task::spawn_blocking(move || store.search(&query, now)).await {
            Ok(Ok((items, total))) => {
                ToolOutput::ok(render(&items, total)).with("count", items.len().to_string())
            }
            Ok(Err(e)) => ToolOutput::err(e.to_string()),
            Err(e) => ToolOutput::err(format!("memory search failed: {e}")),
        }
    }
}

fn render(items: &[MemoryItem], total: u32) -> String {
    if items.is_empty() {
        return "no memory matches".to_string();
    }
    let mut out = format!(
        "{} of {total} matching memories, best first:\n",
        items.len()
    );
    for item in items {
        let kind = MemoryType::try_from(item.memory_type)
            .map(|t| {
                t.as_str_name()
                    .trim_start_matches("MEMORY_TYPE_")
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "- [{}] ({kind}, importance {:.2}{}) {}\n",
            item.id,
            item.importance,
            if item.tags.is_empty() {
                String::new()
            } else {
                format!(", tags {}", item.tags.join(","))
            },
            item.content
        ));
    }
    out
}

/// `registry` with the memory tools added.
pub fn with_memory_tools(mut registry: crate::tools::ToolRegistry) -> crate::tools::ToolRegistry {
    registry.push(Arc::new(MemoryStoreTool));
    registry.push(Arc::new(MemorySearchTool));
    registry
}
