//! Which language server runs for which language: the built-in defaults and
//! the operator's additions (`CODE_AGENT_LSP_SERVERS`, a JSON object, or
//! [`crate::EngineConfig::lsp_servers`]), which replace a default of the
//! same language.
//!
//! ```json
//! {"python": {"command": ["python3", "-m", "pylsp"],
//!             "env": {"PYTHONPATH": "/opt/pylsp"},
//!             "extensions": ["py", "pyi"]}}
//! ```
//!
//! A language may list several candidate commands (`"commands": [[..], [..]]`);
//! the first whose program is found (an absolute path that exists, or a name
//! on the engine's PATH) is started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// How to start the server of one language.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LspServerSpec {
    /// Candidate command lines, tried in order (program first).
    #[serde(default)]
    pub commands: Vec<Vec<String>>,
    /// One command line (shorthand for a single candidate).
    #[serde(default)]
    pub command: Vec<String>,
    /// Extra environment of the server process (not secrets: the server
    /// runs confined, like any agent process).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// File extensions (without the dot) this server handles.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// The LSP `languageId` of its documents (default: the language name).
    #[serde(default)]
    pub language_id: Option<String>,
    /// Directories the server must read that the sandbox does not show by
    /// default (its install dir outside `/usr`, `/bin`, `/lib`, …). The
    /// engine's own sandboxes make them readable (read-only) for every
    /// process of the workspace; an embedder's sandboxes decide for
    /// themselves.
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
}

impl LspServerSpec {
    fn new(commands: &[&[&str]], extensions: &[&str], language_id: &str) -> Self {
        Self {
            commands: commands
                .iter()
                .map(|c| c.iter().map(|s| s.to_string()).collect())
                .collect(),
            command: Vec::new(),
            env: BTreeMap::new(),
            extensions: extensions.iter().map(|s| s.to_string()).collect(),
            language_id: Some(language_id.to_string()),
            read_only: Vec::new(),
        }
    }

    /// Every candidate command line, in order.
    pub fn candidates(&self) -> Vec<Vec<String>> {
        let mut all = Vec::new();
        if !self.command.is_empty() {
            all.push(self.command.clone());
        }
        all.extend(self.commands.iter().filter(|c| !c.is_empty()).cloned());
        all
    }
}

/// The language → server table.
#[derive(Debug, Clone, Default)]
pub struct LspTable {
    specs: BTreeMap<String, LspServerSpec>,
}

impl LspTable {
    /// The built-in defaults.
    pub fn defaults() -> Self {
        let ts: &[&[&str]] = &[&["typescript-language-server", "--stdio"]];
        let specs = [
            (
                "python",
                LspServerSpec::new(
                    &[&["pylsp"], &["pyright-langserver", "--stdio"]],
                    &["py", "pyi"],
                    "python",
                ),
            ),
            (
                "typescript",
                LspServerSpec::new(ts, &["ts", "tsx", "mts", "cts"], "typescript"),
            ),
            (
                "javascript",
                LspServerSpec::new(ts, &["js", "jsx", "mjs", "cjs"], "javascript"),
            ),
            (
                "rust",
                LspServerSpec::new(&[&["rust-analyzer"]], &["rs"], "rust"),
            ),
            ("go", LspServerSpec::new(&[&["gopls"]], &["go"], "go")),
        ];
        Self {
            specs: specs
                .into_iter()
                .map(|(name, spec)| (name.to_string(), spec))
                .collect(),
        }
    }

    /// Adds (or replaces) the servers of `json` (the `CODE_AGENT_LSP_SERVERS`
    /// format); the error names the offending language.
    pub fn extend_from_json(&mut self, json: &str) -> Result<(), String> {
        let parsed: BTreeMap<String, serde_json::Value> = serde_json::from_str(json)
            .map_err(|e| format!("CODE_AGENT_LSP_SERVERS: not a JSON object: {e}"))?;
        for (language, value) in parsed {
            let spec: LspServerSpec = serde_json::from_value(value)
                .map_err(|e| format!("CODE_AGENT_LSP_SERVERS.{language}: {e}"))?;
            self.insert(&language, spec)?;
        }
        Ok(())
    }

    /// Adds (or replaces) the server of `language`.
    pub fn insert(&mut self, language: &str, spec: LspServerSpec) -> Result<(), String> {
        let language = language.trim().to_ascii_lowercase();
        if language.is_empty() {
            return Err("an LSP server entry has an empty language name".into());
        }
        if spec.candidates().is_empty() {
            return Err(format!(
                "lsp server `{language}`: `command` or `commands` is required"
            ));
        }
        self.specs.insert(language, spec);
        Ok(())
    }

    /// The server of `language` (case-insensitive).
    pub fn get(&self, language: &str) -> Option<&LspServerSpec> {
        self.specs.get(&language.trim().to_ascii_lowercase())
    }

    /// Every `read_only` directory of every server (absolute ones only).
    pub fn read_only_paths(&self) -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = self
            .specs
            .values()
            .flat_map(|s| s.read_only.iter().filter(|p| p.is_absolute()).cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// Every language known.
    pub fn languages(&self) -> Vec<String> {
        self.specs.keys().cloned().collect()
    }
}

/// The first candidate whose program exists: `(resolved program, args)`,
/// or an error listing what was tried.
pub(crate) fn resolve(
    language: &str,
    spec: &LspServerSpec,
    path_var: Option<&std::ffi::OsStr>,
) -> Result<(PathBuf, Vec<String>), String> {
    let mut tried = Vec::new();
    for candidate in spec.candidates() {
        let Some((program, args)) = candidate.split_first() else {
            continue;
        };
        tried.push(program.clone());
        if let Some(found) = find_program(program, path_var) {
            return Ok((found, args.to_vec()));
        }
    }
    Err(format!(
        "no language server for `{language}` is installed (tried {}); install one or configure CODE_AGENT_LSP_SERVERS",
        tried.join(", ")
    ))
}

fn find_program(program: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let as_path = Path::new(program);
    if as_path.components().count() > 1 {
        return as_path.is_file().then(|| as_path.to_path_buf());
    }
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_extend_and_resolve() {
        let mut table = LspTable::defaults();
        assert_eq!(
            table.get("Python").unwrap().candidates()[0],
            vec!["pylsp".to_string()]
        );
        assert!(table.get("go").is_some());
        table
            .extend_from_json(r#"{"python": {"command": ["/bin/sh", "-c", "x"], "env": {"A": "b"}, "extensions": ["py"]}}"#)
            .unwrap();
        let spec = table.get("python").unwrap();
        assert_eq!(spec.env["A"], "b");
        let (program, args) = resolve("python", spec, None).unwrap();
        assert_eq!(program, PathBuf::from("/bin/sh"));
        assert_eq!(args, vec!["-c", "x"]);

        let err = table
            .extend_from_json(r#"{"zig": {"cmd": ["zls"]}}"#)
            .unwrap_err();
        assert!(err.contains("CODE_AGENT_LSP_SERVERS.zig"), "{err}");
        let err = table.extend_from_json(r#"{"zig": {}}"#).unwrap_err();
        assert!(err.contains("`command`"), "{err}");
        let err = resolve(
            "rust",
            table.get("rust").unwrap(),
            Some(std::ffi::OsStr::new("/nonexistent")),
        )
        .unwrap_err();
        assert!(err.contains("rust-analyzer"), "{err}");
    }
}
