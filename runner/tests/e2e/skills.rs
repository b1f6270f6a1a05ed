//! Skill packages (`InstallSkillsMpRequest`) from local directories and
//! local git repositories: single and multi-skill, re-install no-op,
//! upgrade, and every rejection, sources the runner does not fetch from
//! (`file://` outside `--skill-local-dir`, plain http, ssh, git transports)
//! included.

use std::path::Path;
use std::process::Command;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use mock_control_plane::MockControlPlane;

use crate::support::*;

fn skill_md(name: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: The {name} skill\nallowed-tools: Bash\n---\n# {name}\n"
    )
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// A runner whose `file://` packages may come from `dir`, with agent `a`.
async fn agent_reading(
    dir: &Path,
    configure: impl FnOnce(RunnerOpts) -> RunnerOpts,
) -> (MockControlPlane, RunnerProc) {
    let dir = dir.to_str().unwrap().to_owned();
    agent_with(move |opts| configure(opts.arg("--skill-local-dir").arg(&dir))).await
}

async fn install(cp: &MockControlPlane, rid: &str, agent: &str, package: &str) -> ClientMessage {
    send(
        cp,
        rid,
        Request::InstallSkillsMpRequest(InstallSkillsMpRequest {
            agent_id: agent.into(),
            package_name: package.into(),
        }),
    )
    .await;
    reply(cp, rid).await
}

fn installed(m: &ClientMessage, agent: &str, package: &str) -> bool {
    matches!(payload(m), Some(Payload::SkillMpUpdate(u))
        if u.agent_id == agent && u.package_name == package && u.status == SkillMpStatus::Installed as i32)
}

