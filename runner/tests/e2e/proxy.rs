//! Outbound proxies: the ControlChannel through a real HTTP
//! proxy on loopback (Debian's `tinyproxy`, installed by the test with apt
//! when root and missing; skipped with the reason otherwise), a `NO_PROXY`
//! match going direct, and a proxy that refuses giving an error that names
//! it (and not its credentials).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::support::*;

/// tinyproxy's path, installing the Debian package when root. `Err`: why
/// it cannot run here.
fn tinyproxy() -> Result<PathBuf, String> {
    let installed = || {
        ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    };
    if let Some(p) = installed() {
        return Ok(p);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "tinyproxy is not installed and the test is not root (cannot apt-get it)".into(),
        );
    }
    let apt = |args: &[&str]| {
        std::process::Command::new("apt-get")
            .args(["-o", "DPkg::Lock::Timeout=600", "-qq"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("apt-get: {e}"))
    };
    let update = apt(&["update"])?;
    if !update.status.success() {
        return Err(format!(
            "apt-get update failed: {}",
            String::from_utf8_lossy(&update.stderr)
        ));
    }
    let install = apt(&["install", "-y", "--no-install-recommends", "tinyproxy"])?;
    assert!(
        install.status.success(),
        "apt-get install tinyproxy failed: {}",
        String::from_utf8_lossy(&install.stderr)
    );
    installed().ok_or_else(|| "tinyproxy installed but not found".into())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A tinyproxy in the foreground on a free loopback port; `extra` config
/// lines. Killed when dropped.
struct Tinyproxy {
    child: tokio::process::Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tinyproxy {
    async fn start(bin: &Path, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("tinyproxy.log");
        let port = free_port();
        let conf = dir.path().join("tinyproxy.conf");
        std::fs::write(
            &conf,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 50\n\
                 LogFile \"{}\"\nLogLevel Info\nAllow 127.0.0.1\n{extra}\n",
                log.display()
            ),
        )
        .unwrap();
        let child = tokio::process::Command::new(bin)
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start tinyproxy");
        let me = Self {
            child,
            port,
            log,
            _dir: dir,
        };
        // Listening?
        let deadline = tokio::time::Instant::now() + WAIT;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "tinyproxy did not listen on {port}:\n{}",
                me.log_text()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        me
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("a port in the mock's URL")
}

#[tokio::test]
async fn the_control_channel_and_agents_go_through_http_proxy() {
    let bin = match tinyproxy() {
        Ok(b) => b,
        Err(why) => {
            test_kit::skip_this_test(&format!("proxy e2e: {why}"));
            return;
        }
    };
    let proxy = Tinyproxy::start(&bin, "").await;
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port);
    let (cp, runner) = agent_with(|o| {
        o.env("HTTP_PROXY", &proxy_url)
            .env("NO_PROXY", "")
            .env("no_proxy", "")
    })
    .await;
    // The proxy carried it: tinyproxy logged the CONNECT to the mock.
    let mock_port = port_of(&cp.url());
    let log = proxy.log_text();
    assert!(
        log.contains("CONNECT") && log.contains(&format!("127.0.0.1:{mock_port}")),
        "no CONNECT to the mock in tinyproxy's log:\n{log}\nrunner:\n{}",
        runner.logs()
    );
    // Agents' commands see the same proxy.
    let thread = create_thread(&cp, "a", "t").await;
    send(
        &cp,
        "m",
        user_message("a", &thread, "run echo \"proxy=$HTTP_PROXY\"", false),
    )
    .await;
    turn_completed(&cp, "m").await;
    let outputs = command_outputs(&replies(&cp, "m"));
    assert!(
        outputs
            .iter()
            .any(|o| o.contains(&format!("proxy={proxy_url}"))),
        "{outputs:?}"
    );
}

#[tokio::test]
async fn no_proxy_goes_direct() {
    // A proxy address nothing listens on: only a direct connection works.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (cp, runner) = connected_with(|o| {
        o.env("HTTP_PROXY", &dead)
            .env("HTTPS_PROXY", &dead)
            .env("NO_PROXY", "localhost,127.0.0.1")
    })
    .await;
    assert!(!cp.registrations().is_empty(), "{}", runner.logs());
    // The same proxy without the NO_PROXY match is used, and fails.
    let through = mock().await;
    let refused = RunnerProc::start(
        RunnerOpts::new(through.url())
            .env("HTTP_PROXY", &dead)
            .env("NO_PROXY", "")
            .env("no_proxy", ""),
    );
    refused
        .wait_log(&format!("proxy {dead}: cannot connect"))
        .await;
    assert!(through.registrations().is_empty(), "{}", refused.logs());
}

