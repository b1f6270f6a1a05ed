//! Several runners at once, each known by its secret (replicas of a
//! runner): they register and stream side by side, a new stream takes over
//! only its own runner's, sequence numbers and acknowledgements are kept
//! per runner so two runners' numbers never collide, and a test sees who
//! sent what.

use agent_runner_proto::runner::RegisterRunnerRequest;
use tonic::Code;

use super::*;
use crate::acks::ACKED_DELIVERY;
use crate::test_runner::{request, scripted_sdk, spawn_scripted_runner_as};
use crate::{DEFAULT_RUNNER, TimelineEvent};

/// A mock knowing runners `r0` (secret `s0`) and `r1` (secret `s1`).
async fn two_runner_mock() -> MockControlPlane {
    MockControlPlane::start(
        MockConfig::default()
            .with_runner("r0", "s0")
            .with_runner("r1", "s1"),
    )
    .await
    .expect("starts")
}

fn offering_acks() -> RegisterRunnerRequest {
    let mut r = scripted_sdk();
    r.features = vec![ACKED_DELIVERY.to_owned()];
    r
}

/// Registers with `secret` (offering acked delivery) and opens a stream;
/// the client (keep it: it holds the connection), the stream, and the
/// registration's `acked_sequence`.
async fn join(plane: &MockControlPlane, secret: &str) -> (Client, Stream, u64) {
    let mut c = client(&plane.url()).await;
    let acked = c
        .register_runner(request(offering_acks(), Some(secret)))
        .await
        .expect("registers")
        .into_inner()
        .acked_sequence;
    let stream = Stream::open(&mut c, Some(secret)).await.expect("opens");
    (c, stream, acked)
}

/// Sends heartbeat replies numbered `seqs` on `stream`, ids `{tag}{seq}`.
async fn send_numbered(stream: &Stream, tag: &str, seqs: &[u64]) {
    for &seq in seqs {
        let mut m = heartbeat(&format!("{tag}{seq}"));
        m.sequence = seq;
        stream.send(m).await;
    }
}

/// Reads acknowledgements from `stream` until one covers `mark`.
async fn acked_up_to(stream: &mut Stream, mark: u64) {
    loop {
        let m = stream.next().await.expect("open").expect("an ack");
        assert!(m.request.is_none(), "only acknowledgements expected: {m:?}");
        if m.acked_sequence >= mark {
            return;
        }
    }
}

#[tokio::test]
async fn two_runners_register_and_stream_side_by_side() {
    let plane = two_runner_mock().await;
    assert_eq!(plane.runner_names(), ["r0", "r1"]);
    let r0 = plane.runner("r0").expect("known");
    let r1 = plane.runner("r1").expect("known");
    let err = plane.runner("r2").expect_err("unknown");
    assert!(err.to_string().contains("r0"), "{err}");

    // Neither no secret nor an unknown one gets in.
    let mut stranger = client(&plane.url()).await;
    for secret in [None, Some("s2")] {
        let err = stranger
            .register_runner(request(scripted_sdk(), secret))
            .await
            .expect_err("refused");
        assert_eq!(err.code(), Code::Unauthenticated);
    }

    let (_c0, mut s0, _) = join(&plane, "s0").await;
    r0.wait_connected(WAIT).await.expect("r0 connected");
    let (_c1, mut s1, _) = join(&plane, "s1").await;
    r1.wait_connected(WAIT).await.expect("r1 connected");
    assert!(r0.is_connected(), "r1's stream did not displace r0's");
    assert_eq!((r0.connection_count(), r1.connection_count()), (1, 1));
    assert_eq!(plane.connection_count(), 2);
    let regs = plane.registrations();
    let names: Vec<&str> = regs.iter().map(|r| r.runner.as_str()).collect();
    assert_eq!(names, ["r0", "r1"]);
    assert_eq!(r1.registrations().len(), 1);

    // Which runner gets a message must be said.
    let err = send_heartbeat(&plane, "h").await.expect_err("ambiguous");
    assert!(err.to_string().contains("several runners"), "{err}");
    r0.send_request("to-r0", heartbeat_request())
        .await
        .expect("sent");
    r1.send_request("to-r1", heartbeat_request())
        .await
        .expect("sent");
    assert_eq!(next_request_id(&mut s0).await, "to-r0");
    assert_eq!(next_request_id(&mut s1).await, "to-r1");
    assert_eq!(r0.sent().len(), 1);
    assert_eq!(plane.sent().len(), 2);

    // Who sent what.
    s1.send(heartbeat("from-r1")).await;
    r1.wait_for(is_heartbeat, WAIT).await.expect("r1's reply");
    s0.send(heartbeat("from-r0")).await;
    let got = r0.wait_for(is_heartbeat, WAIT).await.expect("r0's reply");
    assert_eq!(got.request_id.as_deref(), Some("from-r0"));
    let tagged: Vec<(String, Option<String>)> = plane
        .received_by_runner()
        .into_iter()
        .map(|(runner, m)| (runner, m.request_id))
        .collect();
    assert_eq!(
        tagged,
        [
            ("r1".to_owned(), Some("from-r1".to_owned())),
            ("r0".to_owned(), Some("from-r0".to_owned())),
        ]
    );
    assert_eq!(plane.runner_of(0).as_deref(), Some("r1"));
    assert_eq!(r0.received().len(), 1);
    assert!(
        plane.timeline().iter().any(|e| matches!(
            e,
            TimelineEvent::Connected { runner, .. } if runner == "r1"
        )),
        "connections name their runner"
    );

    // One runner's stream dropped; the other's stays.
    assert!(r0.drop_stream());
    assert_eq!(
        s0.next().await.expect_err("ended").code(),
        Code::Unavailable
    );
    assert!(!r0.is_connected() && r1.is_connected());
    send_heartbeat(&plane, "only-r1")
        .await
        .expect("one runner left");
    assert_eq!(next_request_id(&mut s1).await, "only-r1");
}

