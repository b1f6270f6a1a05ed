//! Protocol 0.7's thread-only world on the runner's agents and threads.
//!
//! A 0.7 control plane knows no agents: a thread names only its model. The
//! runner keeps its one internal model (agents owning threads) by giving
//! each enabled SDK an implicit agent of its own ([`agent_id`], created at
//! start-up by [`ensure_agents`], never announced: no `AgentUpdate` exists
//! in 0.7). A thread goes to the implicit agent of the SDK that advertised
//! its model.
//!
//! Model names in a 0.7 registration are unique across SDKs: a name an SDK
//! earlier in `--sdk` order advertises too is advertised as `SDK/MODEL`
//! ([`ThreadOnly::advertise`]), and a thread may name a model either way
//! ([`ThreadOnly::resolve`]). When an SDK's models change, every SDK whose
//! advertised names change with it is announced again.
//!
//! Each 0.7 thread carries a `cli_secret`, its token for the control
//! plane's agent API: its processes get it as `AGENT_API_TOKEN` (and the
//! `--agent-api-url` as `AGENT_API_URL`), and with a URL both are named in
//! the model's instructions ([`ThreadOnly::env`], [`ThreadOnly::instructions`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use agent_runner_proto::runner::AgentSdk;
use sdk_adapter::{AgentSpec, SdkDescription};

use crate::config::RunConfig;
use crate::host::store::AgentRow;
use crate::tasks::context::Runtime;

/// What an implicit agent's id starts with (then the SDK's name).
pub const AGENT_PREFIX: &str = "_threads-";

/// The variable holding a thread's agent API token.
pub const TOKEN_VAR: &str = "AGENT_API_TOKEN";
/// The variable holding the agent API's URL.
pub const URL_VAR: &str = "AGENT_API_URL";

/// The implicit agent of `sdk`'s threads (path-safe: SDK names are).
pub fn agent_id(sdk: &str) -> String {
    format!("{AGENT_PREFIX}{sdk}")
}

/// What the runner needs to speak 0.7 (see the module doc).
pub struct ThreadOnly {
    /// `--agent-api-url`, if set.
    agent_api_url: Option<String>,
    /// The enabled SDKs in `--sdk` order (which SDK keeps a shared name).
    order: Vec<String>,
    /// The model names each SDK was last advertised with.
    told: Mutex<HashMap<String, Vec<String>>>,
}

impl ThreadOnly {
    /// From the settings (`--sdk` order; every built-in SDK, in their
    /// listed order, when none is named).
    pub fn new(config: &RunConfig) -> Self {
        let order = if config.sdks.is_empty() {
            crate::tasks::sdks::BUILT_IN
                .iter()
                .map(|s| (*s).to_owned())
                .collect()
        } else {
            config.sdks.clone()
        };
        Self::with_order(order, config.agent_api_url.clone())
    }

