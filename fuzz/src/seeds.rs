//! The seed corpus: one `ServerMessage` of every kind, valid and invalid
//! ones, built with the same request builders the end-to-end tests use
//! (`test-kit`), so a change to a request reaches the fuzzer's seeds too.

use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use test_kit::requests::{create_agent_request, create_thread_request, user_message};

use crate::{KNOWN_AGENT, KNOWN_THREAD};

/// `request` (a `CreateThreadRequest`) asking for reasoning `level`.
fn with_reasoning(request: Request, level: &str) -> Request {
    match request {
        Request::CreateThreadRequest(t) => Request::CreateThreadRequest(CreateThreadRequest {
            reasoning_level: Some(level.into()),
            ..t
        }),
        other => other,
    }
}

/// The seed corpus: one message of every kind, valid and invalid ones.
pub fn seeds() -> Vec<(String, ServerMessage)> {
    let um = |text: &str, steer: bool| user_message(KNOWN_AGENT, KNOWN_THREAD, text, steer);
    let m = |rid: &str, r: Option<Request>| ServerMessage {
        request_id: rid.into(),
        request: r,
        acked_sequence: 0,
    };
    vec![
        (
            "heartbeat".into(),
            m("hb", Some(Request::HeartbeatRequest(HeartbeatRequest {}))),
        ),
        ("no_request".into(), m("r0", None)),
        (
            "create_agent".into(),
            m("r1", Some(create_agent_request("a", "scripted"))),
        ),
        (
            "create_agent_bad_id".into(),
            m("r2", Some(create_agent_request("../etc", "scripted"))),
        ),
        (
            "create_thread".into(),
            m(
                "r3",
                Some(with_reasoning(
                    create_thread_request(KNOWN_AGENT, "scripted-fast"),
                    "high",
                )),
            ),
        ),
        (
            "user_message".into(),
            m("r4", Some(um("say hi\nthink hmm\nusage 3 4\nhello", false))),
        ),
        (
            "user_message_steer".into(),
            m("r5", Some(um("say more", true))),
        ),
        (
            "user_message_fail".into(),
            m("r6", Some(um("say x\nfail boom", false))),
        ),
        (
            "user_message_empty_text".into(),
            m("r7", Some(um("", false))),
        ),
        (
            "interrupt".into(),
            m(
                "r8",
                Some(Request::InterruptTurnRequest(InterruptTurnRequest {
                    agent_id: KNOWN_AGENT.into(),
                    thread_id: KNOWN_THREAD.into(),
                })),
            ),
        ),
        (
            "delete_thread_unknown".into(),
            m(
                "r9",
                Some(Request::DeleteThreadRequest(DeleteThreadRequest {
                    agent_id: KNOWN_AGENT.into(),
                    thread_id: "thr-ffffffffffffffffffffffffffffffff".into(),
                })),
            ),
        ),
        (
            "delete_agent".into(),
            m(
                "r10",
                Some(Request::DeleteAgentRequest(DeleteAgentRequest {
                    agent_id: "a".into(),
                })),
            ),
        ),
        (
            "ack_only".into(),
            ServerMessage {
                request_id: String::new(),
                request: None,
                acked_sequence: 3,
            },
        ),
        (
            "ack_beyond_what_was_sent_with_a_request".into(),
            ServerMessage {
                acked_sequence: u64::MAX,
                ..m("r12", Some(Request::HeartbeatRequest(HeartbeatRequest {})))
            },
        ),
        (
            "ack_going_backwards".into(),
            ServerMessage {
                request_id: String::new(),
                request: None,
                acked_sequence: 1,
            },
        ),
        (
            "install_skills".into(),
            m(
                "r11",
                Some(Request::InstallSkillsMpRequest(InstallSkillsMpRequest {
                    agent_id: KNOWN_AGENT.into(),
                    package_name: "pkg".into(),
                })),
            ),
        ),
    ]
}
