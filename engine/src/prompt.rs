//! The system prompt of a session's model calls: the session's own prompt
//! (or a default one naming the workspace) followed by every loaded skill;
//! and, with it, the history every model call of a session starts from.

use std::path::Path;

use crate::llm::ChatMessage;
use crate::session::Session;
use crate::session::message::StoredMessage;
use crate::session::record::SkillRecord;

/// The system prompt of a session configured without one: what the engine
/// tells the model about its workspace and tools. A client that adds its
/// own instructions to a session (the runner's `code-agent` adapter) starts
/// from this, so the model keeps them.
pub fn default_prompt(workspace: &Path) -> String {
    format!(
        "You are a coding agent working in the workspace {}. Paths you pass to tools are relative \
         to it (absolute paths must stay inside it). Use the tools to read and change files and to \
         run commands; keep going until the task is done, then answer briefly with what you did.",
        workspace.display()
    )
}

/// The system message text.
pub fn system_prompt(configured: &str, workspace: &Path, skills: &[SkillRecord]) -> String {
    let mut prompt = if configured.trim().is_empty() {
        default_prompt(workspace)
    } else {
        configured.to_string()
    };
    for skill in skills {
        prompt.push_str(&format!("\n\n# Skill: {}\n", skill.name));
        if !skill.description.is_empty() {
            prompt.push_str(&format!("{}\n\n", skill.description));
        }
        prompt.push_str(&skill.content);
    }
    prompt
}

/// What a model call in `session` starts from, read at one moment: the
/// system prompt text and the session's history as chat messages.
pub fn conversation(session: &Session, workspace: &Path) -> (String, Vec<ChatMessage>) {
    let (history, configured, skills) = session.read(|d| {
        (
            d.messages
                .iter()
                .map(StoredMessage::to_chat)
                .collect::<Vec<_>>(),
            d.config.system_prompt.clone(),
            d.skills.values().cloned().collect::<Vec<_>>(),
        )
    });
    (system_prompt(&configured, workspace, &skills), history)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skills_join_the_prompt() {
        let skill = SkillRecord {
            name: "review".into(),
            description: "How to review".into(),
            content: "Check the tests first.".into(),
            allowed_tools: None,
        };
        let prompt = system_prompt("Be terse.", Path::new("/w"), &[skill]);
        assert!(prompt.starts_with("Be terse."));
        assert!(prompt.contains("# Skill: review"));
        assert!(prompt.contains("Check the tests first."));
        assert!(system_prompt("", Path::new("/w/x"), &[]).contains("/w/x"));
    }
}
