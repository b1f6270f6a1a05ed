//! The first stop of every `ServerMessage`: validate, then route.
//!
//! Runs on the ControlChannel read loop, so it never waits: heartbeats are
//! answered here, invalid requests get their `RequestError` here (and a
//! WARN line: request id, kind, reason), and everything else is handed to
//! the agent's or thread's task mailbox.

use std::sync::Arc;

use agent_runner_proto::runner::{ApprovalOutcome, ServerMessage, server_message::Request};
use agent_runner_proto::{Validate, violations};
use sdk_adapter::Verdict;

use crate::delivery::messages::{self, RequestId};
use crate::host::workspace::check_id;
use crate::observe::metrics::{self, RequestOutcome};
use crate::tasks::context::Runtime;
use crate::tasks::mail::{self, AgentCmd, NewThread, ThreadCmd, ThreadPackage, UserMessage};
use crate::tasks::mailboxes::ThreadRoute;

/// Handle one message from the control plane.
pub fn dispatch(rt: &Arc<Runtime>, msg: ServerMessage) {
    dispatch_with(rt, msg, None);
}

/// [`dispatch`] of a message converted from protocol 0.7
/// (`crate::link::v07`): a thread it creates holds `agent_api_token`.
pub fn dispatch_with(
    rt: &Arc<Runtime>,
    msg: ServerMessage,
    agent_api_token: Option<crate::config::Secret>,
) {
    let rid = messages::request_id(&msg.request_id);
    let kind = request_kind(&msg);
    tracing::debug!(request_id = ?rid, kind, "request received");
    metrics::request_arrived(kind, rid.as_deref());
    if !matches!(msg.request, Some(Request::HeartbeatRequest(_))) {
        rt.note_activity();
    }
    let followed = rid.clone();
    let outcome = route(rt, msg, rid, kind, agent_api_token);
    metrics::request_handled(kind, followed.as_deref(), outcome);
}

/// Refuses a request before it could be routed (the 0.7 edge: invalid by
/// 0.7's rules, an unknown model): answered, logged and counted as any
/// request the dispatcher refuses.
pub fn refuse(rt: &Runtime, rid: RequestId, kind: &'static str, text: String) {
    metrics::request_arrived(kind, rid.as_deref());
    rt.note_activity();
    let followed = rid.clone();
    reject(rt, rid, kind, text);
    metrics::request_handled(kind, followed.as_deref(), RequestOutcome::Invalid);
}

