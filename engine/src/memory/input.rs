//! Checks what a client or the model asks to store or search, shared by the
//! RPCs and the tools; each error names the field (`prefix` + field).

use code_agent_proto::{MemoryItem, MemoryType};

use super::store::{MAX_CONTENT, MAX_LIMIT, Query};

/// Tags one memory may carry.
pub const MAX_TAGS: usize = 32;

/// A memory ready to store: id (a new UUID when empty), timestamp (now when
/// 0), type (`UNKNOWN` becomes `EPISODIC`), importance in [0, 1].
pub fn prepare(mut item: MemoryItem, now_ms: i64, prefix: &str) -> Result<MemoryItem, String> {
    if item.content.trim().is_empty() {
        return Err(format!("{prefix}content: required"));
    }
    if item.content.len() > MAX_CONTENT {
        return Err(format!(
            "{prefix}content: at most {MAX_CONTENT} bytes, got {}",
            item.content.len()
        ));
    }
    if !item.importance.is_finite() || !(0.0..=1.0).contains(&item.importance) {
        return Err(format!(
            "{prefix}importance: must be between 0 and 1, got {}",
            item.importance
        ));
    }
    if item.tags.len() > MAX_TAGS {
        return Err(format!("{prefix}tags: at most {MAX_TAGS} tags"));
    }
    if let Some(i) = item.tags.iter().position(|t| t.trim().is_empty()) {
        return Err(format!("{prefix}tags[{i}]: must not be empty"));
    }
    match MemoryType::try_from(item.memory_type) {
        Ok(MemoryType::Unknown) => item.memory_type = MemoryType::Episodic as i32,
        Ok(_) => {}
        Err(_) => {
            return Err(format!(
                "{prefix}memory_type: unknown value {}",
                item.memory_type
            ));
        }
    }
    if item.id.is_empty() {
        item.id = uuid::Uuid::new_v4().to_string();
    } else if item.id.len() > 128 || item.id.chars().any(char::is_control) {
        return Err(format!(
            "{prefix}id: at most 128 characters, no control characters"
        ));
    }
    if item.timestamp == 0 {
        item.timestamp = now_ms;
    }
    item.access_count = 0;
    item.last_accessed = None;
    Ok(item)
}

/// A search query from its parts.
pub fn query(
    text: Option<String>,
    tags: Vec<String>,
    min_importance: Option<f32>,
    recent_only: bool,
    limit: u32,
) -> Result<Query, String> {
    if let Some(min) = min_importance
        && (!min.is_finite() || !(0.0..=1.0).contains(&min))
    {
        return Err(format!(
            "min_importance: must be between 0 and 1, got {min}"
        ));
    }
    if limit > MAX_LIMIT {
        return Err(format!("limit: at most {MAX_LIMIT}, got {limit}"));
    }
    Ok(Query {
        text: text.filter(|t| !t.trim().is_empty()),
        tags,
        min_importance,
        recent_only,
        limit,
    })
}

/// The memory type named `name` (`episodic`, `semantic`, `procedural`, `working`).
pub fn memory_type(name: &str) -> Result<MemoryType, String> {
    match name.to_ascii_lowercase().trim_start_matches("memory_type_") {
        "episodic" => Ok(MemoryType::Episodic),
        "semantic" => Ok(MemoryType::Semantic),
        "procedural" => Ok(MemoryType::Procedural),
        "working" => Ok(MemoryType::Working),
        other => Err(format!(
            "memory_type: one of episodic, semantic, procedural, working; got {other:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_fills_defaults_and_names_bad_fields() {
        let item = prepare(
            MemoryItem {
                content: "x".into(),
                importance: 0.5,
                ..Default::default()
            },
            42,
            "memory.",
        )
        .unwrap();
        assert_eq!(item.timestamp, 42);
        assert_eq!(item.memory_type, MemoryType::Episodic as i32);
        assert!(!item.id.is_empty());
        let bad = |item: MemoryItem| prepare(item, 1, "memory.").unwrap_err();
        assert!(bad(MemoryItem::default()).starts_with("memory.content"));
        assert!(
            bad(MemoryItem {
                content: "x".into(),
                importance: 1.5,
                ..Default::default()
            })
            .starts_with("memory.importance")
        );
        assert!(
            bad(MemoryItem {
                content: "x".into(),
                memory_type: 9,
                ..Default::default()
            })
            .starts_with("memory.memory_type")
        );
        assert!(
            query(None, vec![], Some(2.0), false, 0)
                .unwrap_err()
                .starts_with("min_importance")
        );
        assert_eq!(memory_type("Semantic").unwrap(), MemoryType::Semantic);
        assert!(memory_type("long").is_err());
    }
}
