//! `buf.validate` checks for the two envelopes, `ServerMessage` and
//! `ClientMessage`.
//!
//! Their payload sits in a oneof of messages, which the build-time generator
//! does not cover, so these impls delegate to the payload's generated impl
//! and prefix each violation with the oneof field's name
//! (`create_agent_request.agent_id: …`). This file is protocol 0.2's and
//! what both versions share; `envelope_v07.rs` is protocol 0.7's. A payload whose message has no rules
//! is valid as it is. An envelope with no payload is left to the caller: it is
//! not a `buf.validate` rule, but the runner rejects it all the same.

use prost_protovalidate::{Validate, ValidationError, Violation};

use crate::runner::{ClientMessage, ServerMessage, client_message, server_message};

pub(crate) fn prefixed(
    field: &str,
    result: Result<(), ValidationError>,
) -> Result<(), ValidationError> {
    result.map_err(|err| {
        ValidationError::new(
            err.into_violations()
                .into_iter()
                .map(|mut v| {
                    v.prepend_field_path(field);
                    v
                })
                .collect(),
        )
    })
}

/// Writes `fn $name(&CreateThreadRequest)`: the rules of the MCP transport
/// messages of one protocol version, which sit in a oneof (see runner.proto):
/// `command`, `url` and each header/env `key` non-empty. Both versions have
/// the same messages at the same numbers, as distinct Rust types.
macro_rules! mcp_transport_rules {
    ($name:ident, $module:ident) => {
        pub(crate) fn $name(
            request: &$crate::$module::CreateThreadRequest,
        ) -> Result<(), prost_protovalidate::ValidationError> {
            use $crate::$module::{ThreadMcpHeader, thread_mcp_server};
            fn keys(
                out: &mut Vec<prost_protovalidate::Violation>,
                path: &str,
                headers: &[ThreadMcpHeader],
            ) {
                for (i, h) in headers.iter().enumerate() {
                    $crate::envelope::min_len(out, format!("{path}[{i}].key"), &h.key);
                }
            }
            let mut out = Vec::new();
            for (i, server) in request.mcp_servers.iter().enumerate() {
                let at = format!("mcp_servers[{i}]");
                match &server.transport_config {
                    Some(thread_mcp_server::TransportConfig::Stdio(s)) => {
                        $crate::envelope::min_len(
                            &mut out,
                            format!("{at}.stdio.command"),
                            &s.command,
                        );
                        keys(&mut out, &format!("{at}.stdio.env_vars"), &s.env_vars);
                    }
                    Some(thread_mcp_server::TransportConfig::StreamableHttp(h)) => {
                        $crate::envelope::min_len(
                            &mut out,
                            format!("{at}.streamable_http.url"),
                            &h.url,
                        );
                        keys(
                            &mut out,
                            &format!("{at}.streamable_http.headers"),
                            &h.headers,
                        );
                    }
                    None => {}
                }
            }
            if out.is_empty() {
                Ok(())
            } else {
                Err(prost_protovalidate::ValidationError::new(out))
            }
        }
    };
}

pub(crate) fn min_len(out: &mut Vec<Violation>, path: String, value: &str) {
    if value.is_empty() {
        out.push(Violation::new(
            path,
            "string.min_len",
            "value length must be at least 1 characters",
        ));
    }
}

mcp_transport_rules!(mcp_transports, runner);
pub(crate) use mcp_transport_rules;

impl Validate for ServerMessage {
    fn validate(&self) -> Result<(), ValidationError> {
        use server_message::Request;
        match &self.request {
            // No rules in these payloads.
            None
            | Some(Request::HeartbeatRequest(_))
            | Some(Request::CodexConfigurationRequest(_)) => Ok(()),
            Some(Request::CreateAgentRequest(m)) => prefixed("create_agent_request", m.validate()),
            Some(Request::DeleteAgentRequest(m)) => prefixed("delete_agent_request", m.validate()),
            Some(Request::CreateThreadRequest(m)) => prefixed(
                "create_thread_request",
                m.validate().and_then(|()| mcp_transports(m)),
            ),
            Some(Request::DeleteThreadRequest(m)) => {
                prefixed("delete_thread_request", m.validate())
            }
            Some(Request::CreateUserMessageRequest(m)) => {
                prefixed("create_user_message_request", m.validate())
            }
            Some(Request::InstallSkillsMpRequest(m)) => {
                prefixed("install_skills_mp_request", m.validate())
            }
            Some(Request::InterruptTurnRequest(m)) => {
                prefixed("interrupt_turn_request", m.validate())
            }
            Some(Request::ApprovalDecision(m)) => prefixed("approval_decision", m.validate()),
        }
    }
}

impl Validate for ClientMessage {
    fn validate(&self) -> Result<(), ValidationError> {
        use client_message::Payload;
        match &self.payload {
            None | Some(Payload::HeartbeatResponse(_)) => Ok(()),
            Some(Payload::RequestError(m)) => prefixed("request_error", m.validate()),
            Some(Payload::AgentUpdate(m)) => prefixed("agent_update", m.validate()),
            Some(Payload::ThreadUpdate(m)) => prefixed("thread_update", m.validate()),
            Some(Payload::TurnUpdate(m)) => prefixed("turn_update", m.validate()),
            Some(Payload::ItemUpdate(m)) => prefixed("item_update", m.validate()),
            Some(Payload::SkillMpUpdate(m)) => prefixed("skill_mp_update", m.validate()),
            Some(Payload::ThreadTokenUsageUpdate(m)) => {
                prefixed("thread_token_usage_update", m.validate())
            }
            Some(Payload::ThreadNameUpdate(m)) => prefixed("thread_name_update", m.validate()),
            Some(Payload::AgentSdkUpdate(m)) => prefixed("agent_sdk_update", m.validate()),
            Some(Payload::CodexDeviceCode(m)) => prefixed("codex_device_code", m.validate()),
            Some(Payload::ApprovalRequest(m)) => prefixed("approval_request", m.validate()),
            Some(Payload::ApprovalResolved(m)) => prefixed("approval_resolved", m.validate()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{CreateAgentRequest, ItemUpdate, RequestError};
    use crate::violations;

    #[test]
    fn server_message_violation_names_the_nested_field() {
        let msg = ServerMessage {
            request_id: "r1".into(),
            request: Some(server_message::Request::CreateAgentRequest(
                CreateAgentRequest {
                    agent_id: String::new(),
                    agent_sdk: "scripted".into(),
                },
            )),
            acked_sequence: 0,
        };
        let err = msg.validate().unwrap_err();
        assert_eq!(
            violations(&err),
            "create_agent_request.agent_id: value length must be at least 1 characters"
        );
    }

    #[test]
    fn client_message_checks_nested_command_item() {
        let msg = ClientMessage {
            request_id: None,
            payload: Some(client_message::Payload::ItemUpdate(ItemUpdate {
                sdk_item_id: "i".into(),
                thread_id: "t".into(),
                sdk_turn_id: "u".into(),
                command_execution_item: Some(Default::default()),
                ..Default::default()
            })),
            sequence: 0,
        };
        let text = violations(&msg.validate().unwrap_err());
        assert!(
            text.contains("item_update.command_execution_item.command"),
            "{text}"
        );
        let ok = ClientMessage {
            request_id: Some("r".into()),
            payload: Some(client_message::Payload::RequestError(RequestError {
                error_message: "boom".into(),
            })),
            sequence: 0,
        };
        assert!(ok.validate().is_ok());
    }
}