fn route(
    rt: &Arc<Runtime>,
    msg: ServerMessage,
    rid: RequestId,
    kind: &'static str,
    agent_api_token: Option<crate::config::Secret>,
) -> RequestOutcome {
    if let Err(err) = msg.validate() {
        reject(
            rt,
            rid,
            kind,
            format!("invalid {kind}: {}", violations(&err)),
        );
        return RequestOutcome::Invalid;
    }
    let Some(request) = msg.request else {
        reject(rt, rid, kind, "request: no request set".to_owned());
        return RequestOutcome::Invalid;
    };
    if let Err(text) = check_ids(&request) {
        reject(rt, rid, kind, text);
        return RequestOutcome::Invalid;
    }
    match request {
        Request::HeartbeatRequest(_) => {
            rt.outbox.push_urgent(messages::heartbeat(rid));
            RequestOutcome::Answered
        }
        Request::CodexConfigurationRequest(r) => {
            crate::tasks::codex_login::handle(rt, rid, r);
            RequestOutcome::Accepted
        }
        Request::CreateAgentRequest(r) => to_agent(
            rt,
            kind,
            &r.agent_id,
            AgentCmd::Create {
                sdk: r.agent_sdk,
                rid,
            },
        ),
        Request::DeleteAgentRequest(r) => to_agent(rt, kind, &r.agent_id, AgentCmd::Delete { rid }),
        Request::CreateThreadRequest(r) => {
            let mcp_servers = match crate::tasks::mcp_spec::from_proto(r.mcp_servers) {
                Ok(servers) => servers,
                Err(text) => {
                    reject(rt, rid, kind, text);
                    return RequestOutcome::Invalid;
                }
            };
            crate::tasks::mcp_spec::register_secrets(&rt.redactor, &mcp_servers);
            to_agent(
                rt,
                kind,
                &r.agent_id,
                AgentCmd::CreateThread {
                    thread: Box::new(NewThread {
                        // Checked above: present means a valid id.
                        thread_id: r.thread_id,
                        instructions: r.additional_model_instructions.filter(|i| !i.is_empty()),
                        skill_packages: r
                            .git_skill_packages
                            .into_iter()
                            .map(|p| ThreadPackage {
                                repository_url: p.repository_url,
                                commit_reference: p.commit_reference,
                                directories: p
                                    .skills
                                    .into_iter()
                                    .map(|s| s.directory_path)
                                    .collect(),
                            })
                            .collect(),
                        model: r.model,
                        // proto3 cannot tell "unset" from "empty": both are "none".
                        reasoning_level: r.reasoning_level.filter(|l| !l.is_empty()),
                        mcp_servers,
                        agent_api_token,
                    }),
                    rid,
                },
            )
        }
        Request::InstallSkillsMpRequest(r) => to_agent(
            rt,
            kind,
            &r.agent_id,
            AgentCmd::InstallSkill {
                package: r.package_name,
                rid,
            },
        ),
        Request::DeleteThreadRequest(r) => to_thread(
            rt,
            kind,
            &r.agent_id,
            &r.thread_id,
            ThreadCmd::Delete { rid, done: None },
        ),
        Request::InterruptTurnRequest(r) => to_thread(
            rt,
            kind,
            &r.agent_id,
            &r.thread_id,
            ThreadCmd::Interrupt { rid },
        ),
        Request::CreateUserMessageRequest(r) => {
            let (agent_id, thread_id) = (r.agent_id.clone(), r.thread_id.clone());
            let msg = UserMessage {
                text: r.text,
                allow_steer: r.allow_steer,
                model: r.model.filter(|m| !m.is_empty()),
                reasoning_level: r.model_reasoning_level.filter(|l| !l.is_empty()),
                rid,
            };
            to_thread(
                rt,
                kind,
                &agent_id,
                &thread_id,
                ThreadCmd::UserMessage(Box::new(msg)),
            )
        }
        Request::ApprovalDecision(r) => {
            // Found here, without waiting on the thread: its task applies it.
            let (agent_id, thread_id) = match rt.approvals.thread_of(&r.approval_id) {
                Ok(found) => found,
                Err(text) => {
                    reject(rt, rid, kind, text);
                    return RequestOutcome::Rejected;
                }
            };
            let verdict = match ApprovalOutcome::try_from(r.outcome) {
                Ok(ApprovalOutcome::Approve) => Verdict::Approve,
                Ok(ApprovalOutcome::ApproveForThread) => Verdict::ApproveForThread,
                Ok(ApprovalOutcome::CancelTurn) => Verdict::CancelTurn,
                // Validated: defined and not unspecified.
                _ => Verdict::Deny,
            };
            let decision = mail::Decision {
                approval_id: r.approval_id,
                verdict,
                answer: r.answer,
                message: r.message,
            };
            let cmd = ThreadCmd::Approval {
                rid,
                decision: Box::new(decision),
            };
            to_thread(rt, kind, &agent_id, &thread_id, cmd)
        }
    }
}

/// Answers with a `RequestError` and says so in the log: a refusal the
/// operator cannot see is one they cannot explain. The reason names ids
/// and limits, never a secret (the reply is masked on its way out too).
fn reject(rt: &Runtime, rid: RequestId, kind: &'static str, text: String) {
    let request_id = rid.as_deref().unwrap_or("-");
    tracing::warn!(request_id, kind, reason = %text, "request refused");
    rt.outbox.push_reply(messages::request_error(rid, text));
}

