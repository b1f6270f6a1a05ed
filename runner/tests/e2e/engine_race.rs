//! The symlink-swap race against the engine's file tools, through the
//! whole runner: a code-agent thread's own `bash` (sandboxed) starts a
//! swapper that keeps exchanging a directory of its workspace with a link
//! to a directory outside (`renameat2(RENAME_EXCHANGE)`), then the mock
//! model has the engine's `write`, `edit`, `read`, `ls`, `glob` and `grep` work
//! in that directory, over and over. Those tools run in the runner's
//! process, with the runner's authority: nothing outside may change or be
//! read, while the thread's own calls still land (some rounds win). Once
//! as the runner's uid, once with `--agent-uid`.

use agent_runner_proto::runner::server_message::Request;
use agent_runner_proto::runner::*;
use code_agent_engine::testing::{MockLlm, MockReply};
use serde_json::json;

use crate::engine_state::MODEL;
use crate::support::*;
/// What the outside directory holds: the agent must never see it.
const SECRET: &str = "outside-secret-7f3a";
const ROUNDS: usize = 6;
const CALLS: usize = 16;

/// A background swapper: `d` (a directory) and `l` (a link to `outside`)
/// trade places as fast as they can; it writes `swapper.pid` once running,
/// and stops (writing `stopped`) once a `stop` file appears.
fn swapper(outside: &str) -> String {
    format!(
        "mkdir -p d && echo mine > d/f.txt && ln -sfn {outside} l && \
         setsid python3 -c \"import ctypes,os,time\nlibc=ctypes.CDLL(None,use_errno=True)\n\
         open('swapper.pid','w').write(str(os.getpid()))\nn=0\nwhile True:\n  n+=libc.renameat2(-100,b'd',-100,b'l',2)==0\n  if n%500==0:\n    open('swaps.new','w').write(str(n)); os.rename('swaps.new','swaps')\n    if os.path.exists('stop'): open('stopped','w').close(); break\" \
         </dev/null >/dev/null 2>&1 & sleep 0.3; cat swapper.pid"
    )
}

/// Has the swapper in `ws` stop and waits until it has: until then `d`
/// and `l` keep trading places, so two reads could both meet the link.
async fn stop_swapper(ws: &std::path::Path) {
    std::fs::write(ws.join("stop"), "").unwrap();
    test_kit::wait::until(
        || ws.join("stopped").exists(),
        || "the swapper did not stop".into(),
    )
    .await;
}

/// One round of file-tool calls inside `d`.
fn round(r: usize) -> MockReply {
    let calls: Vec<(String, &str, serde_json::Value)> = (0..CALLS)
        .map(|i| {
            let id = format!("c{r}-{i}");
            match i % 6 {
                0 => (
                    id,
                    "write",
                    json!({"path": "d/f.txt", "content": format!("round {r}\n")}),
                ),
                1 => (
                    id,
                    "edit",
                    json!({"path": "d/f.txt", "old_string": "round", "new_string": "ROUND"}),
                ),
                2 => (id, "read", json!({"path": "d/secret.txt"})),
                3 => (id, "ls", json!({"path": "d"})),
                4 => (id, "glob", json!({"pattern": "d/*.txt"})),
                _ => (
                    id,
                    "grep",
                    json!({"pattern": "outside-secret", "path": "d"}),
                ),
            }
        })
        .collect();
    let borrowed: Vec<(&str, &str, serde_json::Value)> = calls
        .iter()
        .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
        .collect();
    MockReply::tool_calls(&borrowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engines_file_tools_hold_while_the_agent_swaps_links() {
    file_tools_hold(false).await;
}

/// The whole race; `as_agent_uid`: the swapper runs as
/// `agent_uid::AGENT_UID` (the tools still run as the runner).
pub(crate) async fn file_tools_hold(as_agent_uid: bool) {
    if !std::path::Path::new("/usr/bin/python3").is_file() {
        test_kit::skip_this_test("no /usr/bin/python3 to run the swapper with");
        return;
    }
    let outside = tempfile::tempdir().unwrap();
    let outside_path = outside.path().canonicalize().unwrap();
    std::fs::write(outside_path.join("secret.txt"), SECRET).unwrap();
    std::fs::write(outside_path.join("f.txt"), "precious\n").unwrap();
    let mut script = vec![MockReply::tool_call(
        "swap",
        "bash",
        json!({"command": swapper(&outside_path.display().to_string())}),
    )];
    script.extend((0..ROUNDS).map(round));
    script.push(MockReply::text("raced"));
    let llm = MockLlm::start(script).await;
    let (cp, runner) = crate::engine_state::code_agent_runner(&llm, as_agent_uid).await;
    let thread = try_create_thread(&cp, "c", "t-race", MODEL, WAIT)
        .await
        .unwrap_or_else(|m| panic!("thread: {m:?}\n{}", runner.logs()));
    send(&cp, "race", user_message("c", &thread, "race", false)).await;
    turn_completed(&cp, "race").await;
    let msgs = replies(&cp, "race");
    let swapper_started = command_outputs(&msgs);
    assert!(
        swapper_started.len() == 1 && swapper_started[0].trim().parse::<i32>().is_ok(),
        "{swapper_started:?}\n{}",
        runner.logs()
    );

    // Nothing outside changed, and nothing of it reached the control plane.
    let mut names: Vec<String> = std::fs::read_dir(&outside_path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["f.txt", "secret.txt"]);
    assert_eq!(
        std::fs::read_to_string(outside_path.join("f.txt")).unwrap(),
        "precious\n"
    );
    assert_eq!(
        std::fs::read_to_string(outside_path.join("secret.txt")).unwrap(),
        SECRET
    );
    for text in texts(&msgs) {
        assert!(!text.contains(SECRET), "the agent read outside: {text}");
    }
    // The thread's own calls still landed: some round won, and the file in
    // its workspace holds a round's text (whichever side `d` is on now).
    let ws = runner.thread_workspace("c", &thread);
    stop_swapper(&ws).await;
    let own = ["d/f.txt", "l/f.txt"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(ws.join(p)).ok())
        .find(|t| t.to_lowercase().starts_with("round"));
    assert!(
        own.is_some(),
        "no write of the thread landed\n{}",
        runner.logs()
    );
    // The swapper did swap while the tools worked, and the tools met it:
    // some calls were refused for a path that led out.
    let swaps: u64 = std::fs::read_to_string(ws.join("swaps"))
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let tool_texts = texts(&msgs);
    let refused = tool_texts.iter().filter(|t| t.contains("error:")).count();
    eprintln!(
        "swaps {swaps}, tool items {}, refused {refused}",
        tool_texts.len()
    );
    assert!(swaps >= 500, "the swapper did not run: {swaps}");
    assert_eq!(llm.remaining(), 0);

    // The swapper goes with the thread.
    send(
        &cp,
        "d-race",
        Request::DeleteThreadRequest(DeleteThreadRequest {
            agent_id: "c".into(),
            thread_id: thread,
        }),
    )
    .await;
    reply(&cp, "d-race").await;
    runner.stop().await;
}
