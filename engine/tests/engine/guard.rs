//! The workspace root and the bearer token, in the engine itself: a root
//! with a default workspace outside it does not start; a FILE session saved
//! with a workspace outside the root (before the root was set) cannot
//! generate once it is; `serve_with` refuses calls without the token.

use code_agent_engine::{BearerToken, Engine, EngineConfig, ServeOptions, serve_with};
use code_agent_proto::code_agent_service_client::CodeAgentServiceClient;
use code_agent_proto::*;
use tokio_util::sync::CancellationToken;
use tonic::Code;

#[tokio::test]
async fn a_default_workspace_outside_the_root_is_refused_at_start() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let err = Engine::start(EngineConfig {
        default_workspace: Some(outside.path().to_path_buf()),
        workspace_root: Some(root.path().to_path_buf()),
        ..EngineConfig::default()
    })
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("outside the workspace root"),
        "{err:#}"
    );
    let missing = root.path().join("missing");
    let err = Engine::start(EngineConfig {
        workspace_root: Some(missing),
        ..EngineConfig::default()
    })
    .await
    .unwrap_err();
    assert!(format!("{err:#}").contains("workspace root"), "{err:#}");
}

async fn served(config: EngineConfig, token: &str) -> (String, CancellationToken) {
    let engine = Engine::start(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let options = ServeOptions {
        token: Some(BearerToken::new(token).unwrap()),
        tls: None,
    };
    tokio::spawn(serve_with(engine, listener, options, stop.clone()));
    (format!("http://{addr}"), stop)
}

#[tokio::test]
async fn a_saved_session_outside_a_new_root_cannot_run() {
    let state = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let token = "guard-test-token";
    let bearer: tonic::metadata::MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    let with_token = move |mut req: tonic::Request<()>| {
        req.metadata_mut().insert("authorization", bearer.clone());
        Ok(req)
    };

    // Saved by an engine without a root.
    let (url, stop) = served(
        EngineConfig {
            state_dir: Some(state.path().to_path_buf()),
            ..EngineConfig::default()
        },
        token,
    )
    .await;
    let channel = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    // Without the token: refused.
    let err = CodeAgentServiceClient::new(channel.clone())
        .health_check(HealthCheckRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut client = CodeAgentServiceClient::with_interceptor(channel, with_token.clone());
    client
        .create_session(CreateSessionRequest {
            session_id: Some("old".into()),
            config: Some(SessionConfig {
                storage_type: StorageType::File as i32,
                workspace: outside.path().display().to_string(),
                ..Default::default()
            }),
            initial_context: vec![],
        })
        .await
        .unwrap();
    stop.cancel();

    // Reloaded by an engine confined to `root`.
    let (url, _stop) = served(
        EngineConfig {
            state_dir: Some(state.path().to_path_buf()),
            workspace_root: Some(root.path().to_path_buf()),
            ..EngineConfig::default()
        },
        token,
    )
    .await;
    let channel = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = CodeAgentServiceClient::with_interceptor(channel, with_token);
    let err = client
        .generate(GenerateRequest {
            session_id: "old".into(),
            messages: vec![Message {
                role: "user".into(),
                content: "hi".into(),
                ..Default::default()
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("outside"), "{err:?}");
}