/// Ids that may become paths (agent ids) or are looked up (thread ids) must
/// be path-safe; the error names the field.
fn check_ids(request: &Request) -> Result<(), String> {
    match request {
        Request::HeartbeatRequest(_)
        | Request::CodexConfigurationRequest(_)
        | Request::ApprovalDecision(_) => Ok(()),
        Request::CreateAgentRequest(r) => check_id("create_agent_request.agent_id", &r.agent_id),
        Request::DeleteAgentRequest(r) => check_id("delete_agent_request.agent_id", &r.agent_id),
        Request::CreateThreadRequest(r) => {
            check_id("create_thread_request.agent_id", &r.agent_id)?;
            match r.thread_id.as_deref() {
                Some(id) => check_id("create_thread_request.thread_id", id),
                None => Ok(()),
            }
        }
        Request::InstallSkillsMpRequest(r) => {
            check_id("install_skills_mp_request.agent_id", &r.agent_id)
        }
        Request::DeleteThreadRequest(r) => {
            check_id("delete_thread_request.agent_id", &r.agent_id)?;
            check_id("delete_thread_request.thread_id", &r.thread_id)
        }
        Request::InterruptTurnRequest(r) => {
            check_id("interrupt_turn_request.agent_id", &r.agent_id)?;
            check_id("interrupt_turn_request.thread_id", &r.thread_id)
        }
        Request::CreateUserMessageRequest(r) => {
            check_id("create_user_message_request.agent_id", &r.agent_id)?;
            check_id("create_user_message_request.thread_id", &r.thread_id)
        }
    }
}

fn to_agent(
    rt: &Arc<Runtime>,
    kind: &'static str,
    agent_id: &str,
    cmd: AgentCmd,
) -> RequestOutcome {
    match crate::tasks::agent::route(rt, agent_id, cmd) {
        Ok(()) => RequestOutcome::Accepted,
        Err(cmd) => {
            reject(
                rt,
                cmd.rid(),
                kind,
                format!(
                    "the runner has {} requests waiting (--max-queued-requests); retry later",
                    rt.mailboxes.max_queued()
                ),
            );
            RequestOutcome::Rejected
        }
    }
}

fn to_thread(
    rt: &Arc<Runtime>,
    kind: &'static str,
    agent_id: &str,
    thread_id: &str,
    cmd: ThreadCmd,
) -> RequestOutcome {
    match rt.mailboxes.send_thread(agent_id, thread_id, cmd) {
        ThreadRoute::Sent => RequestOutcome::Accepted,
        ThreadRoute::Busy(cmd) => {
            reject(
                rt,
                cmd.rid(),
                kind,
                format!(
                    "the runner has {} requests waiting (--max-queued-requests); retry later",
                    rt.mailboxes.max_queued()
                ),
            );
            RequestOutcome::Rejected
        }
        ThreadRoute::WrongAgent(owner, cmd) => {
            reject(
                rt,
                cmd.rid(),
                kind,
                format!("thread {thread_id} belongs to agent {owner}, not {agent_id}"),
            );
            RequestOutcome::Rejected
        }
        // Deleting an unknown thread is done already (`mail::unknown_thread`);
        // anything else is refused.
        ThreadRoute::Unknown(cmd @ (ThreadCmd::Interrupt { .. } | ThreadCmd::UserMessage(_))) => {
            reject(rt, cmd.rid(), kind, format!("unknown thread {thread_id}"));
            RequestOutcome::Rejected
        }
        ThreadRoute::Unknown(cmd) => mail::unknown_thread(&rt.outbox, thread_id, cmd),
    }
}

