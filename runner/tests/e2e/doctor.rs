//! `agent-runner doctor` through the real binary: against the
//! mock it passes (exit 0) and says where settings came from; a wrong secret
//! and an unreachable URL each fail the control-plane check (exit 1).

use serde_json::Value;

use crate::support::*;

/// `doctor --json` with the mock's URL as a flag and the dirs from env;
/// exit code and report.
pub(crate) async fn doctor(url: &str, env: &[(&str, &str)]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(runner_bin())
        .args([
            "doctor",
            "--json",
            "--sdk",
            "scripted",
            "--control-plane-url",
            url,
        ])
        .env("AGENT_RUNNER_STATE_DIR", dir.path().join("state"))
        .env("AGENT_RUNNER_WORKSPACE_ROOT", dir.path().join("ws"))
        .env_remove("AGENT_RUNNER_SECRET")
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), report, stderr)
}

pub(crate) fn find<'a>(report: &'a Value, list: &str, field: &str, name: &str) -> &'a Value {
    report[list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c[field] == name))
        .unwrap_or_else(|| panic!("no {name} in {list}: {report:#}"))
}

#[tokio::test]
async fn doctor_passes_against_the_mock_and_says_where_values_came_from() {
    let cp = mock().await;
    let (code, report, stderr) = doctor(&cp.url(), &[]).await;
    assert_eq!(code, 0, "{report:#}\n{stderr}");
    assert_eq!(report["would_start"], true);
    let control = find(&report, "checks", "check", "control plane");
    assert_eq!(control["outcome"], "ok", "{control:#}");
    assert!(
        control["detail"]
            .as_str()
            .unwrap()
            .contains("credentials accepted"),
        "{control:#}"
    );
    for name in ["state dir", "workspace root", "sdk scripted", "git"] {
        assert_eq!(
            find(&report, "checks", "check", name)["outcome"],
            "ok",
            "{name}: {report:#}"
        );
    }
    let sandbox = find(&report, "checks", "check", "sandbox");
    assert!(
        sandbox["detail"]
            .as_str()
            .unwrap()
            .contains("user namespaces"),
        "{sandbox:#}"
    );
    assert_eq!(
        find(&report, "settings", "key", "control_plane_url")["source"],
        "flag --control-plane-url"
    );
    assert_eq!(
        find(&report, "settings", "key", "state_dir")["source"],
        "env AGENT_RUNNER_STATE_DIR"
    );
    assert_eq!(
        find(&report, "settings", "key", "sandbox")["source"],
        "default"
    );
    // Nothing was registered: the probe is read-only.
    assert!(cp.registrations().is_empty());
}

#[tokio::test]
async fn doctor_fails_on_a_wrong_secret_without_showing_it() {
    let cp = mock_control_plane::MockControlPlane::start(
        mock_control_plane::MockConfig::default().with_bearer_secret("the-right-one"),
    )
    .await
    .unwrap();
    let (code, report, stderr) =
        doctor(&cp.url(), &[("AGENT_RUNNER_SECRET", "a-wrong-secret")]).await;
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["would_start"], false);
    let control = find(&report, "checks", "check", "control plane");
    assert_eq!(control["outcome"], "fail", "{control:#}");
    assert!(
        control["detail"]
            .as_str()
            .unwrap()
            .contains("credentials REFUSED"),
        "{control:#}"
    );
    assert_eq!(
        find(&report, "settings", "key", "secret")["source"],
        "env AGENT_RUNNER_SECRET"
    );
    assert!(!report.to_string().contains("a-wrong-secret"), "{report:#}");
    assert!(!stderr.contains("a-wrong-secret"), "{stderr}");
}

#[tokio::test]
async fn doctor_fails_on_an_unreachable_control_plane() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let (code, report, _) = doctor(&url, &[]).await;
    assert_eq!(code, 1, "{report:#}");
    let control = find(&report, "checks", "check", "control plane");
    assert_eq!(control["outcome"], "fail", "{control:#}");
    assert!(
        control["detail"].as_str().unwrap().contains("cannot reach"),
        "{control:#}"
    );
}
