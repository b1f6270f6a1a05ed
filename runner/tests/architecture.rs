//! Keeps the architecture of docs/architecture.md true: which crate may
//! depend on which, and no import cycle between the top-level modules of
//! the runner and of the engine.
//!
//! Both checks read the sources and manifests as they are (no build
//! needed); a failure prints the offending edge or cycle.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("runner/ has a parent")
        .to_owned()
}

/// The workspace crates each crate may depend on (normal and build
/// dependencies; dev-dependencies are free). `optional:` entries may only
/// be optional dependencies (behind a feature).
const ALLOWED: &[(&str, &[&str])] = &[
    ("proto-build", &[]),
    ("agent-runner-proto", &["proto-build"]),
    ("code-agent-proto", &["proto-build"]),
    ("agent-launcher", &[]),
    ("sdk-adapter", &["agent-launcher"]),
    ("mcp-client", &["sdk-adapter"]),
    ("sdk-scripted", &["sdk-adapter", "mcp-client"]),
    ("sdk-process", &["sdk-adapter"]),
    ("sdk-codex", &["sdk-adapter", "sdk-process"]),
    ("sdk-claude-code", &["sdk-adapter", "sdk-process"]),
    (
        "sdk-code-agent",
        &[
            "sdk-adapter",
            "sdk-process",
            "code-agent-proto",
            "code-agent-engine",
        ],
    ),
    (
        "code-agent-engine",
        &[
            "code-agent-proto",
            "agent-launcher",
            "mcp-client",
            "sdk-adapter",
        ],
    ),
    ("mock-control-plane", &["agent-runner-proto"]),
    // Test support: every other crate takes it as a dev-dependency only,
    // except the benchmarks (a binary that starts runners).
    ("test-kit", &["agent-runner-proto", "mock-control-plane"]),
    (
        "agent-runner",
        &[
            "agent-runner-proto",
            "agent-launcher",
            "sdk-adapter",
            "sdk-scripted",
            "sdk-codex",
            "sdk-claude-code",
            "sdk-code-agent",
            "code-agent-engine",
            "optional:mock-control-plane",
        ],
    ),
    (
        "agent-runner-fuzz",
        &[
            "agent-runner",
            "agent-runner-proto",
            "sdk-adapter",
            "sdk-scripted",
            "test-kit",
        ],
    ),
    (
        "runner-bench",
        &[
            "agent-runner-proto",
            "code-agent-engine",
            "mock-control-plane",
            "sdk-codex",
            "test-kit",
        ],
    ),
];

#[test]
fn crate_dependencies_follow_the_allowed_table() {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut problems = Vec::new();
    for p in packages {
        let name = p["name"].as_str().unwrap();
        let Some(rules) = allowed.get(name) else {
            problems.push(format!(
                "{name} is not in the allowed table (runner/tests/architecture.rs and docs/architecture.md)"
            ));
            continue;
        };
        for dep in p["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            if !ours.contains(dep_name) || dep["kind"].as_str() == Some("dev") {
                continue;
            }
            let optional = dep["optional"].as_bool().unwrap_or(false);
            let ok = rules.iter().any(|r| match r.strip_prefix("optional:") {
                Some(only_optional) => only_optional == dep_name && optional,
                None => *r == dep_name,
            });
            if !ok {
                problems.push(format!(
                    "{name} → {dep_name}{} is not allowed",
                    if optional { " (optional)" } else { "" }
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The top-level module a file under `src` belongs to (`None`: the crate
/// root or a binary).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    if rel.components().count() == 1 {
        let stem = first.strip_suffix(".rs")?;
        return (!matches!(stem, "lib" | "main")).then(|| stem.to_owned());
    }
    (first != "bin").then_some(first)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Test code may reach anywhere: leave out test files and everything from
/// a file's first top-level `#[cfg(test)]` on, and comment lines.
fn non_test_source(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let code = match text.find("\n#[cfg(test)]") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    // Comments (doc links included) are not imports.
    Some(
        code.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Edges between the top-level modules of the crate whose sources are in
/// `src`: module → every other top-level module its code names as
/// `crate::<module>`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(src, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = top_module(src, file) else {
            continue;
        };
        let Some(text) = non_test_source(file) else {
            continue;
        };
        let edges = graph.entry(from.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // `use crate::{a, b::c}` names several modules at once.
            let names: Vec<String> = if name.is_empty() && rest.starts_with('{') {
                let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
                group
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect()
                    })
                    .collect()
            } else {
                vec![name]
            };
            for n in names {
                if n != from && modules.contains(&n) {
                    edges.insert(n);
                }
            }
        }
    }
    graph
}

/// A cycle in `graph`, as the list of modules around it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_owned(), 1);
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(node, graph, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

fn assert_acyclic(crate_dir: &str) {
    let src = repo_root().join(crate_dir).join("src");
    let graph = module_graph(&src);
    assert!(graph.len() > 5, "{crate_dir}: no modules found");
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "{crate_dir}: import cycle between top-level modules: {}",
            cycle.join(" → ")
        );
    }
}

#[test]
fn the_runner_has_no_module_cycle() {
    assert_acyclic("runner");
}

/// The runner's folders, top to bottom: a folder's code may name only
/// folders below it (`crate::<folder>`), never one above. The same order
/// is the table in `runner/src/lib.rs` and `docs/architecture.md`.
const RUNNER_LAYERS: &[&str] = &[
    "cli", "runner", "ops", "link", "tasks", "delivery", "host", "config", "observe", "util",
];

/// Every edge of `graph` that goes up (or sideways to an unknown module)
/// in `layers`.
fn upward_edges(graph: &BTreeMap<String, BTreeSet<String>>, layers: &[&str]) -> Vec<String> {
    let rank = |m: &str| layers.iter().position(|l| *l == m);
    let mut bad = Vec::new();
    for (from, tos) in graph {
        for to in tos {
            match (rank(from), rank(to)) {
                (Some(f), Some(t)) if f < t => {}
                (Some(_), Some(_)) => bad.push(format!("{from} → {to} goes up")),
                _ => bad.push(format!("{from} → {to}: not in the layer list")),
            }
        }
    }
    bad
}

#[test]
fn the_runner_folders_import_only_downward() {
    let src = repo_root().join("runner/src");
    let graph = module_graph(&src);
    for m in graph.keys() {
        assert!(
            RUNNER_LAYERS.contains(&m.as_str()),
            "runner/src/{m} is in no layer: add it to RUNNER_LAYERS, lib.rs and docs/architecture.md"
        );
    }
    let bad = upward_edges(&graph, RUNNER_LAYERS);
    assert!(
        bad.is_empty(),
        "runner/src imports against the layers:\n{}",
        bad.join("\n")
    );
    let tops = std::fs::read_dir(&src).unwrap().count();
    assert!(
        tops <= 12,
        "runner/src has {tops} entries at the top (at most 12)"
    );
}

#[test]
fn the_layer_check_finds_an_upward_import() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("b".into()).or_default().insert("a".into());
    assert_eq!(upward_edges(&g, &["a", "b"]).len(), 1);
    assert!(upward_edges(&g, &["b", "a"]).is_empty());
}

#[test]
fn the_engine_has_no_module_cycle() {
    assert_acyclic("engine");
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        g.entry(a.into()).or_default().insert(b.into());
    }
    let cycle = find_cycle(&g).expect("a → b → c → a");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
    g.get_mut("c").unwrap().remove("a");
    assert_eq!(find_cycle(&g), None);
}
