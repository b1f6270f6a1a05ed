//! Protocol 0.7 at the edge: what differs from 0.2 is settled here, so the
//! rest of the runner keeps its one internal model.
//!
//! Inbound, a 0.7 `ServerMessage` is validated by 0.7's rules (an invalid
//! one gets a `RequestError` naming the field; one carrying only an
//! acknowledgement is no request and is not validated), then converted
//! into the 0.2 request the dispatcher routes: a thread's implicit agent
//! (`crate::tasks::thread_only`) is filled in, found from the model a
//! `CreateThreadRequest` names (an unknown model is refused here, naming
//! `create_thread_request.model`) or from the routing tables for the
//! requests naming a thread; the `cli_secret` is registered with the
//! redactor and rides along as the thread's agent API token. Messages whose
//! fields have the same numbers in both versions are converted by their
//! bytes ([`recode`]).
//!
//! Outbound nothing is converted: 0.7's `ClientMessage` has 0.2's field
//! numbers without `AgentUpdate` and `SkillMpUpdate`, which nothing makes
//! in 0.7 mode (no agent or skill request exists there), so the bytes the
//! outbox encoded once are 0.7's bytes. Registration is 0.7's own RPC, its
//! SDKs' model names made unique ([`registration`]).

use std::sync::Arc;

use agent_runner_proto::runner::{self as v02, server_message::Request as R02};
use agent_runner_proto::runner_v07::{self as v07, server_message::Request as R07};
use agent_runner_proto::{Validate, violations};
use prost::Message;

use crate::config::Secret;
use crate::delivery::messages;
use crate::delivery::sending::Sending;
use crate::tasks::context::Runtime;
use crate::tasks::dispatch::refuse;
use crate::tasks::thread_only::{self, ThreadOnly};

/// `A` as a `B` by its bytes: for messages whose fields have the same
/// numbers and types in both versions (a field `B` lacks is dropped).
fn recode<A: Message, B: Message + Default>(a: &A) -> B {
    // Bytes prost just encoded decode as any message of the same fields;
    // should they not, the default is what a field-less message decodes to.
    B::decode(a.encode_to_vec().as_slice()).unwrap_or_default()
}

/// The 0.7 registration: 0.2's, with every SDK's model names made unique
/// across SDKs (same fields, same numbers).
pub fn registration(
    rt: &Runtime,
    thread_only: &ThreadOnly,
    features: Vec<String>,
) -> v07::RegisterRunnerRequest {
    let descriptions = rt.sdks.known();
    let agent_sdks = thread_only
        .advertise(&descriptions)
        .into_iter()
        .map(|mut sdk| {
            messages::redact_sdk(&mut sdk, &rt.redactor);
            sdk
        })
        .collect();
    recode(&v02::RegisterRunnerRequest {
        agent_sdks,
        features,
    })
}

/// Drops, from what a previous run journaled, the updates 0.7 has no words
/// for (`AgentUpdate`, `SkillMpUpdate`: left by a run that spoke 0.2 on
/// the same state dir), and forgets them in `journal`; how many. Once, at
/// start-up: the sending path is never checked.
pub fn drop_unspeakable(
    recovered: &mut crate::delivery::journal::Recovered,
    journal: &crate::delivery::journal::Journal,
) -> usize {
    use v02::client_message::Payload;
    let mut dropped = Vec::new();
    recovered.entries.retain(|entry| {
        let only_02 = v02::ClientMessage::decode(entry.message.as_ref()).is_ok_and(|m| {
            matches!(
                m.payload,
                Some(Payload::AgentUpdate(_) | Payload::SkillMpUpdate(_))
            )
        });
        if only_02 {
            dropped.push(entry.id);
        }
        !only_02
    });
    let count = dropped.len();
    if count > 0 {
        journal.forget(dropped);
        tracing::info!(
            count,
            "journaled agent and skill updates of protocol 0.2 dropped: 0.7 has no such messages"
        );
    }
    count
}

