//! Model providers: persisted configuration, API keys from config or env.
//!
//! A [`ProviderStore`] backs `ListProviders` … `GetDefaultModel` and tells
//! the agent loop which endpoint, key and model a session uses
//! ([`ProviderStore::resolve`]). Providers are kept in `providers.json`
//! (mode 0600) in the engine's state directory when it has one. The
//! environment adds the built-in `openai` provider (when `OPENAI_API_KEY` or
//! `OPENAI_BASE_URL` is set) and `anthropic` (when `ANTHROPIC_API_KEY` or
//! `ANTHROPIC_BASE_URL` is set; see [`speaks_anthropic`]) and supplies any provider's key and base URL it
//! does not configure itself (`<NAME>_API_KEY`, `<NAME>_BASE_URL`), so vLLM,
//! Ollama, OpenRouter and the like work unchanged. Keys leave the store only
//! through `resolve`; everything else shows them as `***`.

mod env;
mod file;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use code_agent_proto::{GetDefaultModelResponse, ListProvidersResponse, ModelInfo, ProviderInfo};
use thiserror::Error;

pub use env::{
    ANTHROPIC_DEFAULT_BASE_URL, ANTHROPIC_DEFAULT_MODEL, ANTHROPIC_PROVIDER, BUILTIN_PROVIDER,
    EnvLookup, OPENAI_DEFAULT_BASE_URL, OPENAI_DEFAULT_MODEL, speaks_anthropic,
};
use file::{StoredModel, StoredProvider, StoredProviders};

/// What list/get show instead of a key; sent back in add/update it means
/// "keep the key as it is".
pub const REDACTED: &str = "***";
/// The file name inside the state directory.
pub const PROVIDERS_FILE: &str = "providers.json";

/// Why a provider operation failed. Never contains a key.
#[derive(Debug, Error)]
pub enum ProviderError {
    /// No provider of that name.
    #[error("provider {0:?} not found")]
    NotFound(String),
    /// The provider does not offer that model.
    #[error("model {model:?} is not one of provider {provider:?}'s models")]
    ModelNotFound {
        /// The provider asked for.
        provider: String,
        /// The model asked for.
        model: String,
    },
    /// A provider of that name is already registered.
    #[error("provider {0:?} already exists")]
    AlreadyExists(String),
    /// A field of the request is wrong; the message names it.
    #[error("{0}")]
    Invalid(String),
    /// Nothing (or not enough) is configured to pick a model.
    #[error("{0}")]
    NotConfigured(String),
    /// `providers.json` could not be read or written.
    #[error("providers file {}: {message}", path.display())]
    Storage {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

impl From<ProviderError> for tonic::Status {
    fn from(err: ProviderError) -> Self {
        let text = err.to_string();
        match err {
            ProviderError::NotFound(_) | ProviderError::ModelNotFound { .. } => {
                tonic::Status::not_found(text)
            }
            ProviderError::AlreadyExists(_) => tonic::Status::already_exists(text),
            ProviderError::Invalid(_) => tonic::Status::invalid_argument(text),
            ProviderError::NotConfigured(_) => tonic::Status::failed_precondition(text),
            ProviderError::Storage { .. } => tonic::Status::internal(text),
        }
    }
}

impl From<file::FileError> for ProviderError {
    fn from(e: file::FileError) -> Self {
        ProviderError::Storage {
            path: e.path,
            message: e.message,
        }
    }
}

/// Where a model is served and with which key.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// The provider's name.
    pub provider: String,
    /// The model's name.
    pub model: String,
    /// Where the provider's API is.
    pub base_url: String,
    /// The key to send (`None`: the provider needs none).
    pub api_key: Option<String>,
}

impl std::fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| REDACTED))
            .finish()
    }
}

struct Inner {
    path: Option<PathBuf>,
    env: EnvLookup,
    /// The current configuration; held only to copy or swap it, never
    /// across the file write, so readers do not wait for the disk.
    stored: Mutex<StoredProviders>,
    /// Serialises changes (held across the file write).
    writer: Mutex<()>,
}

