//! The App mode: the runner's own JWT and octocrab against the mock GitHub
//! API.

use std::sync::Arc;
use std::time::Duration;

use agent_runner::config::{GithubAppConfig, GithubConfig};
use agent_runner::github::app::AppSource;
use agent_runner::github::jwt::AppKey;
use agent_runner::github::{self, GithubError, TokenBroker};
use agent_runner::proxy::ProxyConfig;
use agent_runner::redact::Redactor;
use mock_control_plane::github_api::{
    GithubApiConfig, MockGithubApi, MockInstallation, Route, TestAppKey, other_test_app_key,
    test_app_key,
};

use crate::{counter, fast_retries};

const APP_ID: u64 = 4242;

async fn mock(lifetime: Duration) -> MockGithubApi {
    MockGithubApi::start(
        GithubApiConfig::new(APP_ID, &test_app_key().public_pem)
            .with_installation(MockInstallation::new(11, "acme", &["acme/one", "acme/two"]))
            .with_installation(MockInstallation::new(12, "other", &["other/x"]))
            .with_token_lifetime(lifetime),
    )
    .await
    .unwrap()
}

fn broker_with(api: &MockGithubApi, key: &TestAppKey, redactor: &Redactor) -> TokenBroker {
    let key = AppKey::from_pem(key.private_pem.as_bytes()).unwrap();
    let source = AppSource::new(APP_ID, key, &api.url(), ProxyConfig::default()).unwrap();
    TokenBroker::new(
        Arc::new(source),
        redactor.clone(),
        "127.0.0.1",
        fast_retries(),
    )
}

#[tokio::test]
async fn installations_repositories_and_tokens_through_octocrab() {
    let api = mock(Duration::from_secs(3600)).await;
    let redactor = Redactor::new();
    // Built the way the runner builds it, from its configuration.
    let config = GithubConfig {
        app: Some(GithubAppConfig {
            app_id: APP_ID,
            key: AppKey::from_pem(test_app_key().private_pem.as_bytes()).unwrap(),
            api_url: api.url(),
            token_permissions: Default::default(),
        }),
        host: "127.0.0.1:1".into(),
    };
    let broker = github::broker(&config, None, redactor.clone(), &ProxyConfig::default()).unwrap();
    assert_eq!(broker.git_host(), "127.0.0.1:1");
    let minted_before = counter("agent_runner_token_refreshes_total");

    let all = broker.installations().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].id, 11);
    assert_eq!(all[0].account.as_deref(), Some("acme"));
    assert_eq!(all[0].repositories, ["acme/one", "acme/two"]);
    assert_eq!(all[1].repositories, ["other/x"]);
    assert!(all.iter().all(|i| i.error.is_none()));
    assert_eq!(api.mint_count(), 2);
    assert_eq!(
        api.jwt_rejections(),
        0,
        "the JWT passed the signature check"
    );

    let t = broker.token_for_repo("acme", "two").await.unwrap();
    assert_eq!(t.installation_id, 11);
    assert_eq!(api.token_installation(t.token.expose()), Some(11));
    assert_eq!(api.mint_count(), 2, "cached from installations()");
    assert_eq!(
        broker
            .token_for_repo("other", "x")
            .await
            .unwrap()
            .installation_id,
        12
    );
    assert!(matches!(
        broker.token_for_repo("acme", "three").await,
        Err(GithubError::NotCovered { repo }) if repo == "acme/three"
    ));
    assert_eq!(
        redactor.redact(&format!("push {}", t.token.expose())),
        "push ***"
    );
    assert!(counter("agent_runner_token_refreshes_total") >= minted_before + 2);
}

#[tokio::test]
async fn a_jwt_signed_with_another_key_is_refused() {
    let api = mock(Duration::from_secs(3600)).await;
    let broker = broker_with(&api, other_test_app_key(), &Redactor::new());
    let err = broker.installations().await.unwrap_err();
    assert!(matches!(err, GithubError::Rejected(_)), "{err:?}");
    assert!(err.to_string().contains("401"), "{err}");
    assert!(api.jwt_rejections() >= 1);
    assert_eq!(api.mint_count(), 0);
}

#[tokio::test]
async fn a_server_error_while_minting_is_retried() {
    let api = mock(Duration::from_secs(3600)).await;
    let broker = broker_with(&api, test_app_key(), &Redactor::new());
    let failures_before = counter("agent_runner_token_refresh_failures_total");
    api.fail_next(Route::Mint, 500, 2);
    let t = broker.token_for_repo("acme", "one").await.unwrap();
    assert_eq!(api.token_installation(t.token.expose()), Some(11));
    let posts = api
        .requests()
        .iter()
        .filter(|r| r.starts_with("POST /app/installations/"))
        .count();
    assert_eq!(posts, api.mint_count() + 2, "two failures, then the mints");
    assert!(counter("agent_runner_token_refresh_failures_total") >= failures_before + 2);
}

