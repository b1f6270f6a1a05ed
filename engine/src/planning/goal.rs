//! Goals: the schema the model extracts a goal in (`ExtractGoal`), and the
//! one it judges a goal against the current state in
//! (`CheckGoalAchievement`): one boolean per success criterion, in order,
//! so progress = criteria met / criteria, and the remaining criteria are
//! the goal's own texts, not the model's rewording. A goal without criteria
//! is judged as a whole (`achieved` and a `progress` in [0, 1]).

use code_agent_proto::AgentGoal;
use serde_json::{Value, json};

/// Criteria one goal may carry.
pub const MAX_CRITERIA: usize = 50;

/// The schema of an extracted goal.
pub fn extract_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "description": {"type": "string", "description": "The goal, in one sentence."},
            "success_criteria": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_CRITERIA,
                                 "description": "Checkable conditions that together mean the goal is achieved."}
        },
        "required": ["description", "success_criteria"]
    })
}

/// The goal in an extraction answer, created at `now_ms`.
pub fn from_extraction(doc: &Value, now_ms: i64) -> Result<AgentGoal, String> {
    let description = doc["description"]
        .as_str()
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .ok_or("description: a non-empty string is required")?;
    let success_criteria = doc["success_criteria"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect();
    Ok(AgentGoal {
        description: description.to_string(),
        success_criteria,
        progress: 0.0,
        achieved: false,
        created_at: now_ms,
        achieved_at: None,
    })
}

/// The schema of a judgement of `goal`.
pub fn check_schema(goal: &AgentGoal) -> Value {
    let n = goal.success_criteria.len();
    if n == 0 {
        return json!({
            "type": "object",
            "properties": {
                "achieved": {"type": "boolean"},
                "progress": {"type": "number", "minimum": 0, "maximum": 1}
            },
            "required": ["achieved", "progress"]
        });
    }
    json!({
        "type": "object",
        "properties": {
            "met": {"type": "array", "items": {"type": "boolean"}, "minItems": n, "maxItems": n,
                    "description": "For each success criterion, in order: is it met?"}
        },
        "required": ["met"]
    })
}

/// The question put to the model.
pub fn check_prompt(goal: &AgentGoal, current_state: &str) -> String {
    let mut prompt = format!("Goal: {}\n", goal.description);
    if goal.success_criteria.is_empty() {
        prompt.push_str(
            "Judge whether the goal is achieved and how far along it is (progress 0 to 1).\n",
        );
    } else {
        prompt.push_str("Success criteria:\n");
        for (i, c) in goal.success_criteria.iter().enumerate() {
            prompt.push_str(&format!("{}. {c}\n", i + 1));
        }
        prompt
            .push_str("For each criterion, in order, answer whether the current state meets it.\n");
    }
    prompt.push_str(&format!("\nCurrent state:\n{current_state}\n"));
    prompt
}

/// `(achieved, progress, remaining criteria)` from the model's judgement.
pub fn judge(goal: &AgentGoal, doc: &Value) -> Result<(bool, f32, Vec<String>), String> {
    if goal.success_criteria.is_empty() {
        let achieved = doc["achieved"]
            .as_bool()
            .ok_or("achieved: a boolean is required")?;
        let progress = doc["progress"]
            .as_f64()
            .ok_or("progress: a number is required")?;
        let progress = if achieved {
            1.0
        } else {
            progress.clamp(0.0, 1.0) as f32
        };
        return Ok((achieved, progress, Vec::new()));
    }
    let met: Vec<bool> = doc["met"]
        .as_array()
        .ok_or("met: an array of booleans is required")?
        .iter()
        .map(|v| v.as_bool().unwrap_or(false))
        .collect();
    if met.len() != goal.success_criteria.len() {
        return Err(format!(
            "met: one boolean per criterion ({}), got {}",
            goal.success_criteria.len(),
            met.len()
        ));
    }
    let remaining: Vec<String> = goal
        .success_criteria
        .iter()
        .zip(&met)
        .filter(|(_, ok)| !**ok)
        .map(|(c, _)| c.clone())
        .collect();
    let progress = (met.len() - remaining.len()) as f32 / met.len() as f32;
    Ok((remaining.is_empty(), progress, remaining))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_the_share_of_criteria_met() {
        let goal = AgentGoal {
            description: "ship".into(),
            success_criteria: vec![
                "tests pass".into(),
                "docs".into(),
                "release".into(),
                "tag".into(),
            ],
            ..Default::default()
        };
        let (achieved, progress, remaining) =
            judge(&goal, &json!({"met": [true, false, true, false]})).unwrap();
        assert!(!achieved);
        assert_eq!(progress, 0.5);
        assert_eq!(remaining, vec!["docs".to_string(), "tag".to_string()]);
        assert!(judge(&goal, &json!({"met": [true]})).is_err());
        let whole = AgentGoal::default();
        assert_eq!(
            judge(&whole, &json!({"achieved": false, "progress": 7}))
                .unwrap()
                .1,
            1.0
        );
        assert_eq!(check_schema(&goal)["properties"]["met"]["minItems"], 4);
    }
}
