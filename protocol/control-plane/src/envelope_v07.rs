//! `buf.validate` checks for protocol 0.7's two envelopes, the same way
//! `envelope.rs` checks 0.2's: delegate to the payload's generated impl and
//! prefix each violation with the oneof field's name. 0.7 makes
//! `ServerMessage.request_id` required; that rule sits on the envelope, which
//! the generator leaves to this file, so it is checked here.

use prost_protovalidate::{Validate, ValidationError, Violation};

use crate::envelope::{min_len, prefixed};
use crate::runner_v07::{ClientMessage, ServerMessage, client_message, server_message};

crate::envelope::mcp_transport_rules!(mcp_transports, runner_v07);

impl Validate for ServerMessage {
    fn validate(&self) -> Result<(), ValidationError> {
        use server_message::Request;
        let mut head: Vec<Violation> = Vec::new();
        min_len(&mut head, "request_id".to_owned(), &self.request_id);
        let payload = match &self.request {
            None
            | Some(Request::HeartbeatRequest(_))
            | Some(Request::CodexConfigurationRequest(_)) => Ok(()),
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
            Some(Request::InterruptTurnRequest(m)) => {
                prefixed("interrupt_turn_request", m.validate())
            }
            Some(Request::ApprovalDecision(m)) => prefixed("approval_decision", m.validate()),
        };
        if let Err(err) = payload {
            head.extend(err.into_violations());
        }
        if head.is_empty() {
            Ok(())
        } else {
            Err(ValidationError::new(head))
        }
    }
}

impl Validate for ClientMessage {
    fn validate(&self) -> Result<(), ValidationError> {
        use client_message::Payload;
        match &self.payload {
            None | Some(Payload::HeartbeatResponse(_)) => Ok(()),
            Some(Payload::RequestError(m)) => prefixed("request_error", m.validate()),
            Some(Payload::ThreadUpdate(m)) => prefixed("thread_update", m.validate()),
            Some(Payload::TurnUpdate(m)) => prefixed("turn_update", m.validate()),
            Some(Payload::ItemUpdate(m)) => prefixed("item_update", m.validate()),
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
    use crate::runner_v07::{
        CreateThreadRequest, ThreadMcpServer, ThreadMcpStdioConfig, ThreadTokenUsageUpdate,
        thread_mcp_server,
    };
    use crate::violations;

    fn create_thread(cli_secret: &str) -> ServerMessage {
        ServerMessage {
            request_id: "r1".into(),
            request: Some(server_message::Request::CreateThreadRequest(
                CreateThreadRequest {
                    thread_id: "t1".into(),
                    model: "scripted-fast".into(),
                    cli_secret: cli_secret.into(),
                    ..Default::default()
                },
            )),
            acked_sequence: 0,
        }
    }

    #[test]
    fn a_thread_without_cli_secret_names_the_field() {
        assert!(create_thread("s3cret").validate().is_ok());
        let err = create_thread("").validate().unwrap_err();
        assert_eq!(
            violations(&err),
            "create_thread_request.cli_secret: value length must be at least 1 characters"
        );
    }

    #[test]
    fn request_id_is_required_and_mcp_transports_are_checked() {
        let mut msg = create_thread("s");
        msg.request_id.clear();
        if let Some(server_message::Request::CreateThreadRequest(r)) = &mut msg.request {
            r.mcp_servers.push(ThreadMcpServer {
                server_id: "m".into(),
                name: "m".into(),
                transport_config: Some(thread_mcp_server::TransportConfig::Stdio(
                    ThreadMcpStdioConfig::default(),
                )),
            });
        }
        let text = violations(&msg.validate().unwrap_err());
        assert!(text.starts_with("request_id: "), "{text}");
        assert!(
            text.contains("create_thread_request.mcp_servers[0].stdio.command"),
            "{text}"
        );
    }

    #[test]
    fn token_usage_needs_its_thread_and_turn() {
        let msg = ClientMessage {
            request_id: None,
            payload: Some(client_message::Payload::ThreadTokenUsageUpdate(
                ThreadTokenUsageUpdate::default(),
            )),
            sequence: 0,
        };
        let text = violations(&msg.validate().unwrap_err());
        assert!(
            text.contains("thread_token_usage_update.thread_id"),
            "{text}"
        );
        assert!(
            text.contains("thread_token_usage_update.sdk_turn_id"),
            "{text}"
        );
    }
}
