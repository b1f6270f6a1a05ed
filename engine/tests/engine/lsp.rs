//! LSP against a real language server: `python-lsp-server` (with pyflakes)
//! installed from PyPI by the test into `<target>/pylsp/<version>` and run
//! with PYTHONPATH, started through the engine's sandbox. Hover,
//! definition, references, symbols (pylsp has no workspace symbols, so the
//! document-symbol fallback runs), diagnostics, write-then-diagnostics in a
//! turn, and stop. Skips, saying why, only when pip cannot install it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use code_agent_engine::EngineConfig;
use code_agent_engine::lsp::{LspServerSpec, LspTable};
use code_agent_engine::testing::{MockLlm, MockReply};
use code_agent_proto::*;
use sdk_adapter::testing::cached_install;
use serde_json::json;
use tonic::Code;

use crate::common::*;

/// The python-lsp-server version the test pins.
const PYLSP_VERSION: &str = "1.15.0";

const APP: &str = "def greet(name):\n    return \"hello \" + name\n\n\nmessage = greet(\"world\")\nprint(message)\n";

/// [`install`] once per test process (the tests of this file run in
/// parallel and would otherwise install side by side).
fn install_pylsp() -> Result<(PathBuf, PathBuf, PathBuf), String> {
    static ONCE: std::sync::OnceLock<Result<(PathBuf, PathBuf, PathBuf), String>> =
        std::sync::OnceLock::new();
    ONCE.get_or_init(install).clone()
}

/// The real Python interpreter (not a pyenv shim, which needs the user's
/// HOME), its prefix, and `<target>/pylsp/<version>` with pylsp installed
/// (pip --target, through the suites' shared `cached_install`).
fn install() -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let (python, prefix) = cached_install::python()?;
    let dir = cached_install::pip_install(
        "pylsp",
        PYLSP_VERSION,
        &format!("python-lsp-server[pyflakes]=={PYLSP_VERSION}"),
        |dir| dir.join("pylsp").is_dir() && dir.join("pyflakes").is_dir(),
    )?;
    Ok((python, prefix, dir))
}

/// An engine whose python server is this pylsp.
async fn harness(replies: Vec<MockReply>) -> Option<Harness> {
    let (python, prefix, pylsp) = match install_pylsp() {
        Ok(found) => found,
        Err(why) => {
            test_kit::skip_this_test(&why);
            return None;
        }
    };
    let mut table = LspTable::defaults();
    table
        .insert(
            "python",
            LspServerSpec {
                commands: vec![],
                command: vec![python.display().to_string(), "-m".into(), "pylsp".into()],
                env: BTreeMap::from([("PYTHONPATH".to_string(), pylsp.display().to_string())]),
                extensions: vec!["py".into()],
                language_id: Some("python".into()),
                // The sandbox shows only system dirs and the workspace: the
                // interpreter's prefix and pylsp's dir are made readable.
                read_only: vec![prefix, pylsp.clone()],
            },
        )
        .unwrap();
    let config = EngineConfig {
        lsp_servers: table,
        ..EngineConfig::default()
    };
    let mock = MockLlm::start(replies).await;
    let (workspace, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    Some(Harness::start_configured(mock, workspace, state, config).await)
}

/// The pids and environments of the live processes running pylsp with cwd
/// `root`.
fn pylsp_processes_in(root: &Path) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let dir = entry.path();
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()));
        if !is_pid || std::fs::read_link(dir.join("cwd")).ok().as_deref() != Some(root) {
            continue;
        }
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let zombie = status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'));
        if String::from_utf8_lossy(&cmdline).contains("pylsp") && !zombie {
            let environ = std::fs::read(dir.join("environ")).unwrap_or_default();
            let pid = entry.file_name().to_string_lossy().parse().unwrap();
            found.push((pid, String::from_utf8_lossy(&environ).replace('\0', "\n")));
        }
    }
    found
}

