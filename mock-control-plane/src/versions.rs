//! The two protocol versions the mock speaks, and what crosses between them.
//!
//! A mock serves one version, chosen at start ([`crate::MockConfig::protocol`]):
//! 0.2 (the default) or 0.7, the thread-only final version, with its own
//! tonic service built from `agent_runner_proto::runner_v07`. Whatever a test
//! sends becomes an [`Outgoing`] of the mock's version when it is sent (a 0.2
//! request 0.7 has no counterpart for is refused then, naming it), so the
//! stream only ever carries messages of its own version. What the runner
//! sends in 0.7 is decoded and validated with 0.7's types and rules, then
//! kept in the log in 0.2's form: 0.7's `ClientMessage` is 0.2's minus two
//! payloads, at the same numbers, so the bytes re-decode without loss.

use std::fmt;
use std::str::FromStr;

use agent_runner_proto::runner::{
    self as v02, ClientMessage, RegisterRunnerRequest, ServerMessage,
};
use agent_runner_proto::runner_v07 as v07;

/// A protocol version of `companyhelm.runner.v1`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// 0.2.0 plus its compatible additions: agents, skills marketplace, the
    /// GitHub RPCs.
    #[default]
    V02,
    /// 0.7.0: thread-only, `cli_secret`, no GitHub RPCs.
    V07,
}

impl FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0.2" => Ok(Protocol::V02),
            "0.7" => Ok(Protocol::V07),
            other => Err(format!("unknown protocol version {other:?} (0.2 or 0.7)")),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::V02 => "0.2",
            Protocol::V07 => "0.7",
        })
    }
}

/// A `ServerMessage` of the version the mock serves, on its way into a
/// live stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Outgoing {
    /// Protocol 0.2's.
    V02(ServerMessage),
    /// Protocol 0.7's.
    V07(v07::ServerMessage),
}

impl From<ServerMessage> for Outgoing {
    fn from(m: ServerMessage) -> Self {
        Outgoing::V02(m)
    }
}

impl From<v07::ServerMessage> for Outgoing {
    fn from(m: v07::ServerMessage) -> Self {
        Outgoing::V07(m)
    }
}

impl Outgoing {
    /// An acknowledgement-only message of `protocol`.
    pub(crate) fn ack(protocol: Protocol, acked_sequence: u64) -> Outgoing {
        match protocol {
            Protocol::V02 => Outgoing::V02(ServerMessage {
                acked_sequence,
                ..Default::default()
            }),
            Protocol::V07 => Outgoing::V07(v07::ServerMessage {
                acked_sequence,
                ..Default::default()
            }),
        }
    }

    /// This message in `protocol`: unchanged when it already is, else
    /// converted field by field (see [`to_v07`], [`view`]).
    pub(crate) fn into_protocol(self, protocol: Protocol) -> Result<Outgoing, String> {
        match (self, protocol) {
            (m @ Outgoing::V02(_), Protocol::V02) | (m @ Outgoing::V07(_), Protocol::V07) => Ok(m),
            (Outgoing::V02(m), Protocol::V07) => to_v07(m).map(Outgoing::V07),
            (Outgoing::V07(m), Protocol::V02) => Err(format!(
                "a protocol 0.7 message cannot be sent by a 0.2 control plane: {m:?}"
            )),
        }
    }

    /// What the log shows of it: 0.2's form (a 0.7 thread's `cli_secret`
    /// is left out, as 0.2 has no place for it).
    pub(crate) fn view(&self) -> ServerMessage {
        match self {
            Outgoing::V02(m) => m.clone(),
            Outgoing::V07(m) => view(m),
        }
    }

    pub(crate) fn v02(self) -> Option<ServerMessage> {
        match self {
            Outgoing::V02(m) => Some(m),
            Outgoing::V07(_) => None,
        }
    }

    pub(crate) fn v07(self) -> Option<v07::ServerMessage> {
        match self {
            Outgoing::V07(m) => Some(m),
            Outgoing::V02(_) => None,
        }
    }
}

/// Re-decodes `message` as `T`: for messages both versions define at the
/// same numbers. Decoding what was just encoded from a message with the
/// same fields cannot fail; if it did, the default is the answer.
fn transcode<T: prost::Message + Default>(message: &impl prost::Message) -> T {
    T::decode(message.encode_to_vec().as_slice()).unwrap_or_default()
}

