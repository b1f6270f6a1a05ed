//! Runs the stable fuzz driver as part of `cargo test`, so CI fuzzes from
//! the test build's own artifacts instead of building the tree again for
//! `cargo run -p agent-runner-fuzz` (a `-p` build unifies other features and
//! recompiles most dependencies).
//!
//! How long: `FUZZ_SECONDS` (CI sets 60; 5 by default, enough to replay the
//! seeds and run thousands of mutated inputs). A finding is a panic or a
//! failed check in the harness, which makes the driver exit non-zero. The
//! driver's summary line is kept in `target/tmp/stable_driver.txt`.

// A test: a failed expect is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn the_stable_driver_runs_without_a_finding() {
    let seconds = std::env::var("FUZZ_SECONDS").unwrap_or_else(|_| "5".to_owned());
    seconds
        .parse::<u64>()
        .expect("FUZZ_SECONDS is a whole number of seconds");
    let out = Command::new(env!("CARGO_BIN_EXE_stable_driver"))
        .args(["100000000", "--seconds", &seconds])
        .output()
        .expect("the stable driver starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Kept for CI's summary (the test harness captures a passing test's output).
    let summary = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("stable_driver.txt");
    std::fs::write(&summary, stdout.as_bytes()).expect("the summary is written");
    assert!(
        out.status.success(),
        "the stable driver failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let executions: u64 = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no execution count in {stdout:?}"));
    assert!(
        stdout.contains("without a finding") && executions > 13,
        "the driver ran past its seed corpus: {stdout}"
    );
}
