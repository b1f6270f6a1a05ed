//! `CodexConfigurationRequest`: the control plane logs the `codex` SDK in.
//!
//! - `CODEX_AUTH_TYPE_API_KEY` with `codex_api_key`: codex is logged in with
//!   the key ([`sdk_adapter::SdkAdapter::login`]; the codex adapter passes it
//!   on codex's stdin), then `agent_sdk_update` carries codex's fresh status
//!   (READY once it is logged in). A refusal is a `RequestError`.
//! - `CODEX_AUTH_TYPE_DEVICE_CODE`: codex's device-code login starts; the
//!   code a person must enter goes out as `CodexDeviceCode` (the page to
//!   enter it on is logged), and when the login completes or fails,
//!   `agent_sdk_update` carries codex's fresh status (a failure also gets a
//!   `RequestError` saying why).
//!
//! The key is a secret: it is added to the runner's redactor before anything
//! else (so no log line or update can show it), and is never logged, stored
//! or put on a command line. Everything runs on a task of its own: the read
//! loop never waits for codex. Every reply carries the request's id.

use std::sync::Arc;

use agent_runner_proto::runner::{CodexAuthType, CodexConfigurationRequest};
use sdk_adapter::{Login, LoginStarted};

use crate::delivery::messages::{self, RequestId};
use crate::tasks::context::Runtime;

/// The SDK this request configures.
const CODEX: &str = "codex";

/// Handles the request on a task of its own; returns at once.
pub fn handle(rt: &Arc<Runtime>, rid: RequestId, request: CodexConfigurationRequest) {
    if let Some(key) = &request.codex_api_key {
        rt.redactor.add(key);
    }
    let rt = rt.clone();
    let tracker = rt.tasks.clone();
    tracker.spawn(async move {
        if let Err(text) = configure(&rt, rid.clone(), request).await {
            tracing::warn!(request_id = ?rid, reason = %text, "codex configuration refused");
            rt.outbox.push(messages::request_error(rid, text)).await;
        }
    });
}

async fn configure(
    rt: &Arc<Runtime>,
    rid: RequestId,
    request: CodexConfigurationRequest,
) -> Result<(), String> {
    let Some(adapter) = rt.sdks.get(CODEX) else {
        return Err(format!(
            "codex_configuration_request: the codex SDK is not enabled on this runner (it offers: {})",
            rt.sdks.names().join(", ")
        ));
    };
    let login = match CodexAuthType::try_from(request.auth_type) {
        Ok(CodexAuthType::ApiKey) => match request.codex_api_key {
            Some(key) if !key.trim().is_empty() => Login::ApiKey(key),
            _ => {
                return Err(
                    "codex_configuration_request.codex_api_key: required with CODEX_AUTH_TYPE_API_KEY"
                        .to_owned(),
                );
            }
        },
        Ok(CodexAuthType::DeviceCode) => Login::DeviceCode,
        _ => {
            return Err(format!(
                "codex_configuration_request.auth_type: must be CODEX_AUTH_TYPE_API_KEY or CODEX_AUTH_TYPE_DEVICE_CODE (got {})",
                request.auth_type
            ));
        }
    };
    let started = adapter
        .login(login)
        .await
        .map_err(|e| format!("codex_configuration_request: {e}"))?;
    match started {
        LoginStarted::Done => {
            announce(rt, rid).await;
            Ok(())
        }
        LoginStarted::DeviceCode {
            user_code,
            verification_url,
            completion,
        } => {
            tracing::info!(%verification_url, "codex device-code login started: the code must be entered there");
            rt.outbox
                .push(messages::codex_device_code(rid.clone(), user_code))
                .await;
            let outcome = completion
                .await
                .unwrap_or_else(|_| Err("the login was abandoned".to_owned()));
            match &outcome {
                Ok(()) => tracing::info!("codex device-code login completed"),
                Err(e) => tracing::warn!(error = %e, "codex device-code login failed"),
            }
            announce(rt, rid.clone()).await;
            outcome
                .map_err(|e| format!("codex_configuration_request: device-code login failed: {e}"))
        }
    }
}

/// Sends codex's fresh description (whether or not it changed: the control
/// plane asked), and any other SDK that changed meanwhile.
async fn announce(rt: &Runtime, rid: RequestId) {
    let changed = rt.sdks.reprobe().await;
    let codex = rt.sdks.advertised().into_iter().find(|d| d.name == CODEX);
    for d in changed.into_iter().filter(|d| d.name != CODEX).chain(codex) {
        tracing::info!(sdk = %d.name, status = ?d.status, "announcing the SDK's status");
        for update in crate::tasks::sdk_probe::sdk_updates(rt, rid.clone(), d) {
            rt.outbox.push(update).await;
        }
    }
}
