//! What the runner's log lines look like to the tools that read them: JSON
//! lines a strict parser accepts (no key twice: jq and Python keep one and
//! drop the other), and no colour codes when stderr is not a terminal.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::support::*;

/// A JSON value parsed by a parser that refuses an object with a key twice.
struct Strict;

impl<'de> de::Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            map.next_value::<Strict>()?;
        }
        Ok(Strict)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }
}

/// A run that logs a lost link (gRPC status with a message), a turn with a
/// command, an invalid request and a failed turn.
async fn eventful_run(opts: RunnerOpts) -> RunnerProc {
    let cp = mock().await;
    let r = RunnerProc::start(opts.clone_for(&cp));
    cp.wait_connected(WAIT).await.unwrap();
    create_agent(&cp, "a").await;
    let t = create_thread(&cp, "a", "t").await;
    start_turn(&cp, "m1", "a", &t, "say hi\nrun echo out\nfail on purpose").await;
    turn_completed(&cp, "m1").await;
    send(&cp, "bad", user_message("a", "../x", "say x", false)).await;
    expect_error(&cp, "bad").await;
    assert!(cp.drop_stream());
    cp.wait_for_connections(2, WAIT).await.unwrap();
    r.wait_log("lost the control plane at").await;
    r
}

#[tokio::test]
async fn json_log_lines_have_no_duplicate_keys() {
    let r = eventful_run(RunnerOpts::new("").arg("--log-format").arg("json")).await;
    let logs = r.logs();
    let mut lines = 0;
    for line in logs.lines().filter(|l| l.starts_with('{')) {
        lines += 1;
        if let Err(e) = serde_json::from_str::<Strict>(line) {
            panic!("{e}: {line}");
        }
    }
    assert!(lines > 10, "{logs}");
}

#[tokio::test]
async fn redirected_text_logs_carry_no_colour_codes() {
    let r = eventful_run(RunnerOpts::new("")).await;
    let logs = r.logs();
    assert!(logs.contains("lost the control plane at"), "{logs}");
    assert!(!logs.contains('\u{1b}'), "{logs:?}");
}
