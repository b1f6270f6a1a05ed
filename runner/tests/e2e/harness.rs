//! The mock control plane's harness modes (YAML scenario, stdio JSON lines)
//! driving the real runner binary.

use std::collections::BTreeMap;

use mock_control_plane::{scenario, stdio};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::support::*;

#[tokio::test]
async fn basic_scenario_passes_against_the_real_runner() {
    let cp = mock().await;
    let _r = RunnerProc::start(RunnerOpts::new(cp.url()));
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../mock-control-plane/scenarios/basic.yaml"
    ))
    .unwrap();
    let parsed = scenario::parse(&yaml).unwrap();
    let mut out = Vec::new();
    let result = scenario::run(&cp, &parsed, BTreeMap::new(), &mut out).await;
    let progress = String::from_utf8_lossy(&out);
    let outcome = result.unwrap_or_else(|e| panic!("{e:#}\n{progress}"));
    assert!(
        outcome.vars["thread"].starts_with("thr-"),
        "{:?}",
        outcome.vars
    );
}

#[tokio::test]
async fn stdio_json_lines_drive_the_real_runner() {
    let cp = mock().await;
    let _r = RunnerProc::start(RunnerOpts::new(cp.url()));
    let (mut input_w, input_r) = tokio::io::duplex(64 * 1024);
    let (output_w, output_r) = tokio::io::duplex(1024 * 1024);
    let plane = std::sync::Arc::new(cp);
    let p = plane.clone();
    tokio::spawn(async move { stdio::run(&p, BufReader::new(input_r), output_w).await });
    // Written before the runner may have connected: queued, then sent in order.
    input_w
        .write_all(
            b"{\"requestId\":\"r1\",\"createAgentRequest\":{\"agentId\":\"a\",\"agentSdk\":\"scripted\"}}\n\
              {\"requestId\":\"hb\",\"heartbeatRequest\":{}}\n",
        )
        .await
        .unwrap();
    let mut lines = BufReader::new(output_r).lines();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            seen.push(v.clone());
            let replied = |rid: &str| {
                seen.iter()
                    .any(|v| v["event"] == "message" && v["message"]["requestId"] == rid)
            };
            if replied("hb") && replied("r1") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "{seen:#?}");
    let ready = seen
        .iter()
        .find(|v| v["event"] == "message" && v["message"]["requestId"] == "r1")
        .unwrap();
    assert_eq!(
        ready["message"]["agentUpdate"]["status"],
        "AGENT_STATUS_READY"
    );
    assert!(seen.iter().any(|v| v["event"] == "registered"));
}

/// docs/stdio-walkthrough.md, replayed: each `json stdin` block's line is
/// written to the mock's stdio loop, and the `sent` and `message` events of
/// the `json stdout` block after it must come back exactly (ids that differ
/// between runs, process ids and the workspace root aside). Keeps the page
/// a reader follows by hand true.
#[tokio::test]
async fn the_stdio_walkthrough_is_what_the_binaries_do() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/stdio-walkthrough.md"
    ))
    .unwrap();
    let steps = walkthrough_steps(&doc);
    assert!(steps.len() >= 7, "{steps:#?}");

    let cp = mock().await;
    let r = RunnerProc::start(RunnerOpts::new(cp.url()).arg("--sdk").arg("scripted"));
    // The runner canonicalizes its workspace root (the temp dir may sit
    // behind a symlink); it may not exist yet.
    let root = r.dirs.path().canonicalize().unwrap().join("ws");
    let (mut input_w, input_r) = tokio::io::duplex(64 * 1024);
    let (output_w, output_r) = tokio::io::duplex(1024 * 1024);
    let plane = std::sync::Arc::new(cp);
    let p = plane.clone();
    tokio::spawn(async move { stdio::run(&p, BufReader::new(input_r), output_w).await });
    let mut lines = BufReader::new(output_r).lines();

    let mut want_ids = Normalizer::new("/tmp/walkthrough/ws");
    let mut got_ids = Normalizer::new(&root.to_string_lossy());
    for (input, expected) in steps {
        let expected = by_kind(expected, &mut want_ids);
        // The page's ids, as this run has them.
        let mut line = input.clone();
        for (doc_id, run_id) in want_ids.seen.iter().zip(&got_ids.seen) {
            line = line.replace(doc_id, run_id);
        }
        input_w
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        let mut got = Vec::new();
        let counted = |got: &[serde_json::Value], kind: &str| {
            got.iter().filter(|v| v["event"] == kind).count()
        };
        let arrived = tokio::time::timeout(WAIT, async {
            while counted(&got, "sent") < expected.0.len()
                || counted(&got, "message") < expected.1.len()
            {
                let Ok(Some(l)) = lines.next_line().await else {
                    return false;
                };
                got.push(serde_json::from_str(&l).unwrap());
            }
            true
        })
        .await;
        assert_eq!(arrived, Ok(true), "after {input}: {got:#?}\n{}", r.logs());
        let got = by_kind(got, &mut got_ids);
        assert_eq!(got, expected, "after {input}\n{}", r.logs());
    }
}

