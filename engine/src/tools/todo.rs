//! The `todo` tool: the model replaces the session's todo list (the same
//! list `GetTodos`/`SetTodos` expose) and gets it back.
//!
//! It runs on the query lane: it only changes the session's in-memory list,
//! touches neither the workspace nor any process, so it needs no
//! confirmation and may run beside reads.

use async_trait::async_trait;
use code_agent_proto::Todo;
use serde_json::{Value, json};

use super::args::{object, object_schema};
use super::{Lane, Tool, ToolContext, ToolInfo, ToolOutput};

/// Items one list may hold.
pub const MAX_TODOS: usize = 200;
const STATUSES: [&str; 4] = ["pending", "in_progress", "completed", "cancelled"];
const PRIORITIES: [&str; 3] = ["high", "medium", "low"];

/// `todo`: replaces the session's todo list.
pub struct TodoTool;

static INFO: ToolInfo = ToolInfo {
    name: "todo",
    description: "Replace your todo list for this session with the given items (send the whole \
                  list every time). Use it to plan multi-step work and track progress.",
    lane: Lane::Query,
    parameters,
};

fn parameters() -> Value {
    object_schema(
        json!({
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "content": {"type": "string"},
                        "status": {"type": "string", "enum": STATUSES},
                        "priority": {"type": "string", "enum": PRIORITIES}
                    },
                    "required": ["id", "content", "status"]
                }
            }
        }),
        &["todos"],
    )
}

#[async_trait]
impl Tool for TodoTool {
    fn info(&self) -> &'static ToolInfo {
        &INFO
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let todos = match object(&args).and_then(|()| parse_todos(&args)) {
            Ok(todos) => todos,
            Err(err) => return ToolOutput::err(err),
        };
        let listed = render(&todos);
        let count = todos.len();
        match ctx.todos.lock() {
            Ok(mut list) => *list = todos,
            Err(poisoned) => *poisoned.into_inner() = todos,
        }
        ToolOutput::ok(listed).with("count", count.to_string())
    }
}

fn parse_todos(args: &Value) -> Result<Vec<Todo>, String> {
    let items = match args.get("todos") {
        Some(Value::Array(items)) => items,
        Some(_) => return Err("argument `todos` must be an array".to_string()),
        None => return Err("missing required argument `todos`".to_string()),
    };
    let field = |item: &Value, index: usize, key: &str| -> Result<String, String> {
        match item.get(key) {
            Some(Value::String(text)) => Ok(text.clone()),
            None | Some(Value::Null) => Ok(String::new()),
            Some(_) => Err(format!("todos[{index}].{key} must be a string")),
        }
    };
    let mut todos = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        if !item.is_object() {
            return Err(format!("todos[{index}] must be an object"));
        }
        let mut priority = field(item, index, "priority")?;
        if priority.is_empty() {
            priority = "medium".to_string();
        }
        todos.push(Todo {
            id: field(item, index, "id")?,
            content: field(item, index, "content")?,
            status: field(item, index, "status")?,
            priority,
        });
    }
    validate_todos(&todos)?;
    Ok(todos)
}

/// Checks a list (from the tool or from `SetTodos`): non-empty unique ids,
/// content present, known status and priority, at most `MAX_TODOS` (200).
pub fn validate_todos(todos: &[Todo]) -> Result<(), String> {
    if todos.len() > MAX_TODOS {
        return Err(format!(
            "todos: at most {MAX_TODOS} items (got {})",
            todos.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (index, todo) in todos.iter().enumerate() {
        if todo.id.trim().is_empty() {
            return Err(format!("todos[{index}].id is empty"));
        }
        if !seen.insert(todo.id.as_str()) {
            return Err(format!("todos[{index}].id {:?} is used twice", todo.id));
        }
        if todo.content.trim().is_empty() {
            return Err(format!("todos[{index}].content is empty"));
        }
        if !STATUSES.contains(&todo.status.as_str()) {
            return Err(format!(
                "todos[{index}].status {:?} is not one of {}",
                todo.status,
                STATUSES.join(", ")
            ));
        }
        if !PRIORITIES.contains(&todo.priority.as_str()) {
            return Err(format!(
                "todos[{index}].priority {:?} is not one of {}",
                todo.priority,
                PRIORITIES.join(", ")
            ));
        }
    }
    Ok(())
}

fn render(todos: &[Todo]) -> String {
    if todos.is_empty() {
        return "Todo list cleared.\n".to_string();
    }
    todos
        .iter()
        .map(|todo| {
            let mark = match todo.status.as_str() {
                "completed" => "[x]",
                "in_progress" => "[~]",
                "cancelled" => "[-]",
                _ => "[ ]",
            };
            format!(
                "{mark} {} ({}, {}): {}\n",
                todo.id, todo.status, todo.priority, todo.content
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::temp_context;

    #[tokio::test]
    async fn replaces_the_session_list() {
        let (_dir, ctx) = temp_context();
        let out = TodoTool
            .run(
                json!({"todos": [
                    {"id": "1", "content": "write tests", "status": "in_progress", "priority": "high"},
                    {"id": "2", "content": "ship", "status": "pending"}
                ]}),
                &ctx,
            )
            .await;
        assert!(out.success, "{out:?}");
        assert_eq!(
            out.output,
            "[~] 1 (in_progress, high): write tests\n[ ] 2 (pending, medium): ship\n"
        );
        let list = ctx.todos.lock().unwrap().clone();
        assert_eq!(list.len(), 2);
        assert_eq!(list[1].priority, "medium");
        let out = TodoTool.run(json!({"todos": []}), &ctx).await;
        assert!(out.success);
        assert!(ctx.todos.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn rejects_bad_items_and_keeps_the_list() {
        let (_dir, ctx) = temp_context();
        ctx.todos.lock().unwrap().push(Todo {
            id: "keep".into(),
            content: "c".into(),
            status: "pending".into(),
            priority: "low".into(),
        });
        for (args, needle) in [
            (
                json!({"todos": [{"id": "1", "content": "x", "status": "done"}]}),
                "status",
            ),
            (
                json!({"todos": [{"id": "1", "content": "x", "status": "pending", "priority": "urgent"}]}),
                "priority",
            ),
            (
                json!({"todos": [{"id": "", "content": "x", "status": "pending"}]}),
                ".id",
            ),
            (
                json!({"todos": [{"id": "1", "content": "x", "status": "pending"}, {"id": "1", "content": "y", "status": "pending"}]}),
                "twice",
            ),
            (json!({"todos": "nope"}), "`todos`"),
            (json!({}), "`todos`"),
        ] {
            let out = TodoTool.run(args, &ctx).await;
            assert!(
                out.error.as_deref().unwrap_or("").contains(needle),
                "{needle}: {out:?}"
            );
        }
        assert_eq!(ctx.todos.lock().unwrap()[0].id, "keep");
    }
}
