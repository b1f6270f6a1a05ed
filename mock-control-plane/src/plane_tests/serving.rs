//! Serving: registration and its metadata, the bearer secret, the path
//! prefix, stop and restart on the same port, TLS, the GitHub RPCs, and
//! the handle's futures being `Send`.

use agent_runner_proto::runner::{
    GetGithubInstallationAccessTokenForRunnerRequest, ListGithubInstallationsForRunnerRequest,
};
use tonic::Code;

use super::*;
use crate::GithubInstallation;
use crate::test_runner::{request, scripted_sdk};

#[tokio::test]
async fn registration_is_recorded_with_metadata() {
    let plane = plain().await;
    assert!(plane.url().starts_with("http://127.0.0.1:"));
    let mut c = client(&plane.url()).await;
    let mut req = request(scripted_sdk(), None);
    req.metadata_mut()
        .insert("x-runner-name", "runner-7".parse().expect("ascii"));
    c.register_runner(req).await.expect("registers");

    let regs = plane
        .wait_for_registrations(1, WAIT)
        .await
        .expect("one registration");
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].request, scripted_sdk());
    assert_eq!(
        regs[0].metadata.get("x-runner-name").map(String::as_str),
        Some("runner-7")
    );
    assert_eq!(regs[0].violations, None);
    assert_eq!(plane.registrations().len(), 1);
}

#[tokio::test]
async fn bearer_secret_is_required_on_every_rpc() {
    let plane = MockControlPlane::start(MockConfig::default().with_bearer_secret("s3cret"))
        .await
        .expect("starts");
    let mut c = client(&plane.url()).await;

    for secret in [None, Some("wrong")] {
        let err = c
            .register_runner(request(scripted_sdk(), secret))
            .await
            .expect_err("rejected");
        assert_eq!(err.code(), Code::Unauthenticated);
        let err = Stream::open(&mut c, secret)
            .await
            .err()
            .expect("stream rejected");
        assert_eq!(err.code(), Code::Unauthenticated);
        let err = c
            .list_github_installations_for_runner(request(
                ListGithubInstallationsForRunnerRequest {},
                secret,
            ))
            .await
            .expect_err("rejected");
        assert_eq!(err.code(), Code::Unauthenticated);
    }
    assert!(plane.registrations().is_empty());

    c.register_runner(request(scripted_sdk(), Some("s3cret")))
        .await
        .expect("accepted");
    let regs = plane
        .wait_for_registrations(1, WAIT)
        .await
        .expect("recorded");
    assert_eq!(
        regs[0].metadata.get("authorization").map(String::as_str),
        Some("Bearer s3cret")
    );
    let _stream = Stream::open(&mut c, Some("s3cret"))
        .await
        .expect("accepted");
    plane.wait_connected(WAIT).await.expect("connected");
}

#[tokio::test]
async fn path_prefix_is_required_and_stripped() {
    let plane = MockControlPlane::start(MockConfig::default().with_path_prefix("grpc/"))
        .await
        .expect("starts");
    assert_eq!(plane.path_prefix(), Some("/grpc"));
    assert!(plane.url().ends_with("/grpc"), "{}", plane.url());

    let mut prefixed = client(&plane.url()).await;
    prefixed
        .register_runner(scripted_sdk())
        .await
        .expect("served under the prefix");
    let mut stream = Stream::open(&mut prefixed, None).await.expect("stream");
    plane.wait_connected(WAIT).await.expect("connected");
    send_heartbeat(&plane, "h1").await.expect("sent");
    assert_eq!(
        stream
            .next()
            .await
            .expect("message")
            .expect("some")
            .request_id,
        "h1"
    );

    let mut bare = client(&format!("http://{}", plane.addr())).await;
    let err = bare
        .register_runner(scripted_sdk())
        .await
        .expect_err("no prefix");
    assert_eq!(err.code(), Code::Unimplemented);
    assert_eq!(plane.registrations().len(), 1);
}

