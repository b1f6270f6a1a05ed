//! Parsing the command line, with errors that say where a bad value came
//! from.
//!
//! clap reads each setting from its flag or, failing that, from its
//! `AGENT_RUNNER_*` environment variable, but reports a bad value from
//! either as a bad flag (`invalid value 'abc' for '--drain-timeout'`): a
//! user who never typed that flag looks for it in vain. When the flag is not
//! on the command line and its variable is set, the error names the
//! variable instead.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser};

use super::Cli;

/// The parsed command line; on a usage error, prints it and exits 2 (as
/// clap does), naming the environment variable when the value came from one.
pub fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let argv: Vec<String> = std::env::args().collect();
            match from_env(&err, &argv, |name| std::env::var_os(name).is_some()) {
                Some(message) => {
                    eprintln!("error: {message}\n\nFor more information, try '--help'.");
                    std::process::exit(2);
                }
                None => err.exit(),
            }
        }
    }
}

/// The message for a bad value that came from an environment variable, or
/// `None` when the error is about something else or the flag was typed.
fn from_env(err: &clap::Error, argv: &[String], env_set: impl Fn(&str) -> bool) -> Option<String> {
    if !matches!(
        err.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    // "--drain-timeout <DRAIN_TIMEOUT>"
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let flag = format!("--{long}");
    if argv
        .iter()
        .any(|a| *a == flag || a.starts_with(&format!("{flag}=")))
    {
        return None;
    }
    let env = env_name(&Cli::command(), long)?;
    if !env_set(&env) {
        return None;
    }
    let value = match err.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(v)) => v.clone(),
        _ => String::new(),
    };
    // clap's first line ends with the parser's own reason after "': ".
    let rendered = err.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    let reason = first
        .split_once("': ")
        .map(|(_, reason)| reason.to_owned())
        .unwrap_or_default();
    Some(format!(
        "invalid value {value:?} in the environment variable {env} (the setting {flag}){}{reason}",
        if reason.is_empty() { "" } else { ": " }
    ))
}

/// The environment variable of the flag `--long`, in any subcommand.
fn env_name(cmd: &clap::Command, long: &str) -> Option<String> {
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .or_else(|| cmd.get_subcommands().find_map(|sub| env_name(sub, long)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(args: &[&str]) -> clap::Error {
        match Cli::try_parse_from(args) {
            Ok(_) => panic!("{args:?} parsed"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_bad_value_from_the_environment_names_the_variable() {
        // clap reads the variable itself; here the value is on the command
        // line (as clap sees it) but not in argv as the user typed it.
        let err = error(&["agent-runner", "run", "--drain-timeout", "abc"]);
        let argv = ["agent-runner".to_owned(), "run".to_owned()];
        let message = from_env(&err, &argv, |name| name == "AGENT_RUNNER_DRAIN_TIMEOUT")
            .expect("named as an environment variable");
        assert!(
            message.starts_with(
                "invalid value \"abc\" in the environment variable AGENT_RUNNER_DRAIN_TIMEOUT (the setting --drain-timeout): "
            ),
            "{message}"
        );
        assert!(message.contains("examples: 500ms"), "{message}");
    }

    #[test]
    fn a_typed_flag_stays_a_flag() {
        let err = error(&["agent-runner", "run", "--drain-timeout", "abc"]);
        let argv: Vec<String> = ["agent-runner", "run", "--drain-timeout", "abc"]
            .map(String::from)
            .to_vec();
        assert_eq!(from_env(&err, &argv, |_| true), None);
        let argv: Vec<String> = ["agent-runner", "run", "--drain-timeout=abc"]
            .map(String::from)
            .to_vec();
        assert_eq!(from_env(&err, &argv, |_| true), None);
        // Not a value error at all.
        let err = error(&["agent-runner", "run", "--no-such-flag"]);
        assert_eq!(from_env(&err, &[], |_| true), None);
    }
}
