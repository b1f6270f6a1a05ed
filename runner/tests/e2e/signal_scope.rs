//! A host whose Landlock cannot scope signals (ABI < 6), made of this
//! newer kernel by telling the launcher to use ABI 5
//! (`AGENT_LAUNCHER_LANDLOCK_ABI_MAX`, which only ever lowers): `enforce`
//! without `--agent-uid` refuses every turn, naming the Landlock ABI and
//! `--agent-uid`, and `doctor` fails its sandbox check; `best-effort`
//! serves, and its start log, `doctor` and `/status` say signals are not
//! scoped — which they are not: the agent can signal the runner.

use crate::doctor::{doctor, find};
use crate::local_endpoints::{health_addr, raw_get};
use crate::support::*;

const CAP: (&str, &str) = ("AGENT_LAUNCHER_LANDLOCK_ABI_MAX", "5");

/// Skips (recorded) where the kernel has no ABI 5 to lower to.
fn abi_5_available() -> bool {
    match agent_launcher::probe_host().landlock_abi() {
        Some(abi) if abi >= 5 => true,
        _ => {
            test_kit::skip_this_test("Landlock ABI < 5 here: cannot pose as an ABI 5 kernel");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforce_without_signal_scoping_refuses_turns_naming_why() {
    if !abi_5_available() {
        return;
    }
    let (cp, runner) = agent_with(|o| o.arg("--sandbox").arg("enforce").env(CAP.0, CAP.1)).await;
    runner.wait_log("every turn will be refused").await;
    let outcome = try_create_thread(&cp, "a", "t", "scripted-fast", WAIT).await;
    let why = match outcome {
        Err(m) => format!("{m:?}"),
        Ok(thread) => {
            send(&cp, "m", user_message("a", &thread, "say hi", false)).await;
            expect_error(&cp, "m").await
        }
    };
    assert!(
        why.contains("Landlock ABI 5 < 6") && why.contains("--agent-uid"),
        "{why}\n{}",
        runner.logs()
    );

    let cp = mock().await;
    let (code, report, stderr) =
        doctor(&cp.url(), &[("AGENT_RUNNER_SANDBOX", "enforce"), CAP]).await;
    assert_eq!(code, 1, "{report:#}\n{stderr}");
    let sandbox = find(&report, "checks", "check", "sandbox");
    assert_eq!(sandbox["outcome"], "fail", "{sandbox:#}");
    let detail = sandbox["detail"].as_str().unwrap();
    assert!(
        detail.contains("REFUSING every turn") && detail.contains("signal scoping"),
        "{sandbox:#}"
    );
    assert!(
        detail.contains("capped by AGENT_LAUNCHER_LANDLOCK_ABI_MAX"),
        "{sandbox:#}"
    );
    assert!(sandbox.to_string().contains("--agent-uid"), "{sandbox:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_effort_without_signal_scoping_says_so_everywhere() {
    if !abi_5_available() {
        return;
    }
    let (cp, runner) = agent_with(|o| {
        o.arg("--sandbox")
            .arg("best-effort")
            .arg("--health-addr")
            .arg("127.0.0.1:0")
            .env(CAP.0, CAP.1)
    })
    .await;
    runner.wait_log("signals are not scoped").await;
    let status = raw_get(&health_addr(&runner).await, "/status").await;
    assert!(status.contains("signals are not scoped"), "{status}");
    assert!(status.contains("landlock: ABI 5"), "{status}");

    // It serves, and the gap is real: the agent can signal the runner.
    let thread = create_thread(&cp, "a", "t").await;
    send(
        &cp,
        "m",
        user_message("a", &thread, "run kill -0 $PPID && echo signalled", false),
    )
    .await;
    turn_completed(&cp, "m").await;
    let outputs = command_outputs(&replies(&cp, "m"));
    assert!(
        outputs.iter().any(|o| o.contains("signalled")),
        "{outputs:?}\n{}",
        runner.logs()
    );

    let (_, report, stderr) = doctor(&mock().await.url(), &[CAP]).await;
    let sandbox = find(&report, "checks", "check", "sandbox");
    assert_eq!(sandbox["outcome"], "warn", "{sandbox:#}\n{stderr}");
    assert!(
        sandbox["detail"]
            .as_str()
            .unwrap()
            .contains("signals are not scoped"),
        "{sandbox:#}"
    );
}