#[tokio::test]
async fn a_refusing_proxy_is_named_in_the_error_without_its_credentials() {
    let bin = match tinyproxy() {
        Ok(b) => b,
        Err(why) => {
            test_kit::skip_this_test(&format!("proxy e2e: {why}"));
            return;
        }
    };
    // CONNECT only to 443: the mock's port is refused (403).
    let proxy = Tinyproxy::start(&bin, "ConnectPort 443").await;
    let cp = mock().await;
    let runner = RunnerProc::start(
        RunnerOpts::new(cp.url())
            .arg("--proxy")
            .arg(&format!("http://op:hunter2@127.0.0.1:{}", proxy.port))
            .env("NO_PROXY", "")
            .env("no_proxy", ""),
    );
    let expected = format!(
        "proxy http://<credentials>@127.0.0.1:{} refused CONNECT 127.0.0.1:{}",
        proxy.port,
        port_of(&cp.url())
    );
    runner.wait_log(&expected).await;
    let logs = runner.logs();
    assert!(!logs.contains("hunter2"), "{logs}");
    assert!(
        cp.registrations().is_empty(),
        "registered through a refusing proxy"
    );
}

/// The GitHub App's own API calls (`agent-runner github installations`:
/// App JWT → installations list → installation tokens) against the mock
/// GitHub API on loopback, with `args` and `env` added.
async fn github_installations(
    api: &mock_control_plane::github_api::MockGithubApi,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let key = mock_control_plane::github_api::test_app_key()
        .write_private_key(dir.path(), "app.pem")
        .unwrap();
    let mut cmd = tokio::process::Command::new(runner_bin());
    cmd.args(["github", "installations", "--github-app-id", "777"])
        .arg("--github-app-private-key-file")
        .arg(&key)
        .args(["--github-api-url", &api.url(), "--log-level", "debug"])
        .args(args)
        .env_remove("AGENT_RUNNER_SECRET")
        .env_remove("AGENT_RUNNER_PROXY")
        .env("AGENT_RUNNER_HEALTH_ADDR", "")
        .kill_on_drop(true);
    for name in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        cmd.env_remove(name);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::time::timeout(WAIT, cmd.output())
        .await
        .expect("agent-runner github finishes")
        .expect("agent-runner runs")
}

async fn mock_github() -> mock_control_plane::github_api::MockGithubApi {
    use mock_control_plane::github_api::{
        GithubApiConfig, MockGithubApi, MockInstallation, test_app_key,
    };
    MockGithubApi::start(
        GithubApiConfig::new(777, &test_app_key().public_pem)
            .with_installation(MockInstallation::new(11, "acme", &["acme/one"])),
    )
    .await
    .unwrap()
}

fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_github_app_api_goes_through_the_proxy() {
    let bin = match tinyproxy() {
        Ok(b) => b,
        Err(why) => {
            test_kit::skip_this_test(&format!("proxy e2e: {why}"));
            return;
        }
    };
    let proxy = Tinyproxy::start(&bin, "").await;
    let api = mock_github().await;
    let flag = format!("http://op:hunter2@127.0.0.1:{}", proxy.port);
    let out = github_installations(&api, &["--proxy", &flag], &[]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("installation 11 (acme): 1 repositories"),
        "{stdout}"
    );
    assert_eq!(api.mint_count(), 1);
    let log = proxy.log_text();
    assert!(
        log.contains("CONNECT") && log.contains(&format!("127.0.0.1:{}", port_of(&api.url()))),
        "no CONNECT to the mock GitHub in tinyproxy's log:\n{log}"
    );
    assert!(!format!("{stdout}{stderr}").contains("hunter2"));
}

