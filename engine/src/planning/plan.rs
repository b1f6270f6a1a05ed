//! The shape of a plan as JSON: the schema the model answers `CreatePlan`
//! in (and the `plan` tool's parameters, the same document), and its
//! conversion to the proto's `ExecutionPlan`, checking that step ids are
//! unique and dependencies name earlier-defined or later steps of the plan.

use std::collections::HashSet;

use code_agent_proto::{Complexity, ExecutionPlan, PlanStep, StepStatus};
use serde_json::{Value, json};

/// Steps one plan may have.
pub const MAX_STEPS: usize = 100;

/// Complexity names, in the proto's order (1..=4).
pub const COMPLEXITIES: [&str; 4] = ["simple", "medium", "complex", "very_complex"];

/// The JSON Schema of a plan document.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "goal": {"type": "string", "description": "What the plan achieves, in one sentence."},
            "complexity": {"type": "string", "enum": COMPLEXITIES},
            "steps": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_STEPS,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "Short unique id, e.g. step-1."},
                        "description": {"type": "string"},
                        "tool": {"type": "string", "description": "The main tool this step uses, if any."},
                        "dependencies": {"type": "array", "items": {"type": "string"}, "description": "Ids of steps that must finish first."},
                        "success_criteria": {"type": "array", "items": {"type": "string"}}
                    },
                    "required": ["id", "description"]
                }
            },
            "required_tools": {"type": "array", "items": {"type": "string"}},
            "estimated_steps": {"type": "integer", "minimum": 0}
        },
        "required": ["goal", "steps"]
    })
}

fn strings(value: Option<&Value>, field: &str) -> Result<Vec<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{field}[{i}]: must be a string"))
            })
            .collect(),
        Some(_) => Err(format!("{field}: must be an array of strings")),
    }
}

fn text<'a>(value: &'a Value, field: &str) -> Result<&'a str, String> {
    value
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{field}: a non-empty string is required"))
}

/// The complexity named `name` (case-insensitive; `very complex` too).
pub fn complexity(name: &str) -> Result<Complexity, String> {
    match name
        .trim()
        .to_ascii_lowercase()
        .replace([' ', '-'], "_")
        .as_str()
    {
        "simple" => Ok(Complexity::Simple),
        "medium" => Ok(Complexity::Medium),
        "complex" => Ok(Complexity::Complex),
        "very_complex" => Ok(Complexity::VeryComplex),
        other => Err(format!(
            "complexity: one of {}, got {other:?}",
            COMPLEXITIES.join(", ")
        )),
    }
}

/// The plan in `doc`; every step starts PENDING. Errors name the field.
pub fn from_json(doc: &Value) -> Result<ExecutionPlan, String> {
    let goal = text(&doc["goal"], "goal")?.to_string();
    let items = doc["steps"]
        .as_array()
        .filter(|s| !s.is_empty())
        .ok_or("steps: at least one step is required")?;
    if items.len() > MAX_STEPS {
        return Err(format!("steps: at most {MAX_STEPS}"));
    }
    let mut steps = Vec::new();
    let mut ids = HashSet::new();
    for (i, step) in items.iter().enumerate() {
        let id = text(&step["id"], &format!("steps[{i}].id"))?.to_string();
        if !ids.insert(id.clone()) {
            return Err(format!("steps[{i}].id: {id:?} is used twice"));
        }
        steps.push(PlanStep {
            id,
            description: text(&step["description"], &format!("steps[{i}].description"))?
                .to_string(),
            tool: step["tool"]
                .as_str()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string),
            dependencies: strings(
                step.get("dependencies"),
                &format!("steps[{i}].dependencies"),
            )?,
            status: StepStatus::Pending as i32,
            success_criteria: strings(
                step.get("success_criteria"),
                &format!("steps[{i}].success_criteria"),
            )?,
        });
    }
    for (i, step) in steps.iter().enumerate() {
        for (j, dep) in step.dependencies.iter().enumerate() {
            if !ids.contains(dep) || dep == &step.id {
                return Err(format!(
                    "steps[{i}].dependencies[{j}]: {dep:?} is not another step of this plan"
                ));
            }
        }
    }
    let complexity = match doc["complexity"].as_str() {
        Some(name) => complexity(name)?,
        None => Complexity::Unknown,
    };
    let mut required_tools = strings(doc.get("required_tools"), "required_tools")?;
    for tool in steps.iter().filter_map(|s| s.tool.clone()) {
        if !required_tools.contains(&tool) {
            required_tools.push(tool);
        }
    }
    let estimated_steps = match doc["estimated_steps"].as_u64() {
        Some(n) if n > 0 => u32::try_from(n).unwrap_or(u32::MAX),
        _ => u32::try_from(steps.len()).unwrap_or(u32::MAX),
    };
    Ok(ExecutionPlan {
        goal,
        steps,
        complexity: complexity as i32,
        required_tools,
        estimated_steps,
    })
}

/// The plan as text (for the model and for logs).
pub fn render(plan: &ExecutionPlan) -> String {
    let mut out = format!("Goal: {}\n", plan.goal);
    for (i, step) in plan.steps.iter().enumerate() {
        out.push_str(&format!("{}. [{}] {}", i + 1, step.id, step.description));
        if !step.dependencies.is_empty() {
            out.push_str(&format!(" (after {})", step.dependencies.join(", ")));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_converts_with_proto_enum_values() {
        let plan = from_json(&json!({
            "goal": "add a flag",
            "complexity": "very complex",
            "steps": [
                {"id": "a", "description": "read", "tool": "read"},
                {"id": "b", "description": "edit", "tool": "edit", "dependencies": ["a"], "success_criteria": ["builds"]}
            ],
            "required_tools": ["bash"]
        }))
        .unwrap();
        assert_eq!(plan.complexity, 4);
        assert_eq!(plan.steps[1].status, 1);
        assert_eq!(plan.required_tools, vec!["bash", "read", "edit"]);
        assert_eq!(plan.estimated_steps, 2);
        assert!(render(&plan).contains("2. [b] edit (after a)"));
    }

    #[test]
    fn bad_plans_name_the_field() {
        let err = |doc: Value| from_json(&doc).unwrap_err();
        assert!(err(json!({"goal": "", "steps": []})).starts_with("goal"));
        assert!(err(json!({"goal": "g", "steps": []})).starts_with("steps"));
        assert!(
            err(json!({"goal": "g", "steps": [{"id": "a", "description": "x", "dependencies": ["z"]}]}))
                .starts_with("steps[0].dependencies[0]")
        );
        assert!(
            err(json!({"goal": "g", "steps": [{"id": "a", "description": "x"}, {"id": "a", "description": "y"}]}))
                .starts_with("steps[1].id")
        );
        assert!(complexity("huge").is_err());
    }
}