/// The provider configuration; a cheap, thread-safe handle.
#[derive(Clone)]
pub struct ProviderStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ProviderStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.view().into_iter().map(|p| p.name).collect();
        f.debug_struct("ProviderStore")
            .field("path", &self.inner.path)
            .field("providers", &names)
            .finish()
    }
}

impl ProviderStore {
    /// Opens the store, reading `<state_dir>/providers.json` when a state
    /// directory is given (created if missing); without one nothing persists.
    pub fn open(state_dir: Option<&Path>) -> Result<Self, ProviderError> {
        Self::open_with_env(state_dir, env::process_env())
    }

    /// [`open`](Self::open) with another environment (tests, embedding).
    pub fn open_with_env(state_dir: Option<&Path>, env: EnvLookup) -> Result<Self, ProviderError> {
        let path = match state_dir {
            None => None,
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| ProviderError::Storage {
                    path: dir.to_owned(),
                    message: format!("creating the state directory: {e}"),
                })?;
                Some(dir.join(PROVIDERS_FILE))
            }
        };
        let stored = match &path {
            Some(p) => file::load(p)?,
            None => StoredProviders::default(),
        };
        Ok(ProviderStore {
            inner: Arc::new(Inner {
                path,
                env,
                stored: Mutex::new(stored),
                writer: Mutex::new(()),
            }),
        })
    }

    /// The file the configuration persists to, if any.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, StoredProviders> {
        self.inner
            .stored
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies `change` to a copy, persists it, then makes it current; a
    /// failed write leaves the store as it was. Blocking (the file write):
    /// async callers run the mutators on the blocking pool.
    fn mutate<T>(
        &self,
        change: impl FnOnce(&mut StoredProviders) -> Result<T, ProviderError>,
    ) -> Result<T, ProviderError> {
        let _writer = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Only writers change `stored`, and they hold `writer`: this copy
        // stays current until the swap below.
        let mut next = self.lock().clone();
        let out = change(&mut next)?;
        if let Some(path) = &self.inner.path {
            file::save(path, &next)?;
        }
        *self.lock() = next;
        Ok(out)
    }

    /// Stored providers, then the built-in one unless a stored one shadows it.
    fn view_of(&self, stored: &StoredProviders) -> Vec<StoredProvider> {
        let mut all = stored.providers.clone();
        let builtins: Vec<StoredProvider> = env::builtins(&self.inner.env)
            .into_iter()
            .filter(|b| all.iter().all(|p| p.name != b.name))
            .collect();
        all.splice(0..0, builtins);
        all
    }

    fn view(&self) -> Vec<StoredProvider> {
        self.view_of(&self.lock())
    }

    /// A provider as the API shows it: effective base URL, keys redacted.
    fn shown(&self, p: &StoredProvider) -> ProviderInfo {
        let mut info = ProviderInfo::from(p);
        let has_key = p.api_key.is_some() || env::api_key(&self.inner.env, &p.name).is_some();
        info.api_key = has_key.then(|| REDACTED.to_owned());
        info.base_url = p
            .base_url
            .clone()
            .or_else(|| env::base_url(&self.inner.env, &p.name));
        for m in &mut info.models {
            redact_model(m);
        }
        info
    }

    /// The effective default: the stored one while its provider exists, else
    /// the first provider (built-in first) and its first model.
    fn default_of(&self, stored: &StoredProviders) -> (Option<String>, Option<String>) {
        let view = self.view_of(stored);
        if let Some(name) = &stored.default_provider
            && let Some(p) = view.iter().find(|p| &p.name == name)
        {
            let model = stored
                .default_model
                .clone()
                .or_else(|| p.models.first().map(|m| m.id.clone()));
            return (Some(p.name.clone()), model);
        }
        match view.first() {
            Some(p) => (Some(p.name.clone()), p.models.first().map(|m| m.id.clone())),
            None => (None, None),
        }
    }

    /// `ListProviders`: every provider, keys redacted, and the default.
    pub fn list(&self) -> ListProvidersResponse {
        let stored = self.lock().clone();
        let (default_provider, default_model) = self.default_of(&stored);
        ListProvidersResponse {
            providers: self
                .view_of(&stored)
                .iter()
                .map(|p| self.shown(p))
                .collect(),
            default_provider,
            default_model,
        }
    }

    /// `GetProvider`, key redacted.
    pub fn get(&self, name: &str) -> Result<ProviderInfo, ProviderError> {
        self.view()
            .iter()
            .find(|p| p.name == name)
            .map(|p| self.shown(p))
            .ok_or_else(|| ProviderError::NotFound(name.to_owned()))
    }

    /// `AddProvider`. A stored `openai` replaces the built-in one. A key of
    /// `***` or empty counts as none.
    pub fn add(&self, info: ProviderInfo) -> Result<ProviderInfo, ProviderError> {
        validate_name(&info.name)?;
        let mut provider = StoredProvider {
            name: info.name.clone(),
            api_key: given(info.api_key.as_deref()).filter(|k| k != REDACTED),
            base_url: given(info.base_url.as_deref()),
            models: Vec::new(),
        };
        if let Some(url) = &provider.base_url {
            validate_url("provider.base_url", url)?;
        }
        provider.models = models_from(&info.name, &info.models, &[])?;
        let added = self.mutate(|stored| {
            if stored.providers.iter().any(|p| p.name == provider.name) {
                return Err(ProviderError::AlreadyExists(provider.name.clone()));
            }
            stored.providers.push(provider.clone());
            Ok(provider)
        })?;
        Ok(self.shown(&added))
    }

    /// `UpdateProvider`, by name. Unset fields stay; `api_key`/`base_url`
    /// set to `""` clear, `api_key: "***"` keeps the key; a non-empty model
    /// list replaces the models (a model key of `***` keeps that model's key).
    /// Updating the built-in `openai` stores a copy that then shadows it.
    pub fn update(&self, info: ProviderInfo) -> Result<ProviderInfo, ProviderError> {
        validate_name(&info.name)?;
        if let Some(url) = given(info.base_url.as_deref()) {
            validate_url("provider.base_url", &url)?;
        }
        let builtin = env::builtins(&self.inner.env)
            .into_iter()
            .find(|b| b.name == info.name);
        let updated = self.mutate(|stored| {
            let pos = match stored.providers.iter().position(|p| p.name == info.name) {
                Some(pos) => pos,
                None => match builtin {
                    Some(b) => {
                        stored.providers.push(b);
                        stored.providers.len() - 1
                    }
                    None => return Err(ProviderError::NotFound(info.name.clone())),
                },
            };
            let p = &mut stored.providers[pos];
            match info.api_key.as_deref().map(str::trim) {
                None | Some(REDACTED) => {}
                Some("") => p.api_key = None,
                Some(k) => p.api_key = Some(k.to_owned()),
            }
            match info.base_url.as_deref().map(str::trim) {
                None => {}
                Some("") => p.base_url = None,
                Some(u) => p.base_url = Some(u.to_owned()),
            }
            if !info.models.is_empty() {
                p.models = models_from(&info.name, &info.models, &p.models)?;
            }
            if stored.default_provider.as_deref() == Some(info.name.as_str()) {
                let p = &stored.providers[pos];
                let keep = stored
                    .default_model
                    .as_ref()
                    .is_none_or(|m| p.models.is_empty() || p.models.iter().any(|x| &x.id == m));
                if !keep {
                    stored.default_model = None;
                }
            }
            Ok(stored.providers[pos].clone())
        })?;
        Ok(self.shown(&updated))
    }

    /// `RemoveProvider`. Removing the default provider clears the default.
    /// The built-in `openai` comes from the environment and cannot be
    /// removed (a stored `openai` can; the built-in one shows again).
    pub fn remove(&self, name: &str) -> Result<(), ProviderError> {
        let builtin = env::builtins(&self.inner.env)
            .into_iter()
            .any(|b| b.name == name);
        self.mutate(|stored| {
            let Some(pos) = stored.providers.iter().position(|p| p.name == name) else {
                if builtin {
                    let vars = env::var_name(name, "API_KEY/") + &env::var_name(name, "BASE_URL");
                    return Err(ProviderError::Invalid(format!(
                        "provider {name:?} comes from {vars} in the engine's environment and \
                         cannot be removed"
                    )));
                }
                return Err(ProviderError::NotFound(name.to_owned()));
            };
            stored.providers.remove(pos);
            if stored.default_provider.as_deref() == Some(name) {
                stored.default_provider = None;
                stored.default_model = None;
            }
            Ok(())
        })
    }

    /// `SetDefaultModel`. The model must be one of the provider's models
    /// when it lists any. Returns the stored (provider, model).
    pub fn set_default(
        &self,
        provider: &str,
        model: &str,
    ) -> Result<(String, String), ProviderError> {
        let model = model.trim();
        if model.is_empty() {
            return Err(ProviderError::Invalid("model: must not be empty".into()));
        }
        self.mutate(|stored| {
            let view = self.view_of(stored);
            let p = view
                .iter()
                .find(|p| p.name == provider)
                .ok_or_else(|| ProviderError::NotFound(provider.to_owned()))?;
            if !p.models.is_empty() && p.models.iter().all(|m| m.id != model) {
                return Err(ProviderError::ModelNotFound {
                    provider: provider.to_owned(),
                    model: model.to_owned(),
                });
            }
            stored.default_provider = Some(provider.to_owned());
            stored.default_model = Some(model.to_owned());
            Ok((provider.to_owned(), model.to_owned()))
        })
    }

    /// `GetDefaultModel`: the effective default (see [`list`](Self::list)).
    pub fn get_default(&self) -> GetDefaultModelResponse {
        let stored = self.lock().clone();
        let (provider, model) = self.default_of(&stored);
        GetDefaultModelResponse { provider, model }
    }

    /// Every (provider, model) pair, keys redacted (capabilities, registration).
    pub fn models(&self) -> Vec<(String, ModelInfo)> {
        self.view()
            .iter()
            .flat_map(|p| {
                p.models.iter().map(|m| {
                    let mut info = ModelInfo::from(m);
                    redact_model(&mut info);
                    (p.name.clone(), info)
                })
            })
            .collect()
    }

    /// The endpoint, key and model for a session. A given provider must
    /// exist; without a model it uses the default model (for the default
    /// provider) or the provider's first. A model alone picks the provider
    /// listing it (the default provider first), else the default provider. A
    /// model the provider does not list is passed through as is. A model's
    /// own key/base URL win over the provider's, which win over the env.
    pub fn resolve(
        &self,
        provider: Option<&str>,
        model: Option<&str>,
    ) -> Result<ResolvedModel, ProviderError> {
        let provider = provider.map(str::trim).filter(|p| !p.is_empty());
        let model = model.map(str::trim).filter(|m| !m.is_empty());
        let stored = self.lock().clone();
        let view = self.view_of(&stored);
        let (default_provider, default_model) = self.default_of(&stored);
        let find = |name: &str| view.iter().find(|p| p.name == name);

        let chosen = match (provider, model) {
            (Some(name), _) => {
                find(name).ok_or_else(|| ProviderError::NotFound(name.to_owned()))?
            }
            (None, Some(m)) => default_provider
                .as_deref()
                .and_then(find)
                .filter(|p| p.models.iter().any(|x| x.id == m))
                .or_else(|| view.iter().find(|p| p.models.iter().any(|x| x.id == m)))
                .or_else(|| default_provider.as_deref().and_then(find))
                .ok_or_else(no_provider)?,
            (None, None) => default_provider
                .as_deref()
                .and_then(find)
                .ok_or_else(no_provider)?,
        };
        let model_id = match model {
            Some(m) => m.to_owned(),
            None if default_provider.as_deref() == Some(chosen.name.as_str()) => default_model
                .clone()
                .ok_or_else(|| no_model(&chosen.name))?,
            None => chosen
                .models
                .first()
                .map(|m| m.id.clone())
                .ok_or_else(|| no_model(&chosen.name))?,
        };
        let listed = chosen.models.iter().find(|m| m.id == model_id);
        let env = &self.inner.env;
        let base_url = listed
            .and_then(|m| m.base_url.clone())
            .or_else(|| chosen.base_url.clone())
            .or_else(|| env::base_url(env, &chosen.name))
            .ok_or_else(|| {
                ProviderError::NotConfigured(format!(
                    "provider {:?} has no base_url: set it, or {} in the engine's environment",
                    chosen.name,
                    env::var_name(&chosen.name, "BASE_URL")
                ))
            })?;
        let api_key = listed
            .and_then(|m| m.api_key.clone())
            .or_else(|| chosen.api_key.clone())
            .or_else(|| env::api_key(env, &chosen.name));
        Ok(ResolvedModel {
            provider: chosen.name.clone(),
            model: model_id,
            base_url,
            api_key,
        })
    }
}

