//! Finding an agent CLI without running it: `describe()` must answer fast
//! when the binary is simply not installed.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where `program` would be found: itself when it contains a `/`, else the
/// first executable file of that name on `PATH`. `None` when there is none.
pub fn find_program(program: &Path) -> Option<PathBuf> {
    if program.as_os_str().is_empty() {
        return None;
    }
    if program.components().count() > 1 || program.is_absolute() {
        return is_executable(program).then(|| program.to_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// `program` for messages: as configured.
pub(crate) fn display(program: &OsStr) -> String {
    program.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sh_on_path_and_not_a_made_up_name() {
        assert!(find_program(Path::new("sh")).is_some());
        assert!(find_program(Path::new("surely-no-such-agent-cli-xyz")).is_none());
        assert!(find_program(Path::new("/nonexistent/dir/codex")).is_none());
        assert!(find_program(Path::new("")).is_none());
    }
}
