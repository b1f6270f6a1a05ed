//! Every `ClientMessage` the runner sends is built here: the one place where
//! SDK-neutral events meet the wire contract. Each builder caps the fields
//! it fills (`delivery::fit`), so no update is ever too large for
//! a gRPC peer with default limits.

use agent_runner_proto::runner::{
    AgentSdk, AgentSdkStatus, AgentStatus, AgentUpdate, ApprovalKind, ApprovalOutcome,
    ApprovalRequest, ApprovalResolved, ApprovalResolver, ClientMessage, CodexDeviceCode,
    CommandExecutionItem, HeartbeatResponse, ItemStatus, ItemType, ItemUpdate, LlmModel,
    RequestError, SkillMpStatus, SkillMpUpdate, ThreadNameUpdate, ThreadStatus,
    ThreadTokenUsageUpdate, ThreadUpdate, TokenUsageBreakdown, TurnStatus, TurnUpdate,
    client_message::Payload,
};
use sdk_adapter::{ItemEvent, ItemKind, TokenUsage};

use crate::delivery::fit::{self, id};
use crate::util::redact::Redactor;

/// The request id a reply carries: none when the request had none.
pub type RequestId = Option<String>;

/// Normalise a wire request id (empty ⇒ none).
pub fn request_id(raw: &str) -> RequestId {
    (!raw.is_empty()).then(|| raw.to_owned())
}

fn message(mut request_id: RequestId, payload: Payload) -> ClientMessage {
    if let Some(rid) = &mut request_id {
        fit::cap_id(rid);
    }
    ClientMessage {
        request_id,
        payload: Some(payload),
        sequence: 0,
    }
}

/// A `RequestError` saying `text`.
pub fn request_error(request_id: RequestId, text: impl Into<String>) -> ClientMessage {
    let mut error_message = text.into();
    if error_message.is_empty() {
        error_message = "request failed".to_owned();
    }
    fit::cap_text(&mut error_message, fit::ERROR_CAP);
    message(
        request_id,
        Payload::RequestError(RequestError { error_message }),
    )
}

/// A `HeartbeatResponse`.
pub fn heartbeat(request_id: RequestId) -> ClientMessage {
    message(request_id, Payload::HeartbeatResponse(HeartbeatResponse {}))
}

/// An `AgentUpdate`.
pub fn agent(request_id: RequestId, agent_id: &str, status: AgentStatus) -> ClientMessage {
    message(
        request_id,
        Payload::AgentUpdate(AgentUpdate {
            agent_id: id(agent_id),
            status: status.into(),
        }),
    )
}

/// What registration (and `agent_sdk_update`) says about one SDK, within
/// the caps of `fit::fit_sdk`.
pub fn agent_sdk(d: sdk_adapter::SdkDescription) -> AgentSdk {
    let mut sdk = AgentSdk {
        name: d.name,
        models: d
            .models
            .into_iter()
            .map(|m| LlmModel {
                name: m.name,
                reasoning: m.reasoning_levels,
            })
            .collect(),
        status: match d.status {
            sdk_adapter::SdkStatus::Ready => AgentSdkStatus::Ready,
            sdk_adapter::SdkStatus::Unconfigured => AgentSdkStatus::Unconfigured,
            sdk_adapter::SdkStatus::Error => AgentSdkStatus::Error,
        }
        .into(),
        error_message: d.error_message,
    };
    fit::fit_sdk(&mut sdk);
    sdk
}

/// An `agent_sdk_update`: `d` changed since the control plane was told.
pub fn agent_sdk_update(request_id: RequestId, d: sdk_adapter::SdkDescription) -> ClientMessage {
    message(request_id, Payload::AgentSdkUpdate(agent_sdk(d)))
}

/// An `agent_sdk_update` of `sdk` as made already (protocol 0.7's unique
/// model names).
pub fn agent_sdk_message(request_id: RequestId, sdk: AgentSdk) -> ClientMessage {
    message(request_id, Payload::AgentSdkUpdate(sdk))
}

