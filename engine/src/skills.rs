//! Claude Code skill directories (`SKILL.md` with front matter) read from a workspace.
//!
//! A skill is a directory holding `SKILL.md`: YAML front matter between
//! `---` lines (`name` and `description` required, `allowed-tools` as a
//! string or a list, `disable-model-invocation`), then the markdown
//! instructions. [`claude_code_skills`] reads `.agents/skills/*/SKILL.md`
//! and `.claude/skills/*/SKILL.md`; skill directories may be symlinks
//! (the runner links an agent's installed skills into thread workspaces),
//! and following them is fine here: this only reads, and is not a tool
//! path the model controls.

use std::collections::BTreeMap;
use std::path::Path;

use code_agent_proto::ClaudeCodeSkill;
use serde::Deserialize;

/// Where skills are looked for, in precedence order.
const SKILL_ROOTS: [&str; 2] = [".agents/skills", ".claude/skills"];
/// A SKILL.md larger than this is skipped.
const MAX_SKILL_BYTES: u64 = 1024 * 1024;
/// Skill directories read per root at most.
const MAX_SKILLS_PER_ROOT: usize = 500;

#[derive(Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    #[serde(rename = "allowed-tools", alias = "allowed_tools")]
    allowed_tools: Option<AllowedTools>,
    #[serde(
        rename = "disable-model-invocation",
        alias = "disable_model_invocation"
    )]
    disable_model_invocation: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum AllowedTools {
    One(String),
    Many(Vec<String>),
}

/// Parses one SKILL.md.
pub fn parse_skill(text: &str) -> Result<ClaudeCodeSkill, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err("SKILL.md must start with `---` front matter".to_string());
    }
    let mut yaml = String::new();
    let mut closed = false;
    let mut consumed = first.len();
    for line in lines {
        consumed += line.len();
        let bare = line.trim_end();
        if bare == "---" || bare == "..." {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err("front matter is not closed by a `---` line".to_string());
    }
    if yaml.trim().is_empty() {
        return Err("front matter is empty (name and description are required)".to_string());
    }
    let front: FrontMatter = serde_yaml::from_str(&yaml)
        .map_err(|err| format!("front matter is not valid YAML: {err}"))?;
    let name = front
        .name
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .ok_or("front matter field `name` is required")?;
    let description = front
        .description
        .map(|description| description.trim().to_string())
        .filter(|description| !description.is_empty())
        .ok_or("front matter field `description` is required")?;
    let allowed_tools = front
        .allowed_tools
        .map(|tools| match tools {
            AllowedTools::One(tools) => tools.trim().to_string(),
            AllowedTools::Many(tools) => tools
                .iter()
                .map(|tool| tool.trim())
                .filter(|tool| !tool.is_empty())
                .collect::<Vec<_>>()
                .join(", "),
        })
        .filter(|tools| !tools.is_empty());
    let body = &text[consumed..];
    let body = body
        .strip_prefix("\r\n")
        .or_else(|| body.strip_prefix('\n'))
        .unwrap_or(body);
    Ok(ClaudeCodeSkill {
        name,
        description,
        allowed_tools,
        disable_model_invocation: front.disable_model_invocation.unwrap_or(false),
        content: body.to_string(),
    })
}

/// The skills of a workspace, sorted by name; on equal names `.agents`
/// wins over `.claude`. Invalid skills are skipped with a warning.
pub fn claude_code_skills(workspace: &Path) -> Vec<ClaudeCodeSkill> {
    let mut skills: BTreeMap<String, ClaudeCodeSkill> = BTreeMap::new();
    for root in SKILL_ROOTS {
        let dir = workspace.join(root);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut skill_files: Vec<_> = entries
            .flatten()
            .map(|entry| entry.path().join("SKILL.md"))
            .filter(|path| path.is_file())
            .collect();
        skill_files.sort();
        skill_files.truncate(MAX_SKILLS_PER_ROOT);
        for path in skill_files {
            match read_skill(&path) {
                Ok(skill) => {
                    skills.entry(skill.name.clone()).or_insert(skill);
                }
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "skipping invalid skill");
                }
            }
        }
    }
    skills.into_values().collect()
}

fn read_skill(path: &Path) -> Result<ClaudeCodeSkill, String> {
    let size = std::fs::metadata(path)
        .map_err(|err| format!("cannot stat: {err}"))?
        .len();
    if size > MAX_SKILL_BYTES {
        return Err(format!("larger than {MAX_SKILL_BYTES} bytes"));
    }
    let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read: {err}"))?;
    parse_skill(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_front_matter_and_body() {
        let skill = parse_skill(
            "---\nname: gh\ndescription: Work with GitHub\nallowed-tools: Bash(gh:*)\n---\n# GH\nUse gh.\n",
        )
        .unwrap();
        assert_eq!(skill.name, "gh");
        assert_eq!(skill.description, "Work with GitHub");
        assert_eq!(skill.allowed_tools.as_deref(), Some("Bash(gh:*)"));
        assert!(!skill.disable_model_invocation);
        assert_eq!(skill.content, "# GH\nUse gh.\n");
    }

    #[test]
    fn allowed_tools_list_and_flags() {
        let skill = parse_skill(
            "---\r\nname: x\r\ndescription: d\r\nallowed-tools:\r\n  - Read\r\n  - Bash(git:*)\r\ndisable-model-invocation: true\r\n---\r\nbody",
        )
        .unwrap();
        assert_eq!(skill.allowed_tools.as_deref(), Some("Read, Bash(git:*)"));
        assert!(skill.disable_model_invocation);
        assert_eq!(skill.content, "body");
    }

    #[test]
    fn invalid_skills_say_why() {
        for (text, needle) in [
            ("no front matter", "start with"),
            ("---\nname: x\n", "not closed"),
            ("---\ndescription: d\n---\n", "`name`"),
            ("---\nname: x\n---\n", "`description`"),
            ("---\nname: [x\n---\n", "YAML"),
            ("---\n---\n", "empty"),
        ] {
            let err = parse_skill(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    fn write_skill(dir: &Path, name: &str, description: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {description}\n---\nbody of {name}\n"),
        )
        .unwrap();
    }

    #[test]
    fn discovers_skills_from_both_roots() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        write_skill(&ws.join(".claude/skills/zeta"), "zeta", "from claude");
        write_skill(&ws.join(".claude/skills/dup"), "shared", "from claude");
        write_skill(&ws.join(".agents/skills/dup"), "shared", "from agents");
        std::fs::create_dir_all(ws.join(".agents/skills/broken")).unwrap();
        std::fs::write(ws.join(".agents/skills/broken/SKILL.md"), "nope").unwrap();
        std::fs::create_dir_all(ws.join(".agents/skills/empty-dir")).unwrap();
        // A skill directory linked from outside the workspace.
        let outside = tempfile::tempdir().unwrap();
        write_skill(&outside.path().join("linked"), "alpha", "linked in");
        std::os::unix::fs::symlink(
            outside.path().join("linked"),
            ws.join(".agents/skills/alpha"),
        )
        .unwrap();
        let skills = claude_code_skills(ws);
        let names: Vec<(&str, &str)> = skills
            .iter()
            .map(|skill| (skill.name.as_str(), skill.description.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("alpha", "linked in"),
                ("shared", "from agents"),
                ("zeta", "from claude")
            ]
        );
        assert_eq!(skills[0].content, "body of alpha\n");
        assert!(claude_code_skills(&ws.join("missing")).is_empty());
    }
}