#[tokio::test]
async fn the_github_app_api_honours_no_proxy_and_names_a_dead_proxy() {
    let api = mock_github().await;
    // A proxy nothing listens on: only a direct connection works.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let direct = github_installations(
        &api,
        &[],
        &[("HTTP_PROXY", &dead), ("NO_PROXY", "localhost,127.0.0.1")],
    )
    .await;
    let (stdout, stderr) = text(&direct);
    assert!(direct.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("installation 11 (acme)"), "{stdout}");
    let through = github_installations(&api, &[], &[("HTTP_PROXY", &dead)]).await;
    let (stdout, stderr) = text(&through);
    assert!(!through.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("proxy {dead}: cannot connect")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_engines_model_calls_go_through_the_proxy_flag() {
    use crate::code_agent::{coding_turn, model_env, script};
    let bin = match tinyproxy() {
        Ok(b) => b,
        Err(why) => {
            test_kit::skip_this_test(&format!("proxy e2e: {why}"));
            return;
        }
    };
    let proxy = Tinyproxy::start(&bin, "").await;
    let llm = code_agent_engine::testing::MockLlm::start(script()).await;
    let cp = mock().await;
    let mut opts = RunnerOpts::new(cp.url())
        .arg("--sdk")
        .arg("code-agent")
        .arg("--proxy")
        .arg(&format!("http://127.0.0.1:{}", proxy.port));
    for (k, v) in model_env(&llm) {
        opts = opts.env(&k, &v);
    }
    // Only the flag: no proxy variables for reqwest to find by itself.
    for name in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        opts = opts.env(name, "");
    }
    let runner = RunnerProc::start(opts);
    coding_turn(&cp, &runner, &llm).await;
    // A plain-http model endpoint is forwarded by the proxy (absolute-URI
    // request, not CONNECT): tinyproxy logs the request line.
    let log = proxy.log_text();
    let llm_port = port_of(llm.base_url().trim_end_matches("/v1"));
    assert!(
        log.contains(&format!("127.0.0.1:{llm_port}")) && log.contains("chat/completions"),
        "no model call in tinyproxy's log:\n{log}\nrunner:\n{}",
        runner.logs()
    );
}

/// A plain HTTP server on loopback answering every request with `body`;
/// sends each request head it got on the channel.
async fn http_origin(body: &'static str) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).await.unwrap_or(0) == 1 {
                    head.push(b[0]);
                }
                let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    (port, rx)
}

#[tokio::test]
async fn agents_reach_an_authenticating_proxy_without_its_credentials() {
    agents_through_an_authenticating_proxy(false, |o, url| {
        let mut o = o.arg("--proxy").arg(url);
        for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
            o = o.env(name, "");
        }
        o
    })
    .await;
}

#[tokio::test]
async fn credentials_in_the_runners_proxy_variables_stay_in_the_runner_too() {
    agents_through_an_authenticating_proxy(false, |o, url| {
        o.env("AGENT_RUNNER_PROXY", "")
            .env("HTTPS_PROXY", "")
            .env("https_proxy", url)
            .env("HTTP_PROXY", url)
            .env("http_proxy", "")
    })
    .await;
}

/// Agents running as another uid (`--agent-uid 65534`) are served by the
/// forwarder too (it refuses other users' processes).
#[tokio::test]
async fn agents_of_the_agent_uid_reach_the_forwarder() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        test_kit::skip_this_test("proxy e2e: --agent-uid needs root");
        return;
    }
    agents_through_an_authenticating_proxy(true, |o, url| {
        let mut o = o.arg("--proxy").arg(url).arg("--agent-uid").arg("65534");
        for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
            o = o.env(name, "");
        }
        o
    })
    .await;
}