#[tokio::test]
async fn a_new_stream_takes_over_its_own_runner_only() {
    let plane = two_runner_mock().await;
    let (mut c0, mut old0, _) = join(&plane, "s0").await;
    let (_c1, mut s1, _) = join(&plane, "s1").await;
    plane.wait_for_connections(2, WAIT).await.expect("both");
    // r0 again (a restarted replica, or a second process with its secret).
    let _new0 = Stream::open(&mut c0, Some("s0")).await.expect("opens");
    let r0 = plane.runner("r0").expect("known");
    r0.wait_for_connections(2, WAIT)
        .await
        .expect("r0 reconnected");
    assert_eq!(
        old0.next().await.expect_err("replaced").code(),
        Code::Aborted
    );
    let r1 = plane.runner("r1").expect("known");
    assert!(r1.is_connected(), "r1 is not displaced");
    assert_eq!(r1.connection_count(), 1);
    r1.send_request("still", heartbeat_request())
        .await
        .expect("sent");
    assert_eq!(next_request_id(&mut s1).await, "still");
}

/// Both runners number their messages from 1: nothing is a duplicate of the
/// other's, each is acknowledged up to its own mark, and a real duplicate
/// is dropped for its runner only, and said so.
#[tokio::test]
async fn sequence_numbers_and_acks_are_per_runner() {
    let plane = two_runner_mock().await;
    let (_c0, mut s0, acked0) = join(&plane, "s0").await;
    let (_c1, mut s1, acked1) = join(&plane, "s1").await;
    assert_eq!((acked0, acked1), (0, 0));
    send_numbered(&s0, "a", &[1, 2, 3]).await;
    send_numbered(&s1, "b", &[1, 2, 3]).await;
    acked_up_to(&mut s0, 3).await;
    acked_up_to(&mut s1, 3).await;
    let (r0, r1) = (
        plane.runner("r0").expect("known"),
        plane.runner("r1").expect("known"),
    );
    assert_eq!(plane.received().len(), 6, "nothing dropped");
    assert!(plane.dropped().is_empty());
    for r in [&r0, &r1] {
        let report = r.sequence_report();
        assert_eq!((report.processed, report.duplicates), (3, 0), "{report:?}");
        assert!(report.gaps.is_empty());
    }

    // r0 replays 2 and goes on with 4; r1 is untouched.
    send_numbered(&s0, "a", &[2, 4]).await;
    acked_up_to(&mut s0, 4).await;
    let dropped = plane.dropped();
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0].runner, "r0");
    assert_eq!(dropped[0].message.sequence, 2);
    assert!(dropped[0].reason.contains("duplicate"), "{dropped:?}");
    assert_eq!(r0.dropped().len(), 1);
    assert!(r1.dropped().is_empty());
    assert!(
        plane
            .timeline()
            .iter()
            .any(|e| matches!(e, TimelineEvent::Dropped(d) if d.runner == "r0")),
        "the drop is in the timeline"
    );
    assert_eq!(r0.sequence_report().processed, 4);
    assert_eq!(r1.sequence_report().duplicates, 0);
    let merged = plane.sequence_report();
    assert_eq!((merged.duplicates, merged.processed), (1, 4));

    // A re-registration answers each runner's own mark.
    let (_c0b, _s0b, again0) = join(&plane, "s0").await;
    let (_c1b, _s1b, again1) = join(&plane, "s1").await;
    assert_eq!((again0, again1), (4, 3));
}

