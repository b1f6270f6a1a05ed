//! Installing a pinned tool from a package registry once into the target
//! directory, for the suites that run real third-party programs (codex from
//! npm, the Python MCP SDK and pylsp from PyPI). One mechanism for all:
//! a lock file serialises installers across the threads of one test binary
//! and across processes (two installers writing the same files can leave a
//! program open for writing, and running it then fails with ETXTBSY); the
//! install goes into a staging directory renamed into place, so a half-done
//! install is never taken for a complete one.

use std::path::{Path, PathBuf};

/// `<target>/<kind>/<version>`, the target directory found from the running
/// binary: a test (`<target>/<profile>/deps/<test>-…`) or a binary of the
/// workspace such as the benchmark (`<target>/<profile>/<name>`).
pub fn target_cache(kind: &str, version: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let mut profile = exe.parent()?;
    if profile.file_name().is_some_and(|name| name == "deps") {
        profile = profile.parent()?;
    }
    Some(profile.parent()?.join(kind).join(version))
}

/// `npm install PACKAGE@VERSION` once into `<target>/<kind>/<version>`
/// ([`install_once`]), complete when `ready(dir)`; the cache directory.
/// `Err` says why it cannot be had (no npm, the install failed).
pub fn npm_install_once(
    kind: &str,
    package: &str,
    version: &str,
    ready: impl Fn(&Path) -> bool,
) -> Result<PathBuf, String> {
    let npm_ok = std::process::Command::new("npm")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !npm_ok {
        return Err("npm is not installed".into());
    }
    let cache = target_cache(kind, version).ok_or("cannot locate the target directory")?;
    install_once(&cache, ready, |staging| {
        let output = std::process::Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(staging)
            .arg(format!("{package}@{version}"))
            .output()
            .map_err(|e| format!("running npm: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "npm install {package}@{version} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    })?;
    Ok(cache)
}

/// Makes `cache` hold a complete install: nothing to do when `ready(cache)`;
/// otherwise, under `<cache>.lock`, checks again, runs `install(staging)`
/// into a fresh directory beside `cache` and renames it into place. `Err`
/// says why (the installer's own message, or the file system's).
pub fn install_once(
    cache: &Path,
    ready: impl Fn(&Path) -> bool,
    install: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), String> {
    if ready(cache) {
        return Ok(());
    }
    let (Some(parent), Some(name)) = (cache.parent(), cache.file_name()) else {
        return Err(format!("{} is not a cache directory", cache.display()));
    };
    std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let name = name.to_string_lossy();
    let lock = std::fs::File::create(parent.join(format!("{name}.lock")))
        .map_err(|e| format!("creating the install lock: {e}"))?;
    // Released when `lock` is dropped.
    lock.lock()
        .map_err(|e| format!("taking the install lock: {e}"))?;
    if ready(cache) {
        return Ok(());
    }
    let staging = parent.join(format!("{name}.staging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    if let Err(why) = install(&staging) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(why);
    }
    // A cache left incomplete by an older run is replaced.
    let _ = std::fs::remove_dir_all(cache);
    std::fs::rename(&staging, cache).map_err(|e| {
        let _ = std::fs::remove_dir_all(&staging);
        format!("moving the install into {}: {e}", cache.display())
    })?;
    if ready(cache) {
        Ok(())
    } else {
        Err(format!(
            "{} is incomplete after installing",
            cache.display()
        ))
    }
}

/// The real Python interpreter (not a version-manager shim, which would
/// need more than a sandbox gives) and its installation prefix (for a
/// sandbox's read-only list). `Err` says why python3 cannot be used.
pub fn python() -> Result<(PathBuf, PathBuf), String> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys; print(sys.executable); print(sys.base_prefix)",
        ])
        .output()
        .map_err(|e| format!("python3 is not installed: {e}"))?;
    if !out.status.success() {
        return Err("python3 does not run".into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(exe), Some(prefix)) => Ok((PathBuf::from(exe.trim()), PathBuf::from(prefix.trim()))),
        _ => Err(format!(
            "python3 printed no executable and prefix: {text:?}"
        )),
    }
}

/// `pip install --target` of `requirement` with the real python3 into
/// `<target>/<kind>/<version>`, once ([`install_once`]); `ready` says when
/// the cache holds it. Returns the cache directory (for `PYTHONPATH`).
pub fn pip_install(
    kind: &str,
    version: &str,
    requirement: &str,
    ready: impl Fn(&Path) -> bool,
) -> Result<PathBuf, String> {
    let cache = target_cache(kind, version).ok_or("cannot locate the target directory")?;
    let (python, _) = python()?;
    install_once(&cache, ready, |staging| {
        let output = std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-warn-conflicts",
                "--target",
            ])
            .arg(staging)
            .arg(requirement)
            .output()
            .map_err(|e| format!("running pip: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pip install {requirement} failed (PyPI unreachable?): {}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    })?;
    Ok(cache)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn threads_racing_install_once_and_a_failure_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("tool/1.0");
        let ready = |c: &Path| c.join("bin").is_file();
        let installs = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    install_once(&cache, ready, |staging| {
                        installs.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        std::fs::create_dir_all(staging).map_err(|e| e.to_string())?;
                        std::fs::write(staging.join("bin"), "x").map_err(|e| e.to_string())
                    })
                    .unwrap();
                });
            }
        });
        assert_eq!(installs.load(Ordering::SeqCst), 1);

        let other = dir.path().join("tool/2.0");
        let err = install_once(&other, ready, |staging| {
            std::fs::create_dir_all(staging).unwrap();
            Err("registry unreachable".into())
        })
        .unwrap_err();
        assert_eq!(err, "registry unreachable");
        assert!(!other.exists());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("tool"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("staging"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
