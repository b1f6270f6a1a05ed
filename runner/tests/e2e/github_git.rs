//! An agent clones and pushes a GitHub repository with nothing but the
//! runner's GitHub App configuration (issue 5's "done when"): the real
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
use crate::credentials::{World, assert_refused, clone, commit_and_push, seed_repo, start_world};

const APP_ID: u64 = 5150;
const INSTALLATION: i64 = 31337;

/// Every token the mock issued, and the private key's lines, are in neither
/// the runner's log nor any update.
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
    let git = GitServer::start_accepting(root.path(), move |token| {
        live.token_installation(token) == Some(INSTALLATION)
    })
    .await;
    // No GitHub installations: every token must come from the App.
    let cp = MockControlPlane::start(MockConfig::default())
        .await
        .unwrap();
    let app_id = APP_ID.to_string();
    let api_url = api.url();
    let w = start_world(
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
    .await;
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
