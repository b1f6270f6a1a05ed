//! An agent clones and pushes a GitHub repository with nothing but the
//! runner's GitHub App configuration: the real
//! runner in App mode signs its JWT, mints installation tokens from the mock
//! GitHub API, and hands them to the agent's git through
//! `agent-runner git-credential`; the loopback git server accepts exactly
//! the live tokens the mock issued for the installation. The control plane
//! has no installations at all. After GitHub revokes every token, git's
//! refusal makes the runner forget its token and the next try mints a fresh
//! one. No token and no key ever reaches the runner's log or an update.

use std::sync::Arc;

use mock_control_plane::github_api::{
    GithubApiConfig, MockGithubApi, MockInstallation, test_app_key,
};
use mock_control_plane::{MockConfig, MockControlPlane};

use crate::credentials::git_server::GitServer;
use crate::credentials::{
    World, assert_refused, clone, commit_and_push, git, seed_repo, start_world,
};

const APP_ID: u64 = 5150;
const INSTALLATION: i64 = 31337;

/// Every token the mock issued, and the private key's lines, are in neither
/// the runner's log nor any update.
/// A world whose runner is the GitHub App (`key`, API `api`) and whose
/// control plane has no installations: every token comes from the App.
async fn app_world(
    root: tempfile::TempDir,
    git: GitServer,
    api: &MockGithubApi,
    key: &std::path::Path,
) -> World {
    let cp = MockControlPlane::start(MockConfig::default())
        .await
        .unwrap();
    let app_id = APP_ID.to_string();
    let api_url = api.url();
    start_world(
        root,
        git,
        cp,
        &[
            "--github-app-id",
            &app_id,
            "--github-app-private-key-file",
            key.to_str().unwrap(),
            "--github-api-url",
            &api_url,
        ],
    )
    .await
}

fn assert_no_secret_leaked(w: &World, api: &MockGithubApi) {
    let tokens = api.issued_tokens();
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    w.assert_none_leaked(&tokens);
    let logs = w.runner.logs();
    for line in test_app_key().private_pem.lines() {
        if !line.starts_with("-----") {
            assert!(!logs.contains(line), "the App key in the log:\n{logs}");
        }
    }
}

#[tokio::test]
async fn an_agent_clones_and_pushes_with_only_the_app_configuration() {
    let api = Arc::new(
        MockGithubApi::start(
            GithubApiConfig::new(APP_ID, &test_app_key().public_pem).with_installation(
                MockInstallation::new(INSTALLATION, "owner", &["owner/repo"]),
            ),
        )
        .await
        .unwrap(),
    );
    let keys = tempfile::tempdir().unwrap();
    let key = test_app_key()
        .write_private_key(keys.path(), "app.pem")
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    seed_repo(root.path());
    let live = api.clone();
    let git = GitServer::start_accepting(root.path(), move |token, _path| {
        live.token_installation(token) == Some(INSTALLATION)
    })
    .await;
    // No GitHub installations: every token must come from the App.
    let w = app_world(root, git, &api, &key).await;
    let url = w.url();

    // An App token the agent prints reaches the control plane as `***`.
    w.clone_push_and_fill("t1", "one", "pushed with the App token")
        .await;
    let minted = api.mints();
    assert!(!minted.is_empty());
    assert!(minted.iter().all(|&i| i == INSTALLATION), "{minted:?}");

    // GitHub revokes every token: the server refuses the runner's, git
    // erases it, and the next try gets a token minted after the revocation
    // (the only kind the server still accepts).
    api.revoke_tokens();
    let out = w
        .turn(
            "t2",
            &format!(
                "{}\n{}\n{}",
                clone(&url, "two"),
                clone(&url, "three"),
                commit_and_push("three", "pushed after the revocation"),
            ),
        )
        .await;
    assert_eq!(out.len(), 3, "{out:?}");
    assert_refused(&out[0]);
    assert!(out[1].contains("CLONED"), "{out:?}");
    assert!(out[2].contains("PUSHED"), "{out:?}");
    assert_eq!(w.head_subject(), "pushed after the revocation");
    assert!(w.git.refused() >= 1);
    assert!(api.mint_count() > minted.len());

    assert_eq!(api.jwt_rejections(), 0, "{:?}", api.requests());
    assert!(
        w.cp.github_token_requests().is_empty(),
        "the control plane was asked for a token"
    );
    assert_no_secret_leaked(&w, &api);
}

/// `owner/name` of a smart-HTTP path (`/owner/name.git/info/refs`).
fn repo_of(path: &str) -> String {
    let mut parts = path.trim_start_matches('/').split('/');
    let owner = parts.next().unwrap_or("");
    let name = parts.next().unwrap_or("");
    format!("{owner}/{}", name.trim_end_matches(".git"))
}