    /// With the SDKs in `order` and `agent_api_url`.
    pub fn with_order(order: Vec<String>, agent_api_url: Option<String>) -> Self {
        let mut seen = Vec::with_capacity(order.len());
        for name in order {
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
        Self {
            agent_api_url,
            order: seen,
            told: Mutex::new(HashMap::new()),
        }
    }

    fn rank(&self, sdk: &str) -> usize {
        self.order
            .iter()
            .position(|s| s == sdk)
            .unwrap_or(self.order.len())
    }

    /// `all` in `--sdk` order.
    fn ordered<'a>(&self, all: &'a [SdkDescription]) -> Vec<&'a SdkDescription> {
        let mut out: Vec<&SdkDescription> = all.iter().collect();
        out.sort_by_key(|d| (self.rank(&d.name), d.name.clone()));
        out
    }

    /// Every SDK of `all` as a 0.7 registration advertises it: in `--sdk`
    /// order, a model name an earlier SDK has too qualified as `SDK/MODEL`.
    /// Remembered as told.
    pub fn advertise(&self, all: &[SdkDescription]) -> Vec<AgentSdk> {
        let mut taken: Vec<&str> = Vec::new();
        let mut out = Vec::with_capacity(all.len());
        let mut told = self.told.lock().unwrap_or_else(PoisonError::into_inner);
        for d in self.ordered(all) {
            let mut sdk = crate::delivery::messages::agent_sdk(d.clone());
            for model in &mut sdk.models {
                if taken.contains(&model.name.as_str()) {
                    model.name = format!("{}/{}", d.name, model.name);
                }
            }
            taken.extend(d.models.iter().map(|m| m.name.as_str()));
            told.insert(
                sdk.name.clone(),
                sdk.models.iter().map(|m| m.name.clone()).collect(),
            );
            out.push(sdk);
        }
        out
    }

    /// The `agent_sdk_update`s due now that `changed`'s description changed
    /// (`all`: every SDK's current description): `changed` itself, and
    /// every other SDK whose advertised names changed with it.
    pub fn updates(&self, all: &[SdkDescription], changed: &str) -> Vec<AgentSdk> {
        let before = self
            .told
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        self.advertise(all)
            .into_iter()
            .filter(|sdk| {
                sdk.name == changed || {
                    let names: Vec<&str> = sdk.models.iter().map(|m| m.name.as_str()).collect();
                    before.get(&sdk.name).is_none_or(|old| {
                        old.iter().map(String::as_str).collect::<Vec<_>>() != names
                    })
                }
            })
            .collect()
    }

    /// The SDK and its own model name for a thread's `model` (`all`: what
    /// each SDK advertised): a plain name is the first SDK's in `--sdk`
    /// order that has it, `SDK/MODEL` is that SDK's. `None`: no SDK has it.
    pub fn resolve(&self, all: &[SdkDescription], model: &str) -> Option<(String, String)> {
        let ordered = self.ordered(all);
        let has = |d: &SdkDescription, m: &str| d.models.iter().any(|x| x.name == m);
        if let Some(d) = ordered.iter().find(|d| has(d, model)) {
            return Some((d.name.clone(), model.to_owned()));
        }
        let (sdk, bare) = model.split_once('/')?;
        ordered
            .iter()
            .find(|d| d.name == sdk && has(d, bare))
            .map(|d| (d.name.clone(), bare.to_owned()))
    }

    /// Every model name as advertised (for a refusal's text).
    pub fn offered(&self, all: &[SdkDescription]) -> Vec<String> {
        self.advertise(all)
            .into_iter()
            .flat_map(|s| s.models.into_iter().map(|m| m.name))
            .collect()
    }

    /// The environment a thread with agent API `token` adds for its
    /// processes.
    pub fn env(&self, token: &str) -> Vec<(String, String)> {
        let mut env = vec![(TOKEN_VAR.to_owned(), token.to_owned())];
        if let Some(url) = &self.agent_api_url {
            env.push((URL_VAR.to_owned(), url.clone()));
        }
        env
    }

    /// The thread's instructions (`base`: the control plane's), with the
    /// agent API stated after them when `--agent-api-url` is set. The token
    /// itself is named, not quoted: the model reads it from the environment.
    pub fn instructions(&self, base: Option<String>) -> Option<String> {
        let Some(url) = &self.agent_api_url else {
            return base;
        };
        let note = format!(
            "The control plane's agent API is at {url} (also in the environment variable \
             {URL_VAR}). Authenticate every call to it with the bearer token in the \
             environment variable {TOKEN_VAR}; never print, log or reveal that token."
        );
        Some(match base {
            Some(base) => format!("{base}\n\n{note}"),
            None => note,
        })
    }
}

