//! `agent-runner code-agent serve` hardened like `run`, checked from outside
//! the real process: it is not dumpable, its bearer token is neither in its
//! command line nor in `/proc/<pid>/environ` (from `--auth-token-file`, and
//! from `AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN`, which it takes out of its
//! environment), and a session's `bash` — asked by the mock model — can
//! read neither the token file, the TLS key nor the engine's environ,
//! while it works in its own workspace.
//!
//! Dumpability is seen the way the kernel shows it: a non-dumpable
//! process's `/proc/<pid>/environ` (and the rest) belongs to root. Run as root, the test starts
//! the engine as uid 65534 so that owner tells something.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_proto::{CreateSessionRequest, GenerateRequest, Message, SessionConfig};
use serde_json::json;
use tokio::process::{Child, Command};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

use crate::code_agent_serve::{TestTls, client, listening_addr};
use crate::support::*;

const TOKEN: &str = "serve-hardening-token-5c1e";
/// The uid the engine runs as when the test is root.
const ENGINE_UID: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A directory the engine's uid owns (it must read its files and make its
/// state); 0700 so nobody else reads the token in it.
fn engine_dir(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    if is_root() {
        for entry in walk(dir) {
            std::os::unix::fs::chown(&entry, Some(ENGINE_UID), Some(ENGINE_UID)).unwrap();
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    if dir.is_dir() {
        for e in std::fs::read_dir(dir).unwrap() {
            out.extend(walk(&e.unwrap().path()));
        }
    }
    out
}

/// The served engine: its process, address and directories.
struct Served {
    child: Child,
    addr: String,
    root: PathBuf,
}

async fn serve(
    dir: &Path,
    keys: &Path,
    tls: &TestTls,
    env: &[(&str, &str)],
    mock: &MockLlm,
    token_file: Option<&Path>,
) -> Served {
    let root = dir.join("root");
    let state = dir.join("state");
    std::fs::create_dir_all(&root).unwrap();
    engine_dir(dir);
    engine_dir(keys);
    let mut cmd = Command::new(runner_bin());
    cmd.args(["code-agent", "serve", "--listen", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(&state)
        .arg("--workspace-root")
        .arg(&root)
        .args(tls.serve_args())
        .env_remove("AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN")
        .env_remove("AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN_FILE")
        .env("OPENAI_API_KEY", "sk-serve-hardening")
        .env("OPENAI_BASE_URL", mock.base_url())
        .env("CODE_AGENT_MODELS", "mock-model")
        .env("HOME", dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if let Some(file) = token_file {
        cmd.arg("--auth-token-file").arg(file);
    }
    if is_root() {
        cmd.uid(ENGINE_UID).gid(ENGINE_UID);
    }
    let mut child = cmd.spawn().unwrap();
    let addr = listening_addr(&mut child)
        .await
        .expect("code-agent serve prints its address first");
    Served { child, addr, root }
}

/// Whether `pid` is dumpable, as seen from outside.
fn dumpable(pid: u32) -> bool {
    if is_root() {
        // Non-dumpable: the kernel makes the files of its /proc entry root's.
        let owner = std::fs::metadata(format!("/proc/{pid}/environ"))
            .unwrap()
            .uid();
        owner == ENGINE_UID
    } else {
        // Non-dumpable: another process of its uid may not read its environ.
        std::fs::read(format!("/proc/{pid}/environ")).is_ok()
    }
}

/// One bash call asking for every secret and doing its own work; the
/// tool's output as the model saw it.
async fn probe(
    served: &Served,
    tls: &TestTls,
    mock: &MockLlm,
    secrets: &[(&str, &Path)],
) -> String {
    let t = "t(){ n=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$n=OPEN\"; else echo \"$n=DENIED\"; fi; }";
    let mut line: Vec<String> = vec![t.to_owned()];
    for (name, path) in secrets {
        line.push(format!("t {name} cat {}", path.display()));
    }
    line.push(format!(
        "t engine_environ grep -q {TOKEN} /proc/$PPID/environ"
    ));
    line.push("t own_write sh -c 'echo mine > mine.txt && cat mine.txt'".to_owned());
    mock.push(MockReply::tool_call(
        "call_1",
        "bash",
        json!({ "command": line.join("; ") }),
    ));
    mock.push(MockReply::text("probed"));
    let ws = served.root.join("w1");
    std::fs::create_dir_all(&ws).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&ws, Some(ENGINE_UID), Some(ENGINE_UID)).unwrap();
    }
    let port = served.addr.rsplit(':').next().unwrap();
    let ca = Certificate::from_pem(std::fs::read(&tls.ca_file).unwrap());
    let channel = Endpoint::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(ClientTlsConfig::new().ca_certificate(ca))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = client(channel, Some(TOKEN));
    let session = c
        .create_session(CreateSessionRequest {
            config: Some(SessionConfig {
                workspace: ws.display().to_string(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    tokio::time::timeout(
        WAIT,
        c.generate(GenerateRequest {
            session_id: session,
            messages: vec![Message {
                role: "user".into(),
                content: "probe".into(),
                ..Default::default()
            }],
        }),
    )
    .await
    .expect("the turn ends in time")
    .unwrap();
    assert!(
        ws.join("mine.txt").exists(),
        "the bash call did its own work"
    );
    mock.requests()
        .iter()
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .find(|c| c.contains("own_write="))
        .expect("the tool's output reached the model")
}

fn assert_hardened(pid: u32) {
    assert!(!dumpable(pid), "code-agent serve is dumpable");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(TOKEN));
    if is_root() {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(
            !String::from_utf8_lossy(&environ).contains(TOKEN),
            "the token is in the engine's environ"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_is_not_dumpable_and_its_agents_reach_no_secret() {
    let mock = MockLlm::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let tls = TestTls::new(keys.path());
    let token_file = keys.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let served = serve(dir.path(), keys.path(), &tls, &[], &mock, Some(&token_file)).await;
    let pid = served.child.id().unwrap();
    assert_hardened(pid);
    let secrets: [(&str, &Path); 2] = [("token_file", &token_file), ("tls_key", &tls.key_file)];
    let output = probe(&served, &tls, &mock, &secrets).await;
    if agent_launcher::probe_host().landlock_abi().is_none() {
        test_kit::skip_this_test("no Landlock on this host: the engine's agents are not confined");
        return;
    }
    for name in ["token_file", "tls_key", "engine_environ"] {
        assert!(
            output.contains(&format!("{name}=DENIED")),
            "{name}: {output}"
        );
    }
    assert!(output.contains("own_write=OPEN"), "{output}");
    assert!(!output.contains(TOKEN), "{output}");
    assert!(!output.contains("PRIVATE KEY"), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_the_environment_leaves_it() {
    let mock = MockLlm::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let tls = TestTls::new(keys.path());
    let served = serve(
        dir.path(),
        keys.path(),
        &tls,
        &[("AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN", TOKEN)],
        &mock,
        None,
    )
    .await;
    assert_hardened(served.child.id().unwrap());
    let output = probe(&served, &tls, &mock, &[]).await;
    assert!(output.contains("own_write=OPEN"), "{output}");
    assert!(output.contains("engine_environ=DENIED"), "{output}");
}
