//! What the engine's environment contributes to providers: the built-in
//! `openai` provider (present when `OPENAI_API_KEY` or `OPENAI_BASE_URL` is
//! set), the built-in `anthropic` provider (present when `ANTHROPIC_API_KEY`
//! or `ANTHROPIC_BASE_URL` is set; it speaks the Messages API) and the
//! `<NAME>_API_KEY` / `<NAME>_BASE_URL` fallbacks of every provider.

use std::sync::Arc;

use super::file::{StoredModel, StoredProvider};

/// Reads one environment variable; empty values count as unset.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment.
pub(crate) fn process_env() -> EnvLookup {
    Arc::new(|name| std::env::var(name).ok())
}

/// The name of the built-in provider.
pub const BUILTIN_PROVIDER: &str = "openai";
/// Its base URL when `OPENAI_BASE_URL` is not set.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Its model when neither `CODE_AGENT_MODELS` nor `OPENAI_MODEL` is set.
pub const OPENAI_DEFAULT_MODEL: &str = "gpt-4o-mini";

/// The built-in provider speaking the Anthropic Messages API.
pub const ANTHROPIC_PROVIDER: &str = "anthropic";
/// Its base URL when `ANTHROPIC_BASE_URL` is not set.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// Its model when neither `ANTHROPIC_MODELS` nor `ANTHROPIC_MODEL` is set.
pub const ANTHROPIC_DEFAULT_MODEL: &str = "claude-sonnet-4-5";

/// Whether the provider `name` speaks the Anthropic Messages API rather
/// than OpenAI Chat Completions: `anthropic`, or a name starting with
/// `anthropic-` or `anthropic.` (e.g. `anthropic-proxy`).
pub fn speaks_anthropic(name: &str) -> bool {
    name == ANTHROPIC_PROVIDER || name.starts_with("anthropic-") || name.starts_with("anthropic.")
}