/// Makes sure every enabled SDK's implicit agent exists (store row and the
/// adapter's agent), so 0.7 threads can be created under it. An implicit
/// agent restored from the store was re-opened already; an id taken by an
/// agent of another SDK is an error.
pub async fn ensure_agents(rt: &Arc<Runtime>) -> anyhow::Result<()> {
    for sdk in rt.sdks.names() {
        let id = agent_id(&sdk);
        match rt.store.agent(&id)? {
            Some(row) if row.sdk == sdk => continue,
            Some(row) => anyhow::bail!(
                "agent {id} of the state dir belongs to SDK {:?}, not {sdk:?}",
                row.sdk
            ),
            None => {}
        }
        let Some(adapter) = rt.sdks.get(&sdk) else {
            continue;
        };
        let home = rt.workspaces.agent_home(&id);
        rt.workspaces.create(&home)?;
        let spec = AgentSpec {
            agent_id: id.clone(),
            home,
        };
        adapter
            .create_agent(&spec)
            .await
            .map_err(|e| anyhow::anyhow!("creating {sdk}'s implicit agent: {e}"))?;
        rt.store.put_agent(&AgentRow {
            agent_id: id,
            sdk: sdk.clone(),
        })?;
        tracing::debug!(%sdk, "implicit agent created for protocol 0.7");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use sdk_adapter::{ModelInfo, SdkStatus};

    use super::*;

    fn sdk(name: &str, models: &[&str]) -> SdkDescription {
        SdkDescription {
            name: name.into(),
            models: models
                .iter()
                .map(|m| ModelInfo {
                    name: (*m).into(),
                    reasoning_levels: Vec::new(),
                })
                .collect(),
            status: SdkStatus::Ready,
            error_message: None,
        }
    }

    #[test]
    fn a_shared_name_is_qualified_for_all_but_the_first_in_sdk_order() {
        let t = ThreadOnly::with_order(vec!["codex".into(), "code-agent".into()], None);
        let all = [
            sdk("code-agent", &["gpt-5", "local"]),
            sdk("codex", &["gpt-5", "o3"]),
        ];
        let names: Vec<Vec<String>> = t
            .advertise(&all)
            .into_iter()
            .map(|s| s.models.into_iter().map(|m| m.name).collect())
            .collect();
        assert_eq!(
            names,
            [vec!["gpt-5", "o3"], vec!["code-agent/gpt-5", "local"]]
        );
        assert_eq!(
            t.resolve(&all, "gpt-5"),
            Some(("codex".into(), "gpt-5".into()))
        );
        assert_eq!(
            t.resolve(&all, "code-agent/gpt-5"),
            Some(("code-agent".into(), "gpt-5".into()))
        );
        assert_eq!(
            t.resolve(&all, "codex/o3"),
            Some(("codex".into(), "o3".into()))
        );
        assert_eq!(t.resolve(&all, "codex/local"), None);
        assert_eq!(t.resolve(&all, "nope"), None);
    }

    #[test]
    fn a_change_announces_every_sdk_whose_names_changed() {
        let t = ThreadOnly::with_order(vec!["codex".into(), "code-agent".into()], None);
        let before = [sdk("codex", &[]), sdk("code-agent", &["gpt-5"])];
        t.advertise(&before);
        let after = [sdk("codex", &["gpt-5"]), sdk("code-agent", &["gpt-5"])];
        let updates: Vec<String> = t
            .updates(&after, "codex")
            .into_iter()
            .map(|s| format!("{}:{}", s.name, s.models[0].name))
            .collect();
        assert_eq!(updates, ["codex:gpt-5", "code-agent:code-agent/gpt-5"]);
        assert_eq!(t.updates(&after, "codex").len(), 1);
    }

    #[test]
    fn the_agent_api_is_stated_only_with_a_url() {
        let bare = ThreadOnly::with_order(vec!["scripted".into()], None);
        assert_eq!(bare.env("tok"), [("AGENT_API_TOKEN".into(), "tok".into())]);
        assert_eq!(
            bare.instructions(Some("be brief".into())).as_deref(),
            Some("be brief")
        );
        let t = ThreadOnly::with_order(vec!["scripted".into()], Some("http://cp/api".into()));
        assert_eq!(t.env("tok").len(), 2);
        let text = t.instructions(Some("be brief".into())).unwrap();
        assert!(text.starts_with("be brief\n\n"), "{text}");
        assert!(
            text.contains("http://cp/api") && text.contains("AGENT_API_TOKEN"),
            "{text}"
        );
        assert!(!text.contains("tok "), "{text}");
    }
}