#[tokio::test]
async fn short_lived_tokens_are_replaced_long_lived_ones_reused() {
    // An hour: the second ask is served from the cache.
    let api = mock(Duration::from_secs(3600)).await;
    let broker = broker_with(&api, test_app_key(), &Redactor::new());
    let a = broker.token_for_repo("acme", "one").await.unwrap();
    let b = broker.token_for_repo("acme", "one").await.unwrap();
    assert_eq!(a.token, b.token);
    assert_eq!(api.mint_count(), 2, "one per installation while learning");

    // Two seconds (under the 5-minute margin): every ask gets a new token,
    // and the new one works after the old one expired.
    let api = mock(Duration::from_secs(2)).await;
    let broker = broker_with(&api, test_app_key(), &Redactor::new());
    let first = broker.token_for_repo("acme", "one").await.unwrap();
    let minted = api.mint_count();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        api.token_installation(first.token.expose()),
        None,
        "expired"
    );
    let second = broker.token_for_repo("acme", "one").await.unwrap();
    assert_ne!(second.token, first.token);
    assert_eq!(api.mint_count(), minted + 1);
    assert_eq!(api.token_installation(second.token.expose()), Some(11));
}

#[tokio::test]
async fn a_refused_token_is_replaced_after_invalidate() {
    let api = mock(Duration::from_secs(3600)).await;
    let broker = broker_with(&api, test_app_key(), &Redactor::new());
    let first = broker.token_for_repo("acme", "one").await.unwrap();
    api.revoke_tokens();
    assert_eq!(api.token_installation(first.token.expose()), None);
    // Still cached: only a refusal seen by a user tells the broker.
    let cached = broker.token_for_repo("acme", "one").await.unwrap();
    assert_eq!(cached.token, first.token);
    broker.invalidate(first.installation_id);
    let fresh = broker.token_for_repo("acme", "one").await.unwrap();
    assert_ne!(fresh.token, first.token);
    assert_eq!(api.token_installation(fresh.token.expose()), Some(11));
}

#[tokio::test]
async fn an_unknown_installation_and_a_refused_repository_listing() {
    let api = mock(Duration::from_secs(3600)).await;
    let broker = broker_with(&api, test_app_key(), &Redactor::new());
    assert_eq!(
        broker.token_for_installation(99).await.unwrap_err(),
        GithubError::UnknownInstallation(99)
    );
    api.fail_next(Route::Repositories, 401, 1);
    let err = broker.token_for_installation(11).await.unwrap_err();
    assert!(matches!(err, GithubError::Rejected(_)), "{err:?}");
    assert!(
        err.to_string().contains("repositories of installation 11"),
        "{err}"
    );
}

/// Agents' tokens in App mode: minted for the one repository asked for,
/// with the configured permissions, cached per (installation, repository);
/// the mock GitHub refuses each for any other repository.
#[tokio::test]
async fn agents_get_tokens_for_one_repository_with_the_configured_permissions() {
    use agent_runner::config::TokenPermissions;

    let api = mock(Duration::from_secs(3600)).await;
    let key = AppKey::from_pem(test_app_key().private_pem.as_bytes()).unwrap();
    let perms = TokenPermissions::parse("contents:read,metadata:read").unwrap();
    let source = AppSource::new(APP_ID, key, &api.url(), ProxyConfig::default())
        .unwrap()
        .with_permissions(perms);
    let broker = TokenBroker::new(
        Arc::new(source),
        Redactor::new(),
        "127.0.0.1",
        fast_retries(),
    );
    assert!(!broker.agent_token_cached("acme", "one"));
    let one = broker.token_for_agent("acme", "one").await.unwrap();
    let tok = one.token.expose();
    assert_eq!(one.installation_id, 11);
    assert_eq!(one.repositories, ["acme/one"]);
    assert!(api.token_covers(tok, "acme/one"));
    assert!(
        !api.token_covers(tok, "acme/two"),
        "same installation, other repository"
    );
    assert!(!api.token_covers(tok, "other/x"));
    assert_eq!(
        api.token_repositories(tok),
        Some(vec!["acme/one".to_owned()])
    );
    let perms = api.token_permissions(tok).unwrap();
    assert_eq!(
        perms.into_iter().collect::<Vec<_>>(),
        vec![
            ("contents".to_owned(), "read".to_owned()),
            ("metadata".to_owned(), "read".to_owned())
        ]
    );
    // Cached per (installation, repository).
    assert!(broker.agent_token_cached("acme", "one"));
    assert!(!broker.agent_token_cached("acme", "two"));
    let minted = api.mint_count();
    let again = broker.token_for_agent("ACME", "one").await.unwrap();
    assert_eq!(again.token, one.token);
    assert_eq!(api.mint_count(), minted);
    let two = broker.token_for_agent("acme", "two").await.unwrap();
    assert_ne!(two.token, one.token);
    assert!(api.token_covers(two.token.expose(), "acme/two"));
    assert!(!api.token_covers(two.token.expose(), "acme/one"));
    // Refused by GitHub (erase): only that token is forgotten.
    assert_eq!(broker.forget_token(one.token.expose()), Some(11));
    assert!(!broker.agent_token_cached("acme", "one"));
    assert!(broker.agent_token_cached("acme", "two"));
    let fresh = broker.token_for_agent("acme", "one").await.unwrap();
    assert_ne!(fresh.token, one.token);
    assert!(api.token_covers(fresh.token.expose(), "acme/one"));
    // The installation's own token (skills, `github check`) is untouched.
    let own = broker.token_for_repo("acme", "two").await.unwrap();
    assert!(api.token_covers(own.token.expose(), "acme/one"));
    assert!(api.token_covers(own.token.expose(), "acme/two"));
    assert!(matches!(
        broker.token_for_agent("acme", "three").await,
        Err(GithubError::NotCovered { .. })
    ));
}
