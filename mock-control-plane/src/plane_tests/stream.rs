//! The live `ControlChannel` stream: sending and waiting on the log,
//! validation of what arrives, the timeline, and fault injection (failing
//! registrations and streams, a dropped or replaced stream).

use std::time::Duration;

use tonic::{Code, Status};

use super::*;
use crate::test_runner::scripted_sdk;

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

/// The mock keeps gRPC's default receive limit (4 MiB), as a control plane
/// left at its defaults does: the runner's large-message tests rely on it
/// to catch an update too large for such a peer.
#[tokio::test]
async fn a_message_over_grpcs_default_4_mib_ends_the_stream() {
    let plane = plain().await;
    let stream = connected(&plane).await;
    let is = |rid: &'static str| move |m: &ClientMessage| m.request_id.as_deref() == Some(rid);
    // Just under the runner's outbound limit (4 MiB − 64 KiB): received.
    let fits = "a".repeat(4 * 1024 * 1024 - 64 * 1024 - 64);
    stream.send(agent_ready("fits", &fits)).await;
    plane.wait_for(is("fits"), WAIT).await.expect("received");
    // Over 4 MiB: refused, and the stream ends.
    let over = "a".repeat(4 * 1024 * 1024 + 1);
    stream.send(agent_ready("over", &over)).await;
    plane
        .wait_disconnected(WAIT)
        .await
        .expect("the stream ends");
    assert!(!plane.received().iter().any(is("over")));
    assert_eq!(plane.connection_count(), 1);
}

/// How many ~1 KiB messages a client got to hand over to a mock that reads
/// one and then stalls, granting `window` bytes of HTTP/2 window (None: the
/// default): HTTP/2 takes from the client only what the window lets
/// through, so the count follows the window.
async fn taken_by_a_stalled_mock(window: Option<u32>) -> usize {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let config = MockConfig {
        stream_window: window,
        read_delay: Duration::from_secs(600),
        ..MockConfig::default()
    };
    let plane = MockControlPlane::start(config).await.expect("starts");
    let mut c = client(&plane.url()).await;
    let (taken, stop) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let messages = {
        let (taken, stop) = (taken.clone(), stop.clone());
        futures::stream::iter((0..).map_while(move |n: usize| {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            taken.fetch_add(1, Ordering::Relaxed);
            Some(heartbeat(&format!("{n:01000}")))
        }))
    };
    let _call = c.control_channel(messages).await.expect("opens");
    // Until the count stops rising (the window full), or far past any window.
    let mut last = 0;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = taken.load(Ordering::Relaxed);
        if (now == last && now > 0) || now > 5_000 {
            break;
        }
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    taken.load(Ordering::Relaxed)
}

/// `stream_window` is the window the mock grants: a small one stops a
/// client after about that many bytes, the default only after far more.
#[tokio::test]
async fn the_stream_window_bounds_what_a_stalled_mock_takes_in() {
    let small = taken_by_a_stalled_mock(Some(16 * 1024)).await;
    let default = taken_by_a_stalled_mock(None).await;
    // 16 KiB of window, plus what the client's own HTTP/2 and gRPC
    // encoders hold (a 32 KiB chunk or so): well under 200 messages.
    assert!(small < 200, "{small} messages taken with a 16 KiB window");
    // The default (1 MiB) holds about a thousand.
    assert!(
        default > 500,
        "{default} messages taken at the default window"
    );
}
