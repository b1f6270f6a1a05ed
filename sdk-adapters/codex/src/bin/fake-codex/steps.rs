//! The fake's larger script steps, apart from the protocol plumbing in
//! `main.rs`: one item of every kind (`all-items`), the approval, question
//! and elicitation round trips (`approve`, `ask`, `elicit`), a flood of
//! items (`flood`) and token usage.

use serde_json::{Value, json};

use sdk_process::fake::raw;

use super::{Fake, notify};

impl Fake {
    pub(super) fn all_items(&mut self) {
        let (thread, turn) = self.ids();
        // Noise a client must tolerate, interleaved with the items.
        notify("account/rateLimits/updated", json!({"rateLimits": {}}));
        notify(
            "item/agentMessage/delta",
            json!({"threadId": thread, "turnId": "some-other-turn", "itemId": "x", "delta": "not ours"}),
        );
        raw("{not json either");
        notify("some/future/notification", json!({"threadId": thread}));

        let reasoning = self.started("reasoning", json!({"summary": [], "content": []}));
        self.delta(
            "item/reasoning/summaryTextDelta",
            &reasoning,
            "thinking ",
            json!({"summaryIndex": 0}),
        );
        self.delta(
            "item/reasoning/summaryTextDelta",
            &reasoning,
            "hard",
            json!({"summaryIndex": 0}),
        );
        notify(
            "item/reasoning/summaryPartAdded",
            json!({"threadId": thread, "turnId": turn, "itemId": reasoning, "summaryIndex": 1}),
        );
        self.delta(
            "item/reasoning/summaryTextDelta",
            &reasoning,
            "then more",
            json!({"summaryIndex": 1}),
        );
        self.completed(
            &reasoning,
            "reasoning",
            json!({"summary": [], "content": []}),
        );

        let plan = self.started("plan", json!({"text": ""}));
        self.delta("item/plan/delta", &plan, "1. look", json!({}));
        self.completed(&plan, "plan", json!({"text": "1. look\n2. fix"}));

        self.command("/bin/bash -lc 'echo hi'", "hi\n", "completed", json!(0));

        let change = json!({"changes": [{"path": "src/a.rs", "kind": {"type": "update", "move_path": null}, "diff": "-a\n+b\n"}], "status": "completed"});
        let file = self.started("fileChange", json!({"changes": [], "status": "inProgress"}));
        self.completed(&file, "fileChange", change);

        let mcp_fields = json!({"server": "docs", "tool": "search", "status": "completed", "arguments": {"q": "x"},
            "appContext": null, "mcpAppUi": null, "pluginId": null, "readOnlyHint": null,
            "result": {"content": [{"type": "text", "text": "found it"}], "structuredContent": null, "_meta": null},
            "error": null, "durationMs": 1});
        let mcp = self.started("mcpToolCall", json!({"server": "docs", "tool": "search", "status": "inProgress", "arguments": {"q": "x"}}));
        self.completed(&mcp, "mcpToolCall", mcp_fields);

        let collab = json!({"tool": "spawnAgent", "status": "completed", "senderThreadId": thread,
            "receiverThreadIds": [], "prompt": "help me", "model": null, "reasoningEffort": null, "agentsStates": {}});
        let collab_id = self.started("collabAgentToolCall", collab.clone());
        self.completed(&collab_id, "collabAgentToolCall", collab);

        let search = self.started(
            "webSearch",
            json!({"query": "", "action": null, "results": null}),
        );
        self.completed(
            &search,
            "webSearch",
            json!({"query": "rust tokio", "action": null, "results": null}),
        );

        let image = self.started("imageView", json!({"path": "/tmp/a.png"}));
        self.completed(&image, "imageView", json!({"path": "/tmp/a.png"}));

        let entered = self.started("enteredReviewMode", json!({"review": "checking"}));
        self.completed(&entered, "enteredReviewMode", json!({"review": "checking"}));
        let exited = self.started("exitedReviewMode", json!({"review": "looks good"}));
        self.completed(&exited, "exitedReviewMode", json!({"review": "looks good"}));

        let compaction = self.started("contextCompaction", json!({}));
        self.completed(&compaction, "contextCompaction", json!({}));

        let unknown = self.started("hologram", json!({"shape": "cube"}));
        self.completed(&unknown, "hologram", json!({"shape": "cube"}));

        self.agent_message("all done");
        self.usage();
    }

    pub(super) fn approve(&mut self, command: &str) {
        let (thread, turn) = self.ids();
        let response = self.request("item/commandExecution/requestApproval", json!({
            "kind": "command", "threadId": thread, "turnId": turn, "itemId": "call_approval",
            "startedAtMs": 1, "environmentId": null, "reason": "wants to write", "command": command, "cwd": "/fake/cwd",
        }));
        let decision = match &response["result"]["decision"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        self.agent_message(&format!("approval: {decision}"));
        if decision == "accept" {
            self.command(command, "ran\n", "completed", json!(0));
        } else {
            self.command(command, "", "declined", Value::Null);
        }
    }

    pub(super) fn ask(&mut self) {
        let (thread, turn) = self.ids();
        let response = self.request("item/tool/requestUserInput", json!({
            "threadId": thread, "turnId": turn, "itemId": "ask_1", "isBlocking": true, "autoResolutionMs": null,
            "questions": [{"id": "q1", "header": "Pick", "question": "Which?", "isOther": false, "isSecret": false, "options": null}],
        }));
        self.agent_message(&format!("answers: {}", response["result"]["answers"]));
    }

    pub(super) fn elicit(&mut self) {
        let (thread, turn) = self.ids();
        let response = self.request("mcpServer/elicitation/request", json!({
            "threadId": thread, "turnId": turn, "serverName": "docs", "mode": "form", "message": "Which env?", "_meta": null,
            "requestedSchema": {"type": "object", "properties": {"env": {"type": "string", "enum": ["dev", "prod"]}}},
        }));
        let result = &response["result"];
        let action = result["action"].as_str().unwrap_or("?");
        self.agent_message(&format!("elicitation: {action} {}", result["content"]));
    }

    pub(super) fn flood(&mut self, n: usize) {
        let item_id = self.started("commandExecution", json!({
            "command": "yes | head", "cwd": "/fake/cwd", "processId": "77", "source": "agent",
            "status": "inProgress", "commandActions": [], "aggregatedOutput": null, "exitCode": null, "durationMs": null,
        }));
        for i in 0..n {
            self.delta(
                "item/commandExecution/outputDelta",
                &item_id,
                &format!("line {i}\n"),
                json!({}),
            );
        }
        self.completed(&item_id, "commandExecution", json!({
            "command": "yes | head", "cwd": "/fake/cwd", "processId": "77", "source": "agent",
            "status": "completed", "commandActions": [], "aggregatedOutput": null, "exitCode": 0, "durationMs": 3,
        }));
    }

    pub(super) fn usage(&self) {
        let (thread, turn) = self.ids();
        let breakdown = json!({"totalTokens": 120, "inputTokens": 100, "cachedInputTokens": 10,
            "cacheWriteInputTokens": 0, "outputTokens": 20, "reasoningOutputTokens": 5});
        notify(
            "thread/tokenUsage/updated",
            json!({"threadId": thread, "turnId": turn,
            "tokenUsage": {"total": breakdown, "last": breakdown, "modelContextWindow": 258400}}),
        );
    }
}