/// A `ThreadNameUpdate`: the SDK's title for the thread (`None`: cleared).
pub fn thread_name(
    request_id: RequestId,
    thread_id: &str,
    mut name: Option<String>,
) -> ClientMessage {
    fit::cap_opt(&mut name, fit::NAME_CAP);
    message(
        request_id,
        Payload::ThreadNameUpdate(ThreadNameUpdate {
            thread_id: id(thread_id),
            thread_name: name,
        }),
    )
}

/// A `ThreadUpdate`.
pub fn thread(request_id: RequestId, thread_id: &str, status: ThreadStatus) -> ClientMessage {
    message(
        request_id,
        Payload::ThreadUpdate(ThreadUpdate {
            thread_id: id(thread_id),
            status: status.into(),
        }),
    )
}

/// A `TurnUpdate`.
pub fn turn(
    request_id: RequestId,
    thread_id: &str,
    sdk_turn_id: &str,
    status: TurnStatus,
) -> ClientMessage {
    message(
        request_id,
        Payload::TurnUpdate(TurnUpdate {
            sdk_turn_id: id(sdk_turn_id),
            status: status.into(),
            thread_id: id(thread_id),
        }),
    )
}

/// An `ApprovalRequest`: the turn `sdk_turn_id` of `thread_id` waits for a
/// decision on `ask`, until `expires_unix_ms`.
pub fn approval_request(
    request_id: RequestId,
    approval_id: &str,
    thread_id: &str,
    sdk_turn_id: &str,
    ask: &sdk_adapter::ApprovalAsk,
    expires_unix_ms: i64,
) -> ClientMessage {
    // One line a person can decide on, never empty.
    let mut title = ask.title.split_whitespace().collect::<Vec<_>>().join(" ");
    if title.is_empty() {
        title = "the agent asks for approval".to_owned();
    }
    fit::cap_text(&mut title, fit::NAME_CAP);
    let mut command = ask.command.clone();
    fit::cap_opt(&mut command, fit::COMMAND_CAP);
    let mut cwd = ask.cwd.clone();
    fit::cap_opt(&mut cwd, fit::CWD_CAP);
    let mut reason = ask.reason.clone();
    fit::cap_opt(&mut reason, fit::REASON_CAP);
    let entries = |list: &[String]| -> Vec<String> {
        list.iter()
            .take(fit::MAX_APPROVAL_ENTRIES)
            .map(|entry| {
                let mut entry = entry.clone();
                fit::cap_text(&mut entry, fit::CWD_CAP);
                entry
            })
            .collect()
    };
    message(
        request_id,
        Payload::ApprovalRequest(ApprovalRequest {
            approval_id: id(approval_id),
            thread_id: id(thread_id),
            sdk_turn_id: id(sdk_turn_id),
            kind: approval_kind(ask.kind).into(),
            title,
            command,
            cwd,
            paths: entries(&ask.paths),
            reason,
            options: entries(&ask.options),
            sdk_item_id: ask.item_id.as_deref().map(id),
            expires_unix_ms: expires_unix_ms.max(0),
        }),
    )
}

/// The wire's name for an approval's kind.
pub fn approval_kind(kind: sdk_adapter::ApprovalKind) -> ApprovalKind {
    match kind {
        sdk_adapter::ApprovalKind::CommandExecution => ApprovalKind::CommandExecution,
        sdk_adapter::ApprovalKind::FileChange => ApprovalKind::FileChange,
        sdk_adapter::ApprovalKind::Permission => ApprovalKind::Permission,
        sdk_adapter::ApprovalKind::McpElicitation => ApprovalKind::McpElicitation,
        sdk_adapter::ApprovalKind::Question => ApprovalKind::Question,
    }
}

/// The wire's name for a decision.
pub fn approval_outcome(verdict: sdk_adapter::Verdict) -> ApprovalOutcome {
    match verdict {
        sdk_adapter::Verdict::Approve => ApprovalOutcome::Approve,
        sdk_adapter::Verdict::ApproveForThread => ApprovalOutcome::ApproveForThread,
        sdk_adapter::Verdict::Deny => ApprovalOutcome::Deny,
        sdk_adapter::Verdict::CancelTurn => ApprovalOutcome::CancelTurn,
    }
}

