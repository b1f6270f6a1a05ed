//! What registration advertises for `code-agent`: the models of the
//! engine's default provider (`ListProviders`), or UNCONFIGURED with the
//! reason (no provider configured, engine unreachable).
//!
//! A model whose provider entry says it supports reasoning is offered with
//! the levels `low`, `medium`, `high` (sent as `reasoning_effort`); others
//! with their default level only, since OpenAI-compatible servers reject
//! `reasoning_effort` for models without it.

use std::collections::HashMap;

use code_agent_proto::{ListProvidersRequest, ListProvidersResponse, ProviderInfo};
use sdk_adapter::{ModelInfo, SdkDescription, SdkStatus};

use crate::SDK_NAME;
use crate::connect::Client;

/// Reasoning levels offered for models that support reasoning.
pub(crate) const REASONING_LEVELS: &[&str] = &["low", "medium", "high"];

/// A description plus each model's context window (when the provider
/// states one), for token-usage updates.
pub(crate) struct Described {
    pub description: SdkDescription,
    pub context_windows: HashMap<String, i64>,
}

pub(crate) fn description(
    status: SdkStatus,
    error: Option<String>,
    models: Vec<ModelInfo>,
) -> SdkDescription {
    SdkDescription {
        name: SDK_NAME.to_owned(),
        status,
        error_message: error,
        models,
    }
}

/// Ask the engine.
pub(crate) async fn probe(client: &Client, timeout: std::time::Duration) -> Described {
    let mut client = client.clone();
    let listed =
        tokio::time::timeout(timeout, client.list_providers(ListProvidersRequest {})).await;
    let response = match listed {
        Ok(Ok(response)) => response.into_inner(),
        Ok(Err(status)) => {
            return unusable(format!(
                "the code-agent engine did not list its providers: {}",
                crate::status_text(&status)
            ));
        }
        Err(_) => {
            return unusable(format!(
                "the code-agent engine did not answer ListProviders within {timeout:?}"
            ));
        }
    };
    from_providers(&response)
}

fn unusable(reason: String) -> Described {
    Described {
        description: description(SdkStatus::Unconfigured, Some(reason), Vec::new()),
        context_windows: HashMap::new(),
    }
}

/// The default provider (else the first), its models.
pub(crate) fn from_providers(response: &ListProvidersResponse) -> Described {
    let default = response
        .default_provider
        .as_deref()
        .filter(|name| !name.is_empty());
    let provider: Option<&ProviderInfo> = default
        .and_then(|name| response.providers.iter().find(|p| p.name == name))
        .or_else(|| response.providers.first());
    let Some(provider) = provider else {
        return unusable(
            "no model provider is configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible server) or ANTHROPIC_API_KEY in the engine's environment, or add a provider"
                .to_owned(),
        );
    };
    let mut models = Vec::new();
    let mut context_windows = HashMap::new();
    for model in &provider.models {
        let name = if model.id.is_empty() {
            &model.name
        } else {
            &model.id
        };
        if name.is_empty() || models.iter().any(|m: &ModelInfo| &m.name == name) {
            continue;
        }
        let levels: &[&str] = if model.reasoning {
            REASONING_LEVELS
        } else {
            &[]
        };
        models.push(ModelInfo::new(name, levels));
        if let Some(context) = model.limit.as_ref().map(|l| l.context).filter(|c| *c > 0) {
            context_windows.insert(name.clone(), i64::from(context));
        }
    }
    if models.is_empty() {
        return unusable(format!(
            "model provider {:?} lists no models (set CODE_AGENT_MODELS to a comma-separated list)",
            provider.name
        ));
    }
    Described {
        description: description(SdkStatus::Ready, None, models),
        context_windows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use code_agent_proto::{ModelInfo as ProtoModel, ModelLimitInfo};

    fn model(id: &str, reasoning: bool, context: u32) -> ProtoModel {
        ProtoModel {
            id: id.into(),
            reasoning,
            limit: Some(ModelLimitInfo { context, output: 0 }),
            ..Default::default()
        }
    }

    #[test]
    fn default_provider_models_with_levels_and_windows() {
        let response = ListProvidersResponse {
            providers: vec![
                ProviderInfo {
                    name: "other".into(),
                    models: vec![model("x", false, 0)],
                    ..Default::default()
                },
                ProviderInfo {
                    name: "openai".into(),
                    models: vec![model("gpt-a", false, 128_000), model("o-b", true, 0)],
                    ..Default::default()
                },
            ],
            default_provider: Some("openai".into()),
            default_model: None,
        };
        let d = from_providers(&response);
        assert_eq!(d.description.status, SdkStatus::Ready);
        assert_eq!(
            d.description.models,
            vec![
                ModelInfo::new("gpt-a", &[]),
                ModelInfo::new("o-b", &["low", "medium", "high"])
            ]
        );
        assert_eq!(d.context_windows.get("gpt-a"), Some(&128_000));
        assert_eq!(d.context_windows.get("o-b"), None);
    }

    #[test]
    fn no_provider_or_no_models_is_unconfigured_with_a_reason() {
        let d = from_providers(&ListProvidersResponse::default());
        assert_eq!(d.description.status, SdkStatus::Unconfigured);
        assert!(
            d.description
                .error_message
                .unwrap()
                .contains("OPENAI_API_KEY")
        );
        let d = from_providers(&ListProvidersResponse {
            providers: vec![ProviderInfo {
                name: "openai".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(d.description.status, SdkStatus::Unconfigured);
        assert!(d.description.error_message.unwrap().contains("\"openai\""));
    }
}
