//! Skills read from the workspace and loaded into a session's prompt.

use code_agent_engine::testing::MockReply;
use code_agent_proto::*;

use crate::common::*;

const SKILL: &str = "---\nname: review\ndescription: How we review code\nallowed-tools: Bash(git diff:*), Read\n---\nAlways run the tests before approving.\n";

#[tokio::test]
async fn skills_from_disk_join_the_system_prompt() {
    let mut h = Harness::start(vec![MockReply::text("reviewed"), MockReply::text("plain")]).await;
    let dir = h.ws().join(".claude/skills/review");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), SKILL).unwrap();

    let skills = h
        .client
        .get_claude_code_skills(GetClaudeCodeSkillsRequest { name: None })
        .await
        .unwrap()
        .into_inner()
        .skills;
    assert_eq!(skills.len(), 1);
    assert_eq!(skills[0].name, "review");
    assert_eq!(skills[0].description, "How we review code");
    let missing = h
        .client
        .get_claude_code_skills(GetClaudeCodeSkillsRequest {
            name: Some("nope".into()),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    let s = h.session().await;
    let loaded = h
        .client
        .load_skill(LoadSkillRequest {
            session_id: s.clone(),
            skill_name: "review".into(),
            skill_content: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(loaded.success);
    assert_eq!(loaded.tool_names, vec!["bash", "read"]);
    let listed = h
        .client
        .list_skills(ListSkillsRequest {
            session_id: Some(s.clone()),
        })
        .await
        .unwrap()
        .into_inner()
        .skills;
    assert_eq!(listed[0].name, "review");

    h.turn(&s, "review my change").await;
    let system = request_messages(&h.mock, 0)[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.contains("Always run the tests before approving."),
        "{system}"
    );

    let unloaded = h
        .client
        .unload_skill(UnloadSkillRequest {
            session_id: s.clone(),
            skill_name: "review".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(unloaded.success);
    h.turn(&s, "again").await;
    assert!(!request_mentions(&h.mock, 1, "Always run the tests"));
}