/// An `ApprovalResolved`: how `approval_id` ended and who decided.
pub fn approval_resolved(
    request_id: RequestId,
    approval_id: &str,
    thread_id: &str,
    outcome: ApprovalOutcome,
    resolved_by: ApprovalResolver,
) -> ClientMessage {
    message(
        request_id,
        Payload::ApprovalResolved(ApprovalResolved {
            approval_id: id(approval_id),
            thread_id: id(thread_id),
            outcome: outcome.into(),
            resolved_by: resolved_by.into(),
        }),
    )
}

/// A `SkillMpUpdate INSTALLED`.
pub fn skill_installed(request_id: RequestId, agent_id: &str, package: &str) -> ClientMessage {
    message(
        request_id,
        Payload::SkillMpUpdate(SkillMpUpdate {
            agent_id: id(agent_id),
            status: SkillMpStatus::Installed.into(),
            package_name: id(package),
        }),
    )
}

/// A `CodexDeviceCode`: the code a person enters to finish a codex login.
pub fn codex_device_code(request_id: RequestId, device_code: String) -> ClientMessage {
    message(
        request_id,
        Payload::CodexDeviceCode(CodexDeviceCode {
            device_code: id(&device_code),
        }),
    )
}

/// The wire item type of an adapter's item kind.
pub fn item_type(kind: ItemKind) -> ItemType {
    match kind {
        ItemKind::UserMessage => ItemType::UserMessage,
        ItemKind::AgentMessage => ItemType::AgentMessage,
        ItemKind::Reasoning => ItemType::Reasoning,
        ItemKind::CommandExecution => ItemType::CommandExecution,
        ItemKind::Plan => ItemType::Plan,
        ItemKind::FileChange => ItemType::FileChange,
        ItemKind::McpToolCall => ItemType::McpToolCall,
        ItemKind::CollabAgentToolCall => ItemType::CollabAgentToolCall,
        ItemKind::WebSearch => ItemType::WebSearch,
        ItemKind::ImageView => ItemType::ImageView,
        ItemKind::EnteredReviewMode => ItemType::EnteredReviewMode,
        ItemKind::ExitedReviewMode => ItemType::ExitedReviewMode,
        ItemKind::ContextCompaction => ItemType::ContextCompaction,
    }
}

/// An `ItemUpdate` for an adapter's item, its text, command line, directory
/// and output capped (`delivery::fit`).
pub fn item(
    request_id: RequestId,
    thread_id: &str,
    sdk_turn_id: &str,
    event: ItemEvent,
) -> ClientMessage {
    let status = match event.status {
        sdk_adapter::ItemStatus::Running => ItemStatus::Running,
        sdk_adapter::ItemStatus::Completed => ItemStatus::Completed,
    };
    // The contract requires a process id, but Claude Code never reports one
    // and codex only sometimes does: the item id stands in (stable for the
    // item, unique in the thread) rather than the update being invalid.
    let completed = status == ItemStatus::Completed;
    let mut item_id = event.item_id;
    fit::cap_id(&mut item_id);
    let command_execution_item = event.command.map(|c| {
        // The protocol has no exit status: a finished command's output ends
        // with a marker saying how it ended, unless it exited 0.
        let marker = c.end_marker().filter(|_| completed);
        let mut command = c.command;
        fit::cap_text(&mut command, fit::COMMAND_CAP);
        let mut cwd = c.cwd;
        fit::cap_text(&mut cwd, fit::CWD_CAP);
        CommandExecutionItem {
            process_id: if c.process_id.is_empty() {
                item_id.clone()
            } else {
                id(&c.process_id)
            },
            output: command_output(c.output, marker),
            command,
            cwd,
        }
    });
    let mut text = event.text;
    fit::cap_opt(&mut text, fit::TEXT_CAP);
    message(
        request_id,
        Payload::ItemUpdate(ItemUpdate {
            sdk_item_id: item_id,
            status: status.into(),
            item_type: item_type(event.kind).into(),
            text,
            command_execution_item,
            thread_id: id(thread_id),
            sdk_turn_id: id(sdk_turn_id),
        }),
    )
}

