//! MCP and language servers from a Python venv outside `/usr`, under the
//! engine's own best-effort sandbox with nothing listed read-only: a venv
//! made by `python3 -m venv` (under the target directory, built once in
//! place: a venv's scripts name its path), with the pinned `mcp` and
//! `python-lsp-server` pip-installed into it. A stdio MCP server run by
//! the venv's `bin/python` connects and lists its tool; `bin/pylsp` starts
//! and answers a hover. The sandbox opens the venv and the interpreter it
//! links to (pyvenv.cfg's `home`) for those launches only. Skips, saying
//! why, only when the venv cannot be made or pip cannot install.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use code_agent_engine::EngineConfig;
use code_agent_engine::lsp::{LspServerSpec, LspTable};
use code_agent_engine::testing::MockLlm;
use code_agent_proto::*;
use sdk_adapter::testing::cached_install;

use crate::common::*;

/// What the venv holds (pinned as the other suites pin them).
const REQUIREMENTS: [&str; 2] = ["mcp==2.3.0", "python-lsp-server==1.15.0"];

/// An MCP server over stdio with one tool (mcp 2.x's `MCPServer`, which
/// FastMCP became).
const SERVER: &str = r#"from mcp.server.mcpserver import MCPServer

server = MCPServer("venv")


@server.tool()
def shout(text: str) -> str:
    """Upper-cases text."""
    return text.upper()


server.run()
"#;

/// `<target>/tools-venv/<pins>` with both requirements, made once (under a
/// lock, marked complete last). Not staged and renamed like the other
/// caches: pip writes the venv's path into its scripts' shebangs.
fn venv() -> Result<PathBuf, String> {
    static ONCE: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    ONCE.get_or_init(make_venv).clone()
}

fn make_venv() -> Result<PathBuf, String> {
    let dir = cached_install::target_cache("tools-venv", "mcp-2.3.0-pylsp-1.15.0")
        .ok_or("cannot locate the target directory")?;
    let done = dir.join(".complete");
    if done.exists() {
        return Ok(dir);
    }
    let parent = dir.parent().ok_or("no cache parent")?;
    std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    let lock = std::fs::File::create(parent.join("venv.lock")).map_err(|e| e.to_string())?;
    lock.lock().map_err(|e| e.to_string())?;
    if done.exists() {
        return Ok(dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (python, _) = cached_install::python()?;
    let run = |cmd: &mut std::process::Command, what: &str| -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    run(
        std::process::Command::new(&python)
            .args(["-m", "venv"])
            .arg(&dir),
        "python3 -m venv",
    )?;
    run(
        std::process::Command::new(dir.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(REQUIREMENTS),
        "pip install (PyPI unreachable?)",
    )?;
    std::fs::write(&done, "").map_err(|e| e.to_string())?;
    Ok(dir)
}

/// An engine with its default (own, best-effort) sandbox and `pylsp` of
/// the venv as the python server, nothing made readable for it.
async fn harness(venv: &Path) -> Harness {
    let mut table = LspTable::defaults();
    table
        .insert(
            "python",
            LspServerSpec {
                commands: vec![],
                command: vec![venv.join("bin/pylsp").display().to_string()],
                env: BTreeMap::new(),
                extensions: vec!["py".into()],
                language_id: Some("python".into()),
                read_only: vec![],
            },
        )
        .unwrap();
    let config = EngineConfig {
        lsp_servers: table,
        ..EngineConfig::default()
    };
    let mock = MockLlm::start(vec![]).await;
    let (workspace, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    Harness::start_configured(mock, workspace, state, config).await
}

#[tokio::test]
async fn a_venvs_mcp_server_and_pylsp_run_under_the_default_sandbox() {
    let venv = match venv() {
        Ok(dir) => dir,
        Err(why) => {
            test_kit::skip_this_test(&format!("no venv with mcp and pylsp: {why}"));
            return;
        }
    };
    let mut h = harness(&venv).await;
    let landlocked = agent_launcher::probe_host().landlock.is_ok();
    std::fs::write(h.ws().join("server.py"), SERVER).unwrap();
    std::fs::write(
        h.ws().join("app.py"),
        "def greet():\n    return 1\n\n\ngreet()\n",
    )
    .unwrap();

    let s = h.session().await;
    let config = McpServerConfigProto {
        name: "venv".into(),
        enabled: true,
        env: Default::default(),
        transport: Some(McpTransport {
            transport: Some(mcp_transport::Transport::Stdio(McpStdioTransport {
                command: venv.join("bin/python").display().to_string(),
                args: vec!["-u".into(), h.ws().join("server.py").display().to_string()],
            })),
        }),
    };
    let connected = register_and_connect(&mut h, &s, config, "venv").await;
    assert!(connected.success, "{}", connected.message);
    assert!(
        connected
            .tool_names
            .contains(&"mcp__venv__shout".to_owned()),
        "{:?}",
        connected.tool_names
    );

    let root = h.ws().canonicalize().unwrap();
    let started = h
        .client
        .start_lsp_server(StartLspServerRequest {
            language: "python".into(),
            root_uri: format!("file://{}", root.display()),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(started.success, "{}", started.message);
    let hover = h
        .client
        .lsp_hover(LspHoverRequest {
            file_path: "app.py".into(),
            line: 4,
            column: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(hover.found && hover.content.contains("greet"), "{hover:?}");
    if !landlocked {
        eprintln!("note: no Landlock here; the venv ran without a sandbox to open it");
    }
    h.stop().await;
}
