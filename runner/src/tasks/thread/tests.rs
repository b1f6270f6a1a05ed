//! What every thread pays for as long as it lives: its task waits in
//! `run`'s `select!` all its life, and its mailbox holds room for 32
//! commands from the moment it is made (tokio's channel allocates its
//! first block of 32 slots at once). 10,000 threads: tens of MiB for a few
//! KiB each.

use super::*;
use crate::host::store::Store;
use crate::host::workspace::Workspaces;
use crate::tasks::sdks::Sdks;

/// What a waiting thread's task may take (the future `run` returns; 2,416
/// bytes in a debug build when this was written, the task's own fields
/// about a third of it). It was 4.9 KiB while its handlers were inline,
/// and an await after the loop left unboxed grew it again by about 2.5 KiB.
const LIMIT: usize = 2560;

/// A queued command at most (its mailbox's first block is 32 of them).
const COMMAND_LIMIT: usize = 64;

#[test]
fn a_threads_mailbox_stays_small() {
    let size = std::mem::size_of::<Queued<ThreadCmd>>();
    eprintln!("queued thread command: {size} bytes");
    assert!(
        size <= COMMAND_LIMIT,
        "a queued thread command takes {size} bytes (at most {COMMAND_LIMIT}), 32 of them in every thread's mailbox"
    );
}

#[tokio::test]
async fn a_waiting_threads_task_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let sdks = Sdks::from_adapters(vec![Arc::new(sdk_scripted::ScriptedAdapter::new())]);
    let store = Store::open(&dir.path().join("state")).unwrap();
    let ws = Workspaces::new(dir.path().join("ws")).unwrap();
    let rt = Runtime::bare(sdks, store, ws, 64, 4, 1024);
    let spec = ThreadSpec {
        agent_id: "a".into(),
        thread_id: "t".into(),
        workspace: dir.path().join("ws/a/threads/t"),
        model: "scripted-fast".into(),
        reasoning_level: None,
        sdk_thread_id: None,
        env: Vec::new(),
        sandbox: sdk_adapter::Sandbox::refused("size test: no processes"),
        instructions: None,
        mcp_servers: Default::default(),
    };
    let (_tx, rx) = mpsc::unbounded_channel();
    let task = ThreadTask {
        adapter: rt.sdks.get("scripted"),
        rt,
        sdk: "scripted".into(),
        spec,
        last_turn: None,
        active: None,
        waiting: None,
        approvals: Default::default(),
        rx,
    };
    let fields = std::mem::size_of_val(&task);
    let size = std::mem::size_of_val(&task.run());
    eprintln!("thread task future: {size} bytes (its fields: {fields})");
    assert!(
        size <= LIMIT,
        "a thread's task takes {size} bytes (at most {LIMIT})"
    );
}
