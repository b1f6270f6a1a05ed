//! The SDK adapters this runner was started with, by wire name, and what
//! each advertised at the last registration.
//!
//! Model and reasoning-level checks for `CreateThread` and per-turn
//! overrides use that advertised description, so the control plane is held
//! to exactly what it was told.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use sdk_adapter::{SdkAdapter, SdkDescription, SdkStatus};

/// Every adapter compiled into this binary.
pub const BUILT_IN: &[&str] = &["scripted", "codex", "claude-code", "code-agent"];

pub use crate::config::SdkOptions;

/// `Err` naming `name` when it is not a built-in SDK, with the one it most
/// likely meant (`claude` → `claude-code`). Every place that takes SDK
/// names (`--sdk` of `run`, `sdk list`, `demo`) says the same.
pub fn check_name(name: &str) -> Result<(), String> {
    if BUILT_IN.contains(&name) {
        Ok(())
    } else {
        Err(unknown(name))
    }
}

fn unknown(name: &str) -> String {
    let hint = suggest(name)
        .map(|known| format!("did you mean {known}? "))
        .unwrap_or_default();
    format!(
        "sdk: unknown SDK {name:?} ({hint}built in: {})",
        BUILT_IN.join(", ")
    )
}

/// The built-in SDK `name` most likely meant: one it starts or ends
/// (`claude`, `agent`), or one a few letters away (`codx`, `scriptd`).
pub fn suggest(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if lower.len() >= 4
        && let Some(known) = BUILT_IN
            .iter()
            .find(|k| k.starts_with(&lower) || k.ends_with(&lower) || lower.starts_with(*k))
    {
        return Some(known);
    }
    crate::util::closest::closest(&lower, BUILT_IN)
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
    /// Slow descriptions under way (one per SDK at a time).
    probing: Mutex<BTreeSet<String>>,
    /// Woken when the last probe under way ends.
    probes_over: tokio::sync::Notify,
    /// Probe tickets: an answer older than the last one applied for its
    /// SDK is dropped (a slow first probe must not undo a re-probe after
    /// a login).
    tickets: AtomicU64,
    applied: Mutex<BTreeMap<String, u64>>,
}

/// A probe's place in line (see [`Sdks::ticket`]).
#[derive(Debug, Clone, Copy)]
pub struct Ticket(u64);

