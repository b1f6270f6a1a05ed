//! Programs installed outside the system directories run under the
//! sandbox: a CLI installed by npm in an nvm-like prefix (a bin symlink
//! into `lib/node_modules`, `#!/usr/bin/env node`, a node of the prefix's
//! own) gets its installation opened for its launch, through both ways to
//! start a process; one whose installation may not be opened (inside a
//! protected path) fails with an error naming the path and the setting.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(test)]
mod support;

use std::io::Read as _;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use agent_launcher::{Launch, Mode};
use support::{Tree, landlock_abi, run};

fn executable(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `<root>/nvm/versions/node/v20` with a node of its own (a hard link to,
/// or a copy of, the system's: a path outside `/usr` either way) and a
/// `tool` package that loads a module of its own. `None` without node.
fn nvm_prefix(root: &Path) -> Option<PathBuf> {
    let node = std::fs::canonicalize("/usr/bin/node").ok()?;
    let prefix = root.join("nvm/versions/node/v20");
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    if std::fs::hard_link(&node, prefix.join("bin/node")).is_err() {
        std::fs::copy(&node, prefix.join("bin/node")).unwrap();
    }
    let package = prefix.join("lib/node_modules/tool");
    executable(
        &package.join("bin/tool.js"),
        "#!/usr/bin/env node\nconsole.log(require('../lib/word.js'));\n",
    );
    std::fs::create_dir_all(package.join("lib")).unwrap();
    std::fs::write(
        package.join("lib/word.js"),
        "module.exports = 'from-nvm';\n",
    )
    .unwrap();
    symlink(
        "../lib/node_modules/tool/bin/tool.js",
        prefix.join("bin/tool"),
    )
    .unwrap();
    // What marks a whole node installation (nvm's has it).
    std::fs::create_dir_all(prefix.join("include/node")).unwrap();
    std::fs::write(prefix.join("include/node/node.h"), "").unwrap();
    Some(prefix)
}

#[tokio::test]
async fn an_nvm_installed_cli_runs_under_the_default_sandbox() {
    if landlock_abi().is_none() {
        test_kit::skip_this_test("Landlock unavailable on this kernel");
        return;
    }
    let tree = Tree::new();
    let Some(prefix) = nvm_prefix(&tree.path("outside").canonicalize().unwrap()) else {
        test_kit::skip_this_test("no node at /usr/bin/node");
        return;
    };
    let path_var = format!("{}:/usr/bin:/bin", prefix.join("bin").display());
    let launcher = tree.launcher(Mode::BestEffort);
    let a = launcher.thread(tree.spec("a")).unwrap();
    assert!(a.applied().landlocked(), "{}", a.applied());

    // The forking spawn, by name on the child's PATH.
    let mut cmd = tokio::process::Command::new("tool");
    cmd.env("PATH", &path_var);
    let out = run(&a, cmd).await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout, "from-nvm\n");
    // The node prefix, which holds the package's node_modules too.
    assert_eq!(out.applied.granted, std::slice::from_ref(&prefix));
    // What it was granted is for this launch only: a plain shell of the
    // thread still reads nothing of the prefix.
    let shell = support::sh(
        &a,
        &format!(
            "cat '{}'",
            prefix.join("lib/node_modules/tool/lib/word.js").display()
        ),
    )
    .await;
    assert!(!shell.ok, "{}", shell.stdout);

    // The direct launch, by path.
    let (mut reader, writer) = std::io::pipe().unwrap();
    let launch = Launch::new(prefix.join("bin/tool"))
        .envs([("PATH", path_var.as_str())])
        .stdout(writer);
    let (mut child, applied) = a.launch(launch).unwrap();
    assert!(!applied.granted.is_empty(), "{applied}");
    assert!(child.wait().await.unwrap().success());
    let mut text = String::new();
    reader.read_to_string(&mut text).unwrap();
    assert_eq!(text, "from-nvm\n");
}

#[tokio::test]
async fn a_program_the_sandbox_may_not_open_fails_naming_the_path_and_the_setting() {
    if landlock_abi().is_none() {
        test_kit::skip_this_test("Landlock unavailable on this kernel");
        return;
    }
    let tree = Tree::new();
    // Inside the protected state dir: never opened.
    executable(&tree.path("state/tools/tool"), "#!/bin/sh\necho ran\n");
    let tool = tree.path("state/tools/tool").canonicalize().unwrap();
    let launcher = tree.launcher(Mode::BestEffort);
    let a = launcher.thread(tree.spec("a")).unwrap();
    let mut cmd = tokio::process::Command::new(&tool);
    let err = a.spawn(&mut cmd).unwrap_err().to_string();
    assert!(err.contains(&tool.display().to_string()), "{err}");
    assert!(err.contains("--sandbox-read-only"), "{err}");
    assert!(err.contains("protected"), "{err}");
    let launch = Launch::new(&tool);
    let err = a.launch(launch).unwrap_err().to_string();
    assert!(err.contains(&tool.display().to_string()), "{err}");
    assert!(err.contains("--sandbox-read-only"), "{err}");

    // Without the sandbox the same tool runs: the refusal is the sandbox's.
    let off = tree.launcher(Mode::Off);
    let a_off = off.thread(tree.spec("a")).unwrap();
    let out = run(&a_off, tokio::process::Command::new(&tool)).await;
    assert!(out.ok && out.stdout == "ran\n", "{}", out.stderr);
}

/// `/usr/bin/python3`, real (not a link out of `/usr`), or `None`.
fn system_python() -> Option<PathBuf> {
    let python = std::fs::canonicalize("/usr/bin/python3").ok()?;
    python.starts_with("/usr").then_some(python)
}

/// A user's `~/.local` as the two Python installers that write it leave
/// it, under `home` (outside `/usr`, outside every thread):
/// - `pip install --user`: `bin/userword`, a script of the system python,
///   importing `userword` from `lib/python3.X/site-packages`;
/// - `uv tool install` (pipx alike): `bin/uvword`, a symlink to the script
///   of a venv of its own in `share/uv/tools/uvword`, which imports
///   `uvword` from that venv.
///
/// The launcher is given no read-only path for either.
fn dot_local(home: &Path, python: &Path) -> PathBuf {
    let local = home.join(".local");
    let version = std::process::Command::new(python)
        .args([
            "-c",
            "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')",
        ])
        .output()
        .unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let site = local.join(format!("lib/python{}/site-packages", version.trim()));
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("userword.py"), "WORD = 'from-pip-user'\n").unwrap();
    executable(
        &local.join("bin/userword"),
        &format!(
            "#!{}\nimport userword\nprint(userword.WORD)\n",
            python.display()
        ),
    );
    let venv = local.join("share/uv/tools/uvword");
    let made = std::process::Command::new(python)
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let venv_site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path()
        .join("site-packages");
    std::fs::write(venv_site.join("uvword.py"), "WORD = 'from-uv-tool'\n").unwrap();
    executable(
        &venv.join("bin/uvword"),
        &format!(
            "#!{}\nimport uvword\nprint(uvword.WORD)\n",
            venv.join("bin/python").display()
        ),
    );
    symlink(venv.join("bin/uvword"), local.join("bin/uvword")).unwrap();
    local
}

