//! The built-in tools through the public registry, as the agent loop calls
//! them: path escapes refused by every path-taking tool, and the `bash`
//! environment scrubbed of the engine's secrets.
//!
//! Its own test binary because one test sets process environment variables.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;
use std::path::Path;

use code_agent_engine::tools::{ToolContext, ToolOutput, ToolRegistry};
use serde_json::{Value, json};

/// A workspace whose `bash` runs in a best-effort sandbox (HOME and TMPDIR
/// in a second temporary directory).
fn workspace() -> ((tempfile::TempDir, tempfile::TempDir), ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let private = tempfile::tempdir().unwrap();
    let workspace = dir.path().canonicalize().unwrap();
    let launcher = agent_launcher::Launcher::new(agent_launcher::LauncherConfig {
        cgroups: false,
        ..agent_launcher::LauncherConfig::new(agent_launcher::Mode::BestEffort, "engine-tests")
    })
    .unwrap();
    let sandbox = launcher
        .thread(agent_launcher::ThreadSpec {
            workspace: workspace.clone(),
            home_dir: private.path().join("home"),
            tmp_dir: private.path().join("tmp"),
            ..Default::default()
        })
        .unwrap();
    let ctx = ToolContext::new(workspace).with_sandbox(std::sync::Arc::new(sandbox));
    std::fs::write(ctx.workspace.join("inside.txt"), "root:inside\n").unwrap();
    ((dir, private), ctx)
}

async fn call(ctx: &ToolContext, tool: &str, args: Value) -> ToolOutput {
    let registry = ToolRegistry::builtin();
    let Some(tool) = registry.get(tool) else {
        panic!("no tool {tool}");
    };
    tool.run(args, ctx).await
}

/// Arguments that make `tool` touch `path`.
fn args_for(tool: &str, path: &str) -> Value {
    match tool {
        "read" | "ls" => json!({ "path": path }),
        "write" => json!({ "path": path, "content": "pwned\n" }),
        "edit" => json!({ "path": path, "old_string": "root", "new_string": "pwned" }),
        "grep" => json!({ "pattern": "root", "path": path }),
        "glob" => json!({ "pattern": "*", "path": path }),
        other => panic!("no args for {other}"),
    }
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn every_path_tool_refuses_escapes() {
    let (_dir, ctx) = workspace();
    let outside = tempfile::tempdir().unwrap();
    let outside_root = outside.path().canonicalize().unwrap();
    std::fs::write(outside_root.join("secret.txt"), "root:secret\n").unwrap();
    std::fs::create_dir(outside_root.join("sub")).unwrap();
    std::fs::write(outside_root.join("sub/f.txt"), "root:sub\n").unwrap();
    symlink("/etc", ctx.workspace.join("etc-link")).unwrap();
    symlink(&outside_root, ctx.workspace.join("dir-link")).unwrap();
    symlink(
        outside_root.join("secret.txt"),
        ctx.workspace.join("file-link"),
    )
    .unwrap();
    std::fs::create_dir(ctx.workspace.join("sub")).unwrap();

    let file_targets = [
        "../secret.txt".to_string(),
        outside_root.join("secret.txt").display().to_string(),
        "file-link".to_string(),
        "dir-link/secret.txt".to_string(),
        "sub/../../secret.txt".to_string(),
        "etc-link/passwd".to_string(),
    ];
    let dir_targets = [
        "..".to_string(),
        outside_root.display().to_string(),
        "/etc".to_string(),
        "etc-link".to_string(),
        "dir-link".to_string(),
        "dir-link/sub".to_string(),
        "sub/../..".to_string(),
    ];
    for tool in ["read", "write", "edit"] {
        for path in &file_targets {
            let out = call(&ctx, tool, args_for(tool, path)).await;
            assert!(!out.success, "{tool} {path}: {}", out.output);
            assert!(out.error.is_some(), "{tool} {path}");
        }
    }
    for tool in ["ls", "grep", "glob"] {
        for path in dir_targets.iter().chain(&file_targets) {
            let out = call(&ctx, tool, args_for(tool, path)).await;
            assert!(!out.success, "{tool} {path}: {}", out.output);
        }
    }
    // Nothing outside was created or changed.
    assert_eq!(files_in(&outside_root), vec!["secret.txt", "sub"]);
    assert_eq!(
        std::fs::read_to_string(outside_root.join("secret.txt")).unwrap(),
        "root:secret\n"
    );
    // Searching the whole workspace does not follow the links out.
    let out = call(&ctx, "grep", json!({"pattern": "root:"})).await;
    assert_eq!(out.output, "inside.txt:1:root:inside\n");
    let out = call(&ctx, "glob", json!({"pattern": "**/*.txt"})).await;
    assert_eq!(out.output, "inside.txt\n");
}

#[tokio::test]
async fn a_coding_sequence_works_inside() {
    let (_dir, ctx) = workspace();
    let out = call(
        &ctx,
        "write",
        json!({"path": "src/main.rs", "content": "fn main() {\n    println!(\"a\");\n}\n"}),
    )
    .await;
    assert!(out.success, "{out:?}");
    let out = call(
        &ctx,
        "edit",
        json!({"path": "src/main.rs", "old_string": "\"a\"", "new_string": "\"b\""}),
    )
    .await;
    assert!(out.success, "{out:?}");
    let out = call(
        &ctx,
        "read",
        json!({"path": "src/main.rs", "offset": 2, "limit": 1}),
    )
    .await;
    assert!(
        out.output.starts_with("     2\t    println!(\"b\");\n"),
        "{}",
        out.output
    );
    let out = call(
        &ctx,
        "bash",
        json!({"command": "grep -c println src/main.rs"}),
    )
    .await;
    assert_eq!(out.output, "1\n");
    let out = call(&ctx, "ls", json!({})).await;
    assert_eq!(out.output, "inside.txt\nsrc/\n");
}

#[tokio::test]
async fn bash_env_has_no_secrets_but_has_the_session_env() {
    // SAFETY: this binary's other tests do not read these variables, and
    // std serializes environment access against process spawning.
    unsafe {
        std::env::set_var("OPENAI_API_KEY", "sk-h4-test-openai");
        std::env::set_var("EXAMPLE_API_KEY", "sk-h4-test-example");
        std::env::set_var("AGENT_RUNNER_SECRET", "h4-runner-secret");
        std::env::set_var("GITHUB_TOKEN", "h4-github-token");
        std::env::set_var("GH_TOKEN", "h4-gh-token");
        std::env::set_var("H4_PLAIN_VAR", "plain-value");
    }
    let (_dir, mut ctx) = workspace();
    ctx.env = vec![("SESSION_VAR".into(), "from-session".into())];
    let out = call(&ctx, "bash", json!({"command": "env"})).await;
    assert!(out.success, "{out:?}");
    for secret in [
        "sk-h4-test-openai",
        "sk-h4-test-example",
        "h4-runner-secret",
        "h4-github-token",
        "h4-gh-token",
    ] {
        assert!(!out.output.contains(secret), "{secret} leaked");
    }
    assert!(out.output.contains("SESSION_VAR=from-session"));
    // The launcher's allowlist: the engine's other variables stay out too.
    assert!(!out.output.contains("H4_PLAIN_VAR"), "{}", out.output);
    assert!(out.output.contains("PATH="));
}