/// What the read loop does with one 0.7 `ServerMessage` (see the module
/// doc); never waits.
pub fn on_server_message(rt: &Arc<Runtime>, sending: &Sending, msg: v07::ServerMessage) {
    if msg.acked_sequence != 0 {
        sending.ack(msg.acked_sequence);
        if msg.request.is_none() {
            return;
        }
    }
    let rid = messages::request_id(&msg.request_id);
    let kind = kind(&msg);
    if let Err(err) = msg.validate() {
        refuse(
            rt,
            rid,
            kind,
            format!("invalid {kind}: {}", violations(&err)),
        );
        return;
    }
    let Some(thread_only) = rt.thread_only() else {
        refuse(rt, rid, kind, "the runner does not speak 0.7".to_owned());
        return;
    };
    match convert(rt, thread_only, msg) {
        Ok((converted, token)) => crate::tasks::dispatch::dispatch_with(rt, converted, token),
        Err(text) => refuse(rt, rid, kind, text),
    }
}

/// The 0.2 request for `msg` (valid by 0.7's rules) and the agent API
/// token of a thread it creates; `Err`: the refusal's text.
fn convert(
    rt: &Runtime,
    thread_only: &ThreadOnly,
    msg: v07::ServerMessage,
) -> Result<(v02::ServerMessage, Option<Secret>), String> {
    let mut token = None;
    let request = match msg.request {
        None => None,
        Some(R07::HeartbeatRequest(_)) => Some(R02::HeartbeatRequest(v02::HeartbeatRequest {})),
        Some(R07::CodexConfigurationRequest(r)) => Some(R02::CodexConfigurationRequest(recode(&r))),
        Some(R07::ApprovalDecision(r)) => Some(R02::ApprovalDecision(recode(&r))),
        Some(R07::CreateThreadRequest(r)) => {
            let advertised = rt.sdks.advertised();
            let Some((sdk, model)) = thread_only.resolve(&advertised, &r.model) else {
                return Err(format!(
                    "create_thread_request.model: unknown model {:?} (this runner offers: {})",
                    r.model,
                    thread_only.offered(&advertised).join(", ")
                ));
            };
            if r.cli_secret.len() < 8 {
                tracing::warn!(
                    thread_id = %r.thread_id,
                    "cli_secret is shorter than 8 characters: too short to be masked in output"
                );
            }
            rt.redactor.add(&r.cli_secret);
            token = Some(Secret::new(r.cli_secret));
            Some(R02::CreateThreadRequest(v02::CreateThreadRequest {
                agent_id: thread_only::agent_id(&sdk),
                model,
                reasoning_level: r.reasoning_level,
                thread_id: Some(r.thread_id),
                additional_model_instructions: r.additional_model_instructions,
                mcp_servers: r.mcp_servers.iter().map(recode).collect(),
                git_skill_packages: r.git_skill_packages.iter().map(recode).collect(),
            }))
        }
        Some(R07::DeleteThreadRequest(r)) => {
            let mut out: v02::DeleteThreadRequest = recode(&r);
            out.agent_id = owner(rt, &r.thread_id);
            Some(R02::DeleteThreadRequest(out))
        }
        Some(R07::InterruptTurnRequest(r)) => {
            let mut out: v02::InterruptTurnRequest = recode(&r);
            out.agent_id = owner(rt, &r.thread_id);
            Some(R02::InterruptTurnRequest(out))
        }
        Some(R07::CreateUserMessageRequest(r)) => {
            let mut out: v02::CreateUserMessageRequest = recode(&r);
            out.agent_id = owner(rt, &r.thread_id);
            // A turn's model may be named as advertised (`SDK/MODEL`).
            let sdk = out.agent_id.trim_start_matches(thread_only::AGENT_PREFIX);
            if let Some(model) = &mut out.model
                && let Some(bare) = model.strip_prefix(sdk).and_then(|m| m.strip_prefix('/'))
            {
                *model = bare.to_owned();
            }
            Some(R02::CreateUserMessageRequest(out))
        }
    };
    Ok((
        v02::ServerMessage {
            request_id: msg.request_id,
            request,
            acked_sequence: 0,
        },
        token,
    ))
}

/// The agent of `thread_id`: its live task's, else the first implicit
/// agent (the dispatcher then answers as for any unknown thread).
fn owner(rt: &Runtime, thread_id: &str) -> String {
    rt.mailboxes.thread_agent(thread_id).unwrap_or_else(|| {
        thread_only::agent_id(
            rt.sdks
                .names()
                .first()
                .map(String::as_str)
                .unwrap_or("scripted"),
        )
    })
}

