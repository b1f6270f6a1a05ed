//! The environment variables the standalone `code-agent` binary read before
//! `code-agent serve` had one definition (`CODE_AGENT_*`, `RUST_LOG`),
//! accepted as hidden aliases: a former variable counts only when its
//! canonical one is unset, and `--help` names it only then.

use clap::Command;

/// The former name of the bearer token's variable.
pub const FORMER_AUTH_TOKEN_ENV: &str = "CODE_AGENT_AUTH_TOKEN";

/// (argument of [`super::ServeArgs`], canonical variable, former variable).
const FORMER: &[(&str, &str, &str)] = &[
    (
        "listen",
        "AGENT_RUNNER_CODE_AGENT_LISTEN",
        "CODE_AGENT_LISTEN",
    ),
    (
        "auth_token_file",
        "AGENT_RUNNER_CODE_AGENT_AUTH_TOKEN_FILE",
        "CODE_AGENT_AUTH_TOKEN_FILE",
    ),
    (
        "tls_cert",
        "AGENT_RUNNER_CODE_AGENT_TLS_CERT",
        "CODE_AGENT_TLS_CERT",
    ),
    (
        "tls_key",
        "AGENT_RUNNER_CODE_AGENT_TLS_KEY",
        "CODE_AGENT_TLS_KEY",
    ),
    (
        "workspace_root",
        "AGENT_RUNNER_CODE_AGENT_WORKSPACE_ROOT",
        "CODE_AGENT_WORKSPACE_ROOT",
    ),
    (
        "state_dir",
        "AGENT_RUNNER_CODE_AGENT_STATE_DIR",
        "CODE_AGENT_STATE_DIR",
    ),
    (
        "workspace",
        "AGENT_RUNNER_CODE_AGENT_WORKSPACE",
        "CODE_AGENT_WORKSPACE",
    ),
    (
        "sandbox",
        "AGENT_RUNNER_CODE_AGENT_SANDBOX",
        "CODE_AGENT_SANDBOX",
    ),
    (
        "cron_utc_offset",
        "AGENT_RUNNER_CODE_AGENT_CRON_UTC_OFFSET",
        "CODE_AGENT_CRON_UTC_OFFSET",
    ),
    ("log_level", "AGENT_RUNNER_LOG_LEVEL", "RUST_LOG"),
];

/// `command` (a `serve` command with [`super::ServeArgs`]' arguments)
/// reading each argument's former variable when only that one is set.
pub fn accept_former_env(command: Command) -> Command {
    accept_former_env_with(command, |name| std::env::var_os(name).is_some())
}

/// [`accept_former_env`] with `is_set` saying which variables are set.
fn accept_former_env_with(command: Command, is_set: impl Fn(&str) -> bool) -> Command {
    command.mut_args(|arg| {
        let former = FORMER
            .iter()
            .find(|(id, ..)| arg.get_id().as_str() == *id)
            .filter(|(_, canonical, former)| !is_set(canonical) && is_set(former));
        match former {
            Some((_, _, former)) => arg.env(*former),
            None => arg,
        }
    })
}

/// The variable the bearer token is read from: `canonical`, or its former
/// name when only that one is set.
pub(super) fn token_env(canonical: &'static str) -> &'static str {
    let set = |name: &str| std::env::var_os(name).is_some();
    if !set(canonical) && set(FORMER_AUTH_TOKEN_ENV) {
        FORMER_AUTH_TOKEN_ENV
    } else {
        canonical
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args, CommandFactory, FromArgMatches, Parser};

    use super::*;
    use crate::serve::ServeArgs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// Every alias names an argument `ServeArgs` has, under its canonical
    /// variable.
    #[test]
    fn the_aliases_name_real_arguments() {
        let command = ServeArgs::augment_args(Command::new("serve"));
        for (id, canonical, _) in FORMER {
            let arg = command
                .get_arguments()
                .find(|a| a.get_id().as_str() == *id)
                .unwrap_or_else(|| panic!("no argument {id}"));
            assert_eq!(arg.get_env().unwrap(), *canonical, "{id}");
        }
    }

    #[test]
    fn a_former_variable_counts_only_without_the_canonical_one() {
        let only_former = |name: &str| name == "CODE_AGENT_LISTEN";
        let command = accept_former_env_with(Cli::command(), only_former);
        let listen = command
            .get_arguments()
            .find(|a| a.get_id().as_str() == "listen")
            .unwrap();
        assert_eq!(listen.get_env().unwrap(), "CODE_AGENT_LISTEN");

        let both = |name: &str| name.ends_with("_LISTEN");
        let command = accept_former_env_with(Cli::command(), both);
        let listen = command
            .get_arguments()
            .find(|a| a.get_id().as_str() == "listen")
            .unwrap();
        assert_eq!(listen.get_env().unwrap(), "AGENT_RUNNER_CODE_AGENT_LISTEN");
        // The command still parses into ServeArgs.
        let matches = command.try_get_matches_from(["serve"]).unwrap();
        assert!(Cli::from_arg_matches(&matches).is_ok());
    }
}
