//! Acknowledged delivery over real gRPC: the feature accepted or refused,
//! numbered messages processed once, duplicates dropped (and said so),
//! acknowledgements cumulative.

use super::*;
use crate::test_runner::{request, scripted_sdk};

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

/// A duplicate the mock drops is never dropped silently: it is listed with
/// its runner and reason, in the timeline, and in the stdio output.
#[tokio::test]
async fn a_dropped_duplicate_is_recorded_not_silent() {
    let (plane, mut c) = plain_with_client().await;
    let mut offer = scripted_sdk();
    offer.features = vec![crate::acks::ACKED_DELIVERY.to_owned()];
    c.register_runner(request(offer, None))
        .await
        .expect("registers");
    let stream = Stream::open(&mut c, None).await.expect("opens");
    for seq in [1, 1] {
        let mut m = heartbeat("h");
        m.sequence = seq;
        stream.send(m).await;
    }
    let dropped = loop {
        let dropped = plane.dropped();
        if !dropped.is_empty() {
            break dropped;
        }
        plane
            .wait_timeline(plane.timeline().len(), Some(WAIT))
            .await;
    };
    assert_eq!(dropped[0].runner, crate::DEFAULT_RUNNER);
    assert!(
        dropped[0].reason.contains("duplicate of sequence 1"),
        "{dropped:?}"
    );
    let line = plane
        .timeline()
        .iter()
        .find(|e| matches!(e, crate::TimelineEvent::Dropped(_)))
        .map(crate::stdio::event_json)
        .expect("a Dropped event");
    assert_eq!(line["event"], "dropped");
    assert_eq!(line["message"]["sequence"], "1");
    assert!(
        line.get("runner").is_none(),
        "an unnamed mock's lines stay as they were"
    );
    assert_eq!(plane.received().len(), 1);
}
