//! The drivers outside harnesses use: YAML scenarios and the stdio JSON
//! lines protocol, end to end against a scripted runner.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use super::*;
use crate::stdio;

#[tokio::test]
async fn basic_scenario_passes_against_a_scripted_runner() {
    let (outcome, text) =
        run_scenario(include_str!("../../scenarios/basic.yaml"), BTreeMap::new()).await;
    let outcome = outcome.unwrap_or_else(|e| panic!("{e:#}\n{text}"));
    assert_eq!(
        outcome.vars.get("thread").map(String::as_str),
        Some("thread-1")
    );
    assert_eq!(outcome.vars.get("turn").map(String::as_str), Some("turn-1"));
    assert!(text.contains("captured thread = thread-1"), "{text}");
    assert!(text.contains("scenario passed"), "{text}");
}

#[tokio::test]
async fn a_failed_expectation_reports_the_closest_messages() {
    let (outcome, _) = run_scenario(
        r#"
steps:
  - send: {requestId: r1, createAgentRequest: {agentId: a1, agentSdk: scripted}}
  - expect: {match: {requestId: r1, agentUpdate: {status: AGENT_STATUS_DELETED}}, timeout_ms: 300}
"#,
        BTreeMap::new(),
    )
    .await;
    let err = outcome.expect_err("fails");
    let text = format!("{err:#}");
    assert!(text.contains("step 2/2 (expect) failed"), "{text}");
    assert!(text.contains("expected subset"), "{text}");
    assert!(text.contains("closest received messages"), "{text}");
    assert!(
        text.contains(
            "agentUpdate.status: expected \"AGENT_STATUS_DELETED\", got \"AGENT_STATUS_READY\""
        ),
        "{text}"
    );
}

#[tokio::test]
async fn scenario_variables_come_from_the_caller_and_unknown_ones_fail() {
    let (outcome, _) = run_scenario(
        r#"
steps:
  - send: {requestId: r1, createAgentRequest: {agentId: "${agent}", agentSdk: scripted}}
  - expect: {match: {agentUpdate: {agentId: "${agent}"}}, since: last_send}
  - send: {requestId: r2, createAgentRequest: {agentId: "${nope}", agentSdk: scripted}}
"#,
        BTreeMap::from([("agent".to_owned(), "from-cli".to_owned())]),
    )
    .await;
    let err = outcome.expect_err("unknown variable");
    let text = format!("{err:#}");
    assert!(text.contains("step 3/3"), "{text}");
    assert!(text.contains("${nope}"), "{text}");
}

#[tokio::test]
async fn stdio_queues_until_connected_and_prints_every_event() {
    let plane = plain().await;
    let (mut stdin, input) = tokio::io::duplex(64 * 1024);
    let (output, stdout) = tokio::io::duplex(64 * 1024);
    let mut lines = BufReader::new(stdout).lines();
    let driver = async {
        stdio::run(&plane, BufReader::new(input), output)
            .await
            .expect("stdio ends cleanly");
    };
    let harness = async {
        let mut next = async || -> Value {
            let line = tokio::time::timeout(WAIT, lines.next_line())
                .await
                .expect("a line in time")
                .expect("readable")
                .expect("not at EOF");
            serde_json::from_str(&line).expect("every stdout line is JSON")
        };
        let listening = next().await;
        assert_eq!(listening["event"], "listening");
        assert_eq!(listening["url"], json!(plane.url()));

        // Written before any runner is connected: queued.
        stdin
            .write_all(b"{\"requestId\":\"r1\",\"createAgentRequest\":{\"agentId\":\"a1\",\"agentSdk\":\"scripted\"}}\nnot json\n")
            .await
            .expect("writes");
        let error = next().await;
        assert_eq!(error["event"], "error");
        assert_eq!(error["line"], 2);

        spawn_scripted_runner(&plane.url()).await;
        let mut events = Vec::new();
        while !events.iter().any(|e: &Value| e["event"] == "message") {
            events.push(next().await);
        }
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(kinds, ["registered", "connected", "sent", "message"]);
        assert_eq!(events[0]["agentSdks"][0]["name"], "scripted");
        assert_eq!(
            events[2]["message"],
            json!({"requestId": "r1", "createAgentRequest": {"agentId": "a1", "agentSdk": "scripted"}})
        );
        assert_eq!(
            events[3],
            json!({"event": "message", "index": 0, "message": {
                "requestId": "r1",
                "agentUpdate": {"agentId": "a1", "status": "AGENT_STATUS_READY"}
            }})
        );

        stdin
            .write_all(b"{\"command\":\"drop_connection\"}\n")
            .await
            .expect("writes");
        assert_eq!(next().await["event"], "disconnected");
        drop(stdin);
    };
    tokio::join!(driver, harness);
}

#[tokio::test]
async fn stdio_returns_at_eof_when_nothing_can_be_delivered() {
    let plane = plain().await;
    let input = BufReader::new(&b"{\"requestId\":\"r1\",\"heartbeatRequest\":{}}\n"[..]);
    let mut output = Vec::new();
    stdio::run(&plane, input, &mut output).await.expect("ends");
    let text = String::from_utf8(output).expect("utf-8");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines[0]["event"], "listening");
    assert_eq!(lines[1]["event"], "error");
    assert!(
        lines[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("1 line(s) not delivered")),
        "{text}"
    );
    assert!(plane.sent().is_empty());
}

/// The `expect_sequence` step checks the sequence report: a runner that
/// does not offer acked delivery leaves it empty, so zero passes and one
/// duplicate fails with the report.
#[tokio::test]
async fn expect_sequence_step_checks_the_report() {
    let (outcome, text) = run_scenario(
        r#"
steps:
  - send: {requestId: r1, heartbeatRequest: {}}
  - expect: {match: {requestId: r1}}
  - expect_sequence: {duplicates: 0, gaps: 0, unnumbered: 0}
  - expect_sequence: {duplicates: 1}
"#,
        BTreeMap::new(),
    )
    .await;
    let err = outcome.expect_err("the last step fails");
    let msg = format!("{err:#}");
    assert!(msg.contains("step 4/4 (expect_sequence) failed"), "{msg}");
    assert!(msg.contains("expected 1 duplicates, saw 0"), "{msg}");
    assert!(text.contains("0 duplicate(s) dropped"), "{text}");
}