/// A command's output, capped, then the marker saying how it ended (kept
/// whole: it is what tells failure from success).
fn command_output(output: Option<String>, marker: Option<String>) -> Option<String> {
    let mut output = match (output, marker) {
        (output, None) => output,
        (None, Some(marker)) => Some(marker),
        (Some(mut output), Some(marker)) => {
            fit::cap_text(&mut output, fit::OUTPUT_CAP - fit::MARKER_ROOM);
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&marker);
            Some(output)
        }
    };
    // Without a marker this is the cut; with one, a no-op (markers are
    // shorter than their room) that keeps the bound whatever they say.
    fit::cap_opt(&mut output, fit::OUTPUT_CAP);
    output
}

fn breakdown(b: sdk_adapter::TokenUsageBreakdown) -> TokenUsageBreakdown {
    TokenUsageBreakdown {
        input_tokens: b.input_tokens.max(0),
        cached_input_tokens: b.cached_input_tokens.max(0),
        output_tokens: b.output_tokens.max(0),
        reasoning_output_tokens: b.reasoning_output_tokens.max(0),
        total_tokens: b.total_tokens.max(0),
    }
}

/// A `ThreadTokenUsageUpdate`.
pub fn token_usage(
    request_id: RequestId,
    thread_id: &str,
    sdk_turn_id: &str,
    usage: TokenUsage,
) -> ClientMessage {
    message(
        request_id,
        Payload::ThreadTokenUsageUpdate(ThreadTokenUsageUpdate {
            thread_id: id(thread_id),
            sdk_turn_id: id(sdk_turn_id),
            total_usage: Some(breakdown(usage.total)),
            last_usage: Some(breakdown(usage.last)),
            // Never negative (0.7 requires `gte 0`; a window is a size).
            model_context_window: usage.model_context_window.map(|w| w.max(0)),
        }),
    )
}

/// Mask every registered secret in the free text of `msg`: item text,
/// command line, cwd and output, error messages (a failed turn's reason
/// often quotes the agent's output) and thread names (an agent may title a
/// thread with what it read). Ids and enums are left alone.
pub fn redact(msg: &mut ClientMessage, redactor: &Redactor) {
    match &mut msg.payload {
        Some(Payload::ItemUpdate(item)) => {
            if let Some(text) = &mut item.text {
                redactor.redact_in_place(text);
            }
            if let Some(c) = &mut item.command_execution_item {
                redactor.redact_in_place(&mut c.command);
                redactor.redact_in_place(&mut c.cwd);
                if let Some(output) = &mut c.output {
                    redactor.redact_in_place(output);
                }
            }
        }
        Some(Payload::RequestError(e)) => redactor.redact_in_place(&mut e.error_message),
        Some(Payload::ThreadNameUpdate(n)) => {
            if let Some(name) = &mut n.thread_name {
                redactor.redact_in_place(name);
            }
        }
        Some(Payload::AgentSdkUpdate(sdk)) => redact_sdk(sdk, redactor),
        _ => {}
    }
}

/// Masks the one free text of an SDK's description, its error (a CLI's
/// login failure may quote a key): in `agent_sdk_update`s and registration.
pub fn redact_sdk(sdk: &mut AgentSdk, redactor: &Redactor) {
    if let Some(error) = &mut sdk.error_message {
        redactor.redact_in_place(error);
    }
}

#[cfg(test)]
mod tests {
    use agent_runner_proto::Validate;
    use sdk_adapter::{CommandInfo, ItemStatus as SdkStatus};

    use super::*;

