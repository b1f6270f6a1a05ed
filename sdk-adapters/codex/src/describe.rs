//! What registration advertises for `codex`.
//!
//! A missing binary is found without starting anything (`find_program`), so
//! a runner without codex registers at once. Otherwise one short-lived
//! app-server answers `account/read` (logged in?) and `model/list` (every
//! page, plus the model configured in codex's `config.toml` as read by
//! `config/read`, when the catalog lacks it — a custom provider's model),
//! each under `describe_timeout`; the result is reused for
//! `describe_ttl`, so back-to-back registrations start codex once.

use std::time::Instant;

use sdk_adapter::{ModelInfo, SdkDescription, SdkStatus};
use sdk_process::find_program;
use serde_json::{Value, json};

use crate::server::AppServer;
use crate::{CodexConfig, SDK_NAME};

/// At most this many `model/list` pages are read.
const MAX_PAGES: usize = 50;

#[derive(Debug, Default)]
pub(crate) struct Describer {
    cache: tokio::sync::Mutex<Option<(Instant, SdkDescription)>>,
}

fn description(status: SdkStatus, error: Option<String>, models: Vec<ModelInfo>) -> SdkDescription {
    SdkDescription {
        name: SDK_NAME.to_owned(),
        status,
        error_message: error,
        models,
    }
}

impl Describer {
    /// Drop the cached description: the next `describe` probes codex.
    pub(crate) async fn forget(&self) {
        *self.cache.lock().await = None;
    }

    /// Without starting codex: UNCONFIGURED when the binary is missing,
    /// the cached description while it is fresh, else `None`.
    pub(crate) fn known(&self, config: &CodexConfig) -> Option<SdkDescription> {
        if let Some(missing) = missing_binary(config) {
            return Some(missing);
        }
        let cache = self.cache.try_lock().ok()?;
        cache
            .as_ref()
            .filter(|(at, _)| at.elapsed() < config.describe_ttl)
            .map(|(_, cached)| cached.clone())
    }

    pub(crate) async fn describe(&self, config: &CodexConfig) -> SdkDescription {
        if let Some(missing) = missing_binary(config) {
            return missing;
        }
        let mut cache = self.cache.lock().await;
        if let Some((at, cached)) = cache.as_ref()
            && at.elapsed() < config.describe_ttl
        {
            return cached.clone();
        }
        let fresh = probe(config).await;
        *cache = Some((Instant::now(), fresh.clone()));
        fresh
    }
}

/// UNCONFIGURED, saying why, when the codex binary is not found.
fn missing_binary(config: &CodexConfig) -> Option<SdkDescription> {
    if find_program(&config.bin).is_some() {
        return None;
    }
    Some(description(
        SdkStatus::Unconfigured,
        Some(format!(
            "the codex binary `{}` was not found (install it with `npm install -g @openai/codex`, or set --codex-bin)",
            config.bin.display()
        )),
        Vec::new(),
    ))
}

async fn probe(config: &CodexConfig) -> SdkDescription {
    let timeout = config.describe_timeout;
    let sandbox = match config.probe_sandbox.get() {
        Ok(sandbox) => sandbox,
        Err(e) => return description(SdkStatus::Error, Some(e.to_string()), Vec::new()),
    };
    let server = match AppServer::start(
        config,
        "codex app-server (describe)".to_owned(),
        None,
        &[],
        sandbox,
        timeout,
    )
    .await
    {
        Ok(server) => server,
        Err(e) => {
            return description(
                SdkStatus::Error,
                Some(format!("starting codex app-server: {e}")),
                Vec::new(),
            );
        }
    };
    let rpc = server.rpc();
    let mut models = Vec::new();
    let mut cursor = Value::Null;
    for _ in 0..MAX_PAGES {
        let page = match rpc
            .call_within("model/list", json!({"cursor": cursor}), timeout)
            .await
        {
            Ok(page) => page,
            Err(e) => return description(SdkStatus::Error, Some(e.to_string()), Vec::new()),
        };
        models.extend(
            page.get("data")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(model_info),
        );
        cursor = page.get("nextCursor").cloned().unwrap_or(Value::Null);
        if !cursor.is_string() {
            break;
        }
    }
    let account = match rpc.call_within("account/read", json!({}), timeout).await {
        Ok(account) => account,
        Err(e) => return description(SdkStatus::Error, Some(e.to_string()), models),
    };
    let logged_out = account.get("account").is_none_or(Value::is_null)
        && account.get("requiresOpenaiAuth").and_then(Value::as_bool) == Some(true);
    if logged_out {
        return description(
            SdkStatus::Unconfigured,
            Some("codex is not logged in (run `codex login`, or configure a model provider in CODEX_HOME/config.toml)".to_owned()),
            models,
        );
    }
    // The model codex is configured to use (a custom provider's model is
    // not in the catalog `model/list` returns) is offered too.
    match rpc.call_within("config/read", json!({}), timeout).await {
        Ok(config) => {
            if let Some(model) = config
                .get("config")
                .and_then(|c| c.get("model"))
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                && !models.iter().any(|m| m.name == model)
            {
                models.push(ModelInfo {
                    name: model.to_owned(),
                    reasoning_levels: Vec::new(),
                });
            }
        }
        Err(e) => tracing::debug!(error = %e, "config/read failed; advertising model/list only"),
    }
    if models.is_empty() {
        return description(
            SdkStatus::Error,
            Some("codex offers no models (model/list is empty)".to_owned()),
            models,
        );
    }
    description(SdkStatus::Ready, None, models)
}

fn model_info(model: &Value) -> Option<ModelInfo> {
    let name = model
        .get("model")
        .or_else(|| model.get("id"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())?;
    let reasoning_levels = model
        .get("supportedReasoningEfforts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("reasoningEffort").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    Some(ModelInfo {
        name: name.to_owned(),
        reasoning_levels,
    })
}
