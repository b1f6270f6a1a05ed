//! The `code-agent serve` binary: it serves (with a bearer token), prints
//! where it listens, answers a client that sends the token and refuses one
//! that does not, stops cleanly on SIGTERM, and still reads the binary's
//! former `CODE_AGENT_*` variables when the canonical ones are unset.

use std::process::Stdio;

use code_agent_proto::code_agent_service_client::CodeAgentServiceClient;
use code_agent_proto::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::PATIENCE;

/// `code-agent serve` with the given arguments and environment, its
/// canonical variables removed (so only what the test sets counts); the
/// process and the address it printed on stdout.
async fn serve(args: &[&std::ffi::OsStr], env: &[(&str, &std::ffi::OsStr)]) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_code-agent"));
    command.arg("serve").args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AGENT_RUNNER_") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("the server says where it listens in time")
        .unwrap()
        .expect("a line on stdout");
    let addr = line
        .strip_prefix("code-agent listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .trim()
        .to_owned();
    (child, addr)
}

type Client = CodeAgentServiceClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>,
    >,
>;

/// A client of `addr`: calls without a token are refused; the returned
/// one sends `token`.
async fn client(addr: &str, token: &str) -> Client {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let err = CodeAgentServiceClient::new(channel.clone())
        .get_capabilities(GetCapabilitiesRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    let bearer: tonic::metadata::MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    CodeAgentServiceClient::with_interceptor(
        channel,
        Box::new(move |mut req: tonic::Request<()>| {
            req.metadata_mut().insert("authorization", bearer.clone());
            Ok(req)
        }),
    )
}

/// A FILE session `id`, written under the state dir.
async fn create_file_session(client: &mut Client, id: &str) {
    let created = client
        .create_session(CreateSessionRequest {
            session_id: Some(id.into()),
            config: Some(SessionConfig {
                storage_type: StorageType::File as i32,
                ..Default::default()
            }),
            initial_context: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        created.session.unwrap().config.unwrap().storage_type,
        StorageType::File as i32
    );
}

/// SIGTERM, and a clean exit in time.
async fn stop(mut child: Child) {
    let pid = i32::try_from(child.id().unwrap()).unwrap();
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn serve_answers_and_stops_on_sigterm() {
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let (child, addr) = serve(
        &[
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--state-dir".as_ref(),
            state.path().as_os_str(),
            "--workspace".as_ref(),
            workspace.path().as_os_str(),
            "--log-level".as_ref(),
            "warn".as_ref(),
        ],
        &[(
            "AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN",
            "cli-test-token".as_ref(),
        )],
    )
    .await;
    let mut client = client(&addr, "cli-test-token").await;
    // The token left the environment block at start: /proc shows it to
    // nobody (root reads it even from a non-dumpable process).
    let environ = std::fs::read(format!("/proc/{}/environ", child.id().unwrap()));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let environ = String::from_utf8_lossy(&environ.unwrap()).into_owned();
        assert!(!environ.contains("cli-test-token"), "{environ}");
    }
    let caps = client
        .get_capabilities(GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(caps.tools.len(), 17, "12 built-ins and 5 LSP tools");
    create_file_session(&mut client, "cli-1").await;
    assert!(state.path().join("sessions/cli-1.json").exists());
    stop(child).await;
}

/// `CODE_AGENT_LISTEN`, `CODE_AGENT_STATE_DIR`, `CODE_AGENT_WORKSPACE` and
/// `CODE_AGENT_AUTH_TOKEN` still work when their canonical
/// `AGENT_RUNNER_CODE_AGENT_*` names are unset.
#[tokio::test]
async fn the_former_variables_are_still_read() {
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let (child, addr) = serve(
        &[],
        &[
            ("CODE_AGENT_LISTEN", "127.0.0.1:0".as_ref()),
            ("CODE_AGENT_STATE_DIR", state.path().as_os_str()),
            ("CODE_AGENT_WORKSPACE", workspace.path().as_os_str()),
            ("CODE_AGENT_AUTH_TOKEN", "former-token".as_ref()),
            ("RUST_LOG", "warn".as_ref()),
        ],
    )
    .await;
    let mut client = client(&addr, "former-token").await;
    create_file_session(&mut client, "former-1").await;
    assert!(state.path().join("sessions/former-1.json").exists());
    stop(child).await;
}
