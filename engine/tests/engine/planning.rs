//! Planning: plans and goals from the mock model's structured answers, and
//! the `plan` tool called by the model in a turn.

use code_agent_engine::testing::MockReply;
use code_agent_proto::*;
use serde_json::json;

use crate::common::*;

fn plan_answer() -> String {
    json!({
        "goal": "add a --verbose flag",
        "complexity": "medium",
        "steps": [
            {"id": "s1", "description": "find the argument parser", "tool": "grep", "success_criteria": ["parser found"]},
            {"id": "s2", "description": "add the flag", "tool": "edit", "dependencies": ["s1"]},
            {"id": "s3", "description": "run the tests", "tool": "bash", "dependencies": ["s2"], "success_criteria": ["tests pass"]}
        ],
        "required_tools": ["read"],
        "estimated_steps": 5
    })
    .to_string()
}

async fn get_plan(h: &mut Harness, s: &str, id: &str) -> Result<ExecutionPlan, tonic::Status> {
    h.client
        .get_plan(GetPlanRequest {
            session_id: s.into(),
            plan_id: id.into(),
        })
        .await
        .map(|r| r.into_inner().plan.unwrap())
}

#[tokio::test]
async fn create_plan_stores_the_models_structured_plan() {
    let mut h = Harness::start(vec![MockReply::text(&plan_answer())]).await;
    let s = h.session().await;
    assert_eq!(
        get_plan(&mut h, &s, "").await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let plan = h
        .client
        .create_plan(CreatePlanRequest {
            session_id: s.clone(),
            prompt: "add a verbose flag".into(),
            context: Some("a Rust CLI".into()),
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap();
    assert_eq!(plan.goal, "add a --verbose flag");
    assert_eq!(plan.complexity, Complexity::Medium as i32);
    assert_eq!(plan.complexity, 2);
    assert_eq!(plan.estimated_steps, 5);
    assert_eq!(plan.required_tools, vec!["read", "grep", "edit", "bash"]);
    let ids: Vec<_> = plan.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, vec!["s1", "s2", "s3"]);
    assert_eq!(plan.steps[2].dependencies, vec!["s2".to_string()]);
    assert_eq!(plan.steps[0].tool.as_deref(), Some("grep"));
    assert!(
        plan.steps
            .iter()
            .all(|s| s.status == StepStatus::Pending as i32)
    );
    // The model was asked through structured output with the plan schema.
    let sent = &h.mock.requests()[0];
    assert_eq!(sent["response_format"]["type"], "json_schema");
    assert!(request_mentions(&h.mock, 0, "add a verbose flag"));
    assert!(request_mentions(&h.mock, 0, "a Rust CLI"));
    assert_eq!(get_plan(&mut h, &s, "").await.unwrap(), plan);
    assert_eq!(get_plan(&mut h, &s, "plan-1").await.unwrap(), plan);
    assert_eq!(
        get_plan(&mut h, &s, "plan-2").await.unwrap_err().code(),
        tonic::Code::NotFound
    );
}

#[tokio::test]
async fn a_plan_with_a_dangling_dependency_is_refused() {
    let bad =
        json!({"goal": "g", "steps": [{"id": "a", "description": "x", "dependencies": ["zz"]}]});
    let mut h = Harness::start(vec![MockReply::text(&bad.to_string())]).await;
    let s = h.session().await;
    let err = h
        .client
        .create_plan(CreatePlanRequest {
            session_id: s.clone(),
            prompt: "p".into(),
            context: None,
        })
        .await
        .unwrap_err();
    assert!(
        err.message().contains("steps[0].dependencies[0]"),
        "{}",
        err.message()
    );
    let err = h
        .client
        .create_plan(CreatePlanRequest {
            session_id: s,
            prompt: " ".into(),
            context: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().starts_with("prompt"));
}

#[tokio::test]
async fn goals_are_extracted_and_checked() {
    let mut h = Harness::start(vec![
        MockReply::text(
            &json!({"description": "ship v2", "success_criteria": ["tests pass", "changelog written", "tag pushed"]})
                .to_string(),
        ),
        MockReply::text(&json!({"met": [true, false, true]}).to_string()),
    ])
    .await;
    let s = h.session().await;
    let goal = h
        .client
        .extract_goal(ExtractGoalRequest {
            session_id: s.clone(),
            prompt: "release version 2".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .goal
        .unwrap();
    assert_eq!(goal.description, "ship v2");
    assert_eq!(goal.success_criteria.len(), 3);
    assert!(goal.created_at > 0);
    assert!(!goal.achieved);
    let check = h
        .client
        .check_goal_achievement(CheckGoalAchievementRequest {
            session_id: s.clone(),
            goal: Some(goal),
            current_state: "tests green, tag v2 pushed".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!check.achieved);
    assert!((check.progress - 2.0 / 3.0).abs() < 1e-6);
    assert_eq!(
        check.remaining_criteria,
        vec!["changelog written".to_string()]
    );
    // The judgement was asked with one boolean per criterion.
    let sent = &h.mock.requests()[1];
    assert_eq!(
        sent["response_format"]["json_schema"]["schema"]["properties"]["met"]["minItems"], 3,
        "{sent}"
    );
}

#[tokio::test]
async fn the_model_records_a_plan_with_the_plan_tool() {
    let args: serde_json::Value = serde_json::from_str(&plan_answer()).unwrap();
    let mut h = Harness::start(vec![
        MockReply::tool_call("p1", "plan", args),
        MockReply::tool_call("p2", "plan", json!({"goal": "x", "steps": []})),
        MockReply::text("planned"),
    ])
    .await;
    let s = h.session().await;
    let chunks = h.turn(&s, "plan the verbose flag").await;
    let results = results(&chunks);
    assert!(results[0].success, "{:?}", results[0]);
    assert!(results[0].output.contains("recorded plan-1"));
    assert!(
        results[0]
            .output
            .contains("2. [s2] add the flag (after s1)")
    );
    assert!(!results[1].success);
    assert!(results[1].error.contains("steps"), "{}", results[1].error);
    let plan = get_plan(&mut h, &s, "").await.unwrap();
    assert_eq!(plan.goal, "add a --verbose flag");
    assert_eq!(plan.steps.len(), 3);
}

#[tokio::test]
async fn a_file_sessions_plans_survive_a_restart() {
    let mut h = Harness::start(vec![MockReply::text(&plan_answer())]).await;
    let s = h.session_with(h.config(StorageType::File)).await;
    let plan = h
        .client
        .create_plan(CreatePlanRequest {
            session_id: s.clone(),
            prompt: "add a verbose flag".into(),
            context: None,
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap();
    let file = h.state.path().join(format!("plans/{s}.json"));
    assert!(file.exists());
    let (mock, workspace, state) = h.stop().await;
    let mut h = Harness::start_on(mock, workspace, state).await;
    assert_eq!(get_plan(&mut h, &s, "plan-1").await.unwrap(), plan);
    // Moved to MEMORY, the session keeps its plans but not on disk.
    h.client
        .configure_session(ConfigureSessionRequest {
            session_id: s.clone(),
            config: Some(h.config(StorageType::Memory)),
        })
        .await
        .unwrap();
    assert!(!file.exists());
    assert_eq!(get_plan(&mut h, &s, "").await.unwrap(), plan);
}
