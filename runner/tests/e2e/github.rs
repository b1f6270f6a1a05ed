//! `agent-runner github installations` and `agent-runner github check` as an
//! operator runs them: the real binary against the mock GitHub API (App
//! mode: the runner signs its JWT, the mock checks it) and against the mock
//! control plane (the runner's URL, prefix and bearer secret). Every token
//! minted is looked for in stdout, stderr and the debug log: never there.

use std::process::Output;
use std::time::{Duration, SystemTime};

use mock_control_plane::github_api::{
    GithubApiConfig, MockGithubApi, MockInstallation, test_app_key,
};
use mock_control_plane::{GithubInstallation, MockConfig, MockControlPlane};
use tokio::process::Command;

use crate::support::{RunnerOpts, RunnerProc, WAIT, runner_bin};

const APP_ID: &str = "777";

/// Run `agent-runner ARGS` with a clean environment; its output.
async fn agent_runner(args: &[&str]) -> Output {
    let mut cmd = Command::new(runner_bin());
    cmd.args(args)
        .env_remove("AGENT_RUNNER_SECRET")
        .env("AGENT_RUNNER_HEALTH_ADDR", "")
        .kill_on_drop(true);
    for (k, _) in std::env::vars() {
        if k.starts_with("AGENT_RUNNER_") && k != "AGENT_RUNNER_HEALTH_ADDR" {
            cmd.env_remove(k);
        }
    }
    tokio::time::timeout(WAIT, cmd.output())
        .await
        .expect("agent-runner github finishes")
        .expect("agent-runner runs")
}

/// `agent-runner github ARGS… SETTINGS…`: whether it succeeded, its stdout
/// and its stderr.
async fn github(args: &[&str], settings: &[&str]) -> (bool, String, String) {
    let out = agent_runner(&[&["github"], args, settings].concat()).await;
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`github`], which must succeed; its stdout and stderr.
async fn github_ok(args: &[&str], settings: &[&str]) -> (String, String) {
    let (ok, stdout, stderr) = github(args, settings).await;
    assert!(ok, "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// `text` holds every one of `needles`.
fn assert_holds(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
}

fn assert_no_token(tokens: &[String], out: &str) {
    assert!(!tokens.is_empty(), "the test minted no token to look for");
    for t in tokens {
        assert!(!out.contains(t.as_str()), "a token leaked:\n{out}");
    }
}

#[tokio::test]
async fn installations_and_check_as_the_github_app() {
    let api = MockGithubApi::start(
        GithubApiConfig::new(APP_ID.parse().unwrap(), &test_app_key().public_pem)
            .with_installation(MockInstallation::new(11, "acme", &["acme/one", "acme/two"]))
            .with_installation(MockInstallation::new(12, "other", &["other/x"])),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = test_app_key()
        .write_private_key(dir.path(), "app.pem")
        .unwrap();
    let url = api.url();
    let key = key.to_str().unwrap();
    let app = [
        "--github-app-id",
        APP_ID,
        "--github-app-private-key-file",
        key,
        "--github-api-url",
        url.as_str(),
        "--log-level",
        "debug",
    ];

    let (stdout, stderr) = github_ok(&["installations"], &app).await;
    assert_holds(
        &stdout,
        &[
            "2 installation(s) from GitHub App 777",
            "installation 11 (acme): 2 repositories; token expires",
            "    acme/two",
            "installation 12 (other): 1 repositories",
        ],
    );
    assert_eq!(api.mint_count(), 2);
    assert_eq!(api.jwt_rejections(), 0);

    let (stdout2, stderr2) = github_ok(&["check", "--repo", "acme/two"], &app).await;
    assert!(
        stdout2.contains("acme/two: covered by installation 11; token expires"),
        "{stdout2}"
    );

    let (ok, stdout3, stderr3) = github(&["check", "--repo", "acme/nope"], &app).await;
    assert!(!ok);
    assert!(
        stderr3.contains("no GitHub installation available to this runner covers acme/nope"),
        "{stderr3}"
    );

    let all = format!("{stdout}{stderr}{stdout2}{stderr2}{stdout3}{stderr3}");
    assert!(
        stderr.contains("GitHub installation token refreshed"),
        "{stderr}"
    );
    assert_no_token(&api.issued_tokens(), &all);
}

#[tokio::test]
async fn check_through_the_control_plane() {
    const TOKEN: &str = "ghs_e2e_control_plane_token_0001";
    let expires = SystemTime::now() + Duration::from_secs(3600);
    let cp = MockControlPlane::start(
        MockConfig::default()
            .with_bearer_secret("e2e-github-secret")
            .with_path_prefix("/grpc")
            .with_github_installation(GithubInstallation {
                installation_id: 5,
                access_token: TOKEN.into(),
                expires_unix_ms: expires
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64,
                repositories: vec!["acme/cp".into()],
            }),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "e2e-github-secret\n").unwrap();
    let url = cp.url();
    let common = [
        "--control-plane-url",
        url.as_str(),
        "--secret-file",
        secret.to_str().unwrap(),
        "--log-level",
        "debug",
    ];

    let (stdout, stderr) = github_ok(&["check", "--repo", "acme/cp"], &common).await;
    assert!(
        stdout.contains("acme/cp: covered by installation 5; token expires"),
        "{stdout}"
    );
    assert_eq!(cp.github_token_requests(), [5]);

    let (stdout2, stderr2) = github_ok(&["installations"], &common).await;
    assert_holds(
        &stdout2,
        &[
            "1 installation(s) from the control plane",
            "installation 5: 1 repositories",
            "    acme/cp",
        ],
    );

    // A wrong secret is refused, and said so.
    std::fs::write(&secret, "wrong\n").unwrap();
    let (ok, stdout3, stderr3) = github(&["installations"], &common).await;
    assert!(!ok);
    assert!(stderr3.contains("Unauthenticated"), "{stderr3}");

    let all = format!("{stdout}{stderr}{stdout2}{stderr2}{stdout3}{stderr3}");
    assert_no_token(&[TOKEN.to_owned()], &all);
}

#[tokio::test]
async fn a_bad_app_key_stops_the_runner_naming_the_setting() {
    let cp = MockControlPlane::start(MockConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.pem");
    std::fs::write(
        &bad,
        "-----BEGIN RSA PRIVATE KEY-----\nbm90LWEta2V5LWF0LWFsbA==\n-----END RSA PRIVATE KEY-----\n",
    )
    .unwrap();
    let mut r = RunnerProc::start(
        RunnerOpts::new(cp.url())
            .arg("--github-app-id")
            .arg("9")
            .arg("--github-app-private-key-file")
            .arg(bad.to_str().unwrap()),
    );
    let code = r.wait_exit(WAIT).await;
    assert_eq!(code, Some(1), "{}", r.logs());
    let logs = r.logs();
    assert_holds(
        &logs,
        &["github_app_private_key_file", "not an RSA private key"],
    );
    assert!(
        !logs.contains("bm90LWEta2V5"),
        "the key is never quoted: {logs}"
    );
    assert!(cp.registrations().is_empty(), "stopped before registering");
}