#[tokio::test]
async fn the_bearer_secret_is_the_default_runner_beside_named_ones() {
    let plane = MockControlPlane::start(
        MockConfig::default()
            .with_bearer_secret("d")
            .with_runner("r0", "s0"),
    )
    .await
    .expect("starts");
    assert_eq!(plane.runner_names(), [DEFAULT_RUNNER, "r0"]);
    let (_c, _s, _) = join(&plane, "d").await;
    plane
        .runner(DEFAULT_RUNNER)
        .expect("known")
        .wait_connected(WAIT)
        .await
        .expect("connected");
    assert!(!plane.runner("r0").expect("known").is_connected());

    for config in [
        MockConfig::default()
            .with_runner("a", "same")
            .with_runner("b", "same"),
        MockConfig::default()
            .with_runner("a", "x")
            .with_runner("a", "y"),
    ] {
        let err = MockControlPlane::start(config).await.expect_err("refused");
        assert!(format!("{err:#}").contains("runners"), "{err:#}");
    }
}

/// Through stdio, a line's `"runner"` picks the runner; a line without one
/// while several are connected, or naming an unknown runner, is an error
/// line (never silently dropped); events name their runner.
#[tokio::test]
async fn stdio_addresses_runners_by_name() {
    use serde_json::Value;
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

    let plane = two_runner_mock().await;
    for secret in ["s0", "s1"] {
        spawn_scripted_runner_as(&plane.url(), Some(secret)).await;
    }
    plane
        .wait_for_connections(2, WAIT)
        .await
        .expect("both connected");
    let (mut stdin, input) = tokio::io::duplex(64 * 1024);
    let (output, stdout) = tokio::io::duplex(64 * 1024);
    let mut lines = BufReader::new(stdout).lines();
    let driver = async {
        crate::stdio::run(&plane, BufReader::new(input), output)
            .await
            .expect("stdio ends cleanly");
    };
    let harness = async {
        stdin
            .write_all(
                concat!(
                    r#"{"runner":"r1","requestId":"h1","heartbeatRequest":{}}"#,
                    "\n",
                    r#"{"requestId":"h2","heartbeatRequest":{}}"#,
                    "\n",
                    r#"{"runner":"r9","requestId":"h3","heartbeatRequest":{}}"#,
                    "\n",
                )
                .as_bytes(),
            )
            .await
            .expect("writes");
        let mut events: Vec<Value> = Vec::new();
        let done = |events: &[Value]| {
            events.iter().filter(|e| e["event"] == "error").count() == 2
                && events.iter().any(|e| e["event"] == "message")
        };
        while !done(&events) {
            let line = tokio::time::timeout(WAIT, lines.next_line())
                .await
                .expect("a line in time")
                .expect("readable")
                .expect("not at EOF");
            events.push(serde_json::from_str(&line).expect("JSON"));
        }
        drop(stdin);
        events
    };
    let ((), events) = tokio::join!(driver, harness);
    let of = |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["event"] == kind).collect() };
    let message = of("message")[0];
    assert_eq!(message["runner"], "r1", "{events:#?}");
    assert_eq!(message["message"]["requestId"], "h1");
    let mut connected: Vec<&str> = of("connected")
        .iter()
        .filter_map(|e| e["runner"].as_str())
        .collect();
    connected.sort_unstable();
    assert_eq!(connected, ["r0", "r1"], "{events:#?}");
    let errors: Vec<&str> = of("error")
        .iter()
        .filter_map(|e| e["error"].as_str())
        .collect();
    assert!(
        errors.iter().any(|e| e.contains("several runners")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|e| e.contains("r9")), "{errors:?}");
    assert_eq!(plane.runner("r1").expect("known").sent().len(), 1);
    assert!(plane.runner("r0").expect("known").sent().is_empty());
}

fn heartbeat_request() -> server_message::Request {
    server_message::Request::HeartbeatRequest(HeartbeatRequest {})
}

async fn next_request_id(stream: &mut Stream) -> String {
    stream
        .next()
        .await
        .expect("open")
        .expect("a message")
        .request_id
}

/// A runner view's futures can be spawned too (on a `'static` mock).
#[allow(dead_code, clippy::let_underscore_future)]
fn view_futures_are_send(plane: &'static MockControlPlane) {
    fn assert_send<T: Send>(_: T) {}
    if let Ok(view) = plane.runner(DEFAULT_RUNNER) {
        assert_send(view.wait_for(|_| true, WAIT));
        assert_send(view.wait_for_count(|_| true, 1, WAIT));
        assert_send(view.wait_connected(WAIT));
        assert_send(view.wait_for_registrations(1, WAIT));
        assert_send(view.send(agent_runner_proto::runner::ServerMessage::default()));
    }
}
