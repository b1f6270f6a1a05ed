//! Every file a setting names as secret is out of agents' reach, even in a
//! directory they may read: the real runner, with each such file under
//! `/etc` (a system directory every sandbox reads, where operators keep
//! them: deploy/systemd), against the mock control plane. A scripted `run`
//! step `cat`s each; every one is refused, while a plain file beside them
//! reads fine (so the directory is visible and the probe can fail).
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_file_a_secret_setting_names_is_readable_by_agents() {
    if agent_launcher::probe_host().landlock_abi().is_none() {
        test_kit::skip_this_test("no Landlock on this host: agents can read /etc files");
        return;
    }
    let Some(etc) = EtcDir::new() else { return };
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
    let secrets: [(&str, &Path); 6] = [
        ("config", &config),
        ("secret_file", &secret),
        ("github_app_private_key_file", &app_key),
        ("code_agent_auth_token_file", &token),
        ("sandbox_protect", &env_file),
        ("credentials_directory", &credential),
    ];
    let mut probes = secrets.to_vec();
    probes.push(("public", &public));
    let line = format!("run {}", cat_probe(&probes));
    send(&cp, "m1", user_message("a", &thread, &line, false)).await;
    turn_completed(&cp, "m1").await;
    let outputs = command_outputs(&replies(&cp, "m1"));
    assert_eq!(outputs.len(), 1, "{}", runner.logs());
    let output = &outputs[0];
    for (name, _) in secrets {
        assert!(
            output.contains(&format!("{name}=DENIED")),
            "{name}\n{output}"
        );
    }
    assert!(output.contains("public=OPEN"), "{output}");
}
