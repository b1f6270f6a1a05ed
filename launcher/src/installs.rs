//! What a program the runner starts needs to read and execute besides the
//! system: its installation.
//!
//! A CLI installed by npm under nvm is a symlink
//! (`~/.nvm/versions/node/v20/bin/codex`) to a script in a package
//! (`../lib/node_modules/@openai/codex/bin/codex.js`) whose shebang asks
//! `env` for `node`, which lives in the node prefix, and the script starts a
//! native binary from a sibling package. A language or MCP server in a
//! Python venv is `.venv/bin/pylsp`, a script whose interpreter is
//! `.venv/bin/python`, a symlink to an interpreter elsewhere (pyvenv.cfg's
//! `home`). [`installation`] follows that chain from the program a launch
//! names and returns the roots to grant: the outermost `node_modules` a
//! file sits in, a venv's root, an interpreter's prefix (a whole node or
//! Python installation: npm's package, node's headers or the standard
//! library's `os.py` in it), else the file
//! itself. Only executable regular files are followed; the launcher decides
//! which roots it may grant (never one holding or inside a protected path,
//! `/`, or the runner's HOME or an ancestor of it).

use std::ffi::OsStr;
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// How many interpreters deep a shebang chain is followed.
const MAX_DEPTH: usize = 4;
/// How much of a file is read to find its shebang line.
const SHEBANG_MAX: usize = 256;

/// The installation of one program.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Installation {
    /// The executables the kernel opens for it, resolved: the program, then
    /// each interpreter of the chain.
    pub chain: Vec<PathBuf>,
    /// The directories (or files) to read and execute, canonical.
    pub roots: Vec<PathBuf>,
}

/// The program's path: as given when it names a path (relative to `cwd`),
/// else the first executable match on `path_var` (`/usr/bin:/bin` when
/// the child has no `PATH`).
pub(crate) fn lookup(program: &Path, path_var: Option<&OsStr>, cwd: &Path) -> Option<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Some(if program.is_absolute() {
            program.to_path_buf()
        } else {
            cwd.join(program)
        });
    }
    let path_var = path_var.unwrap_or(OsStr::new("/usr/bin:/bin"));
    std::env::split_paths(path_var)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
}

/// A regular file with an execute bit (symlinks followed).
fn executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What running `program` (already looked up) needs, following its
/// shebang chain with `path_var` for `#!/usr/bin/env NAME`.
pub(crate) fn installation(program: &Path, path_var: Option<&OsStr>, cwd: &Path) -> Installation {
    let mut out = Installation::default();
    follow(program, path_var, cwd, 0, &mut out);
    out.roots.sort();
    out.roots.dedup();
    out
}

fn follow(
    given: &Path,
    path_var: Option<&OsStr>,
    cwd: &Path,
    depth: usize,
    out: &mut Installation,
) {
    if depth >= MAX_DEPTH || !executable(given) {
        return;
    }
    let Ok(real) = std::fs::canonicalize(given) else {
        return;
    };
    if out.chain.contains(&real) {
        return;
    }
    out.chain.push(real.clone());
    roots_of(given, &real, depth > 0, out);
    let Some((interpreter, arg)) = shebang(&real) else {
        return;
    };
    let next = match arg {
        Some(name) if interpreter.file_name() == Some(OsStr::new("env")) => {
            follow(&interpreter, path_var, cwd, depth + 1, out);
            lookup(Path::new(&name), path_var, cwd)
        }
        _ => Some(interpreter),
    };
    if let Some(next) = next {
        follow(&next, path_var, cwd, depth + 1, out);
    }
}

