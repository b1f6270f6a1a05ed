//! `CreateThreadRequest.git_skill_packages` through the real binary: skills
//! from a local git repository at a commit, linked into that thread's
//! `.agents/skills` and `.claude/skills` only, fetched once per (repository,
//! commit) for every thread, refused with a RequestError naming the package
//! when fetching or checking fails (a `file://` repository outside
//! `--skill-local-dir` too); agent skills stay visible beside them.

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

/// A runner whose `file://` packages may come from the temporary
/// directory (where every test's repositories are), with agent `a`.
async fn agent_reading_tmp() -> (MockControlPlane, RunnerProc) {
    let tmp = std::env::temp_dir();
    let tmp = tmp.to_str().unwrap().to_owned();
    agent_with(move |o| o.arg("--skill-local-dir").arg(&tmp)).await
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
    let (cp, runner) = agent_reading_tmp().await;
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
        // `.users`: which thread uses which checkout.
        .filter(|name| !name.starts_with('.'))
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
    let (cp, runner) = agent_reading_tmp().await;
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
            "\"file:///no/such/repo.git\": /no/such/repo.git: ",
        ),
        (
            "outside",
            package("file:///usr", &commit, &["skills"]),
            "/usr is outside every --skill-local-dir (AGENT_RUNNER_SKILL_LOCAL_DIR)",
        ),
        (
            "http",
            package("http://git.example.com/s.git", &commit, &["skills"]),
            "scheme http is never allowed",
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

/// What a thread's sandbox may read of the skill cache is the runner's
/// record of the packages the thread was created with, not the links in
/// its workspace (the agent can write those): a link another thread's
/// package planted in a workspace reads nothing, also after a restart
/// (when the sandbox is made again from what is on disk), while the
/// package's own thread still reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_link_to_another_threads_package_reads_nothing() {
    let repo = tempfile::tempdir().unwrap();
    let (url, commit) = repository(repo.path());
    let tmp = std::env::temp_dir();
    let opts = |cp: &MockControlPlane| {
        RunnerOpts::new(cp.url())
            .arg("--sandbox")
            .arg("enforce")
            .arg("--skill-local-dir")
            .arg(tmp.to_str().unwrap())
    };
    let cp = mock().await;
    let mut runner = RunnerProc::start(opts(&cp));
    cp.wait_connected(WAIT).await.expect("connects");
    create_agent(&cp, "a").await;
    ready(&cp, "owner", vec![package(&url, &commit, &["skills/lint"])]).await;
    ready(&cp, "other", vec![]).await;
    // As the agent of `other` could: its own skills directory, with a link
    // into the cache entry of `owner`'s package.
    let lint = std::fs::canonicalize(
        runner
            .thread_workspace("a", "owner")
            .join(".agents/skills/lint"),
    )
    .unwrap();
    let other = runner.thread_workspace("a", "other");
    std::fs::remove_file(other.join(".agents/skills")).unwrap();
    std::fs::create_dir(other.join(".agents/skills")).unwrap();
    std::os::unix::fs::symlink(&lint, other.join(".agents/skills/stolen")).unwrap();

    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(WAIT).await, Some(0), "{}", runner.logs());
    let cp = mock().await;
    let runner = RunnerProc::start_in(opts(&cp), runner.dirs.clone());
    cp.wait_connected(WAIT).await.expect("reconnects");
    let read = |rid: &'static str, thread: &'static str, path: &'static str| {
        let cp = &cp;
        async move {
            send(
                cp,
                rid,
                user_message(
                    "a",
                    thread,
                    &format!("run cat {path} 2>&1 || echo DENIED"),
                    false,
                ),
            )
            .await;
            turn_completed(cp, rid).await;
            command_outputs(&replies(cp, rid)).join("\n")
        }
    };
    let own = read("m1", "owner", ".agents/skills/lint/SKILL.md").await;
    assert!(own.contains("name: lint"), "{own}\n{}", runner.logs());
    let stolen = read("m2", "other", ".agents/skills/stolen/SKILL.md").await;
    assert!(
        stolen.contains("DENIED") && !stolen.contains("name: lint"),
        "{stolen}"
    );
}
