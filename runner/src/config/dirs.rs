//! The directories the runner writes (`state_dir`, `workspace_root`),
//! checked at start-up: made if missing, then written to once. A root the
//! runner cannot write would otherwise fail every request later, far from
//! the setting that caused it. `run` and `doctor` share the check.

use super::*;

/// Makes `dir` (the setting `key`) if it is missing and checks the runner
/// can create files in it; the error names the setting and the path.
pub fn check_writable_dir(key: &'static str, dir: &Path) -> Result<(), ConfigError> {
    let err = |message: String| ConfigError::Dir {
        key: key.to_owned(),
        path: dir.to_owned(),
        message,
    };
    std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create it: {e}")))?;
    let probe = dir.join(format!(".agent-runner-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| {
        err(format!(
            "not writable by the runner's user: {e} (make it writable: chown/chmod, or set {key} elsewhere)"
        ))
    })?;
    // Only a probe: a leftover is harmless.
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

impl RunConfig {
    /// Checks the directories the runner writes ([`check_writable_dir`]);
    /// the error also says where the setting came from.
    pub fn check_dirs(&self, sources: &Sources) -> Result<(), ConfigError> {
        check_writable_dir("state_dir", &self.state_dir).map_err(|e| sources.locate(e))?;
        check_writable_dir("workspace_root", &self.workspace_root).map_err(|e| sources.locate(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_when_missing_and_written_to() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("a/b");
        check_writable_dir("workspace_root", &ws).unwrap();
        assert!(ws.is_dir());
        assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0, "no probe left");
    }

    #[test]
    fn a_file_in_the_way_or_a_read_only_dir_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ws");
        std::fs::write(&file, "not a dir").unwrap();
        let err = check_writable_dir("workspace_root", &file)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!(
                "workspace_root {}: cannot create it",
                file.display()
            )),
            "{err}"
        );

        // Root writes anywhere: the permission half needs another user.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return;
        }
        use std::os::unix::fs::PermissionsExt as _;
        let read_only = dir.path().join("ro");
        std::fs::create_dir(&read_only).unwrap();
        std::fs::set_permissions(&read_only, std::fs::Permissions::from_mode(0o555)).unwrap();
        let err = check_writable_dir("state_dir", &read_only)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("state_dir {}: not writable", read_only.display())),
            "{err}"
        );
        assert!(err.contains("Permission denied"), "{err}");
    }

    #[test]
    fn the_error_says_where_the_setting_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ws");
        std::fs::write(&file, "").unwrap();
        let args = RunArgs {
            control_plane_url: Some("http://x:1".into()),
            state_dir: Some(dir.path().join("state")),
            workspace_root: Some(file.clone()),
            ..Default::default()
        };
        let (config, sources) = RunConfig::resolve_sourced(args, None, None).unwrap();
        let err = config.check_dirs(&sources).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("workspace_root {}", file.display())),
            "{err}"
        );
        assert!(err.ends_with("(from flag --workspace-root)"), "{err}");
    }
}
