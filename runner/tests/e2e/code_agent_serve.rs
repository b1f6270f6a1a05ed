//! `agent-runner code-agent serve` locked down, tested as a real process
//! over loopback with a raw `CodeAgentService` client: it will not start
//! without a bearer token (unless `--insecure-no-auth`), refuses calls
//! without the token or with a wrong one, serves those with it, refuses
//! workspaces outside `--workspace-root` (a symlink pointing out included),
//! and serves TLS with a certificate from a test CA.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use code_agent_proto::code_agent_service_client::CodeAgentServiceClient;
use code_agent_proto::{
    CreateSessionRequest, HealthCheckRequest, InitializeRequest, SessionConfig,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::support::*;

const TOKEN: &str = "serve-test-token-9f3a";

/// A test CA and a certificate for `localhost` it signed, written as PEM
/// files in a directory.
pub struct TestTls {
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl TestTls {
    pub fn new(dir: &Path) -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let tls = Self {
            ca_file: dir.join("ca.pem"),
            cert_file: dir.join("engine.pem"),
            key_file: dir.join("engine.key"),
        };
        std::fs::write(&tls.ca_file, ca.pem()).unwrap();
        std::fs::write(&tls.cert_file, cert.pem()).unwrap();
        std::fs::write(&tls.key_file, key.serialize_pem()).unwrap();
        tls
    }

    /// `--tls-cert … --tls-key …`.
    pub fn serve_args(&self) -> Vec<String> {
        vec![
            "--tls-cert".to_owned(),
            self.cert_file.display().to_string(),
            "--tls-key".to_owned(),
            self.key_file.display().to_string(),
        ]
    }
}

/// A served engine, its directories and address.
struct Served {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
    root: PathBuf,
}

/// Start `code-agent serve` on a free loopback port with a workspace root
/// and state under a temp dir, plus `args` and `env`; `Err(stderr)` when it
/// exits instead of listening.
async fn serve(args: &[String], env: &[(&str, &str)]) -> Result<Served, String> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let mut child = Command::new(runner_bin())
        .args(["code-agent", "serve", "--listen", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--workspace-root")
        .arg(&root)
        .args(args)
        .env_remove("AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN")
        .env_remove("AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN_FILE")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    match listening_addr(&mut child).await {
        Some(addr) => Ok(Served {
            child,
            addr,
            dir,
            root,
        }),
        None => {
            let out = child.wait_with_output().await.unwrap();
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

fn token_file(dir: &Path) -> PathBuf {
    let file = dir.join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    file
}

/// Sends `authorization: Bearer <token>` when it has a token.
#[derive(Clone)]
pub(crate) struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.0 {
            req.metadata_mut().insert("authorization", h.clone());
        }
        Ok(req)
    }
}

pub(crate) type Client =
    CodeAgentServiceClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>;

/// A client of `channel` sending `token` (if any) with every call.
pub(crate) fn client(channel: Channel, token: Option<&str>) -> Client {
    let header = token.map(|t| format!("Bearer {t}").parse().unwrap());
    CodeAgentServiceClient::with_interceptor(channel, Bearer(header))
}

async fn plain(addr: &str) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn it_will_not_serve_without_a_token_unless_told_to() {
    let err = serve(&[], &[]).await.err().expect("refused to start");
    assert!(
        err.contains("bearer token is required") && err.contains("--insecure-no-auth"),
        "{err}"
    );
    // An explicit choice: served, and said loudly.
    let mut open = serve(&["--insecure-no-auth".to_owned()], &[])
        .await
        .unwrap();
    let mut c = client(plain(&open.addr).await, None);
    c.health_check(HealthCheckRequest {}).await.unwrap();
    let _ = open.child.start_kill();
}

#[tokio::test]
async fn calls_need_the_token_and_workspaces_stay_under_the_root() {
    let keys = tempfile::tempdir().unwrap();
    let file = token_file(keys.path());
    let served = serve(
        &["--auth-token-file".to_owned(), file.display().to_string()],
        &[],
    )
    .await
    .unwrap();
    let channel = plain(&served.addr).await;
    for token in [None, Some("wrong-token"), Some("serve-test-token-9f3")] {
        let err = client(channel.clone(), token)
            .health_check(HealthCheckRequest {})
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{token:?}: {err:?}");
    }
    let mut c = client(channel.clone(), Some(TOKEN));
    c.health_check(HealthCheckRequest {}).await.unwrap();

    // Inside the root: fine.
    let inside = served.root.join("thread-1");
    std::fs::create_dir_all(&inside).unwrap();
    c.initialize(InitializeRequest {
        workspace: inside.display().to_string(),
        ..Default::default()
    })
    .await
    .unwrap();
    // Outside, directly or through a symlink inside the root.
    let outside = served.dir.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let link = served.root.join("escape");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    for path in [outside.clone(), link.clone(), served.root.join("..")] {
        let err = c
            .initialize(InitializeRequest {
                workspace: path.display().to_string(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{path:?}: {err:?}");
        assert!(err.message().contains("outside"), "{err:?}");
        let err = c
            .create_session(CreateSessionRequest {
                config: Some(SessionConfig {
                    workspace: path.display().to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{path:?}: {err:?}");
    }
    drop(served);
}

#[tokio::test]
async fn it_serves_tls_with_the_token_from_the_environment() {
    let keys = tempfile::tempdir().unwrap();
    let tls = TestTls::new(keys.path());
    let mut served = serve(
        &tls.serve_args(),
        &[("AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN", TOKEN)],
    )
    .await
    .unwrap();
    let port = served.addr.rsplit(':').next().unwrap().to_owned();
    let ca = Certificate::from_pem(std::fs::read(&tls.ca_file).unwrap());
    let channel = Endpoint::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(ClientTlsConfig::new().ca_certificate(ca))
        .unwrap()
        .connect()
        .await
        .unwrap();
    client(channel.clone(), Some(TOKEN))
        .health_check(HealthCheckRequest {})
        .await
        .unwrap();
    let err = client(channel, None)
        .health_check(HealthCheckRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    // Plain HTTP/2 to the TLS port gets nowhere.
    let plain = Endpoint::from_shared(format!("http://{}", served.addr))
        .unwrap()
        .connect()
        .await;
    if let Ok(channel) = plain {
        assert!(
            client(channel, Some(TOKEN))
                .health_check(HealthCheckRequest {})
                .await
                .is_err()
        );
    }
    let _ = served.child.start_kill();
}

/// The address `code-agent serve` prints as its first line, waiting at
/// most [`WAIT`]; `None` when it printed something else or closed stdout.
pub async fn listening_addr(child: &mut Child) -> Option<String> {
    let stdout = child.stdout.take()?;
    let line = tokio::time::timeout(WAIT, BufReader::new(stdout).lines().next_line())
        .await
        .expect("the engine prints its address or exits in time")
        .ok()
        .flatten()?;
    line.strip_prefix("code-agent listening on ")
        .map(|addr| addr.trim().to_owned())
}
