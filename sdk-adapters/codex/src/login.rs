//! Logging codex in for the control plane (`CodexConfigurationRequest`),
//! through codex's own JSON-RPC (`account/login/start` on a short-lived
//! `codex app-server`): the API key travels on the app-server's stdin, never
//! on a command line, and is never logged; codex keeps the login in its
//! home (`CODEX_HOME`) as it does for `codex login`.
//!
//! - API key: `{type: "apiKey", apiKey}`; the answer settles it.
//! - Device code: `{type: "chatgptDeviceCode"}` answers the code a person
//!   enters (`userCode`) and where (`verificationUrl`); the app-server is kept
//!   running until codex reports `account/login/completed` (success or its
//!   error), the process goes away, or [`DEVICE_LOGIN_TIMEOUT`] passes.

use std::time::Duration;

use sdk_adapter::{LoginStarted, SdkError};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::CodexConfig;
use crate::rpc::RpcError;
use crate::server::{AppServer, TurnMsg};

/// How long a device-code login may wait for a person.
pub const DEVICE_LOGIN_TIMEOUT: Duration = Duration::from_secs(15 * 60);

async fn server(config: &CodexConfig) -> Result<AppServer, SdkError> {
    // Launched like the describe probe, in the probe's sandbox: the login
    // lands where the probe (and so the SDK's status) reads it.
    let sandbox = config.probe_sandbox.get()?;
    AppServer::start(
        config,
        "codex app-server (login)".to_owned(),
        None,
        &[],
        sandbox,
        config.describe_timeout,
    )
    .await
    .map_err(|e| SdkError::Unavailable(format!("starting codex app-server: {e}")))
}

/// The error codex gave, without anything of the request (the key).
fn login_error(e: RpcError) -> SdkError {
    match e {
        RpcError::Server { message, .. } => {
            SdkError::InvalidRequest(format!("codex refused the login: {message}"))
        }
        other => SdkError::Failed(format!("codex login: {other}")),
    }
}

/// Log in with `key`.
pub async fn api_key(config: &CodexConfig, key: &str) -> Result<LoginStarted, SdkError> {
    let server = server(config).await?;
    let params = json!({"type": "apiKey", "apiKey": key});
    let result = server
        .rpc()
        .call("account/login/start", params)
        .await
        .map_err(login_error)?;
    let answer = result.get("type").and_then(Value::as_str).unwrap_or("?");
    tracing::info!(%answer, "codex logged in with an API key");
    Ok(LoginStarted::Done)
}

/// Start a device-code login.
pub async fn device_code(config: &CodexConfig) -> Result<LoginStarted, SdkError> {
    let server = server(config).await?;
    let sink = server.sink().clone();
    let (sink_id, _sink_tx, mut msgs) = sink.install();
    let result = server
        .rpc()
        .call("account/login/start", json!({"type": "chatgptDeviceCode"}))
        .await
        .map_err(login_error)?;
    let field = |key: &str| {
        result
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| SdkError::Failed(format!("codex's device-code answer has no {key}")))
    };
    let user_code = field("userCode")?;
    let verification_url = field("verificationUrl")?;
    let login_id = result
        .get("loginId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let (done, completion) = oneshot::channel();
    tokio::spawn(async move {
        let outcome = tokio::time::timeout(DEVICE_LOGIN_TIMEOUT, async {
            while let Some(msg) = msgs.recv().await {
                let TurnMsg::Notification { method, params } = msg else {
                    if let TurnMsg::Exited(reason) = msg {
                        return Err(format!("codex app-server went away: {reason}"));
                    }
                    continue;
                };
                if method != "account/login/completed" {
                    continue;
                }
                let theirs = params.get("loginId").and_then(Value::as_str);
                if theirs.is_some() && login_id.is_some() && theirs != login_id.as_deref() {
                    continue;
                }
                if params.get("success").and_then(Value::as_bool) == Some(true) {
                    return Ok(());
                }
                let error = params
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("codex gave no reason");
                return Err(error.to_owned());
            }
            Err("codex app-server went away".to_owned())
        })
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "nobody entered the code within {} minutes",
                DEVICE_LOGIN_TIMEOUT.as_secs() / 60
            ))
        });
        sink.clear(sink_id);
        drop(server);
        let _ = done.send(outcome);
    });
    Ok(LoginStarted::DeviceCode {
        user_code,
        verification_url,
        completion,
    })
}
