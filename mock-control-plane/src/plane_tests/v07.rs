//! A mock serving protocol 0.7, driven by a tonic client built from the 0.7
//! definitions: registration, a 0.7 request out (with its `cli_secret`), 0.7
//! updates in and checked by 0.7's rules, a 0.2-only request refused at
//! send, acknowledgements, and the stdio driver reading 0.7 JSON.

use agent_runner_proto::runner as v02;
use agent_runner_proto::runner_v07 as v07;
use agent_runner_proto::runner_v07::agent_runner_control_service_client::AgentRunnerControlServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::test_runner::WAIT;
use crate::{AckMode, MockConfig, MockControlPlane, Protocol};

fn v07_config() -> MockConfig {
    MockConfig {
        protocol: Protocol::V07,
        ..MockConfig::default()
    }
}

async fn connect(
    plane: &MockControlPlane,
    features: &[&str],
) -> (
    v07::RegisterRunnerResponse,
    mpsc::Sender<v07::ClientMessage>,
    tonic::Streaming<v07::ServerMessage>,
) {
    let mut client = AgentRunnerControlServiceClient::connect(plane.url())
        .await
        .expect("connects");
    let registered = client
        .register_runner(v07::RegisterRunnerRequest {
            agent_sdks: vec![v07::AgentSdk {
                name: "scripted".into(),
                models: vec![v07::LlmModel {
                    name: "scripted-fast".into(),
                    reasoning: vec![],
                }],
                status: v07::AgentSdkStatus::Ready as i32,
                error_message: None,
            }],
            features: features.iter().map(|f| (*f).to_owned()).collect(),
        })
        .await
        .expect("registers")
        .into_inner();
    let (tx, rx) = mpsc::channel(16);
    let inbound = client
        .control_channel(ReceiverStream::new(rx))
        .await
        .expect("opens the channel")
        .into_inner();
    (registered, tx, inbound)
}

#[tokio::test]
async fn a_07_mock_speaks_07_both_ways() {
    let plane = MockControlPlane::start(v07_config()).await.expect("starts");
    assert_eq!(plane.protocol(), Protocol::V07);
    let (registered, tx, mut inbound) =
        connect(&plane, &[agent_runner_proto::ACKED_DELIVERY]).await;
    assert_eq!(registered.features, [agent_runner_proto::ACKED_DELIVERY]);
    plane.wait_connected(WAIT).await.expect("connected");
    let reg = &plane.registrations()[0];
    assert_eq!(reg.request.agent_sdks[0].models[0].name, "scripted-fast");
    assert_eq!(reg.violations, None);

    plane
        .send(v07::ServerMessage {
            request_id: "r1".into(),
            request: Some(v07::server_message::Request::CreateThreadRequest(
                v07::CreateThreadRequest {
                    thread_id: "t1".into(),
                    model: "scripted-fast".into(),
                    cli_secret: "s3cret".into(),
                    ..Default::default()
                },
            )),
            acked_sequence: 0,
        })
        .await
        .expect("sends a 0.7 request");
    let got = inbound.message().await.expect("reads").expect("a message");
    let Some(v07::server_message::Request::CreateThreadRequest(r)) = got.request else {
        panic!("{got:?}")
    };
    assert_eq!(
        (r.thread_id.as_str(), r.cli_secret.as_str()),
        ("t1", "s3cret")
    );
    // The log keeps 0.2's form, without the secret.
    let sent = plane.sent();
    assert!(!format!("{sent:?}").contains("s3cret"), "{sent:?}");

    // A 0.2 request 0.7 has no counterpart for is refused, naming it.
    let err = plane
        .send_request(
            "r2",
            v02::server_message::Request::CreateAgentRequest(v02::CreateAgentRequest {
                agent_id: "a".into(),
                agent_sdk: "scripted".into(),
            }),
        )
        .await
        .expect_err("no agents in 0.7");
    assert!(
        format!("{err:#}").contains("create_agent_request"),
        "{err:#}"
    );

    // Updates are read and checked as 0.7's; the acknowledgement is 0.7's.
    tx.send(v07::ClientMessage {
        request_id: Some("r1".into()),
        payload: Some(v07::client_message::Payload::ThreadUpdate(
            v07::ThreadUpdate {
                thread_id: "t1".into(),
                status: v07::ThreadStatus::Ready as i32,
            },
        )),
        sequence: 1,
    })
    .await
    .expect("sends");
    tx.send(v07::ClientMessage {
        request_id: None,
        payload: Some(v07::client_message::Payload::ThreadTokenUsageUpdate(
            v07::ThreadTokenUsageUpdate::default(),
        )),
        sequence: 2,
    })
    .await
    .expect("sends");
    plane
        .wait_for_count(|_| true, 2, WAIT)
        .await
        .expect("both logged");
    let received = plane.received();
    assert!(matches!(
        received[0].payload,
        Some(v02::client_message::Payload::ThreadUpdate(_))
    ));
    let invalid = plane.invalid_received();
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert!(
        invalid[0].1.contains("thread_token_usage_update.thread_id"),
        "{invalid:?}"
    );
    let ack = inbound.message().await.expect("reads").expect("an ack");
    assert_eq!(ack.request, None);
    assert!(ack.acked_sequence >= 1, "{ack:?}");
}

#[tokio::test]
async fn a_07_mock_refuses_what_07_cannot_say_and_acks_only_when_accepted() {
    let mut config = v07_config();
    config.ack_mode = AckMode::Refuse;
    let plane = MockControlPlane::start(config).await.expect("starts");
    let (registered, _tx, _inbound) = connect(&plane, &[agent_runner_proto::ACKED_DELIVERY]).await;
    assert!(registered.features.is_empty(), "{registered:?}");
    // A 0.2 message with a counterpart is converted: agent ids dropped.
    plane.wait_connected(WAIT).await.expect("connected");
    plane
        .send_request(
            "r3",
            v02::server_message::Request::InterruptTurnRequest(v02::InterruptTurnRequest {
                agent_id: "a".into(),
                thread_id: "t".into(),
            }),
        )
        .await
        .expect("converted");
}

#[tokio::test]
async fn stdio_lines_are_07_server_messages() {
    let plane = MockControlPlane::start(v07_config()).await.expect("starts");
    let (_registered, _tx, mut inbound) = connect(&plane, &[]).await;
    plane.wait_connected(WAIT).await.expect("connected");
    let input = br#"{"requestId":"r9","createThreadRequest":{"threadId":"t9","model":"scripted-fast","cliSecret":"k"}}
"#;
    let mut output = Vec::new();
    crate::stdio::run(&plane, &input[..], &mut output)
        .await
        .expect("runs");
    let got = inbound.message().await.expect("reads").expect("a message");
    let Some(v07::server_message::Request::CreateThreadRequest(r)) = got.request else {
        panic!("{got:?}")
    };
    assert_eq!(r.cli_secret, "k");
    // A 0.2-only message is a bad line in 0.7: said, not sent.
    let bad = br#"{"requestId":"r","createAgentRequest":{"agentId":"a","agentSdk":"scripted"}}
"#;
    let mut output = Vec::new();
    crate::stdio::run(&plane, &bad[..], &mut output)
        .await
        .expect("runs");
    let text = String::from_utf8_lossy(&output);
    assert!(text.contains("error"), "{text}");
}
