//! Many threads at once: all complete, each thread's updates in order.

use std::collections::HashMap;

use agent_runner_proto::runner::client_message::Payload;
use agent_runner_proto::runner::*;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_threads_with_interleaved_messages() {
    let (cp, _r) = connected().await;
    create_agent(&cp, "a").await;
    let mut threads = Vec::new();
    for i in 0..200 {
        threads.push(create_thread(&cp, "a", &format!("t{i}")).await);
    }
    // Two messages per thread, interleaved across threads.
    for round in 0..2 {
        for (i, t) in threads.iter().enumerate() {
            let script = format!("say {i}-{round}-a\nsay {i}-{round}-b");
            send(
                &cp,
                &format!("m{i}-{round}"),
                user_message("a", t, &script, false),
            )
            .await;
        }
        for i in 0..200 {
            turn_completed(&cp, &format!("m{i}-{round}")).await;
        }
    }
    // Per thread: the completed agent messages in order.
    let mut per_thread: HashMap<String, Vec<String>> = HashMap::new();
    for m in cp.received() {
        if let Some(Payload::ItemUpdate(i)) = payload(&m)
            && i.status == ItemStatus::Completed as i32
            && i.item_type == ItemType::AgentMessage as i32
        {
            per_thread
                .entry(i.thread_id.clone())
                .or_default()
                .push(i.text.clone().unwrap());
        }
    }
    for (i, t) in threads.iter().enumerate() {
        let expected: Vec<String> = (0..2)
            .flat_map(|r| [format!("{i}-{r}-a"), format!("{i}-{r}-b")])
            .collect();
        assert_eq!(per_thread.get(t), Some(&expected), "thread {i}");
    }
    assert!(cp.invalid_received().is_empty());
}