#[tokio::test]
async fn programs_in_a_users_local_bin_run_under_the_default_sandbox() {
    if landlock_abi().is_none() {
        test_kit::skip_this_test("Landlock unavailable on this kernel");
        return;
    }
    let Some(python) = system_python() else {
        test_kit::skip_this_test("no /usr/bin/python3");
        return;
    };
    let tree = Tree::new();
    let home = tree
        .path("outside")
        .canonicalize()
        .unwrap()
        .join("operator");
    let local = dot_local(&home, &python);
    let path_var = format!("{}:/usr/bin:/bin", local.join("bin").display());
    let launcher = tree.launcher(Mode::BestEffort);
    let a = launcher.thread(tree.spec("a")).unwrap();
    assert!(a.applied().landlocked(), "{}", a.applied());

    for (tool, word) in [("userword", "from-pip-user"), ("uvword", "from-uv-tool")] {
        let mut cmd = tokio::process::Command::new(tool);
        // pip's user scheme is found by its base (the thread's HOME is
        // its own), as an operator sets it for such tools.
        cmd.env("PATH", &path_var)
            .env("PYTHONUSERBASE", &local)
            .env_remove("PYTHONPATH");
        let out = run(&a, cmd).await;
        assert!(out.ok, "{tool}: {}", out.stderr);
        assert_eq!(out.stdout, format!("{word}\n"), "{tool}");
        // Only what the tool needs: never the user's whole HOME or `.local`.
        for granted in &out.applied.granted {
            assert!(
                granted != &home && granted != &local,
                "{tool} was granted {}",
                granted.display()
            );
        }
    }
    // What was granted is for those launches only: a plain shell of the
    // thread still reads nothing under `.local`.
    let shell = support::sh(
        &a,
        &format!(
            "cat '{}'",
            local.join("share/uv/tools/uvword/pyvenv.cfg").display()
        ),
    )
    .await;
    assert!(!shell.ok, "{}", shell.stdout);

    // Without those grants the sandbox refuses them: the test can fail.
    let mut cmd = tokio::process::Command::new("sh");
    cmd.args(["-c", "uvword"]).env("PATH", &path_var);
    let out = run(&a, cmd).await;
    assert!(!out.ok, "a shell's child got the grant: {}", out.stdout);
}
