//! The `code-agent serve` binary: it serves (with a bearer token), answers
//! a client that sends it and refuses one that does not, and stops cleanly
//! on SIGTERM.

use std::process::Stdio;

use code_agent_proto::code_agent_service_client::CodeAgentServiceClient;
use code_agent_proto::*;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::PATIENCE;

#[tokio::test]
async fn serve_answers_and_stops_on_sigterm() {
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_code-agent"))
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(state.path())
        .arg("--workspace")
        .arg(workspace.path())
        .env("RUST_LOG", "info")
        .env("CODE_AGENT_AUTH_TOKEN", "cli-test-token")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("serving")
                && let Some(rest) = line.split("addr=").nth(1)
            {
                return rest.split_whitespace().next().unwrap().to_string();
            }
        }
        panic!("the server never said where it listens");
    })
    .await
    .unwrap();
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
    let bearer: tonic::metadata::MetadataValue<_> = "Bearer cli-test-token".parse().unwrap();
    let mut client =
        CodeAgentServiceClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
            req.metadata_mut().insert("authorization", bearer.clone());
            Ok(req)
        });
    let caps = client
        .get_capabilities(GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(caps.tools.len(), 17, "12 built-ins and 5 LSP tools");
    let created = client
        .create_session(CreateSessionRequest {
            session_id: Some("cli-1".into()),
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
    assert!(state.path().join("sessions/cli-1.json").exists());

    let pid = i32::try_from(child.id().unwrap()).unwrap();
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}
