//! The SDK adapters this runner was started with, by wire name, and what
//! each advertised at the last registration.
//!
//! Model and reasoning-level checks for `CreateThread` and per-turn
//! overrides use that advertised description, so the control plane is held
//! to exactly what it was told.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use sdk_adapter::{SdkAdapter, SdkDescription, SdkStatus};

/// Every adapter compiled into this binary.
pub const BUILT_IN: &[&str] = &["scripted", "codex", "claude-code", "code-agent"];

/// Settings of the adapters that drive external CLIs (from `RunConfig`).
/// An adapter whose CLI is missing is still built: it advertises itself
/// UNCONFIGURED with the reason.
#[derive(Debug, Clone, Default)]
pub struct SdkOptions {
    /// The codex adapter's settings.
    pub codex: sdk_codex::CodexConfig,
    /// The claude-code adapter's settings.
    pub claude: sdk_claude_code::ClaudeConfig,
    /// The `code-agent` adapter: embedded engine (default) or remote.
    pub code_agent: sdk_code_agent::CodeAgentConfig,
}

fn build(name: &str, options: &SdkOptions) -> Option<Arc<dyn SdkAdapter>> {
    match name {
        "scripted" => Some(Arc::new(sdk_scripted::ScriptedAdapter::new())),
        "codex" => Some(Arc::new(sdk_codex::CodexAdapter::new(
            options.codex.clone(),
        ))),
        "claude-code" => Some(Arc::new(sdk_claude_code::ClaudeAdapter::new(
            options.claude.clone(),
        ))),
        "code-agent" => Some(Arc::new(sdk_code_agent::CodeAgentAdapter::new(
            options.code_agent.clone(),
        ))),
        _ => None,
    }
}

/// The enabled SDK adapters, by name.
pub struct Sdks {
    adapters: BTreeMap<String, Arc<dyn SdkAdapter>>,
    advertised: RwLock<BTreeMap<String, SdkDescription>>,
}

impl Sdks {
    /// The named adapters (all built-in ones when `names` is empty), with
    /// default settings.
    pub fn new(names: &[String]) -> Result<Self, String> {
        Self::with_options(names, &SdkOptions::default())
    }

    /// The named adapters (all built-in ones when `names` is empty).
    pub fn with_options(names: &[String], options: &SdkOptions) -> Result<Self, String> {
        let names: Vec<String> = if names.is_empty() {
            BUILT_IN.iter().map(|s| (*s).to_owned()).collect()
        } else {
            names.to_vec()
        };
        let mut adapters = BTreeMap::new();
        for name in names {
            let adapter = build(&name, options).ok_or_else(|| {
                format!(
                    "sdk: unknown SDK {name:?} (built in: {})",
                    BUILT_IN.join(", ")
                )
            })?;
            adapters.insert(name, adapter);
        }
        Ok(Self::from_adapters(adapters.into_values().collect()))
    }

    /// Wrap given adapters (tests, embedders).
    pub fn from_adapters(list: Vec<Arc<dyn SdkAdapter>>) -> Self {
        Self {
            adapters: list.into_iter().map(|a| (a.name().to_owned(), a)).collect(),
            advertised: RwLock::new(BTreeMap::new()),
        }
    }

    /// The adapter named `name`, if enabled.
    pub fn get(&self, name: &str) -> Option<Arc<dyn SdkAdapter>> {
        self.adapters.get(name).cloned()
    }

    /// The enabled SDKs' names.
    pub fn names(&self) -> Vec<String> {
        self.adapters.keys().cloned().collect()
    }

    /// Ask every adapter for a fresh description and remember it.
    pub async fn describe_all(&self) -> Vec<SdkDescription> {
        let adapters: Vec<Arc<dyn SdkAdapter>> = self.adapters.values().cloned().collect();
        let mut out = Vec::with_capacity(adapters.len());
        for adapter in adapters {
            out.push(adapter.describe().await);
        }
        let mut advertised = self.advertised.write().unwrap_or_else(|p| p.into_inner());
        *advertised = out.iter().map(|d| (d.name.clone(), d.clone())).collect();
        out
    }

    /// Probe every adapter afresh (no cache) and remember the answers; the
    /// descriptions that differ from what was advertised before, in name
    /// order (what an `agent_sdk_update` must announce).
    pub async fn reprobe(&self) -> Vec<SdkDescription> {
        let adapters: Vec<Arc<dyn SdkAdapter>> = self.adapters.values().cloned().collect();
        let mut fresh = Vec::with_capacity(adapters.len());
        for adapter in adapters {
            fresh.push(adapter.describe_fresh().await);
        }
        let mut advertised = self.advertised.write().unwrap_or_else(|p| p.into_inner());
        let mut changed = Vec::new();
        for d in fresh {
            if advertised.get(&d.name) != Some(&d) {
                changed.push(d.clone());
                advertised.insert(d.name.clone(), d);
            }
        }
        changed
    }

    /// What each SDK said at the last [`Sdks::describe_all`].
    pub fn advertised(&self) -> Vec<SdkDescription> {
        let advertised = self.advertised.read().unwrap_or_else(|p| p.into_inner());
        advertised.values().cloned().collect()
    }

    /// Whether `sdk` can take a thread on `model` at `level`, per what it
    /// last advertised. The error is the text of a `RequestError`.
    pub fn check_model(&self, sdk: &str, model: &str, level: Option<&str>) -> Result<(), String> {
        let advertised = self.advertised.read().unwrap_or_else(|p| p.into_inner());
        let desc = advertised
            .get(sdk)
            .ok_or_else(|| format!("SDK {sdk:?} is not enabled on this runner"))?;
        if desc.status != SdkStatus::Ready {
            return Err(format!(
                "SDK {sdk:?} is not ready: {}",
                desc.error_message.as_deref().unwrap_or("no reason given")
            ));
        }
        let m = desc
            .models
            .iter()
            .find(|m| m.name == model)
            .ok_or_else(|| {
                let names: Vec<&str> = desc.models.iter().map(|m| m.name.as_str()).collect();
                format!(
                    "model {model:?} is not offered by SDK {sdk:?} (offered: {})",
                    names.join(", ")
                )
            })?;
        if let Some(level) = level
            && !m.reasoning_levels.iter().any(|l| l == level)
        {
            return Err(format!(
                "reasoning level {level:?} is not offered for model {model:?} (offered: {})",
                if m.reasoning_levels.is_empty() {
                    "default only".to_owned()
                } else {
                    m.reasoning_levels.join(", ")
                }
            ));
        }
        Ok(())
    }
}
