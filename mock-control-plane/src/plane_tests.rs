//! Tests of the mock over real loopback gRPC, with a tonic client playing the
//! runner: auth, path prefix, registration, the live stream and its log,
//! fault injection, stop/restart, GitHub RPCs, and the stdio and scenario
//! drivers end to end. Every server binds 127.0.0.1:0, so tests run in
//! parallel; waits end as soon as their condition holds.

use std::collections::BTreeMap;
use std::time::Duration;

use agent_runner_proto::runner::{
    AgentStatus, AgentUpdate, ClientMessage, GetGithubInstallationAccessTokenForRunnerRequest,
    GithubInstallationForRunner, HeartbeatRequest, HeartbeatResponse,
    ListGithubInstallationsForRunnerRequest, client_message, server_message,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tonic::{Code, Status};

use crate::test_runner::{
    Client, Stream, WAIT, client, reply, request, scripted_sdk, spawn_scripted_runner,
};
use crate::{GithubInstallation, MockConfig, MockControlPlane, scenario, stdio};

fn heartbeat(id: &str) -> ClientMessage {
    reply(
        id,
        client_message::Payload::HeartbeatResponse(HeartbeatResponse {}),
    )
}

fn agent_ready(id: &str, agent: &str) -> ClientMessage {
    reply(
        id,
        client_message::Payload::AgentUpdate(AgentUpdate {
            agent_id: agent.into(),
            status: AgentStatus::Ready as i32,
        }),
    )
}

fn is_heartbeat(m: &ClientMessage) -> bool {
    matches!(
        m.payload,
        Some(client_message::Payload::HeartbeatResponse(_))
    )
}

/// Asks the connected runner for a heartbeat, as request `id`.
async fn send_heartbeat(plane: &MockControlPlane, id: &str) -> anyhow::Result<()> {
    plane
        .send_request(
            id,
            server_message::Request::HeartbeatRequest(HeartbeatRequest {}),
        )
        .await
}

/// The installations the mock lists to `c`.
async fn installations(c: &mut Client) -> Vec<GithubInstallationForRunner> {
    c.list_github_installations_for_runner(ListGithubInstallationsForRunnerRequest {})
        .await
        .expect("lists")
        .into_inner()
        .installations
}

/// A plain mock with a scripted runner connected to it.
async fn with_scripted_runner() -> MockControlPlane {
    let plane = plain().await;
    spawn_scripted_runner(&plane.url()).await;
    plane
}

/// Runs the scenario `yaml` with `vars` against a scripted runner; how it
/// ended, and what it printed.
async fn run_scenario(
    yaml: &str,
    vars: BTreeMap<String, String>,
) -> (anyhow::Result<scenario::Outcome>, String) {
    let plane = with_scripted_runner().await;
    let scenario = scenario::parse(yaml).expect("parses");
    let mut out = Vec::new();
    let outcome = scenario::run(&plane, &scenario, vars, &mut out).await;
    (outcome, String::from_utf8_lossy(&out).into_owned())
}

async fn plain() -> MockControlPlane {
    MockControlPlane::start(MockConfig::default())
        .await
        .expect("starts")
}

/// A plain mock and a client of it.
async fn plain_with_client() -> (MockControlPlane, Client) {
    let plane = plain().await;
    let c = client(&plane.url()).await;
    (plane, c)
}

/// Opens a stream on `c`; waits until the mock has seen `count` streams in
/// all.
async fn open_stream(plane: &MockControlPlane, c: &mut Client, count: u64) -> Stream {
    let stream = Stream::open(c, None).await.expect("opens");
    plane
        .wait_for_connections(count, WAIT)
        .await
        .expect("connected");
    stream
}

async fn connected(plane: &MockControlPlane) -> Stream {
    let mut c = client(&plane.url()).await;
    let stream = Stream::open(&mut c, None).await.expect("opens");
    plane.wait_connected(WAIT).await.expect("connected");
    // The stream keeps the connection; the client handle may go.
    stream
}

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
async fn fail_register_with_fails_until_cleared() {
    let (plane, mut c) = plain_with_client().await;
    for code in [
        Code::PermissionDenied,
        Code::Unauthenticated,
        Code::Unavailable,
    ] {
        plane.fail_register_with(Some(Status::new(code, "injected")));
        let err = c.register_runner(scripted_sdk()).await.expect_err("fails");
        assert_eq!(err.code(), code);
        assert_eq!(err.message(), "injected");
    }
    assert!(plane.registrations().is_empty());
    plane.fail_register_with(None);
    c.register_runner(scripted_sdk()).await.expect("succeeds");
    assert_eq!(plane.registrations().len(), 1);
}

#[tokio::test]
async fn fail_stream_with_rejects_new_streams() {
    let (plane, mut c) = plain_with_client().await;
    plane.fail_stream_with(Some(Status::unavailable("not now")));
    let err = Stream::open(&mut c, None).await.err().expect("rejected");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(!plane.is_connected());
    assert_eq!(plane.connection_count(), 0);
    plane.fail_stream_with(None);
    let _stream = open_stream(&plane, &mut c, 1).await;
}

#[tokio::test]
async fn send_and_wait_for_over_a_live_stream() {
    let plane = plain().await;
    let err = send_heartbeat(&plane, "early")
        .await
        .expect_err("nobody connected");
    assert!(err.to_string().contains("no runner"), "{err}");

    let mut stream = connected(&plane).await;
    assert!(plane.is_connected());
    send_heartbeat(&plane, "h1").await.expect("sent");
    let got = stream.next().await.expect("ok").expect("a message");
    assert_eq!(got.request_id, "h1");
    assert!(matches!(
        got.request,
        Some(server_message::Request::HeartbeatRequest(_))
    ));
    assert_eq!(plane.sent(), vec![got]);

    stream.send(agent_ready("r0", "a1")).await;
    stream.send(heartbeat("h1")).await;
    stream.send(heartbeat("h2")).await;

    let first = plane.wait_for(is_heartbeat, WAIT).await.expect("found");
    assert_eq!(first.request_id.as_deref(), Some("h1"));
    let (index, second) = plane
        .wait_for_after(2, is_heartbeat, WAIT)
        .await
        .expect("found");
    assert_eq!((index, second.request_id.as_deref()), (2, Some("h2")));
    let both = plane
        .wait_for_count(is_heartbeat, 2, WAIT)
        .await
        .expect("two");
    assert_eq!(both.len(), 2);
    assert_eq!(plane.received().len(), 3);
    assert_eq!(plane.received_count(), 3);
    assert!(plane.invalid_received().is_empty());

    // A timeout names what was awaited and shows what did arrive.
    let err = plane
        .wait_for_after(3, is_heartbeat, Duration::ZERO)
        .await
        .expect_err("nothing more");
    let text = err.to_string();
    assert!(text.contains("timed out"), "{text}");
    assert!(text.contains("#2"), "{text}");
    assert!(text.contains("AgentUpdate"), "{text}");
}

#[tokio::test]
async fn invalid_client_messages_are_flagged() {
    let plane = plain().await;
    let stream = connected(&plane).await;
    stream.send(agent_ready("r1", "")).await;
    plane
        .wait_for(|_| true, WAIT)
        .await
        .expect("received anyway");
    let invalid = plane.invalid_received();
    assert_eq!(invalid.len(), 1);
    assert!(invalid[0].1.contains("agent_id"), "{invalid:?}");
}

/// `visit_timeline` shows what `wait_timeline` copies out, in the same
/// order, lending each received message; its cursor goes on from the last
/// event shown, and a timeout shows nothing and keeps the cursor.
#[tokio::test]
async fn visit_timeline_shows_the_timeline_in_place() {
    let plane = plain().await;
    let stream = connected(&plane).await;
    stream.send(agent_ready("r0", "a1")).await;
    stream.send(agent_ready("r1", "")).await;
    plane
        .wait_for_count(|_| true, 2, WAIT)
        .await
        .expect("both received");
    let copied = plane.wait_timeline(0, Some(WAIT)).await;
    let mut seen = Vec::new();
    let cursor = plane
        .visit_timeline(0, Some(WAIT), |event| {
            seen.push(match event {
                crate::TimelineRef::Received {
                    index,
                    message,
                    violations,
                } => crate::TimelineEvent::Received {
                    index,
                    message: message.clone(),
                    violations: violations.map(str::to_owned),
                },
                crate::TimelineRef::Other(other) => other.clone(),
            })
        })
        .await;
    assert_eq!(format!("{seen:?}"), format!("{copied:?}"));
    assert_eq!(cursor, copied.len());
    assert!(
        matches!(seen.last(), Some(crate::TimelineEvent::Received { violations: Some(v), .. }) if v.contains("agent_id")),
        "{seen:?}"
    );
    let mut more = 0;
    let after = plane
        .visit_timeline(cursor, Some(Duration::from_millis(20)), |_| more += 1)
        .await;
    assert_eq!((after, more), (cursor, 0), "nothing new: cursor kept");
    stream.send(heartbeat("h1")).await;
    let after = plane
        .visit_timeline(cursor, Some(WAIT), |event| {
            assert!(matches!(
                event,
                crate::TimelineRef::Received { index: 2, .. }
            ));
            more += 1;
        })
        .await;
    assert_eq!((after, more), (cursor + 1, 1));
}

#[tokio::test]
async fn drop_stream_ends_the_runner_stream_with_an_error() {
    let (plane, mut c) = plain_with_client().await;
    let mut stream = Stream::open(&mut c, None).await.expect("opens");
    plane.wait_connected(WAIT).await.expect("connected");
    assert!(plane.drop_stream());
    let err = stream.next().await.expect_err("ends with an error");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(!plane.is_connected());
    assert!(!plane.drop_stream(), "nothing left to drop");

    // The runner reconnects.
    let _again = open_stream(&plane, &mut c, 2).await;
}

#[tokio::test]
async fn a_new_stream_replaces_the_old_one() {
    let (plane, mut c) = plain_with_client().await;
    let mut old = Stream::open(&mut c, None).await.expect("opens");
    let mut new = Stream::open(&mut c, None).await.expect("opens");
    plane.wait_for_connections(2, WAIT).await.expect("two");
    assert_eq!(
        old.next().await.expect_err("replaced").code(),
        Code::Aborted
    );
    send_heartbeat(&plane, "h").await.expect("sent");
    assert_eq!(
        new.next().await.expect("ok").expect("message").request_id,
        "h"
    );
}

#[tokio::test]
async fn runner_closing_its_stream_disconnects() {
    let plane = plain().await;
    let stream = connected(&plane).await;
    drop(stream);
    plane.wait_disconnected(WAIT).await.expect("disconnected");
    assert!(!plane.is_connected());
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
async fn basic_scenario_passes_against_a_scripted_runner() {
    let (outcome, text) =
        run_scenario(include_str!("../scenarios/basic.yaml"), BTreeMap::new()).await;
    let outcome = outcome.unwrap_or_else(|e| panic!("{e:#}\n{text}"));
    assert_eq!(
        outcome.vars.get("thread").map(String::as_str),
        Some("thread-1")
    );
    assert_eq!(outcome.vars.get("turn").map(String::as_str), Some("turn-1"));
    assert!(text.contains("captured thread = thread-1"), "{text}");
    assert!(text.contains("scenario passed"), "{text}");
}

#[tokio::test]
async fn a_failed_expectation_reports_the_closest_messages() {
    let (outcome, _) = run_scenario(
        r#"
steps:
  - send: {requestId: r1, createAgentRequest: {agentId: a1, agentSdk: scripted}}
  - expect: {match: {requestId: r1, agentUpdate: {status: AGENT_STATUS_DELETED}}, timeout_ms: 300}
"#,
        BTreeMap::new(),
    )
    .await;
    let err = outcome.expect_err("fails");
    let text = format!("{err:#}");
    assert!(text.contains("step 2/2 (expect) failed"), "{text}");
    assert!(text.contains("expected subset"), "{text}");
    assert!(text.contains("closest received messages"), "{text}");
    assert!(
        text.contains(
            "agentUpdate.status: expected \"AGENT_STATUS_DELETED\", got \"AGENT_STATUS_READY\""
        ),
        "{text}"
    );
}

#[tokio::test]
async fn scenario_variables_come_from_the_caller_and_unknown_ones_fail() {
    let (outcome, _) = run_scenario(
        r#"
steps:
  - send: {requestId: r1, createAgentRequest: {agentId: "${agent}", agentSdk: scripted}}
  - expect: {match: {agentUpdate: {agentId: "${agent}"}}, since: last_send}
  - send: {requestId: r2, createAgentRequest: {agentId: "${nope}", agentSdk: scripted}}
"#,
        BTreeMap::from([("agent".to_owned(), "from-cli".to_owned())]),
    )
    .await;
    let err = outcome.expect_err("unknown variable");
    let text = format!("{err:#}");
    assert!(text.contains("step 3/3"), "{text}");
    assert!(text.contains("${nope}"), "{text}");
}

#[tokio::test]
async fn stdio_queues_until_connected_and_prints_every_event() {
    let plane = plain().await;
    let (mut stdin, input) = tokio::io::duplex(64 * 1024);
    let (output, stdout) = tokio::io::duplex(64 * 1024);
    let mut lines = BufReader::new(stdout).lines();
    let driver = async {
        stdio::run(&plane, BufReader::new(input), output)
            .await
            .expect("stdio ends cleanly");
    };
    let harness = async {
        let mut next = async || -> Value {
            let line = tokio::time::timeout(WAIT, lines.next_line())
                .await
                .expect("a line in time")
                .expect("readable")
                .expect("not at EOF");
            serde_json::from_str(&line).expect("every stdout line is JSON")
        };
        let listening = next().await;
        assert_eq!(listening["event"], "listening");
        assert_eq!(listening["url"], json!(plane.url()));

        // Written before any runner is connected: queued.
        stdin
            .write_all(b"{\"requestId\":\"r1\",\"createAgentRequest\":{\"agentId\":\"a1\",\"agentSdk\":\"scripted\"}}\nnot json\n")
            .await
            .expect("writes");
        let error = next().await;
        assert_eq!(error["event"], "error");
        assert_eq!(error["line"], 2);

        spawn_scripted_runner(&plane.url()).await;
        let mut events = Vec::new();
        while !events.iter().any(|e: &Value| e["event"] == "message") {
            events.push(next().await);
        }
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(kinds, ["registered", "connected", "sent", "message"]);
        assert_eq!(events[0]["agentSdks"][0]["name"], "scripted");
        assert_eq!(
            events[2]["message"],
            json!({"requestId": "r1", "createAgentRequest": {"agentId": "a1", "agentSdk": "scripted"}})
        );
        assert_eq!(
            events[3],
            json!({"event": "message", "index": 0, "message": {
                "requestId": "r1",
                "agentUpdate": {"agentId": "a1", "status": "AGENT_STATUS_READY"}
            }})
        );

        stdin
            .write_all(b"{\"command\":\"drop_connection\"}\n")
            .await
            .expect("writes");
        assert_eq!(next().await["event"], "disconnected");
        drop(stdin);
    };
    tokio::join!(driver, harness);
}

#[tokio::test]
async fn stdio_returns_at_eof_when_nothing_can_be_delivered() {
    let plane = plain().await;
    let input = BufReader::new(&b"{\"requestId\":\"r1\",\"heartbeatRequest\":{}}\n"[..]);
    let mut output = Vec::new();
    stdio::run(&plane, input, &mut output).await.expect("ends");
    let text = String::from_utf8(output).expect("utf-8");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines[0]["event"], "listening");
    assert_eq!(lines[1]["event"], "error");
    assert!(
        lines[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("1 line(s) not delivered")),
        "{text}"
    );
    assert!(plane.sent().is_empty());
}

#[tokio::test]
async fn tls_serves_with_a_pem_certificate_and_key() {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

    use agent_runner_proto::runner::agent_runner_control_service_client::AgentRunnerControlServiceClient;

    let plane = MockControlPlane::start(MockConfig::default().with_tls(
        include_str!("../testdata/tls/server.pem"),
        include_str!("../testdata/tls/server.key"),
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
                "../testdata/tls/ca.pem"
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
    assert_send(plane.send(Default::default()));
    assert_send(plane.stop());
    assert_send(plane.restart());
}

/// Acknowledged delivery over real gRPC: the feature is accepted, numbered
/// messages are processed once (a repeat is dropped, a skip recorded as a
/// gap), acknowledgements arrive cumulatively, and a later registration
/// answers the processed mark; a refusing mock accepts nothing.
#[tokio::test]
async fn acked_delivery_drops_duplicates_and_acknowledges() {
    let (plane, mut c) = plain_with_client().await;
    let offer = || {
        let mut r = scripted_sdk();
        r.features = vec![crate::acks::ACKED_DELIVERY.to_owned()];
        r
    };
    let registered = c
        .register_runner(request(offer(), None))
        .await
        .expect("registers")
        .into_inner();
    assert_eq!(registered.features, vec!["acked-delivery/1".to_owned()]);
    assert_eq!(registered.acked_sequence, 0);
    let mut stream = Stream::open(&mut c, None).await.expect("opens");
    for seq in [1, 2, 2, 5] {
        let mut m = heartbeat(&format!("h{seq}"));
        m.sequence = seq;
        stream.send(m).await;
    }
    // Acknowledgements are cumulative; wait for the one covering 5.
    loop {
        let m = stream.next().await.expect("open").expect("an ack");
        assert!(m.request.is_none() && m.request_id.is_empty(), "{m:?}");
        if m.acked_sequence == 5 {
            break;
        }
    }
    let report = plane.sequence_report();
    assert_eq!(report.processed, 5);
    assert_eq!(report.duplicates, 1);
    assert_eq!(report.gaps, vec![(3, 4)]);
    let seqs: Vec<u64> = plane.received().iter().map(|m| m.sequence).collect();
    assert_eq!(seqs, vec![1, 2, 5], "the duplicate is not processed");
    assert!(
        plane.sent().is_empty(),
        "acknowledgements are not logged as sent"
    );
    let again = c
        .register_runner(request(offer(), None))
        .await
        .expect("registers")
        .into_inner();
    assert_eq!(again.acked_sequence, 5);

    plane.set_ack_mode(crate::AckMode::Refuse);
    let legacy = c
        .register_runner(request(offer(), None))
        .await
        .expect("registers")
        .into_inner();
    assert!(legacy.features.is_empty());
    assert_eq!(legacy.acked_sequence, 0);
}

/// The `expect_sequence` step checks the sequence report: a runner that
/// does not offer acked delivery leaves it empty, so zero passes and one
/// duplicate fails with the report.
#[tokio::test]
async fn expect_sequence_step_checks_the_report() {
    let (outcome, text) = run_scenario(
        r#"
steps:
  - send: {requestId: r1, heartbeatRequest: {}}
  - expect: {match: {requestId: r1}}
  - expect_sequence: {duplicates: 0, gaps: 0, unnumbered: 0}
  - expect_sequence: {duplicates: 1}
"#,
        BTreeMap::new(),
    )
    .await;
    let err = outcome.expect_err("the last step fails");
    let msg = format!("{err:#}");
    assert!(msg.contains("step 4/4 (expect_sequence) failed"), "{msg}");
    assert!(msg.contains("expected 1 duplicates, saw 0"), "{msg}");
    assert!(text.contains("0 duplicate(s) dropped"), "{text}");
}