/// A 0.2 `ServerMessage` as 0.7 says it: agent ids dropped, the thread's id
/// required, no `cli_secret` (the runner refuses such a thread, which is
/// what a test of that wants). Agents and the skills marketplace have no
/// counterpart in 0.7: refused, naming the request.
pub fn to_v07(message: ServerMessage) -> Result<v07::ServerMessage, String> {
    use v02::server_message::Request as R;
    use v07::server_message::Request as R7;
    let request = match message.request {
        None => None,
        Some(R::CreateAgentRequest(_)) => return Err(not_in_07("create_agent_request")),
        Some(R::DeleteAgentRequest(_)) => return Err(not_in_07("delete_agent_request")),
        Some(R::InstallSkillsMpRequest(_)) => return Err(not_in_07("install_skills_mp_request")),
        Some(R::CreateThreadRequest(r)) => {
            Some(R7::CreateThreadRequest(v07::CreateThreadRequest {
                thread_id: r.thread_id.unwrap_or_default(),
                model: r.model,
                reasoning_level: r.reasoning_level,
                additional_model_instructions: r.additional_model_instructions,
                mcp_servers: r.mcp_servers.iter().map(transcode).collect(),
                git_skill_packages: r.git_skill_packages.iter().map(transcode).collect(),
                cli_secret: String::new(),
            }))
        }
        Some(R::DeleteThreadRequest(r)) => {
            Some(R7::DeleteThreadRequest(v07::DeleteThreadRequest {
                thread_id: r.thread_id,
            }))
        }
        Some(R::InterruptTurnRequest(r)) => {
            Some(R7::InterruptTurnRequest(v07::InterruptTurnRequest {
                thread_id: r.thread_id,
            }))
        }
        Some(R::CreateUserMessageRequest(r)) => Some(R7::CreateUserMessageRequest(
            v07::CreateUserMessageRequest {
                thread_id: r.thread_id,
                text: r.text,
                allow_steer: r.allow_steer,
                model: r.model,
                model_reasoning_level: r.model_reasoning_level,
            },
        )),
        Some(R::HeartbeatRequest(_)) => Some(R7::HeartbeatRequest(v07::HeartbeatRequest {})),
        Some(R::CodexConfigurationRequest(r)) => Some(R7::CodexConfigurationRequest(transcode(&r))),
        Some(R::ApprovalDecision(r)) => Some(R7::ApprovalDecision(transcode(&r))),
    };
    Ok(v07::ServerMessage {
        request_id: message.request_id,
        request,
        acked_sequence: message.acked_sequence,
    })
}

fn not_in_07(request: &str) -> String {
    format!("{request} is not part of protocol 0.7 (thread-only): this mock serves 0.7")
}

/// A 0.7 `ServerMessage` in 0.2's form, for the log: agent ids empty, no
/// `cli_secret`.
fn view(message: &v07::ServerMessage) -> ServerMessage {
    use v02::server_message::Request as R;
    use v07::server_message::Request as R7;
    let request = message.request.as_ref().map(|request| match request {
        R7::CreateThreadRequest(r) => R::CreateThreadRequest(v02::CreateThreadRequest {
            agent_id: String::new(),
            model: r.model.clone(),
            reasoning_level: r.reasoning_level.clone(),
            thread_id: Some(r.thread_id.clone()),
            additional_model_instructions: r.additional_model_instructions.clone(),
            mcp_servers: r.mcp_servers.iter().map(transcode).collect(),
            git_skill_packages: r.git_skill_packages.iter().map(transcode).collect(),
        }),
        R7::DeleteThreadRequest(r) => R::DeleteThreadRequest(v02::DeleteThreadRequest {
            agent_id: String::new(),
            thread_id: r.thread_id.clone(),
        }),
        R7::InterruptTurnRequest(r) => R::InterruptTurnRequest(v02::InterruptTurnRequest {
            agent_id: String::new(),
            thread_id: r.thread_id.clone(),
        }),
        R7::CreateUserMessageRequest(r) => {
            R::CreateUserMessageRequest(v02::CreateUserMessageRequest {
                agent_id: String::new(),
                thread_id: r.thread_id.clone(),
                text: r.text.clone(),
                allow_steer: r.allow_steer,
                model: r.model.clone(),
                model_reasoning_level: r.model_reasoning_level.clone(),
            })
        }
        R7::HeartbeatRequest(_) => R::HeartbeatRequest(v02::HeartbeatRequest {}),
        R7::CodexConfigurationRequest(r) => R::CodexConfigurationRequest(transcode(r)),
        R7::ApprovalDecision(r) => R::ApprovalDecision(transcode(r)),
    });
    ServerMessage {
        request_id: message.request_id.clone(),
        request,
        acked_sequence: message.acked_sequence,
    }
}