/// A raw `GET path` to the mock GitHub API with `token`; the status code.
async fn api_status(api: &MockGithubApi, path: &str, token: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(api.addr()).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        api.addr()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// In App mode the token an agent receives is minted for the repository
/// its git asked for, with the default permissions: it opens that
/// repository and the mock GitHub (and a git server asking it) refuses it
/// for another repository of the same installation.
#[tokio::test]
async fn an_agents_app_token_opens_its_repository_only() {
    let api = Arc::new(
        MockGithubApi::start(
            GithubApiConfig::new(APP_ID, &test_app_key().public_pem).with_installation(
                MockInstallation::new(INSTALLATION, "owner", &["owner/repo", "owner/other"]),
            ),
        )
        .await
        .unwrap(),
    );
    let keys = tempfile::tempdir().unwrap();
    let key = test_app_key()
        .write_private_key(keys.path(), "app.pem")
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    seed_repo(root.path());
    let repo_dir = root.path().join("owner/repo.git");
    let other_dir = root.path().join("owner/other.git");
    git(
        root.path(),
        &[
            "clone",
            "-q",
            "--bare",
            repo_dir.to_str().unwrap(),
            other_dir.to_str().unwrap(),
        ],
    );
    git(&other_dir, &["config", "http.receivepack", "true"]);
    let live = api.clone();
    let git_server = GitServer::start_accepting(root.path(), move |token, path| {
        live.token_covers(token, &repo_of(path))
    })
    .await;
    let w = app_world(root, git_server, &api, &key).await;

    // The agent's git works for both repositories: one token each.
    let other_url = w.git.url("owner/other.git");
    let out = w
        .turn(
            "t1",
            &format!(
                "{}\n{}\n{}",
                clone(&w.url(), "one"),
                commit_and_push("one", "pushed with a repository token"),
                clone(&other_url, "two"),
            ),
        )
        .await;
    assert!(out[0].contains("CLONED"), "{out:?}");
    assert!(out[1].contains("PUSHED"), "{out:?}");
    assert!(out[2].contains("CLONED"), "{out:?}");
    assert_eq!(w.head_subject(), "pushed with a repository token");
    assert_eq!(w.git.refused(), 0);

    // The token the agent's git receives for owner/repo, asked with the
    // thread's capability exactly as its helper does.
    let file =
        crate::credentials::capability::capability_file(&w.runner.workspace_root(), &w.thread);
    let socket = w.runner.dirs.path().join("state/cred/git.sock");
    let mut child = std::process::Command::new(crate::support::runner_bin())
        .args(["git-credential", "--socket"])
        .arg(&socket)
        .arg("--capability-file")
        .arg(&file)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        write!(
            stdin,
            "protocol=http\nhost={}\npath=owner/repo.git\n\n",
            w.git.host()
        )
        .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let token = stdout
        .lines()
        .find_map(|l| l.strip_prefix("password="))
        .unwrap_or_else(|| panic!("no token: {stdout:?}"))
        .to_owned();

    assert!(api.token_covers(&token, "owner/repo"));
    assert!(!api.token_covers(&token, "owner/other"));
    assert_eq!(
        api.token_repositories(&token),
        Some(vec!["owner/repo".to_owned()])
    );
    let perms: Vec<(String, String)> = api.token_permissions(&token).unwrap().into_iter().collect();
    assert_eq!(
        perms,
        [
            ("contents", "write"),
            ("metadata", "read"),
            ("pull_requests", "write")
        ]
        .map(|(n, l)| (n.to_owned(), l.to_owned()))
    );
    assert_eq!(api_status(&api, "/repos/owner/repo", &token).await, 200);
    assert_eq!(api_status(&api, "/repos/owner/other", &token).await, 404);
    // And the git server, asking the mock, refuses it for owner/other.
    let with_token = |repo: &str| format!("http://x-access-token:{token}@{}/{repo}", w.git.host());
    // Async: the git server runs on this test's runtime.
    let ls = |url: String| {
        tokio::process::Command::new("git")
            .args(["ls-remote", &url])
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", w.root.path())
            .output()
    };
    assert!(
        ls(with_token("owner/repo.git"))
            .await
            .unwrap()
            .status
            .success()
    );
    let refused = ls(with_token("owner/other.git")).await.unwrap();
    assert!(!refused.status.success(), "{refused:?}");
    assert!(w.git.refused() >= 1);

    assert_eq!(api.jwt_rejections(), 0, "{:?}", api.requests());
    assert_no_secret_leaked(&w, &api);
}
