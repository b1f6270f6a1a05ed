//! `CreateThreadRequest.git_skill_packages` through the real binary: skills
//! from a local git repository at a commit, linked into that thread's
//! `.agents/skills` and `.claude/skills` only, fetched once per (repository,
//! commit) for every thread, refused with a RequestError naming the package
//! when fetching or checking fails; agent skills stay visible beside them.

use std::path::Path;
use std::process::Command;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::MockControlPlane;

use crate::support::*;

fn skill_md(name: &str) -> String {
    format!("---\nname: {name}\ndescription: The {name} skill\n---\n# {name}\n")
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A repository with skills `lint` and `fmt` (under `skills/`) and a
/// broken one (`broken/`, no front matter); its URL and commit.
fn repository(dir: &Path) -> (String, String) {
    write(&dir.join("skills/lint/SKILL.md"), &skill_md("lint"));
    write(&dir.join("skills/fmt/SKILL.md"), &skill_md("fmt"));
    write(&dir.join("broken/SKILL.md"), "no front matter\n");
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "skills"]);
    let commit = git(dir, &["rev-parse", "HEAD"]);
    (format!("file://{}", dir.display()), commit)
}

fn package(url: &str, commit: &str, dirs: &[&str]) -> ThreadGitSkillPackage {
    ThreadGitSkillPackage {
        repository_url: url.into(),
        commit_reference: commit.into(),
        skills: dirs
            .iter()
            .map(|d| ThreadGitSkill {
                directory_path: (*d).into(),
            })
            .collect(),
    }
}

async fn create(cp: &MockControlPlane, rid: &str, packages: Vec<ThreadGitSkillPackage>) {
    send(
        cp,
        rid,
        Request::CreateThreadRequest(CreateThreadRequest {
            agent_id: "a".into(),
            model: "scripted-fast".into(),
            thread_id: Some(rid.into()),
            git_skill_packages: packages,
            ..Default::default()
        }),
    )
    .await;
}

async fn ready(cp: &MockControlPlane, rid: &str, packages: Vec<ThreadGitSkillPackage>) {
    create(cp, rid, packages).await;
    let m = reply(cp, rid).await;
    assert!(
        matches!(payload(&m), Some(Payload::ThreadUpdate(u)) if u.status == ThreadStatus::Ready as i32),
        "{m:?}"
    );
}

/// The skills `thread`'s agent process sees under `dir` (`.agents` or `.claude`).
fn seen(runner: &RunnerProc, thread: &str, dir: &str) -> Vec<String> {
    let skills = runner
        .thread_workspace("a", thread)
        .join(dir)
        .join("skills");
    let mut names: Vec<String> = std::fs::read_dir(&skills)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().join("SKILL.md").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_skill_packages_are_linked_into_that_thread_only_and_cached() {
    let repo = tempfile::tempdir().unwrap();
    let (url, commit) = repository(repo.path());
    let (cp, runner) = agent_with(|o| o).await;
    // An agent-level skill, visible to every thread.
    let agent_skill = tempfile::tempdir().unwrap();
    write(&agent_skill.path().join("SKILL.md"), &skill_md("review"));
    send(
        &cp,
        "i1",
        Request::InstallSkillsMpRequest(InstallSkillsMpRequest {
            agent_id: "a".into(),
            package_name: format!("file://{}", agent_skill.path().display()),
        }),
    )
    .await;
    let m = reply(&cp, "i1").await;
    assert!(
        matches!(payload(&m), Some(Payload::SkillMpUpdate(_))),
        "{m:?}"
    );

    ready(&cp, "with", vec![package(&url, &commit, &["skills/lint"])]).await;
    ready(&cp, "plain", vec![]).await;
    // By branch name: resolved to the same commit, so the same cache entry.
    ready(
        &cp,
        "again",
        vec![package(&url, "main", &["skills/fmt", "skills/lint"])],
    )
    .await;

    assert_eq!(seen(&runner, "with", ".agents"), ["lint", "review"]);
    assert_eq!(seen(&runner, "with", ".claude"), ["lint", "review"]);
    assert_eq!(seen(&runner, "plain", ".agents"), ["review"]);
    assert_eq!(seen(&runner, "plain", ".claude"), ["review"]);
    assert_eq!(seen(&runner, "again", ".agents"), ["fmt", "lint", "review"]);
    let cache: Vec<_> = std::fs::read_dir(runner.workspace_root().join(".skill-cache"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(cache.len(), 1, "{cache:?}");
    assert!(cache[0].ends_with(&commit), "{cache:?}");

    // The agent process sees them: a scripted command lists its skills.
    send(
        &cp,
        "m1",
        user_message("a", "with", "run ls .claude/skills/lint", false),
    )
    .await;
    turn_completed(&cp, "m1").await;
    assert_eq!(command_outputs(&replies(&cp, "m1")), ["SKILL.md\n"]);

    // A skill the agent gets later shows up in threads with their own skills.
    let later = tempfile::tempdir().unwrap();
    write(&later.path().join("SKILL.md"), &skill_md("later"));
    send(
        &cp,
        "i2",
        Request::InstallSkillsMpRequest(InstallSkillsMpRequest {
            agent_id: "a".into(),
            package_name: format!("file://{}", later.path().display()),
        }),
    )
    .await;
    reply(&cp, "i2").await;
    assert_eq!(
        seen(&runner, "with", ".agents"),
        ["later", "lint", "review"]
    );
    assert_eq!(seen(&runner, "plain", ".agents"), ["later", "review"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_thread_skill_packages_are_refused_naming_the_package() {
    let repo = tempfile::tempdir().unwrap();
    let (url, commit) = repository(repo.path());
    let (cp, runner) = agent_with(|o| o).await;
    let cases = [
        (
            "broken",
            package(&url, &commit, &["broken"]),
            "front matter",
        ),
        ("missing", package(&url, &commit, &["nope"]), "no directory"),
        (
            "escape",
            package(&url, &commit, &["../x"]),
            "directory_path",
        ),
        (
            "ref",
            package(&url, "no-such-branch", &["skills"]),
            // The package's label names the ref already: the cause must say
            // what is wrong with it.
            "no branch or tag \"no-such-branch\"",
        ),
        (
            "repo",
            package("file:///no/such/repo.git", &commit, &["skills"]),
            "fetching file:///no/such/repo.git",
        ),
    ];
    for (rid, pkg, needle) in cases {
        create(
            &cp,
            rid,
            vec![package(&url, &commit, &["skills/lint"]), pkg],
        )
        .await;
        let text = expect_error(&cp, rid).await;
        assert!(
            text.contains("create_thread_request.git_skill_packages[1]") && text.contains(needle),
            "{rid}: {text}"
        );
        assert!(!runner.thread_workspace("a", rid).exists(), "{rid}");
    }
    // Nothing half-made: the thread ids are free.
    send(&cp, "m", user_message("a", "broken", "say hi", false)).await;
    let text = expect_error(&cp, "m").await;
    assert!(text.contains("unknown thread"), "{text}");
}
