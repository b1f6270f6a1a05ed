//! Finding the skills in a fetched package and checking them before anything
//! is installed: `SKILL.md` with valid front matter, no path or symlink that
//! escapes the package, and a size limit.

use std::path::{Component, Path, PathBuf};

use super::SkillError;

/// One skill found in a package.
#[derive(Debug, Clone)]
pub struct Skill {
    /// The skill's name (from its SKILL.md).
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
}

#[derive(serde::Deserialize)]
struct FrontMatter {
    name: Option<serde_yaml::Value>,
    description: Option<serde_yaml::Value>,
}

fn bad(message: impl Into<String>) -> SkillError {
    SkillError::Package(message.into())
}

/// The skills of the package at `root`: `root/SKILL.md`, or every
/// `root/skills/*/SKILL.md`.
pub fn find_skills(root: &Path, max_bytes: u64) -> Result<Vec<Skill>, SkillError> {
    let mut total = 0u64;
    check_tree(root, root, &mut total, max_bytes)?;
    let mut dirs = Vec::new();
    if root.join("SKILL.md").is_file() {
        dirs.push(root.to_owned());
    } else if root.join("skills").is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join("skills"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("SKILL.md").is_file())
            .collect();
        entries.sort();
        dirs = entries;
    }
    if dirs.is_empty() {
        return Err(bad("no SKILL.md (expected SKILL.md or skills/*/SKILL.md)"));
    }
    let mut skills = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let text = std::fs::read_to_string(dir.join("SKILL.md"))
            .map_err(|e| bad(format!("{}: {e}", rel(root, &dir.join("SKILL.md")))))?;
        // The description is required (agents see it in SKILL.md) but the
        // runner itself has no use for it.
        let (name, _description) = front_matter(&text)
            .map_err(|m| bad(format!("{}: {m}", rel(root, &dir.join("SKILL.md")))))?;
        if skills.iter().any(|s: &Skill| s.name == name) {
            return Err(bad(format!("two skills are named {name:?}")));
        }
        skills.push(Skill { name, dir });
    }
    Ok(skills)
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// `name` and `description` from `---`-delimited YAML front matter. The name
/// becomes a directory name, so it must be a safe one.
pub fn front_matter(text: &str) -> Result<(String, String), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("no front matter (the file must start with a --- line)".into());
    }
    let mut yaml = String::new();
    let mut closed = false;
    for line in lines {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        yaml.push_str(line);
        yaml.push('\n');
    }
    if !closed {
        return Err("front matter is not closed by a --- line".into());
    }
    let fm: FrontMatter =
        serde_yaml::from_str(&yaml).map_err(|e| format!("front matter is not valid YAML: {e}"))?;
    let field = |v: Option<serde_yaml::Value>, key: &str| match v {
        Some(serde_yaml::Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        _ => Err(format!("front matter needs a non-empty `{key}`")),
    };
    let name = field(fm.name, "name")?;
    let description = field(fm.description, "description")?;
    crate::host::workspace::check_id("name", &name).map_err(|e| format!("front matter {e}"))?;
    Ok((name, description))
}

/// Walk the package: every symlink must stay inside it, the total size under
/// the limit. `.git` is not part of the package.
fn check_tree(root: &Path, dir: &Path, total: &mut u64, max: u64) -> Result<(), SkillError> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if path.file_name().is_some_and(|n| n == ".git") {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?;
            let parent = path.parent().unwrap_or(root);
            if target.is_absolute() || !stays_inside(root, &parent.join(&target)) {
                return Err(bad(format!(
                    "{} is a symlink leaving the package ({})",
                    rel(root, &path),
                    target.display()
                )));
            }
        } else if meta.is_dir() {
            check_tree(root, &path, total, max)?;
        } else {
            *total += meta.len();
            if *total > max {
                return Err(bad(format!("larger than the limit of {max} bytes")));
            }
        }
    }
    Ok(())
}

/// Whether `path` (under `root`, maybe with `..`) stays inside `root`,
/// judged lexically.
fn stays_inside(root: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(root) else {
        return false;
    };
    let mut depth = 0i32;
    for c in rest.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::CurDir => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_rules() {
        let ok =
            "---\nname: lint\ndescription: Runs the linter\nallowed-tools: Bash\n---\n# Lint\n";
        assert_eq!(
            front_matter(ok).unwrap(),
            ("lint".into(), "Runs the linter".into())
        );
        for (text, needle) in [
            ("# no front matter", "no front matter"),
            ("---\nname: x\n", "not closed"),
            ("---\nname: [\n---\n", "YAML"),
            ("---\ndescription: d\n---\n", "name"),
            ("---\nname: x\n---\n", "description"),
            ("---\nname: ../evil\ndescription: d\n---\n", "name"),
        ] {
            let err = front_matter(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn lexical_containment() {
        let root = Path::new("/p");
        assert!(stays_inside(root, Path::new("/p/a/../b")));
        assert!(!stays_inside(root, Path::new("/p/a/../../x")));
        assert!(!stays_inside(root, Path::new("/q")));
    }
}
