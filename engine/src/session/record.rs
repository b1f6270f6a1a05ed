//! The on-disk form of a session (`<state_dir>/sessions/<id>.json`): plain
//! serde mirrors of the proto types it holds. An `LLMConfig.api_key` given
//! in a session's config is never written here: after a restart the
//! session falls back to its provider's key.

use code_agent_proto::{
    ConfirmationPolicy, LaneHandlerConfig, LlmConfig, PermissionPolicy, PermissionRule,
    SessionConfig, Todo,
};
use serde::{Deserialize, Serialize};

use super::message::StoredMessage;

/// Bumped when the layout changes incompatibly.
pub const RECORD_VERSION: u32 = 1;

/// A session file. The fields after `config` may be missing (a file
/// written before they existed): they load empty, the `Option`s as `None`
/// (serde's rule for a missing `Option`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRecord {
    pub version: u32,
    pub session_id: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub config: ConfigRecord,
    #[serde(default)]
    pub messages: Vec<StoredMessage>,
    #[serde(default)]
    pub todos: Vec<TodoRecord>,
    #[serde(default)]
    pub usage: UsageRecord,
    #[serde(default)]
    pub skills: Vec<SkillRecord>,
    pub permissions: Option<PolicyRecord>,
    pub confirmation: Option<ConfirmationRecord>,
    #[serde(default)]
    pub lanes: Vec<LaneRecord>,
    /// The log of steps saved after this snapshot is
    /// `<id>.<log_generation>.log` (see `crate::store`); 0 in files written
    /// before there were logs.
    #[serde(default)]
    pub log_generation: u64,
}

/// One save after the snapshot, appended to the session's log: the
/// messages from `base` on (the history is cut to `base` first), and
/// everything else as it was then.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delta {
    pub base: usize,
    pub messages: Vec<StoredMessage>,
    /// The record without its messages.
    pub rest: SessionRecord,
}

impl SessionRecord {
    /// An empty session `id` whose log is generation 1 (tests).
    #[cfg(test)]
    pub(crate) fn empty(id: &str) -> Self {
        SessionRecord {
            version: RECORD_VERSION,
            session_id: id.into(),
            created_at: 0,
            updated_at: 0,
            config: ConfigRecord::default(),
            messages: Vec::new(),
            todos: Vec::new(),
            usage: UsageRecord::default(),
            skills: Vec::new(),
            permissions: None,
            confirmation: None,
            lanes: Vec::new(),
            log_generation: 1,
        }
    }