/// The roots of one executable: `given` is the path it was reached by
/// (a venv's `bin/python` is a symlink out of the venv), `real` the file.
/// An interpreter's (`interpreter`: reached through a shebang) prefix is
/// granted whole; a program's own is not (`/srv/app/bin/server` must not
/// open `/srv/app`).
fn roots_of(given: &Path, real: &Path, interpreter: bool, out: &mut Installation) {
    if let Some(modules) = real
        .ancestors()
        .filter(|dir| dir.file_name() == Some(OsStr::new("node_modules")))
        .last()
    {
        out.roots.push(modules.to_path_buf());
    } else {
        out.roots.push(real.to_path_buf());
    }
    for path in [given, real] {
        if let Some(venv) = venv_of(path) {
            out.roots.extend(std::fs::canonicalize(&venv));
            if let Some(prefix) = venv_home_prefix(&venv) {
                out.roots.push(prefix);
            }
        }
    }
    if let Some(prefix) = interpreter_prefix(real).filter(|_| interpreter) {
        out.roots.push(prefix);
    }
    // A script of a `pip install --user` (`~/.local/bin/pylsp`) imports
    // from `~/.local/lib/python3.X`: those, not the whole prefix.
    if let Some(prefix) = bin_prefix(real) {
        out.roots.extend(python_libs(&prefix));
    }
}

/// `<venv>` when `path` is `<venv>/bin/<name>` and `<venv>/pyvenv.cfg`
/// exists.
fn venv_of(path: &Path) -> Option<PathBuf> {
    let prefix = bin_prefix(path)?;
    prefix.join("pyvenv.cfg").is_file().then_some(prefix)
}

/// `<prefix>` when `path` is `<prefix>/bin/<name>`.
fn bin_prefix(path: &Path) -> Option<PathBuf> {
    let bin = path.parent()?;
    if bin.file_name() != Some(OsStr::new("bin")) {
        return None;
    }
    bin.parent().map(Path::to_path_buf)
}

/// The prefix of the interpreter a venv was made from: pyvenv.cfg's
/// `home` is its `bin` directory.
fn venv_home_prefix(venv: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(venv.join("pyvenv.cfg")).ok()?;
    let home = text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })?;
    let home = std::fs::canonicalize(home).ok()?;
    let prefix = home.parent()?;
    looks_like_interpreter_prefix(prefix).then(|| prefix.to_path_buf())
}

/// `<prefix>` of an interpreter installed as `<prefix>/bin/<name>` with
/// its libraries beside it (a node or Python installation).
fn interpreter_prefix(real: &Path) -> Option<PathBuf> {
    let prefix = bin_prefix(real)?;
    looks_like_interpreter_prefix(&prefix).then_some(prefix)
}

/// A whole node or Python installation, by the files only one has (npm's
/// package, node's headers, the standard library's `os.py`): not an
/// application's tree with a `bin` and a `lib` of its own, which may hold
/// more than code.
fn looks_like_interpreter_prefix(prefix: &Path) -> bool {
    prefix.join("lib/node_modules/npm/package.json").is_file()
        || prefix.join("include/node/node.h").is_file()
        || python_libs(prefix)
            .iter()
            .any(|lib| lib.join("os.py").is_file())
}

/// `<prefix>/lib/python3*` directories.
fn python_libs(prefix: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().as_bytes().starts_with(b"python3"))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    out.sort();
    out
}

