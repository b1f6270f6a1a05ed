//! `providers.json`: the persisted provider configuration (its own serde
//! shape, versioned), read on open and replaced atomically (temporary file in
//! the same directory, fsync, rename) with mode 0600 since it may hold keys.

use std::io::Write;
use std::path::{Path, PathBuf};

use code_agent_proto::{
    ModelCostInfo, ModelInfo, ModelLimitInfo, ModelModalitiesInfo, ProviderInfo,
};
use serde::{Deserialize, Serialize};

/// The file's format version.
const VERSION: u32 = 1;

/// Everything `providers.json` holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredProviders {
    #[serde(default)]
    pub version: u32,
    #[serde(default)]
    pub providers: Vec<StoredProvider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_model: Option<String>,
}

// Debug by hand below: the API keys never print.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredProvider {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default)]
    pub models: Vec<StoredModel>,
}

#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StoredModel {
    pub id: String,
    pub name: String,
    pub family: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    pub attachment: bool,
    pub reasoning: bool,
    pub tool_call: bool,
    pub temperature: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_date: Option<String>,
    pub input_modalities: Vec<String>,
    pub output_modalities: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<StoredCost>,
    pub context_limit: u32,
    pub output_limit: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StoredCost {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// `$target { .. }` built from `$m`: the fields `ModelInfo` and
/// `StoredModel` share by name (cost included, as `$cost`), then the given
/// ones, which differ in shape between the two.
macro_rules! model_fields {
    ($target:ident, $cost:ident, $m:ident, { $($field:ident: $value:expr),* $(,)? }) => {
        $target {
            id: $m.id.clone(),
            name: $m.name.clone(),
            family: $m.family.clone(),
            api_key: $m.api_key.clone(),
            base_url: $m.base_url.clone(),
            attachment: $m.attachment,
            reasoning: $m.reasoning,
            tool_call: $m.tool_call,
            temperature: $m.temperature,
            release_date: $m.release_date.clone(),
            cost: $m.cost.map(|c| $cost {
                input: c.input,
                output: c.output,
                cache_read: c.cache_read,
                cache_write: c.cache_write,
            }),
            $($field: $value,)*
        }
    };
}

impl From<&StoredModel> for ModelInfo {
    fn from(m: &StoredModel) -> Self {
        let has_modalities = !m.input_modalities.is_empty() || !m.output_modalities.is_empty();
        let has_limit = m.context_limit != 0 || m.output_limit != 0;
        model_fields!(ModelInfo, ModelCostInfo, m, {
            modalities: has_modalities.then(|| ModelModalitiesInfo {
                input: m.input_modalities.clone(),
                output: m.output_modalities.clone(),
            }),
            limit: has_limit.then_some(ModelLimitInfo {
                context: m.context_limit,
                output: m.output_limit,
            }),
        })
    }
}

impl From<&ModelInfo> for StoredModel {
    fn from(m: &ModelInfo) -> Self {
        let modalities = m.modalities.clone().unwrap_or_default();
        let limit = m.limit.unwrap_or_default();
        model_fields!(StoredModel, StoredCost, m, {
            input_modalities: modalities.input,
            output_modalities: modalities.output,
            context_limit: limit.context,
            output_limit: limit.output,
        })
    }
}

impl From<&StoredProvider> for ProviderInfo {
    fn from(p: &StoredProvider) -> Self {
        ProviderInfo {
            name: p.name.clone(),
            api_key: p.api_key.clone(),
            base_url: p.base_url.clone(),
            models: p.models.iter().map(ModelInfo::from).collect(),
        }
    }
}

/// Why the file could not be read or written.
#[derive(Debug)]
pub(crate) struct FileError {
    pub path: PathBuf,
    pub message: String,
}

fn file_error(path: &Path, what: &str, err: impl std::fmt::Display) -> FileError {
    FileError {
        path: path.to_owned(),
        message: format!("{what}: {err}"),
    }
}

/// Reads the file; a missing file is an empty configuration. A file readable
/// by others is narrowed to 0600.
pub(crate) fn load(path: &Path) -> Result<StoredProviders, FileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(StoredProviders::default()),
        Err(e) => return Err(file_error(path, "reading", e)),
    };
    restrict_mode(path)?;
    let stored: StoredProviders =
        serde_json::from_str(&text).map_err(|e| file_error(path, "parsing", e))?;
    if stored.version > VERSION {
        return Err(file_error(
            path,
            "version",
            format!(
                "{} is newer than this engine understands ({VERSION})",
                stored.version
            ),
        ));
    }
    Ok(stored)
}

#[cfg(unix)]
fn restrict_mode(path: &Path) -> Result<(), FileError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| file_error(path, "stat", e))?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| file_error(path, "restricting the mode to 0600", e))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn restrict_mode(_path: &Path) -> Result<(), FileError> {
    Ok(())
}

/// Replaces the file atomically with `stored` (mode 0600).
pub(crate) fn save(path: &Path, stored: &StoredProviders) -> Result<(), FileError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut stored = stored.clone();
    stored.version = VERSION;
    let json = serde_json::to_vec_pretty(&stored).map_err(|e| file_error(path, "encoding", e))?;
    // NamedTempFile creates the file with mode 0600.
    let mut tmp = tempfile::Builder::new()
        .prefix(".providers.json.")
        .tempfile_in(dir)
        .map_err(|e| file_error(path, "creating a temporary file", e))?;
    tmp.write_all(&json)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| file_error(path, "writing", e))?;
    tmp.persist(path)
        .map_err(|e| file_error(path, "replacing", e.error))?;
    // Make the rename itself durable; failure here does not lose the data.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// `***` for a key that is set, so a `{:?}` never leaks one.
fn key_shown(key: &Option<String>) -> Option<&'static str> {
    key.as_ref().map(|_| "***")
}

impl std::fmt::Debug for StoredProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredProvider")
            .field("name", &self.name)
            .field("api_key", &key_shown(&self.api_key))
            .field("base_url", &self.base_url)
            .field("models", &self.models)
            .finish()
    }
}

impl std::fmt::Debug for StoredModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredModel")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("api_key", &key_shown(&self.api_key))
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_round_trip_through_the_stored_shape() {
        let full = ModelInfo {
            id: "m1".into(),
            name: "Model One".into(),
            family: "fam".into(),
            api_key: Some("sk-model".into()),
            base_url: Some("http://127.0.0.1:1/v1".into()),
            attachment: true,
            reasoning: true,
            tool_call: true,
            temperature: true,
            release_date: Some("2025-01-01".into()),
            modalities: Some(ModelModalitiesInfo {
                input: vec!["text".into(), "image".into()],
                output: vec!["text".into()],
            }),
            cost: Some(ModelCostInfo {
                input: 1.5,
                output: 2.5,
                cache_read: 0.25,
                cache_write: 0.75,
            }),
            limit: Some(ModelLimitInfo {
                context: 128_000,
                output: 4096,
            }),
        };
        assert_eq!(ModelInfo::from(&StoredModel::from(&full)), full);
        let bare = ModelInfo {
            id: "m2".into(),
            ..ModelInfo::default()
        };
        assert_eq!(ModelInfo::from(&StoredModel::from(&bare)), bare);
    }

    #[test]
    fn debug_never_shows_a_key() {
        let provider = StoredProvider {
            name: "p".into(),
            api_key: Some("sk-provider-secret".into()),
            models: vec![StoredModel {
                id: "m".into(),
                api_key: Some("sk-model-secret".into()),
                ..StoredModel::default()
            }],
            ..StoredProvider::default()
        };
        let shown = format!("{provider:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }
}