    /// Applies one logged step; refused (the record unchanged) when it
    /// does not fit this record.
    pub fn apply(&mut self, delta: Delta) -> Result<(), String> {
        if delta.rest.session_id != self.session_id {
            return Err(format!(
                "a step of session {:?} in the log of {:?}",
                delta.rest.session_id, self.session_id
            ));
        }
        if delta.base > self.messages.len() {
            return Err(format!(
                "a step starts at message {} of {}",
                delta.base,
                self.messages.len()
            ));
        }
        let mut messages = std::mem::take(&mut self.messages);
        messages.truncate(delta.base);
        messages.extend(delta.messages);
        let log_generation = self.log_generation;
        *self = SessionRecord {
            messages,
            log_generation,
            ..delta.rest
        };
        Ok(())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConfigRecord {
    pub name: String,
    pub workspace: String,
    pub llm: Option<LlmRecord>,
    pub system_prompt: String,
    pub max_context_length: u32,
    pub auto_compact: bool,
    pub storage_type: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LlmRecord {
    pub provider: String,
    pub model: String,
    pub base_url: String,
    pub temperature: f32,
    pub max_tokens: u32,
}

impl From<&SessionConfig> for ConfigRecord {
    fn from(c: &SessionConfig) -> Self {
        Self {
            name: c.name.clone(),
            workspace: c.workspace.clone(),
            llm: c.llm.as_ref().map(|l| LlmRecord {
                provider: l.provider.clone(),
                model: l.model.clone(),
                base_url: l.base_url.clone(),
                temperature: l.temperature,
                max_tokens: l.max_tokens,
            }),
            system_prompt: c.system_prompt.clone(),
            max_context_length: c.max_context_length,
            auto_compact: c.auto_compact,
            storage_type: c.storage_type,
        }
    }
}

impl ConfigRecord {
    pub fn to_proto(&self) -> SessionConfig {
        SessionConfig {
            name: self.name.clone(),
            workspace: self.workspace.clone(),
            llm: self.llm.as_ref().map(|l| LlmConfig {
                provider: l.provider.clone(),
                model: l.model.clone(),
                api_key: String::new(),
                base_url: l.base_url.clone(),
                temperature: l.temperature,
                max_tokens: l.max_tokens,
            }),
            system_prompt: self.system_prompt.clone(),
            max_context_length: self.max_context_length,
            auto_compact: self.auto_compact,
            storage_type: self.storage_type,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TodoRecord {
    pub id: String,
    pub content: String,
    pub status: String,
    pub priority: String,
}

impl From<&Todo> for TodoRecord {
    fn from(t: &Todo) -> Self {
        Self {
            id: t.id.clone(),
            content: t.content.clone(),
            status: t.status.clone(),
            priority: t.priority.clone(),
        }
    }
}

impl TodoRecord {
    pub fn to_proto(&self) -> Todo {
        Todo {
            id: self.id.clone(),
            content: self.content.clone(),
            status: self.status.clone(),
            priority: self.priority.clone(),
        }
    }
}

/// Token counts the model reported for the session's last call.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct UsageRecord {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

/// A skill loaded into a session (its content joins the system prompt).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SkillRecord {
    pub name: String,
    pub description: String,
    pub content: String,
    pub allowed_tools: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PolicyRecord {
    pub deny: Vec<String>,
    pub allow: Vec<String>,
    pub ask: Vec<String>,
    pub default_decision: i32,
    pub enabled: bool,
}

impl From<&PermissionPolicy> for PolicyRecord {
    fn from(p: &PermissionPolicy) -> Self {
        let rules = |r: &[PermissionRule]| r.iter().map(|r| r.rule.clone()).collect();
        Self {
            deny: rules(&p.deny),
            allow: rules(&p.allow),
            ask: rules(&p.ask),
            default_decision: p.default_decision,
            enabled: p.enabled,
        }
    }
}

impl PolicyRecord {
    pub fn to_proto(&self) -> PermissionPolicy {
        let rules = |r: &[String]| {
            r.iter()
                .map(|rule| PermissionRule { rule: rule.clone() })
                .collect()
        };
        PermissionPolicy {
            deny: rules(&self.deny),
            allow: rules(&self.allow),
            ask: rules(&self.ask),
            default_decision: self.default_decision,
            enabled: self.enabled,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConfirmationRecord {
    pub enabled: bool,
    pub auto_approve_tools: Vec<String>,
    pub require_confirm_tools: Vec<String>,
    pub default_timeout_ms: u64,
    pub timeout_action: i32,
    pub yolo_lanes: Vec<i32>,
}

impl From<&ConfirmationPolicy> for ConfirmationRecord {
    fn from(p: &ConfirmationPolicy) -> Self {
        Self {
            enabled: p.enabled,
            auto_approve_tools: p.auto_approve_tools.clone(),
            require_confirm_tools: p.require_confirm_tools.clone(),
            default_timeout_ms: p.default_timeout_ms,
            timeout_action: p.timeout_action,
            yolo_lanes: p.yolo_lanes.clone(),
        }
    }
}

impl ConfirmationRecord {
    pub fn to_proto(&self) -> ConfirmationPolicy {
        ConfirmationPolicy {
            enabled: self.enabled,
            auto_approve_tools: self.auto_approve_tools.clone(),
            require_confirm_tools: self.require_confirm_tools.clone(),
            default_timeout_ms: self.default_timeout_ms,
            timeout_action: self.timeout_action,
            yolo_lanes: self.yolo_lanes.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LaneRecord {
    pub lane: i32,
    pub mode: i32,
    pub timeout_ms: u64,
}

impl LaneRecord {
    pub fn new(lane: i32, config: &LaneHandlerConfig) -> Self {
        Self {
            lane,
            mode: config.mode,
            timeout_ms: config.timeout_ms,
        }
    }

    pub fn to_proto(&self) -> LaneHandlerConfig {
        LaneHandlerConfig {
            mode: self.mode,
            timeout_ms: self.timeout_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_added_later_may_be_missing() {
        let text = r#"{"version": 1, "session_id": "s1", "created_at": 1, "updated_at": 2,
            "config": {"name": "", "workspace": "", "llm": null, "system_prompt": "",
                "max_context_length": 0, "auto_compact": false, "storage_type": 0},
            "skills": [{"name": "n", "description": "d", "content": "c"}]}"#;
        let record: SessionRecord = serde_json::from_str(text).unwrap();
        assert!(record.messages.is_empty() && record.todos.is_empty() && record.lanes.is_empty());
        assert_eq!(record.usage, UsageRecord::default());
        assert!(record.permissions.is_none() && record.confirmation.is_none());
        assert_eq!(record.skills[0].allowed_tools, None);
        // The fields every file has stay required.
        let no_id = text.replace(r#""session_id": "s1","#, "");
        assert!(serde_json::from_str::<SessionRecord>(&no_id).is_err());
    }

    #[test]
    fn api_keys_are_not_persisted() {
        let config = SessionConfig {
            llm: Some(LlmConfig {
                provider: "openai".into(),
                model: "m".into(),
                api_key: "sk-secret".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = serde_json::to_string(&ConfigRecord::from(&config)).unwrap();
        assert!(!text.contains("sk-secret"), "{text}");
        let back = serde_json::from_str::<ConfigRecord>(&text)
            .unwrap()
            .to_proto();
        assert_eq!(back.llm.unwrap().model, "m");
    }
}