fn kind(msg: &v07::ServerMessage) -> &'static str {
    match &msg.request {
        None => "request",
        Some(R07::CreateThreadRequest(_)) => "create_thread_request",
        Some(R07::DeleteThreadRequest(_)) => "delete_thread_request",
        Some(R07::CreateUserMessageRequest(_)) => "create_user_message_request",
        Some(R07::InterruptTurnRequest(_)) => "interrupt_turn_request",
        Some(R07::HeartbeatRequest(_)) => "heartbeat_request",
        Some(R07::CodexConfigurationRequest(_)) => "codex_configuration_request",
        Some(R07::ApprovalDecision(_)) => "approval_decision",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 0.2 run's agent update, journaled and not delivered, never reaches
    /// a 0.7 control plane; a thread update does.
    #[tokio::test]
    async fn journaled_agent_updates_are_dropped_in_0_7() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (journal, _) = crate::delivery::journal::Journal::open(dir.path()).unwrap();
            for msg in [
                messages::agent(None, "a", v02::AgentStatus::Ready),
                messages::thread(None, "t", v02::ThreadStatus::Ready),
            ] {
                let id = journal.next_id();
                journal
                    .append(id, msg.encode_to_vec().into())
                    .await
                    .unwrap();
            }
            journal.flush().await.unwrap();
        }
        let (journal, mut recovered) = crate::delivery::journal::Journal::open(dir.path()).unwrap();
        assert_eq!(recovered.entries.len(), 2);
        assert_eq!(drop_unspeakable(&mut recovered, &journal), 1);
        assert_eq!(recovered.entries.len(), 1);
        let kept = v02::ClientMessage::decode(recovered.entries[0].message.as_ref()).unwrap();
        assert!(matches!(
            kept.payload,
            Some(v02::client_message::Payload::ThreadUpdate(_))
        ));
        journal.flush().await.unwrap();
        drop(journal);
        let (_, again) = crate::delivery::journal::Journal::open(dir.path()).unwrap();
        assert_eq!(again.entries.len(), 1, "forgotten for good");
    }

    /// The messages converted by their bytes keep every field.
    #[test]
    fn same_numbered_messages_convert_whole() {
        let m = v07::CreateUserMessageRequest {
            thread_id: "t".into(),
            text: "hi".into(),
            allow_steer: true,
            model: Some("m".into()),
            model_reasoning_level: Some("low".into()),
        };
        let out: v02::CreateUserMessageRequest = recode(&m);
        assert_eq!(
            (
                out.thread_id.as_str(),
                out.text.as_str(),
                out.allow_steer,
                out.model.as_deref(),
                out.model_reasoning_level.as_deref()
            ),
            ("t", "hi", true, Some("m"), Some("low"))
        );
        let server = v07::ThreadMcpServer {
            server_id: "s".into(),
            name: "n".into(),
            transport_config: Some(v07::thread_mcp_server::TransportConfig::StreamableHttp(
                v07::ThreadMcpStreamableHttpConfig {
                    url: "http://x".into(),
                    auth_type: 2,
                    bearer_token: Some("b".into()),
                    headers: vec![v07::ThreadMcpHeader {
                        key: "k".into(),
                        value: "v".into(),
                    }],
                },
            )),
        };
        let out: v02::ThreadMcpServer = recode(&server);
        assert_eq!(out.encode_to_vec(), server.encode_to_vec());
        let reg = v02::RegisterRunnerRequest {
            agent_sdks: vec![v02::AgentSdk {
                name: "scripted".into(),
                models: vec![v02::LlmModel {
                    name: "scripted-fast".into(),
                    reasoning: vec!["low".into()],
                }],
                status: 2,
                error_message: None,
            }],
            features: vec!["acked-delivery/1".into()],
        };
        let out: v07::RegisterRunnerRequest = recode(&reg);
        assert_eq!(out.encode_to_vec(), reg.encode_to_vec());
        assert_eq!(out.agent_sdks[0].models[0].name, "scripted-fast");
    }
}
