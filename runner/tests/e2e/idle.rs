//! `--exit-when-idle`: a running turn keeps the runner up, and
//! once nothing runs and nothing arrives for the limit it drains and exits 0.

use agent_runner_proto::runner::TurnStatus;

use crate::support::*;

#[tokio::test]
async fn exits_0_once_idle_but_never_during_a_turn() {
    let (cp, mut runner) = agent_with(|o| o.arg("--exit-when-idle").arg("1500ms")).await;
    let thread = create_thread(&cp, "a", "t").await;
    // A turn longer than the idle limit: the runner must not start draining
    // while it runs, so the next message is still taken.
    send(
        &cp,
        "long",
        user_message("a", &thread, &sleep_then_says(3000, 1), false),
    )
    .await;
    turn_completed(&cp, "long").await;
    send(
        &cp,
        "next",
        user_message("a", &thread, "say still here", false),
    )
    .await;
    let next = cp
        .wait_for(
            |m| rid_is(m, "next") && (is_turn(m, TurnStatus::Completed) || error_text(m).is_some()),
            WAIT,
        )
        .await
        .unwrap();
    assert!(
        error_text(&next).is_none(),
        "refused after a long turn: {next:?}\n{}",
        runner.logs()
    );
    // Then nothing: it drains and exits 0 by itself.
    let code = runner.wait_exit(WAIT).await;
    assert_eq!(code, Some(0), "{}", runner.logs());
    assert!(
        runner.logs().contains("--exit-when-idle"),
        "{}",
        runner.logs()
    );
}