async fn start_python(h: &mut Harness) -> StartLspServerResponse {
    let root = h.ws().canonicalize().unwrap();
    h.client
        .start_lsp_server(StartLspServerRequest {
            language: "python".into(),
            root_uri: format!("file://{}", root.display()),
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn a_real_pylsp_answers_hover_definition_references_symbols_diagnostics() {
    let Some(mut h) = harness(vec![]).await else {
        return;
    };
    std::fs::write(h.ws().join("app.py"), APP).unwrap();
    let clock = Instant::now();
    let started = start_python(&mut h).await;
    let start_ms = clock.elapsed().as_millis();
    assert!(started.success, "{}", started.message);
    runs_in_the_sandbox(&mut h, started).await;
    let hover_ms = navigates(&mut h).await;
    let diagnostics_ms = diagnoses(&mut h).await;
    // Measured, never asserted.
    eprintln!(
        "LSP timings (pylsp): start {start_ms} ms, first hover {hover_ms} ms, diagnostics of a new file {diagnostics_ms} ms"
    );
    refuses_unknown_files_and_languages(&mut h).await;
    stops(&mut h).await;
    h.stop().await;
}

/// The started server runs in the root, launched through the engine's
/// sandbox (the sandbox's own HOME under the state dir, the entry's
/// PYTHONPATH), and is listed.
async fn runs_in_the_sandbox(h: &mut Harness, started: StartLspServerResponse) {
    let root = h.ws().canonicalize().unwrap();
    let processes = pylsp_processes_in(&root);
    assert_eq!(processes.len(), 1, "{processes:?}");
    let state = h.state.path().canonicalize().unwrap();
    let home = processes[0]
        .1
        .lines()
        .find_map(|l| l.strip_prefix("HOME="))
        .unwrap();
    assert!(
        Path::new(home).starts_with(state.join("sandboxes")),
        "{home}"
    );
    assert!(processes[0].1.contains("PYTHONPATH="));
    let info = started.server_info.unwrap();
    assert_eq!(info.name, "pylsp");
    assert!(info.version.is_some_and(|v| !v.is_empty()));
    assert!(info.running);
    let listed = h
        .client
        .list_lsp_servers(ListLspServersRequest {})
        .await
        .unwrap()
        .into_inner()
        .servers;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].language, "python");
}

/// Hover, definition, references and symbols on `greet`; the first
/// hover's time in ms.
async fn navigates(h: &mut Harness) -> u128 {
    // `greet` in `message = greet("world")` (line 4, 0-based).
    let clock = Instant::now();
    let hover = h
        .client
        .lsp_hover(LspHoverRequest {
            file_path: "app.py".into(),
            line: 4,
            column: 11,
        })
        .await
        .unwrap()
        .into_inner();
    let hover_ms = clock.elapsed().as_millis();
    assert!(hover.found);
    assert!(hover.content.contains("greet"), "{}", hover.content);

    let definition = h
        .client
        .lsp_definition(LspDefinitionRequest {
            file_path: h.ws().join("app.py").display().to_string(),
            line: 4,
            column: 11,
        })
        .await
        .unwrap()
        .into_inner()
        .locations;
    assert_eq!(definition.len(), 1);
    assert!(
        definition[0].uri.ends_with("/app.py"),
        "{}",
        definition[0].uri
    );
    assert_eq!(definition[0].range.unwrap().start.unwrap().line, 0);

    let references = h
        .client
        .lsp_references(LspReferencesRequest {
            file_path: "app.py".into(),
            line: 0,
            column: 5,
            include_declaration: true,
        })
        .await
        .unwrap()
        .into_inner()
        .locations;
    let lines: Vec<u32> = references
        .iter()
        .map(|l| l.range.unwrap().start.unwrap().line)
        .collect();
    assert!(lines.contains(&0) && lines.contains(&4), "{lines:?}");

    let symbols = h
        .client
        .lsp_symbols(LspSymbolsRequest {
            query: "gree".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .symbols;
    let greet = symbols.iter().find(|s| s.name == "greet").unwrap();
    assert_eq!(greet.kind, "function");
    assert!(greet.location.as_ref().unwrap().uri.ends_with("/app.py"));
    assert!(
        symbols.iter().all(|s| s.name.contains("gree")),
        "{symbols:?}"
    );
    hover_ms
}

/// A new file with an undefined name and an unused import gets both
/// diagnostics; the time they took in ms.
async fn diagnoses(h: &mut Harness) -> u128 {
    std::fs::write(h.ws().join("bad.py"), "import os\nprint(undefined_name)\n").unwrap();
    let clock = Instant::now();
    let diagnostics = h
        .client
        .lsp_diagnostics(LspDiagnosticsRequest {
            file_path: Some("bad.py".into()),
        })
        .await
        .unwrap()
        .into_inner()
        .diagnostics;
    let diagnostics_ms = clock.elapsed().as_millis();
    let undefined = diagnostics
        .iter()
        .find(|d| d.message.contains("undefined name 'undefined_name'"))
        .unwrap_or_else(|| panic!("{diagnostics:?}"));
    assert_eq!(undefined.severity, "error");
    assert_eq!(undefined.range.unwrap().start.unwrap().line, 1);
    assert!(
        diagnostics
            .iter()
            .any(|d| d.message.contains("'os' imported but unused"))
    );
    // Every file reported on: bad.py is among them.
    let all = h
        .client
        .lsp_diagnostics(LspDiagnosticsRequest { file_path: None })
        .await
        .unwrap()
        .into_inner()
        .diagnostics;
    assert!(all.iter().any(|d| d.uri.ends_with("/bad.py")));
    diagnostics_ms
}

/// A path outside every server's root, and an unknown language.
async fn refuses_unknown_files_and_languages(h: &mut Harness) {
    let err = h
        .client
        .lsp_hover(LspHoverRequest {
            file_path: "/etc/hostname".into(),
            line: 0,
            column: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    let err = h
        .client
        .start_lsp_server(StartLspServerRequest {
            language: "cobol".into(),
            root_uri: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("language:"), "{}", err.message());
}

/// Stop: gone from the list and the process table, and the RPCs say no
/// server handles the file.
async fn stops(h: &mut Harness) {
    let root = h.ws().canonicalize().unwrap();
    let stopped = h
        .client
        .stop_lsp_server(StopLspServerRequest {
            language: "python".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(stopped.success);
    let listed = h
        .client
        .list_lsp_servers(ListLspServersRequest {})
        .await
        .unwrap()
        .into_inner()
        .servers;
    assert!(listed.is_empty());
    assert!(
        pylsp_processes_in(&root).is_empty(),
        "the server outlived Stop"
    );
    let err = h
        .client
        .lsp_symbols(LspSymbolsRequest {
            query: String::new(),
            limit: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    let err = h
        .client
        .lsp_hover(LspHoverRequest {
            file_path: h.ws().join("app.py").display().to_string(),
            line: 4,
            column: 11,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
}

#[tokio::test]
async fn a_turn_that_writes_a_broken_file_gets_its_diagnostics_and_the_lsp_tools() {
    let replies = vec![
        MockReply::tool_call(
            "w1",
            "write",
            json!({"path": "broken.py", "content": "value = missing_thing + 1\n"}),
        ),
        MockReply::tool_call(
            "e1",
            "edit",
            json!({"path": "broken.py", "old_string": "missing_thing", "new_string": "2"}),
        ),
        MockReply::tool_call("s1", "lsp_symbols", json!({"query": "value"})),
        // 1-based: `value` at line 1, column 1.
        MockReply::tool_call(
            "h1",
            "lsp_references",
            json!({"path": "broken.py", "line": 1, "column": 1}),
        ),
        MockReply::tool_call(
            "h2",
            "lsp_hover",
            json!({"path": "broken.py", "line": 0, "column": 1}),
        ),
        MockReply::text("done"),
    ];
    let Some(mut h) = harness(replies).await else {
        return;
    };
    let started = start_python(&mut h).await;
    assert!(started.success, "{}", started.message);
    let s = h.session().await;
    let chunks = h.turn(&s, "write broken.py").await;
    let results = results(&chunks);
    assert_eq!(results.len(), 5, "{chunks:?}");
    let write = &results[0];
    assert!(write.success, "{write:?}");
    assert!(
        write
            .output
            .contains("broken.py:1:9: error: undefined name 'missing_thing'"),
        "{}",
        write.output
    );
    assert_eq!(write.metadata["diagnostics"], "1");
    // The fix clears them.
    let edit = &results[1];
    assert!(edit.success, "{edit:?}");
    assert!(
        edit.output.contains("[pylsp: no diagnostics in broken.py]"),
        "{}",
        edit.output
    );
    assert_eq!(edit.metadata["diagnostics"], "0");
    let symbols = &results[2];
    assert!(symbols.success, "{symbols:?}");
    assert!(
        symbols.output.contains("variable value — broken.py:1:1"),
        "{}",
        symbols.output
    );
    let references = &results[3];
    assert!(references.success, "{references:?}");
    assert_eq!(references.output, "broken.py:1:1");
    // Lines are 1-based for the model: 0 is refused, naming the argument.
    let hover = &results[4];
    assert!(!hover.success);
    assert!(
        hover.output.contains("`line` is 1-based"),
        "{}",
        hover.output
    );
    // The model was offered the LSP tools while the server ran.
    let request = &h.mock.requests()[0];
    let offered: Vec<String> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    for name in code_agent_engine::lsp::LSP_TOOL_NAMES {
        assert!(
            offered.iter().any(|o| o == name),
            "{name} not in {offered:?}"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn without_a_running_server_the_model_gets_no_lsp_tools_and_writes_carry_no_diagnostics() {
    let replies = vec![
        MockReply::tool_call(
            "w1",
            "write",
            json!({"path": "broken.py", "content": "value = missing_thing\n"}),
        ),
        MockReply::text("done"),
    ];
    let mock = MockLlm::start(replies).await;
    let (workspace, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut h = Harness::start_configured(mock, workspace, state, EngineConfig::default()).await;
    let s = h.session().await;
    let chunks = h.turn(&s, "write").await;
    let write = &results(&chunks)[0];
    assert!(write.success);
    assert!(!write.metadata.contains_key("diagnostics"));
    assert!(!request_mentions(&h.mock, 0, "lsp_hover"));
    h.stop().await;
}

#[tokio::test]
async fn a_crashed_server_shows_not_running_and_starts_again() {
    let Some(mut h) = harness(vec![]).await else {
        return;
    };
    std::fs::write(h.ws().join("app.py"), APP).unwrap();
    assert!(start_python(&mut h).await.success);
    let root = h.ws().canonicalize().unwrap();
    let processes = pylsp_processes_in(&root);
    assert_eq!(processes.len(), 1);
    // SAFETY: kill only sends a signal to the server this test started.
    unsafe { libc::kill(processes[0].0, libc::SIGKILL) };
    let listed = tokio::time::timeout(PATIENCE, async {
        loop {
            let servers = h
                .client
                .list_lsp_servers(ListLspServersRequest {})
                .await
                .unwrap()
                .into_inner()
                .servers;
            if servers.iter().all(|s| !s.running) {
                return servers;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(listed.len(), 1, "a crashed server stays listed");
    let err = h
        .client
        .lsp_hover(LspHoverRequest {
            file_path: "app.py".into(),
            line: 4,
            column: 11,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    // Starting it again replaces the dead one.
    let started = start_python(&mut h).await;
    assert!(started.success, "{}", started.message);
    assert!(started.message.contains("started"), "{}", started.message);
    let hover = h
        .client
        .lsp_hover(LspHoverRequest {
            file_path: "app.py".into(),
            line: 4,
            column: 11,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(hover.found);
    h.stop().await;
}

#[tokio::test]
async fn a_session_sees_no_symbols_or_diagnostics_of_another_workspace() {
    let replies = vec![
        MockReply::tool_call("s1", "lsp_symbols", json!({"query": ""})),
        MockReply::tool_call("d1", "lsp_diagnostics", json!({})),
        MockReply::text("done"),
    ];
    let Some(mut h) = harness(replies).await else {
        return;
    };
    let (a, b) = (h.ws().join("a"), h.ws().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(
        b.join("other.py"),
        "def secret_helper():\n    return nope\n",
    )
    .unwrap();
    let started = h
        .client
        .start_lsp_server(StartLspServerRequest {
            language: "python".into(),
            root_uri: b.canonicalize().unwrap().display().to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(started.success, "{}", started.message);
    // Through the RPCs (not scoped to a session) b's symbol and error show.
    let diagnostics = h
        .client
        .lsp_diagnostics(LspDiagnosticsRequest {
            file_path: Some(b.join("other.py").display().to_string()),
        })
        .await
        .unwrap()
        .into_inner()
        .diagnostics;
    assert!(diagnostics.iter().any(|d| d.message.contains("'nope'")));
    let symbols = h
        .client
        .lsp_symbols(LspSymbolsRequest {
            query: "secret".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .symbols;
    assert_eq!(symbols.len(), 1);
    // A session working in `a` sees none of it.
    let mut config = h.config(StorageType::Memory);
    config.workspace = a.display().to_string();
    let s = h.session_with(config).await;
    let chunks = h.turn(&s, "look around").await;
    let results = results(&chunks);
    assert_eq!(results.len(), 2, "{chunks:?}");
    assert_eq!(results[0].output, "No symbols match \"\".");
    assert_eq!(results[1].output, "No diagnostics.");
    h.stop().await;
}
