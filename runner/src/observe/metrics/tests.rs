//! The metrics' tests: how requests are counted and timed, and the
//! exposition's names.

use std::time::Duration;

use sdk_adapter::TurnOutcome;

use super::*;
use crate::delivery::messages;

/// An update labelled as it enters the outbox and sent: the link's calls.
fn sent(msg: &agent_runner_proto::runner::ClientMessage) {
    let label = crate::delivery::label::Label::of(msg);
    update_sent(label.kind_index(), label.first_reply(), label.is_error());
}

fn requests(kind: &'static str, outcome: &'static str) -> u64 {
    get()
        .requests
        .get_or_create(&RequestLabels { kind, outcome })
        .get()
}

/// A request handed to a task counts as it ends — failed when its first
/// reply is a RequestError, completed otherwise — whichever comes first,
/// the dispatcher or the reply; one the dispatcher ended counts once.
#[test]
fn requests_count_by_how_they_ended() {
    let error = |id: &str| messages::request_error(Some(id.to_owned()), "unknown SDK");
    let ok = |id: &str| messages::heartbeat(Some(id.to_owned()));
    // Dispatcher first, then a RequestError.
    request_arrived("unit-test-a", Some("ua1"));
    request_handled("unit-test-a", Some("ua1"), RequestOutcome::Accepted);
    assert_eq!(requests("unit-test-a", "accepted"), 0);
    sent(&error("ua1"));
    // The reply first (it raced the dispatcher), then the dispatcher.
    request_arrived("unit-test-a", Some("ua2"));
    sent(&ok("ua2"));
    sent(&ok("ua2"));
    request_handled("unit-test-a", Some("ua2"), RequestOutcome::Accepted);
    assert_eq!(requests("unit-test-a", "failed"), 1);
    assert_eq!(requests("unit-test-a", "completed"), 1);
    assert_eq!(requests("unit-test-a", "accepted"), 0);
    // Ended in the dispatcher, its reply out before or after: once.
    request_arrived("unit-test-b", Some("ub1"));
    sent(&ok("ub1"));
    request_handled("unit-test-b", Some("ub1"), RequestOutcome::Answered);
    request_arrived("unit-test-b", Some("ub2"));
    request_handled("unit-test-b", Some("ub2"), RequestOutcome::Answered);
    sent(&ok("ub2"));
    assert_eq!(requests("unit-test-b", "answered"), 2);
    assert_eq!(requests("unit-test-b", "completed"), 0);
    // No request id: counted as the dispatcher left it.
    request_handled("unit-test-c", None, RequestOutcome::Accepted);
    assert_eq!(requests("unit-test-c", "accepted"), 1);
}

#[test]
fn names_carry_prefix_units_and_total() {
    register_failed(tonic::Code::Unavailable);
    adapter_error("unit-test-sdk", "start_turn");
    request_handled("heartbeat_request", None, RequestOutcome::Answered);
    sent(&messages::heartbeat(None));
    delivery_set_aside("heartbeat_response");
    sdks_enabled(&["unit-test-sdk".to_owned()]);
    turn_started("unit-test-sdk");
    turn_waiting("unit-test-sdk");
    turn_wait_ended("unit-test-sdk");
    turn_ended(
        "unit-test-sdk",
        &TurnOutcome::Completed,
        Duration::from_secs(2),
    );
    request_arrived("heartbeat_request", Some("unit-test-names"));
    sent(&messages::heartbeat(Some("unit-test-names".to_owned())));
    let text = render(Scraped {
        outbox_depth: 3,
        delivery_unsettled: 1,
        child_processes: Some(2),
    });
    for name in [
        "agent_runner_build_info{version=",
        "agent_runner_connection_state{state=\"connecting\"}",
        "agent_runner_reconnects_total ",
        "agent_runner_register_failures_total{code=\"UNAVAILABLE\"}",
        "agent_runner_requests_total{kind=\"heartbeat_request\",outcome=\"answered\"}",
        "# TYPE agent_runner_request_duration_seconds histogram",
        "# UNIT agent_runner_request_duration_seconds seconds",
        "agent_runner_updates_sent_total{kind=\"heartbeat_response\"}",
        "agent_runner_outbox_depth 3",
        "agent_runner_outbox_dropped_total ",
        "agent_runner_outbox_coalesced_total ",
        "agent_runner_delivery_unsettled 1",
        "agent_runner_delivery_acks_ignored_total ",
        "agent_runner_delivery_unacked_full_total ",
        "agent_runner_delivery_set_aside_total{kind=\"heartbeat_response\"} 1",
        "# UNIT agent_runner_journal_append_duration_seconds seconds",
        "agent_runner_running_turns{sdk=\"unit-test-sdk\"} 0",
        "agent_runner_waiting_turns{sdk=\"unit-test-sdk\"} 0",
        "agent_runner_turn_duration_seconds_bucket{le=\"5.0\",sdk=\"unit-test-sdk\",outcome=\"completed\"} 1",
        "agent_runner_child_processes 2",
        "agent_runner_adapter_errors_total{sdk=\"unit-test-sdk\",operation=\"start_turn\"} 1",
        // Other tests of this process mint tokens: no value asserted.
        "agent_runner_token_refreshes_total ",
        "agent_runner_token_refresh_failures_total ",
        "agent_runner_git_credential_rate_limited_total ",
    ] {
        assert!(text.contains(name), "missing {name:?} in\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn a_request_is_timed_until_its_first_reply() {
    let id = "unit-test-request-timing";
    request_arrived("heartbeat_request", Some(id));
    assert!(get().pending().contains_key(id));
    sent(&messages::heartbeat(Some(id.to_owned())));
    // Kept until the dispatcher, which this reply raced, is done too.
    request_handled("heartbeat_request", Some(id), RequestOutcome::Answered);
    assert!(!get().pending().contains_key(id));
    let text = render(Scraped::default());
    assert!(
        text.contains("agent_runner_request_duration_seconds_count{kind=\"heartbeat_request\"}"),
        "{text}"
    );
}