/// `env(name)`, with empty or blank values treated as unset.
pub(crate) fn get(env: &EnvLookup, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `<NAME>_<suffix>` for a provider name: uppercased, `-` and `.` as `_`.
pub(crate) fn var_name(provider: &str, suffix: &str) -> String {
    let mut name: String = provider
        .chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    name.push('_');
    name.push_str(suffix);
    name
}

/// The provider's key from the environment (`<NAME>_API_KEY`).
pub(crate) fn api_key(env: &EnvLookup, provider: &str) -> Option<String> {
    get(env, &var_name(provider, "API_KEY"))
}

/// The provider's base URL from the environment (`<NAME>_BASE_URL`), and for
/// `openai` the public API as the last resort.
pub(crate) fn base_url(env: &EnvLookup, provider: &str) -> Option<String> {
    get(env, &var_name(provider, "BASE_URL")).or_else(|| match provider {
        BUILTIN_PROVIDER => Some(OPENAI_DEFAULT_BASE_URL.to_owned()),
        ANTHROPIC_PROVIDER => Some(ANTHROPIC_DEFAULT_BASE_URL.to_owned()),
        _ => None,
    })
}

/// Every built-in provider the environment configures: `openai`, then
/// `anthropic`.
pub(crate) fn builtins(env: &EnvLookup) -> Vec<StoredProvider> {
    builtin(env).into_iter().chain(anthropic(env)).collect()
}

/// The built-in `anthropic` provider when `ANTHROPIC_API_KEY` or
/// `ANTHROPIC_BASE_URL` is set; its models from `ANTHROPIC_MODELS` (comma
/// separated), else `ANTHROPIC_MODEL`, else [`ANTHROPIC_DEFAULT_MODEL`].
pub(crate) fn anthropic(env: &EnvLookup) -> Option<StoredProvider> {
    let configured =
        get(env, "ANTHROPIC_API_KEY").is_some() || get(env, "ANTHROPIC_BASE_URL").is_some();
    if !configured {
        return None;
    }
    let ids: Vec<String> = match get(env, "ANTHROPIC_MODELS") {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect(),
        None => {
            vec![get(env, "ANTHROPIC_MODEL").unwrap_or_else(|| ANTHROPIC_DEFAULT_MODEL.to_owned())]
        }
    };
    Some(StoredProvider {
        name: ANTHROPIC_PROVIDER.to_owned(),
        api_key: None,
        base_url: None,
        models: dedup_models(ids, true),
    })
}

fn dedup_models(ids: Vec<String>, reasoning: bool) -> Vec<StoredModel> {
    let mut models: Vec<StoredModel> = Vec::new();
    for id in ids {
        if models.iter().all(|m| m.id != id) {
            models.push(StoredModel {
                name: id.clone(),
                id,
                tool_call: true,
                temperature: true,
                reasoning,
                ..StoredModel::default()
            });
        }
    }
    models
}

/// The built-in `openai` provider when the environment configures it. Its
/// key and base URL stay in the environment (they are looked up on use).
pub(crate) fn builtin(env: &EnvLookup) -> Option<StoredProvider> {
    let configured = get(env, "OPENAI_API_KEY").is_some() || get(env, "OPENAI_BASE_URL").is_some();
    if !configured {
        return None;
    }
    let ids: Vec<String> = match get(env, "CODE_AGENT_MODELS") {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect(),
        None => vec![get(env, "OPENAI_MODEL").unwrap_or_else(|| OPENAI_DEFAULT_MODEL.to_owned())],
    };
    Some(StoredProvider {
        name: BUILTIN_PROVIDER.to_owned(),
        api_key: None,
        base_url: None,
        models: dedup_models(ids, false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> EnvLookup {
        Arc::new(move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn var_names() {
        assert_eq!(var_name("open-router", "API_KEY"), "OPEN_ROUTER_API_KEY");
        assert_eq!(var_name("my.vllm", "BASE_URL"), "MY_VLLM_BASE_URL");
    }

    #[test]
    fn builtin_models_from_env() {
        assert!(builtin(&env(&[])).is_none());
        assert!(builtin(&env(&[("OPENAI_API_KEY", "  ")])).is_none());
        let p = builtin(&env(&[("OPENAI_API_KEY", "k")])).expect("builtin");
        assert_eq!(p.models[0].id, OPENAI_DEFAULT_MODEL);
        let p = builtin(&env(&[
            ("OPENAI_BASE_URL", "http://x/v1"),
            ("OPENAI_MODEL", "m1"),
        ]))
        .expect("builtin");
        assert_eq!(p.models.len(), 1);
        assert_eq!(p.models[0].id, "m1");
        let p = builtin(&env(&[
            ("OPENAI_API_KEY", "k"),
            ("OPENAI_MODEL", "ignored"),
            ("CODE_AGENT_MODELS", "a, b,,a"),
        ]))
        .expect("builtin");
        let ids: Vec<_> = p.models.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
    }

    #[test]
    fn builtin_anthropic_from_env() {
        assert!(anthropic(&env(&[("OPENAI_API_KEY", "k")])).is_none());
        let e = env(&[("ANTHROPIC_API_KEY", "k"), ("OPENAI_API_KEY", "k")]);
        let p = anthropic(&e).expect("anthropic");
        assert_eq!(p.models[0].id, ANTHROPIC_DEFAULT_MODEL);
        assert!(p.models[0].reasoning);
        let names: Vec<_> = builtins(&e).into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["openai", "anthropic"]);
        assert_eq!(
            base_url(&env(&[]), "anthropic").as_deref(),
            Some(ANTHROPIC_DEFAULT_BASE_URL)
        );
        let p = anthropic(&env(&[
            ("ANTHROPIC_BASE_URL", "http://x"),
            ("ANTHROPIC_MODELS", "c1,c2"),
        ]))
        .expect("anthropic");
        assert_eq!(p.models.len(), 2);
        assert!(speaks_anthropic("anthropic-proxy"));
        assert!(!speaks_anthropic("openai"));
        assert!(!speaks_anthropic("anthropicish"));
    }
}
