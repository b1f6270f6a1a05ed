//! The optional TOML file named by `--config`: the same settings as the
//! flags, every key optional, each key the flag's name with `_`.
//!
//! Every value goes through its flag's own parser (a file's `drain_timeout
//! = "3x"` fails exactly as `--drain-timeout 3x` would), so the file has no
//! definitions of its own. An unknown key is an error, with the closest
//! known key suggested.

use clap::error::{ContextKind, ContextValue};
use clap::{ColorChoice, Command, FromArgMatches};

use super::defs::definitions;
use super::*;

/// What the config file gave (nothing without one).
#[derive(Debug, Default)]
pub(super) struct FileLayer {
    /// The file, if any.
    pub(super) path: Option<PathBuf>,
    /// Its settings, parsed.
    pub(super) args: RunArgs,
    /// Each key's value as written (list items joined with `,`).
    texts: Vec<(String, String)>,
}

impl FileLayer {
    /// The file at `path`, or nothing.
    pub(super) fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        match path {
            Some(path) => load_file(path),
            None => Ok(Self::default()),
        }
    }

    /// The value of `key` as written in the file.
    pub(super) fn text(&self, key: &str) -> Option<&str> {
        self.texts
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The flags of `run` without their variables and list delimiters: what
/// parses one key of the file.
pub(super) fn file_command() -> Command {
    defs::command()
        .no_binary_name(true)
        .color(ColorChoice::Never)
        .disable_help_flag(true)
        .mut_args(|arg| arg.env(None::<&'static str>).value_delimiter(None::<char>))
}

pub(super) fn load_file(path: &Path) -> Result<FileLayer, ConfigError> {
    let file_error = |message: String| ConfigError::File {
        path: path.to_owned(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
    // toml's message names the line.
    let table: toml::Table = text.parse().map_err(|e| file_error(format!("{e}")))?;
    let defs = definitions();
    let keys: Vec<&str> = defs.iter().filter_map(|d| d.toml_key()).collect();
    let mut command = file_command();
    let mut layer = FileLayer {
        path: Some(path.to_owned()),
        ..FileLayer::default()
    };
    for (key, value) in &table {
        let Some(def) = defs.iter().find(|d| d.toml_key() == Some(key.as_str())) else {
            return Err(file_error(unknown_key(key, &keys)));
        };
        let located = |message: String| ConfigError::Located {
            error: Box::new(ConfigError::Key {
                key: key.clone(),
                message,
            }),
            origin: Source::File(path.to_owned()).origin().unwrap_or_default(),
        };
        let items = items(value, def.list).map_err(located)?;
        let argv = items.iter().map(|v| format!("--{}={v}", def.long));
        let matches = command
            .try_get_matches_from_mut(argv)
            .map_err(|e| located(reason(&e)))?;
        layer
            .args
            .update_from_arg_matches(&matches)
            .map_err(|e| located(reason(&e)))?;
        layer.texts.push((key.clone(), items.join(",")));
    }
    Ok(layer)
}

/// A TOML value as the flag's values: an array for a list, else one
/// string, number or boolean.
fn items(value: &toml::Value, list: bool) -> Result<Vec<String>, String> {
    let scalar = |value: &toml::Value| match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Datetime(d) => Ok(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => Err(format!(
            "expected a single value, found {}",
            value.type_str()
        )),
    };
    match (value, list) {
        (toml::Value::Array(values), true) => values.iter().map(scalar).collect(),
        (_, true) => Err(format!(
            "expected an array (`key = [\"a\", \"b\"]`), found {}",
            value.type_str()
        )),
        (_, false) => scalar(value).map(|v| vec![v]),
    }
}

/// What clap says is wrong with a value, without its usage lines: the
/// parser's own message, or the values allowed.
fn reason(error: &clap::Error) -> String {
    let value = match error.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(v)) => format!("invalid value {v:?}"),
        _ => "invalid value".to_owned(),
    };
    if let Some(source) = std::error::Error::source(error) {
        return format!("{value}: {source}");
    }
    if let Some(ContextValue::Strings(valid)) = error.get(ContextKind::ValidValue) {
        return format!("{value} (possible values: {})", valid.join(", "));
    }
    let rendered = error.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    first.trim_start_matches("error: ").to_owned()
}

/// "unknown key `drain_timout`", followed by the closest known key when
/// one is close enough to be a typo.
fn unknown_key(unknown: &str, known: &[&str]) -> String {
    let message = format!("unknown key `{unknown}`");
    match crate::util::closest::closest(unknown, known) {
        Some(known) => format!("{message}\ndid you mean `{known}`?"),
        None => format!("{message} (every key: docs/configuration.md)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<FileLayer, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runner.toml");
        std::fs::write(&path, text).unwrap();
        load_file(&path).map_err(|e| e.to_string())
    }

    fn parse_error(text: &str) -> String {
        match load_text(text) {
            Err(e) => e,
            Ok(_) => panic!("{text:?} parsed"),
        }
    }

    #[test]
    fn a_misspelt_key_gets_a_suggestion() {
        let err = parse_error("drain_timout = \"3s\"\n");
        assert!(err.contains("unknown key `drain_timout`"), "{err}");
        assert!(err.ends_with("did you mean `drain_timeout`?"), "{err}");
        let err = parse_error("statedir = \"/x\"\n");
        assert!(err.ends_with("did you mean `state_dir`?"), "{err}");
    }

    #[test]
    fn a_key_like_nothing_known_gets_no_guess() {
        let err = parse_error("colour = \"blue\"\n");
        assert!(err.contains("unknown key `colour`"), "{err}");
        assert!(!err.contains("did you mean"), "{err}");
        // The file does not name itself.
        let err = parse_error("config = \"/etc/other.toml\"\n");
        assert!(err.contains("unknown key `config`"), "{err}");
    }

    #[test]
    fn values_go_through_the_flags_parsers() {
        let layer = load_text(
            "drain_timeout = \"3s\"\nmax_concurrent_turns = 7\nsdk = [\"a,b\", \"c\"]\nlog_format = \"json\"\nhealth_addr = \"\"\n",
        )
        .unwrap();
        assert_eq!(layer.args.drain_timeout, Some(Duration::from_secs(3)));
        assert_eq!(layer.args.max_concurrent_turns, Some(7));
        // No splitting at commas in the file: an array is the list.
        assert_eq!(layer.args.sdk, ["a,b", "c"]);
        assert_eq!(layer.args.log_format, Some(LogFormat::Json));
        assert_eq!(layer.args.health_addr.as_deref(), Some(""));
        assert_eq!(layer.text("sdk"), Some("a,b,c"));
        assert_eq!(layer.text("max_concurrent_turns"), Some("7"));
    }

    #[test]
    fn a_bad_value_names_key_value_and_file() {
        for (text, key, why) in [
            (
                "drain_timeout = \"3x\"\n",
                "drain_timeout",
                "examples: 500ms",
            ),
            (
                "max_concurrent_turns = \"many\"\n",
                "max_concurrent_turns",
                "invalid digit",
            ),
            (
                "max_concurrent_turns = -1\n",
                "max_concurrent_turns",
                "invalid digit",
            ),
            (
                "log_format = \"yaml\"\n",
                "log_format",
                "possible values: text, json",
            ),
            ("sdk = \"codex\"\n", "sdk", "expected an array"),
            (
                "state_dir = [\"/a\"]\n",
                "state_dir",
                "expected a single value",
            ),
        ] {
            let err = parse_error(text);
            assert!(err.starts_with(&format!("{key}: ")), "{err}");
            assert!(err.contains(why), "{err}");
            assert!(err.contains("(in /"), "{err}");
            assert!(err.contains("runner.toml)"), "{err}");
        }
        let err = parse_error("drain_timeout = \n");
        assert!(err.starts_with("config file "), "{err}");
    }
}