/// What a 0.7 runner sent, in 0.2's form for the log (lossless: the same
/// payloads at the same numbers), with what 0.7's rules found wrong in it.
/// A message without a payload that is not an acknowledgement is flagged
/// too: 0.7's decoder drops payloads it does not know (an `AgentUpdate`,
/// a `SkillMpUpdate`), and a runner never sends an empty message.
pub(crate) fn client_from_v07(message: &v07::ClientMessage) -> (ClientMessage, Option<String>) {
    let mut problems = Vec::new();
    if let Err(e) = agent_runner_proto::Validate::validate(message) {
        problems.push(agent_runner_proto::violations(&e));
    }
    if message.payload.is_none() {
        problems.push(
            "payload: none that protocol 0.7 knows (a 0.2-only message, e.g. agent_update?)"
                .to_owned(),
        );
    }
    let problems = (!problems.is_empty()).then(|| problems.join("; "));
    (transcode(message), problems)
}

/// A 0.7 registration in 0.2's form (the same fields), with what 0.7's rules
/// found wrong in it.
pub(crate) fn registration_from_v07(
    request: &v07::RegisterRunnerRequest,
) -> (RegisterRunnerRequest, Option<String>) {
    let violations = agent_runner_proto::Validate::validate(request)
        .err()
        .map(|e| agent_runner_proto::violations(&e));
    (transcode(request), violations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_message_loses_only_its_agent() {
        let m = ServerMessage {
            request_id: "r".into(),
            request: Some(v02::server_message::Request::CreateUserMessageRequest(
                v02::CreateUserMessageRequest {
                    agent_id: "a".into(),
                    thread_id: "t".into(),
                    text: "say hi".into(),
                    allow_steer: true,
                    model: Some("m".into()),
                    model_reasoning_level: None,
                },
            )),
            acked_sequence: 3,
        };
        let v7 = to_v07(m.clone()).expect("converts");
        let mut expected = m;
        if let Some(v02::server_message::Request::CreateUserMessageRequest(r)) =
            &mut expected.request
        {
            r.agent_id.clear();
        }
        assert_eq!(view(&v7), expected);
    }

    #[test]
    fn agents_have_no_counterpart_in_07() {
        let m = ServerMessage {
            request_id: "r".into(),
            request: Some(v02::server_message::Request::CreateAgentRequest(
                v02::CreateAgentRequest {
                    agent_id: "a".into(),
                    agent_sdk: "scripted".into(),
                },
            )),
            acked_sequence: 0,
        };
        let err = Outgoing::V02(m).into_protocol(Protocol::V07).unwrap_err();
        assert!(err.contains("create_agent_request"), "{err}");
    }

    #[test]
    fn an_agent_update_read_as_07_is_flagged() {
        let update = ClientMessage {
            request_id: None,
            payload: Some(v02::client_message::Payload::AgentUpdate(
                v02::AgentUpdate {
                    agent_id: "a".into(),
                    status: v02::AgentStatus::Ready as i32,
                },
            )),
            sequence: 7,
        };
        let read: v07::ClientMessage = transcode(&update);
        let (_, problems) = client_from_v07(&read);
        assert!(problems.is_some_and(|p| p.contains("payload")));
        let usage = v07::ClientMessage {
            request_id: None,
            payload: Some(v07::client_message::Payload::ThreadTokenUsageUpdate(
                v07::ThreadTokenUsageUpdate::default(),
            )),
            sequence: 8,
        };
        let (logged, problems) = client_from_v07(&usage);
        assert_eq!(logged.sequence, 8);
        assert!(problems.is_some_and(|p| p.contains("thread_token_usage_update.thread_id")));
    }
}
