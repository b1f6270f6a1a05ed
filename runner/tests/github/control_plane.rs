//! The control-plane mode: `ListGithubInstallationsForRunner` and
//! `GetGithubInstallationAccessTokenForRunner` through the runner's own
//! authenticated client, against the mock control plane.

use std::time::{Duration, SystemTime};

use agent_runner::config::{GithubConfig, RunArgs, RunConfig, Secret};
use agent_runner::github::{self, GithubError, TokenBroker};
use agent_runner::proxy::ProxyConfig;
use agent_runner::redact::Redactor;
use mock_control_plane::{GithubInstallation, MockConfig, MockControlPlane};

const SECRET: &str = "cp-bearer-secret";

fn installation(id: i64, token: &str, lifetime: Duration, repos: &[&str]) -> GithubInstallation {
    let expires = SystemTime::now() + lifetime;
    GithubInstallation {
        installation_id: id,
        access_token: token.to_owned(),
        expires_unix_ms: expires
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
        repositories: repos.iter().map(|r| (*r).to_owned()).collect(),
    }
}

async fn plane(installations: Vec<GithubInstallation>) -> MockControlPlane {
    let mut config = MockConfig::default()
        .with_bearer_secret(SECRET)
        .with_path_prefix("/grpc");
    for i in installations {
        config = config.with_github_installation(i);
    }
    MockControlPlane::start(config).await.unwrap()
}

/// The broker `run` makes, from the same settings (URL with prefix, secret).
fn broker(cp: &MockControlPlane, secret: &str, redactor: &Redactor) -> TokenBroker {
    let config = RunConfig::resolve(
        RunArgs {
            // Includes the "/grpc" prefix.
            control_plane_url: Some(cp.url()),
            ..Default::default()
        },
        Some(Secret::new(secret.to_owned())),
    )
    .unwrap();
    let client = agent_runner::client::client(&config).unwrap();
    github::broker(
        &GithubConfig::default(),
        Some(client),
        redactor.clone(),
        &ProxyConfig::default(),
    )
    .unwrap()
}

#[tokio::test]
async fn tokens_come_from_the_control_plane_and_are_cached() {
    let cp = plane(vec![
        installation(
            5,
            "ghs_cp_token_five_1",
            Duration::from_secs(3600),
            &["acme/cp"],
        ),
        installation(
            6,
            "ghs_cp_token_six_01",
            Duration::from_secs(3600),
            &["acme/other"],
        ),
    ])
    .await;
    let redactor = Redactor::new();
    let b = broker(&cp, SECRET, &redactor);
    assert_eq!(b.git_host(), "github.com");

    let t = b.token_for_repo("acme", "cp").await.unwrap();
    assert_eq!(t.installation_id, 5);
    assert_eq!(t.token.expose(), "ghs_cp_token_five_1");
    assert_eq!(t.repositories, ["acme/cp"]);
    let mut asked = cp.github_token_requests();
    asked.sort_unstable();
    assert_eq!(asked, [5, 6]);

    b.token_for_repo("acme", "cp").await.unwrap();
    assert_eq!(cp.github_token_requests().len(), 2, "served from the cache");
    assert_eq!(redactor.redact("ghs_cp_token_five_1"), "***");

    let all = b.installations().await.unwrap();
    assert_eq!(all.iter().map(|i| i.id).collect::<Vec<_>>(), [5, 6]);
    assert_eq!(all[1].repositories, ["acme/other"]);

    // Rotation: the control plane now hands out another token; a 401 seen
    // with the old one makes the broker ask again.
    cp.set_github_installations(vec![installation(
        5,
        "ghs_cp_token_five_2",
        Duration::from_secs(3600),
        &["acme/cp"],
    )]);
    b.invalidate(5);
    let rotated = b.token_for_repo("acme", "cp").await.unwrap();
    assert_eq!(rotated.token.expose(), "ghs_cp_token_five_2");
}

#[tokio::test]
async fn short_lived_tokens_are_asked_for_again() {
    let cp = plane(vec![installation(
        5,
        "ghs_cp_short_token",
        Duration::from_secs(60),
        &["acme/cp"],
    )])
    .await;
    let b = broker(&cp, SECRET, &Redactor::new());
    b.token_for_repo("acme", "cp").await.unwrap();
    b.token_for_repo("acme", "cp").await.unwrap();
    // A one-minute token is inside the 5-minute margin: due at once.
    assert_eq!(cp.github_token_requests(), [5, 5]);
}

#[tokio::test]
async fn refusals_and_invalid_answers_are_errors() {
    let cp = plane(vec![
        installation(
            5,
            "ghs_cp_token_five_1",
            Duration::from_secs(3600),
            &["acme/cp"],
        ),
        // Breaks `access_token` min_len 1.
        installation(7, "", Duration::from_secs(3600), &["acme/seven"]),
    ])
    .await;

    let wrong = broker(&cp, "not-the-secret", &Redactor::new());
    let err = wrong.installations().await.unwrap_err();
    assert!(matches!(err, GithubError::Rejected(_)), "{err:?}");
    assert!(err.to_string().contains("Unauthenticated"), "{err}");

    let b = broker(&cp, SECRET, &Redactor::new());
    let err = b.token_for_installation(7).await.unwrap_err();
    assert!(err.to_string().contains("invalid response"), "{err}");
    assert!(err.to_string().contains("access_token"), "{err}");
    assert_eq!(
        b.token_for_installation(99).await.unwrap_err(),
        GithubError::UnknownInstallation(99)
    );
    // Installation 7 fails, 5 does not cover it: named as not covered.
    assert!(matches!(
        b.token_for_repo("acme", "nowhere").await,
        Err(GithubError::NotCovered { .. })
    ));
}