fn lock(ws: &Path, agent: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(ws.join(agent).join(".agents/.skill-lock.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn single_skill_from_a_directory() {
    let src = tempfile::tempdir().unwrap();
    let (cp, r) = agent_reading(src.path(), |o| o).await;
    // A thread that exists before the install sees the skill too.
    let thread = create_thread(&cp, "a", "t1").await;
    write(&src.path().join("SKILL.md"), &skill_md("lint"));
    write(&src.path().join("scripts/run.sh"), "echo lint\n");
    let pkg = format!("file://{}", src.path().display());
    let m = install(&cp, "s1", "a", &pkg).await;
    assert!(installed(&m, "a", &pkg), "{m:?}");
    let ws = r.workspace_root();
    let dir = ws.join("a/.agents/skills/lint");
    assert!(dir.join("SKILL.md").is_file());
    assert_eq!(
        std::fs::read_to_string(dir.join("scripts/run.sh")).unwrap(),
        "echo lint\n"
    );
    let entry = &lock(&ws, "a")["skills"]["lint"];
    assert_eq!(entry["source"], pkg.as_str());
    assert!(
        entry["content_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(entry["resolved_commit"].is_null());

    // Visible to the thread's agent where Codex/the engine (.agents) and
    // Claude Code (.claude) look for project skills.
    start_turn(
        &cp,
        "m1",
        "a",
        &thread,
        "run cat .agents/skills/lint/SKILL.md .claude/skills/lint/SKILL.md",
    )
    .await;
    turn_completed(&cp, "m1").await;
    let output = command_outputs(&replies(&cp, "m1")).join("\n");
    assert_eq!(output.matches("name: lint").count(), 2, "{output}");
}

#[tokio::test]
async fn multi_skill_git_package_reinstall_is_a_noop_and_a_new_ref_upgrades() {
    let repo = tempfile::tempdir().unwrap();
    let (cp, r) = agent_reading(repo.path(), |o| o).await;
    let root = repo.path();
    git(root, &["init", "-q"]);
    write(&root.join("skills/one/SKILL.md"), &skill_md("one"));
    write(&root.join("skills/two/SKILL.md"), &skill_md("two"));
    write(&root.join("README.md"), "not a skill\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "v1"]);
    git(root, &["tag", "v1"]);
    write(&root.join("skills/two/extra.md"), "new in v2\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "v2"]);
    git(root, &["tag", "v2"]);

    let ws = r.workspace_root();
    let v1 = format!("file://{}#v1", root.display());
    assert!(installed(&install(&cp, "i1", "a", &v1).await, "a", &v1));
    let skills = ws.join("a/.agents/skills");
    assert!(skills.join("one/SKILL.md").is_file() && skills.join("two/SKILL.md").is_file());
    assert!(!skills.join("two/extra.md").exists());
    let first = lock(&ws, "a");
    let commit_v1 = first["skills"]["two"]["resolved_commit"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(commit_v1.len(), 40);

    // Same version again: success, nothing rewritten.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(installed(&install(&cp, "i2", "a", &v1).await, "a", &v1));
    assert_eq!(lock(&ws, "a"), first);

    // New ref: replaced, recorded.
    let v2 = format!("file://{}#v2", root.display());
    assert!(installed(&install(&cp, "i3", "a", &v2).await, "a", &v2));
    assert_eq!(
        std::fs::read_to_string(skills.join("two/extra.md")).unwrap(),
        "new in v2\n"
    );
    let after = lock(&ws, "a");
    assert_ne!(
        after["skills"]["two"]["resolved_commit"],
        first["skills"]["two"]["resolved_commit"]
    );
    assert_ne!(
        after["skills"]["two"]["content_hash"],
        first["skills"]["two"]["content_hash"]
    );
    // No staging leftovers.
    let leftovers: Vec<_> = std::fs::read_dir(&skills)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn bad_packages_are_rejected_with_clear_errors() {
    let base = tempfile::tempdir().unwrap();
    let (cp, r) = agent_reading(base.path(), |o| o.arg("--skill-max-bytes").arg("1000")).await;
    let case = |name: &str| base.path().join(name);

    write(&case("empty/README.md"), "nothing here\n");
    write(&case("nofm/SKILL.md"), "# no front matter\n");
    write(&case("noname/SKILL.md"), "---\ndescription: d\n---\n");
    write(&case("escape/SKILL.md"), &skill_md("escape"));
    std::os::unix::fs::symlink("/etc/passwd", case("escape/passwd")).unwrap();
    write(&case("escape2/SKILL.md"), &skill_md("escape2"));
    std::os::unix::fs::symlink("../../outside", case("escape2/up")).unwrap();
    write(&case("big/SKILL.md"), &skill_md("big"));
    write(&case("big/blob.bin"), &"x".repeat(2000));

    let cases = [
        ("empty", "no SKILL.md"),
        ("nofm", "front matter"),
        ("noname", "name"),
        ("escape", "symlink"),
        ("escape2", "symlink"),
        ("big", "limit"),
    ];
    for (dir, needle) in cases {
        let pkg = format!("file://{}", case(dir).display());
        let rid = format!("bad-{dir}");
        install(&cp, &rid, "a", &pkg).await;
        let text = expect_error(&cp, &rid).await;
        assert!(text.contains(needle), "{dir}: {text}");
    }
    // Nothing was installed by any of them.
    assert!(!r.workspace_root().join("a/.agents/skills/escape").exists());
    assert!(!r.workspace_root().join("a/.agents/skills/big").exists());

    // Unknown agent, bad coordinates, missing source.
    let ok_pkg = format!("file://{}", case("escape").display());
    install(&cp, "ghost", "nobody", &ok_pkg).await;
    assert!(expect_error(&cp, "ghost").await.contains("unknown agent"));
    install(&cp, "coord", "a", "not a coordinate").await;
    assert!(expect_error(&cp, "coord").await.contains("package_name"));
    install(&cp, "missing", "a", "file:///no/such/dir").await;
    assert!(expect_error(&cp, "missing").await.contains("/no/such/dir"));
}

/// Sources the runner does not fetch from are refused before anything is
/// fetched, the error naming the scheme and the setting that would allow
/// it; a listed directory cannot be left through `..` or a symlink; a URL's
/// credentials never come back in the error.
#[tokio::test]
async fn sources_outside_the_policy_are_refused_naming_the_setting() {
    let base = tempfile::tempdir().unwrap();
    let listed = base.path().join("listed");
    let outside = base.path().join("outside");
    write(&outside.join("SKILL.md"), &skill_md("outside"));
    write(&listed.join("ok/SKILL.md"), &skill_md("ok"));
    std::os::unix::fs::symlink(&outside, listed.join("link")).unwrap();
    let (cp, r) = agent_reading(&listed, |o| o).await;
    let cases = [
        (
            format!("file://{}", outside.display()),
            "is outside every --skill-local-dir",
        ),
        (
            format!("file://{}/../outside", listed.display()),
            "is outside every --skill-local-dir",
        ),
        (
            format!("file://{}/link", listed.display()),
            "is outside every --skill-local-dir",
        ),
        (
            "http://git.example.com/skills.git".to_owned(),
            "scheme http is never allowed",
        ),
        (
            "git://git.example.com/skills.git".to_owned(),
            "scheme git is not allowed",
        ),
        (
            "ssh://git@git.example.com/skills.git".to_owned(),
            "scheme ssh is not allowed: add ssh to --skill-sources",
        ),
        (
            "git@git.example.com:skills.git".to_owned(),
            "scheme ssh is not allowed: add ssh to --skill-sources",
        ),
        (
            "ext::git-remote-x".to_owned(),
            "git transport ext:: is never allowed",
        ),
        (
            "https://x-access-token:ghs_e2eSkillUrlSecret01@git.example.com/s.git".to_owned(),
            "credentials in a package URL are not accepted",
        ),
    ];
    for (i, (package, needle)) in cases.iter().enumerate() {
        let rid = format!("refused-{i}");
        install(&cp, &rid, "a", package).await;
        let text = expect_error(&cp, &rid).await;
        assert!(
            text.contains("install_skills_mp_request.package_name") && text.contains(needle),
            "{package}: {text}"
        );
        assert!(!text.contains("ghs_e2eSkillUrlSecret01"), "{text}");
    }
    assert!(!r.workspace_root().join("a/.agents/skills/outside").exists());
    // Inside the listed directory: installed.
    let ok = format!("file://{}/ok", listed.display());
    assert!(installed(&install(&cp, "ok", "a", &ok).await, "a", &ok));
}
