//! Skill RPCs: load/unload/list a session's skills (a loaded skill's
//! instructions join its system prompt) and the Claude Code skills of a
//! workspace (`.agents/skills/*/SKILL.md`, `.claude/skills/*/SKILL.md`).

use std::collections::HashMap;
use std::path::PathBuf;

use code_agent_proto::*;
use tonic::Status;

use super::Service;
use crate::session::record::SkillRecord;
use crate::skills::{claude_code_skills, parse_skill};

/// Tool names an `allowed-tools` value mentions (`Bash(gh:*), Read` ⇒
/// `bash`, `read`).
pub fn tools_of(allowed: Option<&str>) -> Vec<String> {
    let mut names = Vec::new();
    let (mut depth, mut current) = (0usize, String::new());
    for c in allowed.unwrap_or("").chars().chain([' ']) {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            c if depth == 0 && (c.is_alphanumeric() || c == '_' || c == '-') => current.push(c),
            _ if depth == 0 => {
                let name = std::mem::take(&mut current).to_ascii_lowercase();
                if !name.is_empty() && !names.contains(&name) {
                    names.push(name);
                }
            }
            _ => {}
        }
    }
    names
}

async fn workspace_skills(workspace: PathBuf) -> Result<Vec<ClaudeCodeSkill>, Status> {
    tokio::task::spawn_blocking(move || claude_code_skills(&workspace))
        .await
        .map_err(|e| Status::internal(format!("reading skills: {e}")))
}

fn to_skill(name: &str, description: &str, allowed: Option<&str>, source: &str) -> Skill {
    Skill {
        name: name.to_string(),
        description: description.to_string(),
        tools: tools_of(allowed),
        metadata: HashMap::from([("source".to_string(), source.to_string())]),
    }
}

impl Service {
    pub(super) async fn load_skill(
        &self,
        request: LoadSkillRequest,
    ) -> Result<LoadSkillResponse, Status> {
        let session = self.session(&request.session_id)?;
        let name = request.skill_name.trim().to_string();
        if name.is_empty() {
            return Err(Status::invalid_argument("skill_name: required"));
        }
        let record = match request.skill_content.filter(|c| !c.trim().is_empty()) {
            Some(content) => match parse_skill(&content) {
                Ok(skill) => SkillRecord {
                    name: name.clone(),
                    description: skill.description,
                    content: skill.content,
                    allowed_tools: skill.allowed_tools,
                },
                // Plain instructions without front matter are fine too.
                Err(_) => SkillRecord {
                    name: name.clone(),
                    description: String::new(),
                    content,
                    allowed_tools: None,
                },
            },
            None => {
                let workspace = self.engine.workspace_of(&session)?;
                let found = workspace_skills(workspace.clone())
                    .await?
                    .into_iter()
                    .find(|s| s.name == name)
                    .ok_or_else(|| {
                        Status::not_found(format!(
                            "skill_name: no skill {name:?} in .agents/skills or .claude/skills of {}",
                            workspace.display()
                        ))
                    })?;
                SkillRecord {
                    name: name.clone(),
                    description: found.description,
                    content: found.content,
                    allowed_tools: found.allowed_tools,
                }
            }
        };
        let tool_names = tools_of(record.allowed_tools.as_deref());
        session.update(|d| d.skills.insert(name, record));
        self.engine.persist(&session).await?;
        Ok(LoadSkillResponse {
            success: true,
            tool_names,
        })
    }

    pub(super) async fn unload_skill(
        &self,
        request: UnloadSkillRequest,
    ) -> Result<UnloadSkillResponse, Status> {
        let session = self.session(&request.session_id)?;
        if request.skill_name.trim().is_empty() {
            return Err(Status::invalid_argument("skill_name: required"));
        }
        let removed = session.update(|d| d.skills.remove(request.skill_name.trim()));
        self.engine.persist(&session).await?;
        Ok(UnloadSkillResponse {
            success: removed.is_some(),
            removed_tools: removed
                .map(|r| tools_of(r.allowed_tools.as_deref()))
                .unwrap_or_default(),
        })
    }

    pub(super) async fn list_skills(
        &self,
        request: ListSkillsRequest,
    ) -> Result<ListSkillsResponse, Status> {
        if let Some(id) = request.session_id.filter(|id| !id.is_empty()) {
            let session = self.session(&id)?;
            let skills = session.read(|d| {
                d.skills
                    .values()
                    .map(|s| {
                        to_skill(
                            &s.name,
                            &s.description,
                            s.allowed_tools.as_deref(),
                            "loaded",
                        )
                    })
                    .collect()
            });
            return Ok(ListSkillsResponse { skills });
        }
        let skills = match self.engine.default_workspace() {
            Some(workspace) => workspace_skills(workspace)
                .await?
                .iter()
                .map(|s| {
                    to_skill(
                        &s.name,
                        &s.description,
                        s.allowed_tools.as_deref(),
                        "workspace",
                    )
                })
                .collect(),
            None => Vec::new(),
        };
        Ok(ListSkillsResponse { skills })
    }

    pub(super) async fn get_claude_code_skills(
        &self,
        request: GetClaudeCodeSkillsRequest,
    ) -> Result<GetClaudeCodeSkillsResponse, Status> {
        let workspace = self.engine.default_workspace().ok_or_else(|| {
            Status::failed_precondition(
                "no default workspace: call Initialize with a workspace or start the engine with --workspace",
            )
        })?;
        let mut skills = workspace_skills(workspace).await?;
        if let Some(name) = request.name.filter(|n| !n.is_empty()) {
            skills.retain(|s| s.name == name);
            if skills.is_empty() {
                return Err(Status::not_found(format!("name: no skill {name:?}")));
            }
        }
        Ok(GetClaudeCodeSkillsResponse { skills })
    }
}

#[cfg(test)]
mod tests {
    use super::tools_of;

    #[test]
    fn allowed_tools_names() {
        assert_eq!(
            tools_of(Some("Bash(gh pr:*), Read Grep")),
            vec!["bash", "read", "grep"]
        );
        assert!(tools_of(None).is_empty());
    }
}