    fn command_item(process_id: &str) -> ClientMessage {
        item(
            request_id("r1"),
            "thr-1",
            "turn-1",
            ItemEvent {
                item_id: "turn-1:tool-7".into(),
                kind: ItemKind::CommandExecution,
                status: SdkStatus::Running,
                text: None,
                command: Some(CommandInfo {
                    command: "ls".into(),
                    cwd: "/w".into(),
                    process_id: process_id.into(),
                    output: None,
                    exit_code: None,
                    ..Default::default()
                }),
            },
        )
    }

    fn process_id(m: &ClientMessage) -> String {
        match &m.payload {
            Some(Payload::ItemUpdate(u)) => u
                .command_execution_item
                .as_ref()
                .map(|c| c.process_id.clone())
                .unwrap_or_default(),
            other => panic!("not an item update: {other:?}"),
        }
    }

    /// Longer than gRPC's default limit on its own.
    const HUGE: usize = 5 * 1024 * 1024;

    fn huge(c: char) -> String {
        c.to_string().repeat(HUGE)
    }

    /// `m` is valid and, with the largest sequence number, encodes to at
    /// most the limit every gRPC peer accepts.
    fn assert_fits(what: &str, m: &ClientMessage) {
        let mut numbered = m.clone();
        numbered.sequence = u64::MAX;
        let len = prost::Message::encoded_len(&numbered);
        assert!(len <= fit::MESSAGE_LIMIT, "{what}: {len} bytes");
        assert!(m.validate().is_ok(), "{what}: {:?}", m.validate());
    }

    fn item_update(m: &ClientMessage) -> &ItemUpdate {
        match &m.payload {
            Some(Payload::ItemUpdate(u)) => u,
            other => panic!("not an item update: {other:?}"),
        }
    }

    #[test]
    fn an_item_with_every_part_huge_fits() {
        let m = item(
            Some(huge('r')),
            &huge('t'),
            &huge('u'),
            ItemEvent {
                item_id: huge('i'),
                kind: ItemKind::CommandExecution,
                status: SdkStatus::Completed,
                text: Some(huge('x')),
                command: Some(CommandInfo {
                    command: huge('c'),
                    cwd: huge('d'),
                    process_id: huge('p'),
                    output: Some(huge('o')),
                    exit_code: Some(3),
                    ..Default::default()
                }),
            },
        );
        assert_fits("command item", &m);
        let u = item_update(&m);
        let text = u.text.as_deref().unwrap_or_default();
        assert!(
            text.ends_with("… [truncated: 5,242,880 bytes, 1,048,526 shown]"),
            "{}",
            &text[text.len() - 80..]
        );
        let output = u
            .command_execution_item
            .as_ref()
            .and_then(|c| c.output.as_deref())
            .unwrap_or_default();
        assert!(
            output.contains("… [truncated: 5,242,880 bytes,"),
            "{}",
            &output[output.len() - 100..]
        );
        assert!(
            output.ends_with("\n[exit status 3]"),
            "{}",
            &output[output.len() - 100..]
        );
    }

    #[test]
    fn an_item_of_every_kind_with_a_huge_text_fits() {
        let kinds = [
            ItemKind::UserMessage,
            ItemKind::AgentMessage,
            ItemKind::Reasoning,
            ItemKind::CommandExecution,
            ItemKind::Plan,
            ItemKind::FileChange,
            ItemKind::McpToolCall,
            ItemKind::CollabAgentToolCall,
            ItemKind::WebSearch,
            ItemKind::ImageView,
            ItemKind::EnteredReviewMode,
            ItemKind::ExitedReviewMode,
            ItemKind::ContextCompaction,
        ];
        let text = huge('é');
        for kind in kinds {
            let event = |status| ItemEvent {
                item_id: "turn-1-item-1".into(),
                kind,
                status,
                text: Some(text.clone()),
                command: None,
            };
            for status in [SdkStatus::Running, SdkStatus::Completed] {
                let m = item(request_id("r1"), "thr-1", "turn-1", event(status));
                assert_fits(&format!("{kind:?}"), &m);
                let kept = item_update(&m).text.as_deref().unwrap_or_default();
                assert!(kept.starts_with("éé") && kept.contains("[truncated: 10,485,760 bytes,"));
            }
        }
    }

