//! The canonical protobuf JSON mapping of the control-plane messages, as the
//! binary's stdio and scenario formats use it: camelCase field names, enums
//! by name (`"AGENT_STATUS_READY"`), a oneof member as a plain field
//! (`{"requestId": "r1", "createAgentRequest": {...}}`), int64 as a string,
//! default values omitted. Parsing also accepts snake_case names and int64
//! as numbers, and rejects unknown fields. The serde impls come from
//! `pbjson-build` in the protocol crate.

use agent_runner_proto::runner::{ClientMessage, RegisterRunnerRequest, ServerMessage};
use anyhow::{Context as _, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::versions::{Outgoing, Protocol};

/// Any message as a JSON value. Cannot fail for protobuf messages (they have
/// no non-string map keys); anything else that fails becomes `null`.
pub fn to_value<T: Serialize>(message: &T) -> Value {
    serde_json::to_value(message).unwrap_or(Value::Null)
}

/// Any message from a JSON value, naming the message type on error.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T> {
    serde_json::from_value(value)
        .with_context(|| format!("not a valid {} in protobuf JSON", short_type_name::<T>()))
}

fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

/// A ClientMessage in canonical protobuf JSON.
pub fn client_message_to_json(message: &ClientMessage) -> Value {
    to_value(message)
}

/// A ClientMessage from canonical protobuf JSON.
pub fn client_message_from_json(value: Value) -> Result<ClientMessage> {
    from_value(value)
}

/// A ServerMessage in canonical protobuf JSON.
pub fn server_message_to_json(message: &ServerMessage) -> Value {
    to_value(message)
}

/// A ServerMessage from canonical protobuf JSON.
pub fn server_message_from_json(value: Value) -> Result<ServerMessage> {
    from_value(value)
}

/// Parses one JSON text (e.g. a stdin line) as a `ServerMessage`.
pub fn server_message_from_str(text: &str) -> Result<ServerMessage> {
    let value: Value = serde_json::from_str(text).context("not valid JSON")?;
    server_message_from_json(value)
}

/// A ServerMessage of `protocol` from canonical protobuf JSON: a 0.7 mock
/// reads 0.7's messages (`createThreadRequest` with `cliSecret`, no agents).
pub fn outgoing_from_json(protocol: Protocol, value: Value) -> Result<Outgoing> {
    Ok(match protocol {
        Protocol::V02 => Outgoing::V02(from_value(value)?),
        Protocol::V07 => Outgoing::V07(
            from_value::<agent_runner_proto::runner_v07::ServerMessage>(value)?,
        ),
    })
}

/// A RegisterRunnerRequest in canonical protobuf JSON.
pub fn register_request_to_json(request: &RegisterRunnerRequest) -> Value {
    to_value(request)
}

#[cfg(test)]
mod tests {
    use agent_runner_proto::runner::{
        AgentStatus, AgentUpdate, CommandExecutionItem, CreateUserMessageRequest, ItemStatus,
        ItemType, ItemUpdate, ThreadTokenUsageUpdate, TokenUsageBreakdown, client_message,
        server_message,
    };
    use serde_json::json;

    use super::*;

    #[test]
    fn server_message_round_trips_in_canonical_form() {
        let message = ServerMessage {
            request_id: "r1".into(),
            request: Some(server_message::Request::CreateUserMessageRequest(
                CreateUserMessageRequest {
                    agent_id: "a1".into(),
                    thread_id: "t1".into(),
                    text: "say hi".into(),
                    allow_steer: true,
                    model: Some("scripted-fast".into()),
                    model_reasoning_level: None,
                },
            )),
            acked_sequence: 0,
        };
        let value = server_message_to_json(&message);
        assert_eq!(
            value,
            json!({
                "requestId": "r1",
                "createUserMessageRequest": {
                    "agentId": "a1", "threadId": "t1", "text": "say hi",
                    "allowSteer": true, "model": "scripted-fast"
                }
            })
        );
        assert_eq!(server_message_from_json(value).expect("parses"), message);
    }

    #[test]
    fn server_message_accepts_snake_case_and_rejects_unknown_fields() {
        let parsed = server_message_from_str(r#"{"request_id":"h","heartbeat_request":{}}"#)
            .expect("parses");
        assert_eq!(parsed.request_id, "h");
        assert!(matches!(
            parsed.request,
            Some(server_message::Request::HeartbeatRequest(_))
        ));
        let err =
            server_message_from_str(r#"{"requestId":"h","bogus":1}"#).expect_err("unknown field");
        assert!(format!("{err:#}").contains("bogus"), "{err:#}");
        assert!(server_message_from_str("not json").is_err());
    }

    #[test]
    fn client_message_round_trips_with_enums_by_name_and_int64_as_string() {
        let item = ClientMessage {
            request_id: Some("r3".into()),
            payload: Some(client_message::Payload::ItemUpdate(ItemUpdate {
                sdk_item_id: "i1".into(),
                status: ItemStatus::Completed as i32,
                item_type: ItemType::CommandExecution as i32,
                text: None,
                command_execution_item: Some(CommandExecutionItem {
                    command: "echo hi".into(),
                    cwd: "/w".into(),
                    process_id: "p1".into(),
                    output: Some("hi\n".into()),
                }),
                thread_id: "t1".into(),
                sdk_turn_id: "u1".into(),
            })),
            sequence: 0,
        };
        let value = client_message_to_json(&item);
        assert_eq!(
            value["itemUpdate"]["status"],
            json!("ITEM_STATUS_COMPLETED")
        );
        assert_eq!(value["itemUpdate"]["itemType"], json!("COMMAND_EXECUTION"));
        assert_eq!(
            value["itemUpdate"]["commandExecutionItem"]["processId"],
            json!("p1")
        );
        assert_eq!(client_message_from_json(value).expect("parses"), item);

        let usage = ClientMessage {
            request_id: None,
            payload: Some(client_message::Payload::ThreadTokenUsageUpdate(
                ThreadTokenUsageUpdate {
                    thread_id: "t1".into(),
                    sdk_turn_id: "u1".into(),
                    total_usage: Some(TokenUsageBreakdown {
                        input_tokens: 5,
                        total_tokens: 7,
                        ..Default::default()
                    }),
                    last_usage: None,
                    model_context_window: Some(1000),
                },
            )),
            sequence: 0,
        };
        let value = client_message_to_json(&usage);
        assert_eq!(value.get("requestId"), None);
        assert_eq!(
            value["threadTokenUsageUpdate"]["totalUsage"]["inputTokens"],
            json!("5")
        );
        assert_eq!(
            value["threadTokenUsageUpdate"]["modelContextWindow"],
            json!("1000")
        );
        assert_eq!(client_message_from_json(value).expect("parses"), usage);

        let ready = ClientMessage {
            request_id: Some("r1".into()),
            payload: Some(client_message::Payload::AgentUpdate(AgentUpdate {
                agent_id: "a1".into(),
                status: AgentStatus::Ready as i32,
            })),
            sequence: 0,
        };
        assert_eq!(
            client_message_to_json(&ready),
            json!({"requestId": "r1", "agentUpdate": {"agentId": "a1", "status": "AGENT_STATUS_READY"}})
        );
    }
}
