//! The built-in tools through the public registry, as the agent loop calls
//! them: path escapes refused by every path-taking tool (also while the
//! agent swaps a directory for a symlink leading out), and the `bash`
//! environment scrubbed of the engine's secrets.
//!
//! Its own test binary because one test sets process environment variables.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

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

#[tokio::test]
async fn symlinks_leading_out_are_refused_and_inside_ones_work() {
    let (_dir, ctx) = workspace();
    let outside = tempfile::tempdir().unwrap();
    let outside_root = outside.path().canonicalize().unwrap();
    std::fs::write(outside_root.join("f.txt"), "root:outside\n").unwrap();
    symlink(&outside_root, ctx.workspace.join("out")).unwrap();
    symlink(outside_root.join("f.txt"), ctx.workspace.join("out-file")).unwrap();
    for (tool, path) in [
        ("read", "out/f.txt"),
        ("read", "out-file"),
        ("write", "out/f.txt"),
        ("write", "out/new.txt"),
        ("write", "out/deeper/new.txt"),
        ("write", "out-file"),
        ("edit", "out/f.txt"),
        ("edit", "out-file"),
        ("ls", "out"),
    ] {
        let out = call(&ctx, tool, args_for(tool, path)).await;
        let error = out.error.unwrap_or_default();
        assert!(
            error.contains(&format!("{path} leads outside the workspace")),
            "{tool} {path}: {error}"
        );
    }
    assert_eq!(files_in(&outside_root), vec!["f.txt"]);
    assert_eq!(
        std::fs::read_to_string(outside_root.join("f.txt")).unwrap(),
        "root:outside\n"
    );

    // Relative symlinks that stay inside are followed.
    std::fs::create_dir(ctx.workspace.join("real")).unwrap();
    std::fs::write(ctx.workspace.join("real/a.txt"), "root:a\n").unwrap();
    symlink("real", ctx.workspace.join("alias")).unwrap();
    symlink("../inside.txt", ctx.workspace.join("real/up")).unwrap();
    let out = call(&ctx, "read", json!({"path": "alias/a.txt"})).await;
    assert_eq!(out.output, "     1\troot:a\n", "{out:?}");
    let out = call(&ctx, "read", json!({"path": "alias/up"})).await;
    assert_eq!(out.output, "     1\troot:inside\n", "{out:?}");
    let out = call(&ctx, "edit", args_for("edit", "alias/up")).await;
    assert!(out.success, "{out:?}");
    let out = call(
        &ctx,
        "write",
        json!({"path": "alias/new/b.txt", "content": "b"}),
    )
    .await;
    assert!(out.success, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ctx.workspace.join("real/new/b.txt")).unwrap(),
        "b"
    );
    assert_eq!(
        std::fs::read_to_string(ctx.workspace.join("inside.txt")).unwrap(),
        "pwned:inside\n"
    );
    let out = call(&ctx, "ls", json!({"path": "alias"})).await;
    assert_eq!(out.output, "a.txt\nnew/\nup -> ../inside.txt\n", "{out:?}");
    let out = call(&ctx, "grep", json!({"pattern": "root:a", "path": "alias"})).await;
    assert_eq!(out.output, "real/a.txt:1:root:a\n", "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_directory_for_a_symlink_never_leads_out() {
    let (_dir, ctx) = workspace();
    let outside = tempfile::tempdir().unwrap();
    let outside_root = outside.path().canonicalize().unwrap();
    std::fs::write(outside_root.join("f.txt"), "OUTSIDE-SECRET\n").unwrap();
    std::fs::create_dir(ctx.workspace.join("sub")).unwrap();
    std::fs::write(ctx.workspace.join("sub/f.txt"), "inside\n").unwrap();

    // What the agent's own `bash` would run: swap `sub` and a symlink to
    // the outside in a tight loop, for at most a few seconds.
    let swapper =
        sdk_adapter::testing::race::Swapper::start(&ctx.workspace.join("sub"), &outside_root);

    let (mut writes, mut reads, mut refused) = (0, 0, 0);
    let started = Instant::now();
    for round in 0..400 {
        if started.elapsed() > Duration::from_millis(1900) {
            break;
        }
        let content = format!("round {round}\n");
        let out = call(
            &ctx,
            "write",
            json!({"path": "sub/f.txt", "content": content}),
        )
        .await;
        if out.success {
            writes += 1;
        } else {
            refused += 1;
        }
        let out = call(&ctx, "read", json!({"path": "sub/f.txt"})).await;
        assert!(
            !out.output.contains("OUTSIDE-SECRET"),
            "read outside: {out:?}"
        );
        if out.success {
            reads += 1;
        } else {
            refused += 1;
        }
    }
    let swaps = swapper.stop();
    assert!(swaps > 0, "the swapper never swapped");
    assert!(writes > 0 && reads > 0, "writes {writes}, reads {reads}");
    // Nothing was written outside: the only file there is unchanged.
    assert_eq!(files_in(&outside_root), vec!["f.txt"], "refused {refused}");
    assert_eq!(
        std::fs::read_to_string(outside_root.join("f.txt")).unwrap(),
        "OUTSIDE-SECRET\n"
    );
}