/// `#!INTERPRETER [ARG]` of a script: the interpreter's path and, for
/// `env`, the program it is asked for (`-S` splitting and `NAME=VALUE`
/// assignments skipped).
fn shebang(path: &Path) -> Option<(PathBuf, Option<String>)> {
    let mut buf = [0u8; SHEBANG_MAX];
    let mut file = std::fs::File::open(path).ok()?;
    let n = file.read(&mut buf).ok()?;
    let head = buf.get(..n)?;
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let interpreter = PathBuf::from(words.next()?);
    let arg = words
        .flat_map(|w| {
            w.strip_prefix("-S")
                .map_or(w, |rest| rest)
                .split_whitespace()
        })
        .find(|w| !w.is_empty() && !w.starts_with('-') && !w.contains('='))
        .map(str::to_owned);
    Some((interpreter, arg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn script(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// nvm's layout: a bin symlink into the global node_modules, a
    /// `#!/usr/bin/env node` script, node in the prefix's bin.
    #[test]
    fn an_nvm_cli_needs_its_node_modules_and_the_node_prefix() {
        let d = tempfile::tempdir().unwrap();
        let prefix = d
            .path()
            .canonicalize()
            .unwrap()
            .join("nvm/versions/node/v20");
        let js = prefix.join("lib/node_modules/@openai/codex/bin/codex.js");
        script(&js, "#!/usr/bin/env node\nconsole.log(1)\n");
        script(&prefix.join("bin/node"), "#!/bin/sh\n");
        script(&prefix.join("include/node/node.h"), "");
        symlink(
            "../lib/node_modules/@openai/codex/bin/codex.js",
            prefix.join("bin/codex"),
        )
        .unwrap();
        let path_var =
            std::ffi::OsString::from(format!("{}:/usr/bin:/bin", prefix.join("bin").display()));
        let found = lookup(Path::new("codex"), Some(&path_var), d.path()).unwrap();
        assert_eq!(found, prefix.join("bin/codex"));
        let inst = installation(&found, Some(&path_var), d.path());
        assert_eq!(inst.chain[0], js);
        assert!(inst.chain.contains(&prefix.join("bin/node")), "{inst:?}");
        assert!(
            inst.roots.contains(&prefix.join("lib/node_modules")),
            "{inst:?}"
        );
        assert!(inst.roots.contains(&prefix), "{inst:?}");
    }

    /// A venv's script: the venv root and the interpreter's prefix
    /// (pyvenv.cfg's `home`), reached through the venv's python symlink.
    #[test]
    fn a_venv_script_needs_the_venv_and_its_interpreter() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let base = root.join("pyenv/3.12");
        script(&base.join("bin/python3.12"), "#!/bin/sh\n");
        script(&base.join("lib/python3.12/os.py"), "");
        let venv = root.join("proj/.venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(
            venv.join("pyvenv.cfg"),
            format!("home = {}\n", base.join("bin").display()),
        )
        .unwrap();
        symlink(base.join("bin/python3.12"), venv.join("bin/python")).unwrap();
        script(
            &venv.join("bin/pylsp"),
            &format!("#!{}\nimport pylsp\n", venv.join("bin/python").display()),
        );
        let inst = installation(&venv.join("bin/pylsp"), None, &root);
        // Then the fake interpreter's own `/bin/sh`.
        assert_eq!(
            inst.chain[..2],
            [venv.join("bin/pylsp"), base.join("bin/python3.12")]
        );
        assert!(inst.roots.contains(&venv), "{inst:?}");
        assert!(inst.roots.contains(&base), "{inst:?}");
    }

    /// Not executable: nothing is followed, so naming a secret file as a
    /// program grants nothing.
    #[test]
    fn a_file_without_an_execute_bit_needs_nothing() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "#!/bin/sh\n").unwrap();
        assert_eq!(
            installation(&secret, None, d.path()),
            Installation::default()
        );
        assert_eq!(
            lookup(Path::new("secret"), Some(d.path().as_os_str()), d.path()),
            None
        );
    }

    #[test]
    fn env_shebangs_name_their_program() {
        let d = tempfile::tempdir().unwrap();
        for (text, want) in [
            ("#!/usr/bin/env node\n", Some("node")),
            (
                "#!/usr/bin/env -S node --max-old-space-size=4096\n",
                Some("node"),
            ),
            (
                "#!/usr/bin/env NODE_OPTIONS=x python3 -u\n",
                Some("python3"),
            ),
            ("#!/bin/sh -e\n", None),
        ] {
            let p = d.path().join("s");
            std::fs::write(&p, text).unwrap();
            let (_, arg) = shebang(&p).unwrap();
            assert_eq!(arg.as_deref(), want, "{text}");
        }
        std::fs::write(d.path().join("elf"), b"\x7fELF").unwrap();
        assert_eq!(shebang(&d.path().join("elf")), None);
    }
}