/// (stdin line, stdout events) of each step of the walkthrough: a
/// ```` ```json stdin ```` block and the ```` ```json stdout ```` block after it.
fn walkthrough_steps(doc: &str) -> Vec<(String, Vec<serde_json::Value>)> {
    let mut steps: Vec<(String, Vec<serde_json::Value>)> = Vec::new();
    let mut block: Option<&str> = None;
    let mut pending: Option<String> = None;
    for line in doc.lines() {
        match (block, line) {
            (None, "```json stdin") => block = Some("stdin"),
            (None, "```json stdout") => block = Some("stdout"),
            (Some(_), "```") => block = None,
            (Some("stdin"), l) => pending = Some(l.to_owned()),
            (Some("stdout"), l) => {
                if let Some(input) = pending.take() {
                    steps.push((input, Vec::new()));
                } else if steps.is_empty() {
                    continue; // the start-up block, before any input
                }
                if let Some(step) = steps.last_mut() {
                    step.1.push(serde_json::from_str(l).unwrap());
                }
            }
            _ => {}
        }
    }
    steps
}

/// `sent` and `message` events, apart and in order, normalized: other events
/// depend on the transport (`disconnected`) and are left out.
fn by_kind(
    events: Vec<serde_json::Value>,
    ids: &mut Normalizer,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let (mut sent, mut messages) = (Vec::new(), Vec::new());
    for e in events {
        match e["event"].as_str() {
            Some("sent") => sent.push(e),
            Some("message") => messages.push(e),
            _ => {}
        }
    }
    // Ids first appear in messages: normalize those first, so the order of
    // first appearance is the same in the page and in the run.
    for v in messages.iter_mut().chain(sent.iter_mut()) {
        ids.value(v);
    }
    (sent, messages)
}

/// Replaces what differs between runs: thread ids (`thr-` + 32 hex digits)
/// and turn ids (`turn-` + a UUID) by their order of first appearance,
/// process ids by `PID`, and the workspace root by `ROOT`.
struct Normalizer {
    root: String,
    seen: Vec<String>,
}

impl Normalizer {
    fn new(root: &str) -> Self {
        Self {
            root: root.to_owned(),
            seen: Vec::new(),
        }
    }

    fn text(&mut self, s: &str) -> String {
        let mut s = s.replace(&self.root, "ROOT");
        for (prefix, len) in [("thr-", 32), ("turn-", 36)] {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(i) = rest.find(prefix) {
                out.push_str(&rest[..i]);
                let tail = &rest[i + prefix.len()..];
                let id_len = tail
                    .bytes()
                    .take(len)
                    .take_while(|b| b.is_ascii_hexdigit() || *b == b'-')
                    .count();
                if id_len < len {
                    out.push_str(prefix);
                    rest = tail;
                    continue;
                }
                let id = &rest[i..i + prefix.len() + len];
                let n = match self.seen.iter().position(|x| x == id) {
                    Some(n) => n,
                    None => {
                        self.seen.push(id.to_owned());
                        self.seen.len() - 1
                    }
                };
                out.push_str(&format!("{prefix}#{n}"));
                rest = &tail[len..];
            }
            out.push_str(rest);
            s = out;
        }
        s
    }

    fn value(&mut self, v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => *s = self.text(s),
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| self.value(x)),
            serde_json::Value::Object(o) => {
                for (k, x) in o.iter_mut() {
                    if k == "processId" {
                        *x = "PID".into();
                    } else {
                        self.value(x);
                    }
                }
            }
            _ => {}
        }
    }
}
