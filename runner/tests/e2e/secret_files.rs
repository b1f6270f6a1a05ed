//! Every file a setting names as secret is out of agents' reach, even in a
//! directory they may read: the real runner, with each such file under
//! `/etc` (a system directory every sandbox reads, where operators keep
//! them: deploy/systemd), against the mock control plane. A scripted `run`
//! step `cat`s each; every one is refused, while a plain file beside them
//! reads fine (so the directory is visible), and with `--sandbox off` the
//! same step reads every one (so the probe can fail).
//!
//! Which settings those are is `runner/src/config/files.rs`; its unit tests
//! hold that table against every file-valued setting.

use std::path::{Path, PathBuf};

use crate::support::*;

/// A directory of this test under `/etc`, removed when dropped.
struct EtcDir(PathBuf);

impl EtcDir {
    /// `None` (the test skipped, saying why) where `/etc` is not writable.
    fn new() -> Option<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = PathBuf::from(format!(
            "/etc/agent-runner-e2e-{}-{nanos}",
            std::process::id()
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => Some(Self(dir)),
            Err(e) => {
                test_kit::skip_this_test(&format!(
                    "secret files under /etc: cannot create {}: {e}",
                    dir.display()
                ));
                None
            }
        }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for EtcDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `name=OPEN` or `name=DENIED` for `cat PATH` of each `(name, path)`.
fn cat_probe(files: &[(&str, &Path)]) -> String {
    let t = "t(){ n=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$n=OPEN\"; else echo \"$n=DENIED\"; fi; }";
    std::iter::once(t.to_owned())
        .chain(
            files
                .iter()
                .map(|(name, path)| format!("t {name} cat {}", path.display())),
        )
        .collect::<Vec<_>>()
        .join("; ")
}

/// The settings whose files the probe reads.
const SECRETS: [&str; 6] = [
    "config",
    "secret_file",
    "github_app_private_key_file",
    "code_agent_auth_token_file",
    "sandbox_protect",
    "credentials_directory",
];

/// A runner in sandbox `mode` with every secret-file setting pointing
/// under `/etc`, and one scripted `run` step `cat`ing each and a public
/// file beside them: its output (`name=OPEN|DENIED` lines); `None` where
/// `/etc` is not writable (skipped, said).
async fn probe_secret_files(mode: &str) -> Option<String> {
    let etc = EtcDir::new()?;
    let config = etc.file("runner.toml", "drain_timeout = \"1s\"\n");
    let secret = etc.file("secret", "e2e-bearer-secret\n");
    let app_key = mock_control_plane::github_api::test_app_key()
        .write_private_key(etc.path(), "app.pem")
        .unwrap();
    let token = etc.file("engine-token", "e2e-engine-token\n");
    // The systemd EnvironmentFile, which no setting names: --sandbox-protect.
    let env_file = etc.file("env", "AGENT_RUNNER_LOG_LEVEL=debug\n");
    // systemd's LoadCredential= directory.
    let credential = etc.file("credentials/bearer", "e2e-credential\n");
    let public = etc.file("public.txt", "anyone may read this\n");
    let cp = mock().await;
    let opts = RunnerOpts::new(cp.url())
        .arg("--sandbox")
        .arg(mode)
        .arg("--sdk")
        .arg("scripted")
        .arg("--config")
        .arg(config.to_str().unwrap())
        .env("AGENT_RUNNER_SECRET_FILE", secret.to_str().unwrap())
        .arg("--github-app-id")
        .arg("1")
        .arg("--github-app-private-key-file")
        .arg(app_key.to_str().unwrap())
        .arg("--github-api-url")
        .arg("http://127.0.0.1:9")
        .arg("--code-agent-endpoint")
        .arg("http://127.0.0.1:9")
        .arg("--code-agent-auth-token-file")
        .arg(token.to_str().unwrap())
        .arg("--sandbox-protect")
        .arg(env_file.to_str().unwrap())
        .env(
            "CREDENTIALS_DIRECTORY",
            credential.parent().unwrap().to_str().unwrap(),
        );
    let runner = RunnerProc::start(opts);
    cp.wait_connected(WAIT)
        .await
        .unwrap_or_else(|e| panic!("connects: {e:?}\n{}", runner.logs()));
    create_agent(&cp, "a").await;
    let thread = create_thread(&cp, "a", "t1").await;
    let files: [&Path; 6] = [&config, &secret, &app_key, &token, &env_file, &credential];
    let mut probes: Vec<(&str, &Path)> = SECRETS.into_iter().zip(files).collect();
    probes.push(("public", &public));
    let line = format!("run {}", cat_probe(&probes));
    send(&cp, "m1", user_message("a", &thread, &line, false)).await;
    turn_completed(&cp, "m1").await;
    let outputs = command_outputs(&replies(&cp, "m1"));
    assert_eq!(outputs.len(), 1, "{}", runner.logs());
    Some(outputs[0].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_file_a_secret_setting_names_is_readable_by_agents() {
    if agent_launcher::probe_host().landlock_abi().is_none() {
        test_kit::skip_this_test("no Landlock on this host: agents can read /etc files");
        return;
    }
    let Some(output) = probe_secret_files("best-effort").await else {
        return;
    };
    for name in SECRETS {
        assert!(
            output.contains(&format!("{name}=DENIED")),
            "{name}\n{output}"
        );
    }
    assert!(output.contains("public=OPEN"), "{output}");
}

/// The same probe with `--sandbox off` reads every one: the test above
/// can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sandbox_off_every_secret_file_is_readable() {
    let Some(output) = probe_secret_files("off").await else {
        return;
    };
    for name in SECRETS.iter().chain(&["public"]) {
        assert!(
            output.contains(&format!("{name}=OPEN")),
            "{name} with --sandbox off\n{output}"
        );
    }
}