#[tokio::test]
async fn stop_and_restart_serve_the_same_port_and_keep_the_log() {
    let plane = plain().await;
    let addr = plane.addr();
    let mut c = client(&plane.url()).await;
    c.register_runner(scripted_sdk()).await.expect("registers");
    let mut stream = Stream::open(&mut c, None).await.expect("opens");
    plane.wait_connected(WAIT).await.expect("connected");
    stream.send(heartbeat("before")).await;
    plane.wait_for(is_heartbeat, WAIT).await.expect("received");

    plane.stop().await.expect("stops");
    assert!(!plane.is_serving().await);
    assert!(!plane.is_connected());
    assert!(stream.next().await.is_err(), "the stream broke");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the port is closed"
    );
    plane.stop().await.expect("stopping twice is fine");

    plane.restart().await.expect("restarts");
    assert!(plane.is_serving().await);
    assert_eq!(plane.addr(), addr);
    let mut c = client(&plane.url()).await;
    c.register_runner(scripted_sdk())
        .await
        .expect("registers again");
    let stream = Stream::open(&mut c, None).await.expect("reopens");
    stream.send(heartbeat("after")).await;
    let all = plane
        .wait_for_count(is_heartbeat, 2, WAIT)
        .await
        .expect("both");
    assert_eq!(all[0].request_id.as_deref(), Some("before"));
    assert_eq!(all[1].request_id.as_deref(), Some("after"));
    assert_eq!(plane.registrations().len(), 2);
    assert_eq!(plane.connection_count(), 2);

    // restart() while serving stops first.
    plane.restart().await.expect("restarts again");
    client(&plane.url())
        .await
        .register_runner(scripted_sdk())
        .await
        .expect("serving");
}

#[tokio::test]
async fn github_rpcs_serve_the_configured_installations() {
    let plane = MockControlPlane::start(MockConfig::default().with_github_installation(
        GithubInstallation {
            installation_id: 42,
            access_token: "ghs_token".into(),
            expires_unix_ms: 1_700_000_000_000,
            repositories: vec!["org/repo".into()],
        },
    ))
    .await
    .expect("starts");
    let mut c = client(&plane.url()).await;
    let list = installations(&mut c).await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].installation_id, 42);

    let token = c
        .get_github_installation_access_token_for_runner(
            GetGithubInstallationAccessTokenForRunnerRequest {
                installation_id: 42,
            },
        )
        .await
        .expect("token")
        .into_inner();
    assert_eq!(token.installation_id, 42);
    assert_eq!(token.access_token, "ghs_token");
    assert_eq!(token.access_token_expires_unix_time_ms, 1_700_000_000_000);
    assert_eq!(token.repositories, vec!["org/repo".to_owned()]);

    let err = c
        .get_github_installation_access_token_for_runner(
            GetGithubInstallationAccessTokenForRunnerRequest { installation_id: 7 },
        )
        .await
        .expect_err("unknown");
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(plane.github_token_requests(), vec![42, 7]);

    plane.set_github_installations(vec![]);
    assert!(installations(&mut c).await.is_empty());
}

#[tokio::test]
async fn tls_serves_with_a_pem_certificate_and_key() {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

    use agent_runner_proto::runner::agent_runner_control_service_client::AgentRunnerControlServiceClient;

    let plane = MockControlPlane::start(MockConfig::default().with_tls(
        include_str!("../../testdata/tls/server.pem"),
        include_str!("../../testdata/tls/server.key"),
    ))
    .await
    .expect("starts with TLS");
    assert!(
        plane.url().starts_with("https://127.0.0.1:"),
        "{}",
        plane.url()
    );
    let channel = Endpoint::from_shared(plane.url())
        .expect("valid url")
        .tls_config(
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(include_str!(
                "../../testdata/tls/ca.pem"
            ))),
        )
        .expect("tls config")
        .connect()
        .await
        .expect("TLS handshake");
    let mut c = AgentRunnerControlServiceClient::new(channel);
    c.register_runner(scripted_sdk())
        .await
        .expect("registers over TLS");
    assert_eq!(plane.registrations().len(), 1);

    let err = MockControlPlane::start(MockConfig::default().with_tls("not a cert", "not a key"))
        .await
        .expect_err("bad PEM is refused at start");
    assert!(format!("{err:#}").contains("TLS"), "{err:#}");
}

/// The handle's futures can be spawned (the runner's demo shares the mock
/// across tasks).
#[allow(dead_code, clippy::let_underscore_future)]
fn futures_are_send(plane: &'static MockControlPlane) {
    fn assert_send<T: Send>(_: T) {}
    fn assert_sync<T: Send + Sync>() {}
    assert_sync::<MockControlPlane>();
    assert_send(MockControlPlane::start(MockConfig::default()));
    assert_send(plane.wait_for(|_| true, WAIT));
    assert_send(plane.wait_for_after(0, |_| true, WAIT));
    assert_send(plane.wait_for_count(|_| true, 1, WAIT));
    assert_send(plane.wait_connected(WAIT));
    assert_send(plane.wait_for_registrations(1, WAIT));
    assert_send(plane.wait_timeline(0, None));
    assert_send(plane.visit_timeline(0, None, |_| {}));
    assert_send(plane.send(agent_runner_proto::runner::ServerMessage::default()));
    assert_send(plane.stop());
    assert_send(plane.restart());
}
