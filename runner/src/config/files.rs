//! Which settings name files or directories, and which of those agents
//! must never read: one table ([`file_settings`]), from which the agent
//! sandbox's protected paths are derived (`host::sandbox::protected_paths`
//! takes [`RunConfig::hidden_files`]).
//!
//! It exists so a new file setting cannot be forgotten: the tests hold the
//! table against every setting clap parses into a `PathBuf`, so a setting
//! added without a line here (hidden, or not secret and why) fails them.

use super::*;

/// Whether agents may see what a file-valued setting names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Never: the sandbox cuts it out of everything agents may read (a
    /// secret, or a directory holding secrets).
    Hidden,
    /// Not secret; why agents may (or must) see it.
    NotSecret(&'static str),
}

/// Every file-valued setting of `run`: its key, whether agents may see it,
/// and the paths `s` gives it (none when not given).
pub fn file_settings(s: &RunArgs) -> Vec<(&'static str, Exposure, Vec<PathBuf>)> {
    use Exposure::{Hidden, NotSecret};
    let one = |p: &Option<PathBuf>| p.iter().cloned().collect::<Vec<_>>();
    let sdks = &s.external_sdks;
    let engine = &s.code_agent;
    vec![
        ("config", Hidden, one(&s.config)),
        (
            "ca_cert",
            NotSecret("a CA certificate is public"),
            one(&s.ca_cert),
        ),
        ("secret_file", Hidden, one(&s.secret_file)),
        ("state_dir", Hidden, one(&s.state_dir)),
        (
            "workspace_root",
            NotSecret("each thread sees its own workspace and HOME under it, nothing else"),
            one(&s.workspace_root),
        ),
        (
            "skill_local_dir",
            NotSecret("the control plane may install any package in it into a thread"),
            s.skills.skill_local_dir.clone(),
        ),
        (
            "codex_bin",
            NotSecret("a program agents run"),
            one(&sdks.codex_bin),
        ),
        (
            "claude_bin",
            NotSecret("a program agents run"),
            one(&sdks.claude_bin),
        ),
        (
            "code_agent_state_dir",
            Hidden,
            one(&engine.code_agent_state_dir),
        ),
        (
            "code_agent_auth_token_file",
            Hidden,
            one(&engine.code_agent_auth_token_file),
        ),
        (
            "code_agent_ca_cert",
            NotSecret("a CA certificate is public"),
            one(&engine.code_agent_ca_cert),
        ),
        (
            "github_app_private_key_file",
            Hidden,
            one(&s.github.github_app_private_key_file),
        ),
        (
            "sandbox_read_only",
            NotSecret("what the operator gives agents to read"),
            s.sandbox.sandbox_read_only.clone(),
        ),
        ("sandbox_protect", Hidden, s.sandbox.sandbox_protect.clone()),
    ]
}

/// The paths of every [`Exposure::Hidden`] setting `s` gives.
pub(super) fn hidden(s: &RunArgs) -> Vec<PathBuf> {
    file_settings(s)
        .into_iter()
        .filter(|(_, exposure, _)| *exposure == Exposure::Hidden)
        .flat_map(|(_, _, paths)| paths)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::any::TypeId;

    use clap::FromArgMatches;

    use super::*;

    /// The keys of every setting clap parses into a `PathBuf`.
    fn path_valued() -> Vec<String> {
        defs::command()
            .get_arguments()
            .filter(|a| a.get_value_parser().type_id() == TypeId::of::<PathBuf>())
            .map(|a| a.get_id().as_str().to_owned())
            .collect()
    }

    /// Every file-valued setting is in the table, once, and nothing else
    /// is: a new one must be classified here before the tests pass.
    #[test]
    fn every_file_setting_is_classified() {
        let mut table: Vec<String> = file_settings(&RunArgs::default())
            .into_iter()
            .map(|(key, _, _)| key.to_owned())
            .collect();
        let mut clap = path_valued();
        assert!(clap.len() >= 10, "{clap:?}");
        table.sort();
        clap.sort();
        let unique = table.len();
        table.dedup();
        assert_eq!(table.len(), unique, "a key is in the table twice");
        assert_eq!(table, clap, "the table and the PathBuf settings differ");
    }

    /// Each line reads its own setting: given every file setting on the
    /// command line (`/given/<key>`), each line has its own path, and the
    /// hidden paths are exactly those of the hidden settings, the secrets
    /// among them.
    #[test]
    fn each_line_reads_its_own_setting_and_secrets_are_hidden() {
        let keys = path_valued();
        let defs = defs::definitions();
        let argv: Vec<String> = keys
            .iter()
            .map(|key| {
                let def = defs.iter().find(|d| &d.key == key).unwrap();
                format!("--{}=/given/{key}", def.long)
            })
            .collect();
        let matches = file::file_command().try_get_matches_from(argv).unwrap();
        let args = RunArgs::from_arg_matches(&matches).unwrap();
        let table = file_settings(&args);
        for (key, _, paths) in &table {
            assert_eq!(paths, &[PathBuf::from(format!("/given/{key}"))], "{key}");
        }
        let hidden = hidden(&args);
        for (key, exposure, _) in &table {
            let path = PathBuf::from(format!("/given/{key}"));
            assert_eq!(
                hidden.contains(&path),
                *exposure == Exposure::Hidden,
                "{key}"
            );
        }
        for secret in [
            "config",
            "secret_file",
            "state_dir",
            "code_agent_state_dir",
            "code_agent_auth_token_file",
            "github_app_private_key_file",
            "sandbox_protect",
        ] {
            assert!(
                hidden.contains(&PathBuf::from(format!("/given/{secret}"))),
                "{secret}"
            );
        }
    }
}