/// A tinyproxy wanting `BasicAuth`, given to the runner by `give` (its URL
/// with the credentials); a scripted thread's `run` step shows its
/// environment and fetches from a loopback origin through the proxy.
/// `walkable`: the runner's directories are opened to other users (for an
/// agent uid).
async fn agents_through_an_authenticating_proxy(
    walkable: bool,
    give: impl FnOnce(RunnerOpts, &str) -> RunnerOpts,
) {
    let bin = match tinyproxy() {
        Ok(b) => b,
        Err(why) => {
            test_kit::skip_this_test(&format!("proxy e2e: {why}"));
            return;
        }
    };
    const USER: &str = "opuser-e2e";
    const PASSWORD: &str = "s3cr3t-proxy-pw";
    let proxy = Tinyproxy::start(&bin, &format!("BasicAuth {USER} {PASSWORD}")).await;
    let (origin, mut seen) = http_origin("through-the-proxy").await;
    let flag = format!("http://{USER}:{PASSWORD}@127.0.0.1:{}", proxy.port);
    let (cp, runner) = connected_with(|o| {
        // Everything through the proxy, the control channel included.
        give(o, &flag).env("NO_PROXY", "").env("no_proxy", "")
    })
    .await;
    if walkable {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(runner.dirs.path(), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    create_agent(&cp, "a").await;
    let thread = create_thread(&cp, "a", "t").await;
    // Neither credential is in the command (split in two), so masking
    // cannot hide them from the counts; the proxy itself refuses a client
    // without them (407), and the agent's curl gets through by the
    // variables it is given.
    let script = format!(
        "run env | grep -i _proxy= | sort; echo \"uid=$(id -u)\"; \
         echo \"pw-in-env=$(cat /proc/self/environ | tr '\\0' '\\n' | grep -c 's3cr3t''-proxy-pw')\"; \
         echo \"user-in-env=$(env | grep -c 'opuser''-e2e')\"; \
         echo \"direct=$(curl -s -o /dev/null -w '%{{http_code}}' --noproxy '' -x http://127.0.0.1:{tp} http://127.0.0.1:{origin}/direct)\"; \
         echo \"via=$(curl -sS --max-time 20 http://127.0.0.1:{origin}/via-agent 2>&1)\"",
        tp = proxy.port
    );
    send(&cp, "m", user_message("a", &thread, &script, false)).await;
    turn_completed(&cp, "m").await;
    let outputs = command_outputs(&replies(&cp, "m")).join("\n");
    let forwarder = outputs
        .lines()
        .find_map(|l| l.strip_prefix("HTTPS_PROXY="))
        .unwrap_or_else(|| panic!("no HTTPS_PROXY in the agent's env:\n{outputs}"));
    assert!(
        forwarder.starts_with("http://127.0.0.1:")
            && !forwarder.ends_with(&format!(":{}", proxy.port)),
        "agents are given the runner's forwarder: {outputs}"
    );
    for name in ["https_proxy", "HTTP_PROXY", "http_proxy"] {
        assert!(
            outputs.contains(&format!("{name}={forwarder}\n")),
            "{name}: {outputs}"
        );
    }
    for want in [
        "pw-in-env=0",
        "user-in-env=0",
        "direct=407",
        "via=through-the-proxy",
    ] {
        assert!(
            outputs.contains(want),
            "{want}: {outputs}\nrunner:\n{}\ntinyproxy:\n{}",
            runner.logs(),
            proxy.log_text()
        );
    }
    assert!(!outputs.contains("***"), "something was masked: {outputs}");
    assert_eq!(walkable, outputs.contains("uid=65534"), "{outputs}");
    // The agent's request reached the origin through tinyproxy (which
    // adds its Via header), and tinyproxy logged it.
    let mut heads = Vec::new();
    while let Ok(h) = seen.try_recv() {
        heads.push(h);
    }
    assert!(
        heads
            .iter()
            .any(|h| h.starts_with("GET /via-agent") && h.to_ascii_lowercase().contains("via:")),
        "{heads:?}"
    );
    assert!(
        proxy.log_text().contains("via-agent"),
        "{}",
        proxy.log_text()
    );
    // The credentials are in no update, transcript or log line.
    let basic = "b3B1c2VyLWUyZTpzM2NyM3QtcHJveHktcHc"; // base64 "opuser-e2e:s3cr3t-proxy-pw", unpadded
    let updates = format!("{:?}", cp.received());
    let transcript = std::fs::read_to_string(
        runner
            .dirs
            .path()
            .join("state/transcripts")
            .join(format!("{thread}.jsonl")),
    )
    .unwrap_or_default();
    assert!(transcript.contains("through-the-proxy"), "{transcript}");
    for (what, text) in [
        ("updates", &updates),
        ("transcript", &transcript),
        ("logs", &runner.logs()),
    ] {
        for secret in [PASSWORD, USER, basic] {
            assert!(!text.contains(secret), "{secret} in the {what}:\n{text}");
        }
    }
}