    #[test]
    fn a_huge_error_fits() {
        let m = request_error(Some(huge('r')), huge('e'));
        assert_fits("request error", &m);
    }

    #[test]
    fn a_huge_thread_name_fits() {
        let m = thread_name(Some(huge('r')), &huge('t'), Some(huge('n')));
        assert_fits("thread name", &m);
        match &m.payload {
            Some(Payload::ThreadNameUpdate(n)) => {
                let name = n.thread_name.as_deref().unwrap_or_default();
                assert!(name.len() <= fit::NAME_CAP, "{}", name.len());
                assert!(
                    name.ends_with("… [truncated: 5,242,880 bytes, 4,050 shown]"),
                    "{name:.80}"
                );
            }
            other => panic!("not a thread name: {other:?}"),
        }
    }

    #[test]
    fn updates_of_huge_ids_fit() {
        let rid = || Some(huge('r'));
        let usage = sdk_adapter::TokenUsage::default();
        for (what, m) in [
            ("agent", agent(rid(), &huge('a'), AgentStatus::Ready)),
            ("thread", thread(rid(), &huge('t'), ThreadStatus::Ready)),
            (
                "turn",
                turn(rid(), &huge('t'), &huge('u'), TurnStatus::Running),
            ),
            ("skill", skill_installed(rid(), &huge('a'), &huge('p'))),
            ("device code", codex_device_code(rid(), huge('d'))),
            (
                "token usage",
                token_usage(rid(), &huge('t'), &huge('u'), usage),
            ),
            ("heartbeat", heartbeat(rid())),
        ] {
            assert_fits(what, &m);
        }
    }

    fn huge_sdk(name: char) -> sdk_adapter::SdkDescription {
        let levels = (0..40).map(|i| format!("level-{i}")).collect::<Vec<_>>();
        sdk_adapter::SdkDescription {
            name: huge(name),
            status: sdk_adapter::SdkStatus::Error,
            error_message: Some(huge('e')),
            models: (0..1_000)
                .map(|i| sdk_adapter::ModelInfo {
                    name: format!("model-{i}-{}", "m".repeat(200)),
                    reasoning_levels: levels.clone(),
                })
                .chain(std::iter::once(sdk_adapter::ModelInfo {
                    name: huge('m'),
                    reasoning_levels: vec![huge('l')],
                }))
                .collect(),
        }
    }

    #[test]
    fn an_sdk_error_is_masked() {
        let redactor = Redactor::new();
        redactor.add("sk-live-0123456789");
        let mut update = agent_sdk_update(
            None,
            sdk_adapter::SdkDescription {
                name: "codex".into(),
                status: sdk_adapter::SdkStatus::Error,
                error_message: Some("login failed for key sk-live-0123456789".into()),
                models: Vec::new(),
            },
        );
        redact(&mut update, &redactor);
        let Some(Payload::AgentSdkUpdate(sdk)) = &update.payload else {
            panic!("not an sdk update: {update:?}");
        };
        assert_eq!(
            sdk.error_message.as_deref(),
            Some("login failed for key ***")
        );
    }

    #[test]
    fn a_huge_sdk_description_fits_alone_and_in_a_registration() {
        assert_fits(
            "agent_sdk_update",
            &agent_sdk_update(Some(huge('r')), huge_sdk('s')),
        );
        let registration = agent_runner_proto::runner::RegisterRunnerRequest {
            agent_sdks: ['a', 'b', 'c', 'd'].map(|c| agent_sdk(huge_sdk(c))).into(),
            features: vec!["acked-delivery/1".into()],
        };
        let len = prost::Message::encoded_len(&registration);
        assert!(len <= fit::MESSAGE_LIMIT, "registration: {len} bytes");
    }

    #[test]
    fn a_command_without_a_process_id_is_still_a_valid_update() {
        let m = command_item("");
        assert!(m.validate().is_ok(), "{:?}", m.validate());
        assert_eq!(process_id(&m), "turn-1:tool-7");
        assert_eq!(process_id(&command_item("4242")), "4242");
    }
}
