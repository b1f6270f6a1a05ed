//! The table of settings, read back from their one definition (the clap
//! flags of [`RunArgs`]): key, flag, variable, list or not, section, help
//! and default. The config file's keys, `doctor`'s sources and
//! docs/configuration.md all come from here.

use clap::{ArgAction, Command};

use super::*;

/// One setting, as defined by its flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    /// The TOML key and clap id (`drain_timeout`).
    pub key: String,
    /// The flag without its dashes (`drain-timeout`).
    pub long: String,
    /// The environment variable (`AGENT_RUNNER_DRAIN_TIMEOUT`).
    pub env: String,
    /// What the flag's value is called in `--help` (`DUR`).
    pub value_name: String,
    /// Repeatable flag, comma-separated variable, TOML array.
    pub list: bool,
    /// The section (`--help` heading).
    pub heading: String,
    /// The help without its `Default: …` sentence, one line.
    pub help: String,
    /// The `Default: …` sentence's text, without the final period.
    pub default: Option<String>,
}

impl Definition {
    /// The TOML key, or `None` for the one setting that is not a key
    /// (`config`, the file itself).
    pub fn toml_key(&self) -> Option<&str> {
        (self.key != "config").then_some(self.key.as_str())
    }
}

/// The flags of `run` on a bare command, as clap builds them.
pub(super) fn command() -> Command {
    RunArgs::augment_args(Command::new("agent-runner run"))
}

/// Every setting of `run`, in `--help` order.
pub fn definitions() -> Vec<Definition> {
    command()
        .get_arguments()
        .filter(|a| a.get_long().is_some())
        .map(|arg| {
            let text = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let (help, default) = split_default(&text);
            let key = arg.get_id().as_str().to_owned();
            Definition {
                long: arg.get_long().unwrap_or_default().to_owned(),
                env: arg
                    .get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                value_name: arg
                    .get_value_names()
                    .and_then(|names| names.first())
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| key.to_uppercase()),
                list: matches!(arg.get_action(), ArgAction::Append),
                heading: arg.get_help_heading().unwrap_or("Other").to_owned(),
                key,
                help,
                default,
            }
        })
        .collect()
}

/// `… Default: 30s.` → (`…`, `30s`): the last `Default: ` runs to the end
/// of its paragraph; paragraphs are joined into one line.
fn split_default(text: &str) -> (String, Option<String>) {
    let mut help = Vec::new();
    let mut default = None;
    for paragraph in text.split("\n\n") {
        let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
        match paragraph.rsplit_once("Default: ") {
            Some((before, after)) => {
                help.push(before.trim().to_owned());
                default = Some(after.trim().trim_end_matches('.').to_owned());
            }
            None => help.push(paragraph),
        }
    }
    let mut help = help
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if !help.is_empty() && !help.ends_with(['.', ')', ':']) {
        help.push('.');
    }
    (help, default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_sentence_is_split_off() {
        assert_eq!(
            split_default("How long. Default: `30s`"),
            ("How long.".to_owned(), Some("`30s`".to_owned()))
        );
        assert_eq!(
            split_default("One.\n\nTwo, and more. Default: none: the engine."),
            (
                "One. Two, and more.".to_owned(),
                Some("none: the engine".to_owned())
            )
        );
        assert_eq!(
            split_default("No default"),
            ("No default.".to_owned(), None)
        );
    }

    /// One definition, one spelling: the TOML key is the flag with `_`, the
    /// variable is `AGENT_RUNNER_` and the key in capitals; every setting
    /// has a section, a help and a documented default.
    #[test]
    fn names_follow_from_the_key() {
        let defs = definitions();
        assert!(defs.len() > 40, "{}", defs.len());
        for d in &defs {
            assert_eq!(d.long.replace('-', "_"), d.key, "{d:?}");
            assert_eq!(
                d.env,
                format!("AGENT_RUNNER_{}", d.key.to_uppercase()),
                "{d:?}"
            );
            assert_ne!(d.heading, "Other", "{d:?}");
            assert!(!d.help.is_empty(), "{d:?}");
            assert!(d.default.is_some(), "no `Default: …` sentence: {d:?}");
        }
        let keys: Vec<&str> = defs.iter().map(|d| d.key.as_str()).collect();
        for key in ["control_plane_url", "sdk", "github_app_id", "sandbox_env"] {
            assert!(keys.contains(&key), "{key}");
        }
        assert!(defs.iter().find(|d| d.key == "sdk").is_some_and(|d| d.list));
    }
}
