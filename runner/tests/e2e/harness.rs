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