fn no_provider() -> ProviderError {
    ProviderError::NotConfigured(
        "no model provider is configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for an \
         OpenAI-compatible server) or ANTHROPIC_API_KEY, or add a provider"
            .into(),
    )
}

fn no_model(provider: &str) -> ProviderError {
    ProviderError::NotConfigured(format!(
        "provider {provider:?} lists no models: name a model or add one to the provider"
    ))
}

fn redact_model(m: &mut ModelInfo) {
    if m.api_key.is_some() {
        m.api_key = Some(REDACTED.to_owned());
    }
}

/// A set, non-blank value, trimmed.
fn given(v: Option<&str>) -> Option<String> {
    v.map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// Names become env var names (`<NAME>_API_KEY`) and map keys, never paths.
fn validate_name(name: &str) -> Result<(), ProviderError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ProviderError::Invalid(
            "provider.name: 1-64 characters of A-Z, a-z, 0-9, '-', '_', '.'".into(),
        ))
    }
}

fn validate_url(field: &str, url: &str) -> Result<(), ProviderError> {
    // The value is not echoed: it may carry credentials.
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| ProviderError::Invalid(format!("{field}: not a valid URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ProviderError::Invalid(format!(
            "{field}: must be an http:// or https:// URL"
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(ProviderError::Invalid(format!(
            "{field}: must not carry credentials (use api_key)"
        )));
    }
    Ok(())
}

/// Validated stored models; a model key of `***` keeps `previous`'s key.
fn models_from(
    provider: &str,
    models: &[ModelInfo],
    previous: &[StoredModel],
) -> Result<Vec<StoredModel>, ProviderError> {
    let mut out: Vec<StoredModel> = Vec::with_capacity(models.len());
    for (i, m) in models.iter().enumerate() {
        let id = m.id.trim();
        if id.is_empty() {
            return Err(ProviderError::Invalid(format!(
                "provider.models[{i}].id: must not be empty"
            )));
        }
        if out.iter().any(|o| o.id == id) {
            return Err(ProviderError::Invalid(format!(
                "provider.models[{i}].id: {id:?} appears twice in provider {provider:?}"
            )));
        }
        if let Some(url) = given(m.base_url.as_deref()) {
            validate_url(&format!("provider.models[{i}].base_url"), &url)?;
        }
        let mut stored = StoredModel::from(m);
        stored.id = id.to_owned();
        stored.base_url = given(m.base_url.as_deref());
        stored.api_key = match given(m.api_key.as_deref()) {
            Some(k) if k == REDACTED => previous
                .iter()
                .find(|p| p.id == id)
                .and_then(|p| p.api_key.clone()),
            other => other,
        };
        if stored.name.is_empty() {
            stored.name = stored.id.clone();
        }
        out.push(stored);
    }
    Ok(out)
}