fn request_kind(msg: &ServerMessage) -> &'static str {
    match &msg.request {
        None => "request",
        Some(Request::CreateAgentRequest(_)) => "create_agent_request",
        Some(Request::DeleteAgentRequest(_)) => "delete_agent_request",
        Some(Request::CreateThreadRequest(_)) => "create_thread_request",
        Some(Request::DeleteThreadRequest(_)) => "delete_thread_request",
        Some(Request::CreateUserMessageRequest(_)) => "create_user_message_request",
        Some(Request::InstallSkillsMpRequest(_)) => "install_skills_mp_request",
        Some(Request::InterruptTurnRequest(_)) => "interrupt_turn_request",
        Some(Request::HeartbeatRequest(_)) => "heartbeat_request",
        Some(Request::CodexConfigurationRequest(_)) => "codex_configuration_request",
        Some(Request::ApprovalDecision(_)) => "approval_decision",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use agent_runner_proto::runner::client_message::Payload;
    use agent_runner_proto::runner::{InterruptTurnRequest, ThreadStatus};
    use sdk_adapter::ThreadSpec;

    use super::*;
    use crate::host::store::Store;
    use crate::host::workspace::Workspaces;
    use crate::tasks::sdks::Sdks;

    /// A thread whose task is stuck (the outbox is full of terminal updates
    /// and nothing drains it) fills the runner's queue bound; the next
    /// request is answered at once by the dispatcher itself, and once the
    /// outbox drains every request has exactly one answer.
    #[tokio::test]
    async fn a_full_request_queue_answers_at_once_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let sdks = Sdks::from_adapters(vec![Arc::new(sdk_scripted::ScriptedAdapter::new())]);
        let store = Store::open(&dir.path().join("state")).unwrap();
        let ws = Workspaces::new(dir.path().join("ws")).unwrap();
        const BOUND: usize = 64;
        let rt = Runtime::new(crate::tasks::context::RuntimeParts {
            sdks,
            store,
            workspaces: ws,
            outbox: Arc::new(crate::delivery::outbox::Outbox::new(
                16,
                crate::util::redact::Redactor::new(),
            )),
            mailboxes: Arc::new(crate::tasks::mailboxes::Mailboxes::new(BOUND)),
            max_turns: 8,
            skills: crate::host::skills::SkillSettings::with_max_bytes(1024),
            git_env: None,
            github: None,
            sandboxes: Arc::new(crate::host::sandbox::AgentSandboxes::unconfined(
                "dispatch-test",
            )),
        });
        for _ in 0..16 {
            let filler = messages::thread(None, "filler", ThreadStatus::Ready);
            rt.outbox.push(filler).await;
        }
        let spec = ThreadSpec {
            agent_id: "a".into(),
            thread_id: "t".into(),
            workspace: dir.path().join("ws/a/threads/t"),
            model: "scripted-fast".into(),
            reasoning_level: None,
            sdk_thread_id: None,
            env: Vec::new(),
            sandbox: sdk_adapter::Sandbox::refused("dispatch test: no processes"),
            instructions: None,
            mcp_servers: Default::default(),
        };
        crate::tasks::thread::start(&rt, "scripted".into(), spec, None);
        let total = BOUND + 10;
        for i in 0..total {
            let msg = ServerMessage {
                request_id: format!("r{i}"),
                request: Some(Request::InterruptTurnRequest(InterruptTurnRequest {
                    agent_id: "a".into(),
                    thread_id: "t".into(),
                })),
                acked_sequence: 0,
            };
            dispatch(&rt, msg);
        }
        // Refusals were queued past the bound while the thread was stuck.
        assert!(rt.outbox.stats().depth > 16, "{:?}", rt.outbox.stats());

        let mut answered = HashSet::new();
        let mut refused = 0;
        while answered.len() < total {
            let msg = tokio::time::timeout(std::time::Duration::from_secs(10), rt.outbox.pop())
                .await
                .expect("every request is answered");
            let Some(rid) = msg.request_id.clone() else {
                continue;
            };
            if let Some(Payload::RequestError(e)) = &msg.payload {
                assert!(e.error_message.contains("requests waiting"), "{e:?}");
                refused += 1;
            }
            assert!(answered.insert(rid.clone()), "{rid} answered twice");
        }
        assert!(refused >= 9, "only {refused} refused");
    }
}