/// What registration says of an SDK whose description takes a probe that
/// has not answered yet: not READY (threads on it are refused until the
/// `agent_sdk_update` with the answer).
pub fn being_probed(name: &str) -> SdkDescription {
    SdkDescription {
        name: name.to_owned(),
        status: SdkStatus::Unconfigured,
        error_message: Some(
            "being probed (the runner just started); an agent_sdk_update follows".to_owned(),
        ),
        models: Vec::new(),
    }
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
            check_name(&name)?;
            let adapter = build(&name, options).ok_or_else(|| unknown(&name))?;
            adapters.insert(name, adapter);
        }
        Ok(Self::from_adapters(adapters.into_values().collect()))
    }

    /// Wrap given adapters (tests, embedders).
    pub fn from_adapters(list: Vec<Arc<dyn SdkAdapter>>) -> Self {
        Self {
            adapters: list.into_iter().map(|a| (a.name().to_owned(), a)).collect(),
            advertised: RwLock::new(BTreeMap::new()),
            probing: Mutex::new(BTreeSet::new()),
            probes_over: tokio::sync::Notify::new(),
            tickets: AtomicU64::new(0),
            applied: Mutex::new(BTreeMap::new()),
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

    /// What a registration advertises, at once: each SDK's
    /// [`SdkAdapter::known`] description, else what it said last, else
    /// [`being_probed`]; remembered as advertised. The SDKs still to be
    /// probed are [`Sdks::pending`].
    pub fn known(&self) -> Vec<SdkDescription> {
        let mut advertised = self.advertised.write().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::with_capacity(self.adapters.len());
        for (name, adapter) in &self.adapters {
            let d = adapter.known().unwrap_or_else(|| {
                advertised
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| being_probed(name))
            });
            advertised.insert(name.clone(), d.clone());
            out.push(d);
        }
        out
    }

    /// The adapters whose full description is still to be probed.
    pub fn pending(&self) -> Vec<Arc<dyn SdkAdapter>> {
        self.adapters
            .values()
            .filter(|adapter| adapter.known().is_none())
            .cloned()
            .collect()
    }

    /// Marks `name` as being probed; false if a probe is under way already.
    pub fn begin_probe(&self, name: &str) -> bool {
        self.probing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned())
    }

    /// Returns once no probe is under way (at once if none is).
    pub async fn no_probe_running(&self) {
        loop {
            let over = self.probes_over.notified();
            tokio::pin!(over);
            // Registered before the check, so an end in between wakes it.
            over.as_mut().enable();
            if self
                .probing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
            {
                return;
            }
            over.await;
        }
    }

    /// The probe of `name` is over.
    pub fn end_probe(&self, name: &str) {
        let mut probing = self.probing.lock().unwrap_or_else(PoisonError::into_inner);
        probing.remove(name);
        if probing.is_empty() {
            self.probes_over.notify_waiters();
        }
    }

    /// A ticket to take before probing; [`Sdks::settle`] drops answers
    /// from probes that started before one already applied.
    pub fn ticket(&self) -> Ticket {
        Ticket(self.tickets.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// A probe's answer: remembered, and returned if it differs from what
    /// the control plane was last told (an `agent_sdk_update` is due).
    /// `None` too when a later probe's answer was applied already.
    pub fn settle(&self, ticket: Ticket, d: SdkDescription) -> Option<SdkDescription> {
        {
            let mut applied = self.applied.lock().unwrap_or_else(PoisonError::into_inner);
            let last = applied.entry(d.name.clone()).or_insert(0);
            if *last > ticket.0 {
                return None;
            }
            *last = ticket.0;
        }
        let mut advertised = self.advertised.write().unwrap_or_else(|p| p.into_inner());
        if advertised.get(&d.name) == Some(&d) {
            return None;
        }
        advertised.insert(d.name.clone(), d.clone());
        Some(d)
    }

    /// Probe every adapter afresh (no cache) and remember the answers; the
    /// descriptions that differ from what was advertised before, in name
    /// order (what an `agent_sdk_update` must announce).
    pub async fn reprobe(&self) -> Vec<SdkDescription> {
        let adapters: Vec<Arc<dyn SdkAdapter>> = self.adapters.values().cloned().collect();
        let ticket = self.ticket();
        let mut fresh = Vec::with_capacity(adapters.len());
        for adapter in adapters {
            fresh.push(adapter.describe_fresh().await);
        }
        fresh
            .into_iter()
            .filter_map(|d| self.settle(ticket, d))
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use sdk_adapter::{AgentSpec, SdkError, ThreadHandle, ThreadSpec, Turn, TurnInput};

    /// An SDK whose description only a probe that never answers can give.
    struct Slow;

    #[async_trait]
    impl SdkAdapter for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        async fn describe(&self) -> SdkDescription {
            std::future::pending().await
        }
        async fn create_agent(&self, _: &AgentSpec) -> Result<(), SdkError> {
            Ok(())
        }
        async fn delete_agent(&self, _: &str) -> Result<(), SdkError> {
            Ok(())
        }
        async fn create_thread(&self, _: &ThreadSpec) -> Result<ThreadHandle, SdkError> {
            Err(SdkError::Failed("not here".into()))
        }
        async fn delete_thread(&self, _: &ThreadSpec) -> Result<(), SdkError> {
            Ok(())
        }
        async fn start_turn(&self, _: &ThreadSpec, _: TurnInput) -> Result<Turn, SdkError> {
            Err(SdkError::Failed("not here".into()))
        }
    }

    fn ready(name: &str) -> SdkDescription {
        SdkDescription {
            name: name.into(),
            status: SdkStatus::Ready,
            error_message: None,
            models: vec![sdk_adapter::ModelInfo::new("m", &[])],
        }
    }

    /// Start-up's end waits for the probes under way, and only for them.
    #[tokio::test]
    async fn no_probe_running_waits_for_the_last_probe_to_end() {
        let sdks = Arc::new(Sdks::from_adapters(vec![Arc::new(Slow)]));
        // None under way: at once.
        sdks.no_probe_running().await;
        assert!(sdks.begin_probe("slow"));
        assert!(sdks.begin_probe("other"));
        let waiter = tokio::spawn({
            let sdks = sdks.clone();
            async move { sdks.no_probe_running().await }
        });
        sdks.end_probe("slow");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "one probe is still under way");
        sdks.end_probe("other");
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
            .await
            .expect("woken when the last probe ended")
            .unwrap();
    }

    #[test]
    fn registration_does_not_wait_for_a_probe_and_the_answer_is_announced_once() {
        let sdks = Sdks::from_adapters(vec![
            Arc::new(Slow),
            Arc::new(sdk_scripted::ScriptedAdapter::new()),
        ]);
        let (known, pending) = (sdks.known(), sdks.pending());
        // In name order: scripted, slow.
        assert_eq!(known.len(), 2);
        assert_eq!(
            known[0].status,
            SdkStatus::Ready,
            "scripted is known at once"
        );
        assert_eq!(known[1], being_probed("slow"));
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].name(), "slow");
        let err = sdks.check_model("slow", "m", None).unwrap_err();
        assert!(err.contains("being probed"), "{err}");
        // One probe at a time per SDK.
        assert!(sdks.begin_probe("slow"));
        assert!(!sdks.begin_probe("slow"));
        let first = sdks.ticket();
        sdks.end_probe("slow");
        assert_eq!(sdks.settle(first, ready("slow")), Some(ready("slow")));
        assert_eq!(sdks.settle(first, ready("slow")), None, "nothing changed");
        sdks.check_model("slow", "m", None).unwrap();
        // The next registration advertises the probed answer.
        let known = sdks.known();
        assert_eq!(known[1], ready("slow"));
    }

    #[test]
    fn an_older_probe_does_not_undo_a_newer_one() {
        let sdks = Sdks::from_adapters(vec![Arc::new(Slow)]);
        let _ = sdks.known();
        let old = sdks.ticket();
        let new = sdks.ticket();
        assert!(sdks.settle(new, ready("slow")).is_some());
        let stale = SdkDescription {
            status: SdkStatus::Unconfigured,
            ..ready("slow")
        };
        assert_eq!(sdks.settle(old, stale), None);
        assert_eq!(sdks.advertised()[0], ready("slow"));
    }
}
