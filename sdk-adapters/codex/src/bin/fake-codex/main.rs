//! A stand-in for `codex app-server` for the adapter's tests: newline-
//! delimited JSON-RPC on stdio with the method names and shapes of codex
//! 0.169.0 (responses and notifications without `"jsonrpc"`, as the real one
//! sends them). Invoked as `fake-codex app-server`.
//!
//! A turn's text is a script, one step per line:
//!
//! | line | what the fake does |
//! |---|---|
//! | `say TEXT` | an `agentMessage` item streamed as deltas |
//! | `all-items` | one item of every type (and an unknown one), with deltas, interleaved noise |
//! | `approve CMD` | asks `item/commandExecution/requestApproval`, waits for the answer, reports it in an `agentMessage` (`approval: <decision>`) and a `commandExecution` item |
//! | `ask` | asks `item/tool/requestUserInput`, reports the answers |
//! | `elicit` | asks `mcpServer/elicitation/request`, reports the action and content (`elicitation: <action> <content>`) |
//! | `flood N` | a `commandExecution` item with N output deltas in a burst |
//! | `usage` | `thread/tokenUsage/updated` (total 120 = 100 in + 20 out) |
//! | `wait` | waits for a `turn/steer` in this turn (each steer is echoed) or `turn/interrupt` |
//! | `stall` | says `stalling`, then stops answering anything (an interrupt goes unheard) |
//! | `crash` | starts an item, then exits 3 mid-turn |
//! | `fail TEXT` | an `error` with `willRetry`, then the turn fails with TEXT |
//! | `name TEXT` | `thread/name/updated` with TEXT (as codex does when it names a thread) |
//! | `instructions` | `agentMessage` with the `developerInstructions` the thread was started or resumed with (`(no instructions)` when none) |
//! | `mcp` | `agentMessage` describing the `mcp_servers.<name>` config overrides the thread was started or resumed with, one `; `-separated entry per server: `NAME stdio COMMAND ARGS env K=V…` or `NAME http URL bearer=VALUE header K=VALUE…`, where VALUE is what the named environment variable (`bearer_token_env_var`, `env_http_headers`) holds in the fake's own environment (`<unset>` when missing) — so a test sees the secret arrived without it being in the config (`(no mcp servers)` when none) |
//! | anything else | `agentMessage` `echo: LINE` |
//!
//! State that must outlive a process (which threads have a rollout, so
//! `thread/resume` works only for those) lives in `$FAKE_CODEX_STATE` (else
//! `$CODEX_HOME`, its home, as for codex), where
//! the fake also appends `pid N`, `args …` and one line per request method
//! to `log`.
//! `FAKE_CODEX_LOGGED_OUT=1`, or a file `$FAKE_CODEX_STATE/logged-out`, makes
//! `account/read` say nobody is logged in unless a login happened since
//! (`$FAKE_CODEX_STATE/auth.json`, as codex keeps it in its home).
//! `account/login/start` with `apiKey` accepts keys starting `sk-` (writes
//! `auth.json`, then `account/login/completed`); with `chatgptDeviceCode` it
//! answers the user code `FAKE-1234` and completes once a file
//! `$FAKE_CODEX_STATE/device-approved` appears (fails on `device-denied`);
//! `config/read` reports the model `$FAKE_CODEX_CONFIG_MODEL` (default
//! `fake-fast`, which `model/list` already lists).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::mpsc;

use sdk_process::fake::{FakeLog, out, raw, read_stdin};
use serde_json::{Value, json};

mod steps;

struct Fake {
    input: mpsc::Receiver<Value>,
    state: PathBuf,
    /// `$FAKE_CODEX_STATE/log`.
    log: FakeLog,
    thread: Option<String>,
    /// `developerInstructions` of the last `thread/start` or `thread/resume`.
    instructions: Option<String>,
    /// `config` overrides of the last `thread/start` or `thread/resume`.
    config: Value,
    turn: Option<String>,
    next_request: i64,
    counter: u64,
    steers: VecDeque<String>,
    /// A steer arrived during this turn (it may already have run).
    steered: bool,
    interrupted: bool,
}

fn main() {
    if std::env::args().nth(1).as_deref() != Some("app-server") {
        eprintln!("usage: fake-codex app-server");
        std::process::exit(2);
    }
    // Its home, as codex's is: FAKE_CODEX_STATE, else CODEX_HOME (what
    // the runner's sandbox lets a CLI write), else the temp dir.
    let state = std::env::var_os("FAKE_CODEX_STATE")
        .or_else(|| std::env::var_os("CODEX_HOME"))
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let mut fake = Fake {
        input: read_stdin("fake-codex"),
        log: FakeLog::new(state.join("log")),
        state,
        thread: None,
        instructions: None,
        config: Value::Null,
        turn: None,
        next_request: 0,
        counter: 0,
        steers: VecDeque::new(),
        steered: false,
        interrupted: false,
    };
    fake.log.append_pid();
    let args: Vec<String> = std::env::args().collect();
    fake.log.append(&format!("args {}", args.join(" ")));
    eprintln!("fake-codex: started");
    while let Ok(message) = fake.input.recv() {
        fake.dispatch(message);
    }
}

fn notify(method: &str, params: Value) {
    out(&json!({"method": method, "params": params, "emittedAtMs": 1}));
}

fn respond(id: &Value, result: Value) {
    out(&json!({"id": id, "result": result}));
}

fn error(id: &Value, code: i64, message: &str) {
    out(&json!({"error": {"code": code, "message": message}, "id": id}));
}

fn instructions_of(params: &Value) -> Option<String> {
    params
        .get("developerInstructions")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// What the `mcp` step says about the thread's `mcp_servers.*` overrides.
fn mcp_description(config: &Value) -> String {
    let from_env = |var: &Value| {
        var.as_str()
            .and_then(|v| std::env::var(v).ok())
            .unwrap_or_else(|| "<unset>".into())
    };
    let mut entries = Vec::new();
    if let Some(map) = config.as_object() {
        let mut keys: Vec<&String> = map
            .keys()
            .filter(|k| k.starts_with("mcp_servers."))
            .collect();
        keys.sort();
        for key in keys {
            let name = &key["mcp_servers.".len()..];
            let t = &map[key];
            if let Some(url) = t.get("url").and_then(Value::as_str) {
                let mut entry = format!(
                    "{name} http {url} bearer={}",
                    from_env(&t["bearer_token_env_var"])
                );
                if let Some(headers) = t.get("env_http_headers").and_then(Value::as_object) {
                    for (k, var) in headers {
                        entry.push_str(&format!(" header {k}={}", from_env(var)));
                    }
                }
                entries.push(entry);
            } else {
                let args: Vec<&str> = t["args"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut entry = format!(
                    "{name} stdio {} {} env",
                    t["command"].as_str().unwrap_or(""),
                    args.join(" ")
                );
                if let Some(env) = t.get("env").and_then(Value::as_object) {
                    for (k, v) in env {
                        entry.push_str(&format!(" {k}={}", v.as_str().unwrap_or("")));
                    }
                }
                entries.push(entry);
            }
        }
    }
    if entries.is_empty() {
        "(no mcp servers)".into()
    } else {
        entries.join("; ")
    }
}

fn is_response(value: &Value) -> bool {
    value.get("method").is_none() && (value.get("result").is_some() || value.get("error").is_some())
}

impl Fake {
    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}-{}-{}", std::process::id(), self.counter)
    }

    /// Handle one message outside a turn.
    fn dispatch(&mut self, message: Value) {
        let Some(method) = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return;
        };
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        if !id.is_null() {
            self.log.append(&method);
        }
        match method.as_str() {
            "initialize" => {
                raw("this line is not json");
                notify(
                    "remoteControl/status/changed",
                    json!({"status": "disabled"}),
                );
                respond(
                    &id,
                    json!({
                        "userAgent": "fake-codex/0.169.0", "codexHome": self.state,
                        "platformFamily": "unix", "platformOs": "linux",
                    }),
                );
            }
            "initialized" => {}
            "model/list" => {
                let page = if params.get("cursor").and_then(Value::as_str) == Some("p2") {
                    json!({"data": [model("fake-slow", &[])], "nextCursor": null})
                } else {
                    json!({"data": [model("fake-fast", &["low", "high"])], "nextCursor": "p2"})
                };
                respond(&id, page);
            }
            "config/read" => {
                let model =
                    std::env::var("FAKE_CODEX_CONFIG_MODEL").unwrap_or_else(|_| "fake-fast".into());
                respond(
                    &id,
                    json!({"config": {"model": model, "model_provider": "fake"}, "origins": {}, "layers": null}),
                );
            }
            "account/read" => {
                if !self.logged_in() {
                    respond(
                        &id,
                        json!({"account": null, "userId": null, "requiresOpenaiAuth": true}),
                    );
                } else {
                    respond(
                        &id,
                        json!({"account": {"type": "apiKey"}, "userId": null, "requiresOpenaiAuth": true}),
                    );
                }
            }
            "account/login/start" => self.login(&id, &params),
            "thread/start" => {
                let thread = self.fresh("thr");
                self.thread = Some(thread.clone());
                self.instructions = instructions_of(&params);
                self.config = params.get("config").cloned().unwrap_or(Value::Null);
                notify(
                    "thread/started",
                    json!({"thread": thread_json(&thread, &params)}),
                );
                respond(
                    &id,
                    json!({
                        "thread": thread_json(&thread, &params), "model": params["model"],
                        "modelProvider": "fake", "cwd": params["cwd"],
                        "approvalPolicy": params.get("approvalPolicy").cloned().unwrap_or(json!("on-request")),
                        "sandbox": {"type": "dangerFullAccess"}, "reasoningEffort": null,
                    }),
                );
            }
            "thread/resume" => {
                let thread = params["threadId"].as_str().unwrap_or("").to_owned();
                if self.state.join(format!("rollout-{thread}")).exists() {
                    self.thread = Some(thread.clone());
                    self.instructions = instructions_of(&params);
                    self.config = params.get("config").cloned().unwrap_or(Value::Null);
                    notify(
                        "thread/status/changed",
                        json!({"threadId": thread, "status": {"type": "idle"}}),
                    );
                    respond(
                        &id,
                        json!({"thread": thread_json(&thread, &params), "model": params["model"], "cwd": params["cwd"]}),
                    );
                } else {
                    error(
                        &id,
                        -32600,
                        &format!("no rollout found for thread id {thread}"),
                    );
                }
            }
            "turn/start" => self.turn(&id, &params),
            "turn/steer" => error(&id, -32600, "no active turn to steer"),
            "turn/interrupt" => error(&id, -32600, "no active turn to interrupt"),
            other => error(&id, -32601, &format!("unknown method {other}")),
        }
    }

    fn logged_in(&self) -> bool {
        let out = std::env::var_os("FAKE_CODEX_LOGGED_OUT").is_some()
            || self.state.join("logged-out").exists();
        !out || self.state.join("auth.json").exists()
    }

    fn login(&mut self, id: &Value, params: &Value) {
        match params["type"].as_str() {
            Some("apiKey") => {
                let key = params["apiKey"].as_str().unwrap_or("");
                if !key.starts_with("sk-") {
                    error(id, -32600, "invalid API key");
                    return;
                }
                let auth = json!({"OPENAI_API_KEY": key});
                let _ = std::fs::write(self.state.join("auth.json"), auth.to_string());
                respond(id, json!({"type": "apiKey"}));
                notify(
                    "account/login/completed",
                    json!({"loginId": null, "success": true, "error": null}),
                );
            }
            Some("chatgptDeviceCode") => {
                let login = self.fresh("login");
                respond(
                    id,
                    json!({"type": "chatgptDeviceCode", "loginId": login,
                        "userCode": "FAKE-1234", "verificationUrl": "https://auth.example/device"}),
                );
                let state = self.state.clone();
                std::thread::spawn(move || {
                    loop {
                        if state.join("device-approved").exists() {
                            let auth = json!({"tokens": {"access_token": "fake"}});
                            let _ = std::fs::write(state.join("auth.json"), auth.to_string());
                            notify(
                                "account/login/completed",
                                json!({"loginId": login, "success": true, "error": null}),
                            );
                            return;
                        }
                        if state.join("device-denied").exists() {
                            notify(
                                "account/login/completed",
                                json!({"loginId": login, "success": false, "error": "the device code was denied"}),
                            );
                            return;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                });
            }
            other => error(id, -32600, &format!("unsupported login type {other:?}")),
        }
    }

    /// Handle a message that arrives while a turn runs; returns responses
    /// (to our own requests) for the caller.
    fn during_turn(&mut self, message: Value) -> Option<Value> {
        if is_response(&message) {
            return Some(message);
        }
        let method = message.get("method").and_then(Value::as_str).unwrap_or("");
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        match method {
            "turn/steer" => {
                self.log.append("turn/steer");
                let expected = message["params"]["expectedTurnId"].as_str();
                if expected != self.turn.as_deref() {
                    error(
                        &id,
                        -32600,
                        "expected turn id does not match the active turn",
                    );
                    return None;
                }
                let text = message["params"]["input"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                respond(&id, json!({"turnId": self.turn}));
                self.steers.push_back(text);
                self.steered = true;
            }
            "turn/interrupt" => {
                self.log.append("turn/interrupt");
                respond(&id, json!({}));
                self.interrupted = true;
            }
            _ => self.dispatch(message),
        }
        None
    }

    /// Take what has arrived, without waiting.
    fn poll(&mut self) {
        while let Ok(message) = self.input.try_recv() {
            let _ = self.during_turn(message);
        }
    }

    /// Wait for the response to our request `id` (handling the rest).
    fn await_response(&mut self, id: i64) -> Value {
        loop {
            let Ok(message) = self.input.recv() else {
                std::process::exit(0);
            };
            if let Some(response) = self.during_turn(message)
                && response["id"] == json!(id)
            {
                return response;
            }
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_request += 1;
        let id = self.next_request;
        out(&json!({"id": id, "method": method, "params": params}));
        self.await_response(id)
    }

    fn turn(&mut self, id: &Value, params: &Value) {
        let thread = params["threadId"].as_str().unwrap_or("").to_owned();
        if self.thread.as_deref() != Some(thread.as_str()) {
            error(id, -32600, &format!("thread not loaded: {thread}"));
            return;
        }
        let _ = std::fs::write(self.state.join(format!("rollout-{thread}")), "");
        let turn = self.fresh("turn");
        self.turn = Some(turn.clone());
        self.interrupted = false;
        self.steered = false;
        self.steers.clear();
        self.log.append(&format!(
            "turn model={} effort={}",
            params["model"].as_str().unwrap_or("-"),
            params["effort"].as_str().unwrap_or("-")
        ));
        let text = params["input"][0]["text"].as_str().unwrap_or("").to_owned();
        respond(id, json!({"turn": turn_json(&turn, "inProgress")}));
        notify(
            "thread/status/changed",
            json!({"threadId": thread, "status": {"type": "active", "activeFlags": []}}),
        );
        notify(
            "turn/started",
            json!({"threadId": thread, "turn": turn_json(&turn, "inProgress")}),
        );
        self.user_message(&text);
        let mut status = "completed";
        let mut turn_error = Value::Null;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            self.poll();
            self.drain_steers();
            if self.interrupted {
                break;
            }
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                "say" => self.agent_message(rest),
                "all-items" => self.all_items(),
                "approve" => self.approve(rest),
                "ask" => self.ask(),
                "elicit" => self.elicit(),
                "flood" => self.flood(rest.parse().unwrap_or(100)),
                "usage" => self.usage(),
                "name" => notify(
                    "thread/name/updated",
                    json!({"threadId": thread, "threadName": rest}),
                ),
                "instructions" => {
                    let text = self
                        .instructions
                        .clone()
                        .unwrap_or_else(|| "(no instructions)".into());
                    self.agent_message(&text);
                }
                "mcp" => {
                    let text = mcp_description(&self.config);
                    self.agent_message(&text);
                }
                "wait" => {
                    while !self.steered && !self.interrupted {
                        let Ok(message) = self.input.recv() else {
                            std::process::exit(0);
                        };
                        let _ = self.during_turn(message);
                    }
                    self.drain_steers();
                }
                "stall" => {
                    self.agent_message("stalling");
                    loop {
                        std::thread::park();
                    }
                }
                "crash" => {
                    self.started("agentMessage", json!({"text": ""}));
                    eprintln!("fake-codex: crashing on purpose");
                    std::process::exit(3);
                }
                "fail" => {
                    notify(
                        "error",
                        json!({"threadId": thread, "turnId": turn, "willRetry": true,
                        "error": {"message": "transient, retrying", "codexErrorInfo": null, "additionalDetails": null}}),
                    );
                    status = "failed";
                    turn_error =
                        json!({"message": rest, "codexErrorInfo": null, "additionalDetails": null});
                    break;
                }
                _ => self.agent_message(&format!("echo: {line}")),
            }
        }
        self.poll();
        self.drain_steers();
        if self.interrupted {
            status = "interrupted";
        }
        notify(
            "thread/status/changed",
            json!({"threadId": thread, "status": {"type": "idle"}}),
        );
        let mut done = turn_json(&turn, status);
        done["error"] = turn_error;
        notify("turn/completed", json!({"threadId": thread, "turn": done}));
        self.turn = None;
    }

    fn drain_steers(&mut self) {
        while let Some(text) = self.steers.pop_front() {
            self.user_message(&text);
            self.agent_message(&format!("steered: {text}"));
        }
    }

    fn ids(&self) -> (String, String) {
        (
            self.thread.clone().unwrap_or_default(),
            self.turn.clone().unwrap_or_default(),
        )
    }

    fn started(&mut self, kind: &str, fields: Value) -> String {
        let item_id = self.fresh(kind);
        let (thread, turn) = self.ids();
        let mut item = fields;
        item["type"] = json!(kind);
        item["id"] = json!(item_id);
        notify(
            "item/started",
            json!({"item": item, "threadId": thread, "turnId": turn, "startedAtMs": 1}),
        );
        item_id
    }

    fn completed(&self, item_id: &str, kind: &str, fields: Value) {
        let (thread, turn) = self.ids();
        let mut item = fields;
        item["type"] = json!(kind);
        item["id"] = json!(item_id);
        notify(
            "item/completed",
            json!({"item": item, "threadId": thread, "turnId": turn, "completedAtMs": 2}),
        );
    }

    fn delta(&self, method: &str, item_id: &str, delta: &str, extra: Value) {
        let (thread, turn) = self.ids();
        let mut params =
            json!({"threadId": thread, "turnId": turn, "itemId": item_id, "delta": delta});
        if let (Some(target), Some(fields)) = (params.as_object_mut(), extra.as_object()) {
            for (key, value) in fields {
                target.insert(key.clone(), value.clone());
            }
        }
        notify(method, params);
    }

    fn user_message(&mut self, text: &str) {
        let content = json!({"clientId": null, "content": [{"type": "text", "text": text, "text_elements": []}]});
        let item_id = self.started("userMessage", content.clone());
        self.completed(&item_id, "userMessage", content);
    }

    fn agent_message(&mut self, text: &str) {
        let item_id = self.started("agentMessage", json!({"text": "", "phase": null}));
        let mid = text.len() / 2;
        let mid = (0..=mid)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        self.delta("item/agentMessage/delta", &item_id, &text[..mid], json!({}));
        self.delta("item/agentMessage/delta", &item_id, &text[mid..], json!({}));
        self.completed(
            &item_id,
            "agentMessage",
            json!({"text": text, "phase": null}),
        );
    }

    fn command(&mut self, command: &str, output: &str, status: &str, exit_code: Value) {
        let cwd = "/fake/cwd";
        let item_id = self.started(
            "commandExecution",
            json!({
                "command": command, "cwd": cwd, "processId": "4242", "source": "agent",
                "status": "inProgress", "commandActions": [], "aggregatedOutput": null,
                "exitCode": null, "durationMs": null,
            }),
        );
        if !output.is_empty() {
            self.delta(
                "item/commandExecution/outputDelta",
                &item_id,
                output,
                json!({}),
            );
        }
        self.completed(
            &item_id,
            "commandExecution",
            json!({
                "command": command, "cwd": cwd, "processId": "4242", "source": "agent",
                "status": status, "commandActions": [], "aggregatedOutput": output,
                "exitCode": exit_code, "durationMs": 3,
            }),
        );
    }
}

fn model(name: &str, efforts: &[&str]) -> Value {
    let efforts: Vec<Value> = efforts
        .iter()
        .map(|e| json!({"reasoningEffort": e, "description": "effort"}))
        .collect();
    json!({"id": name, "model": name, "displayName": name, "description": "fake", "hidden": false,
        "supportedReasoningEfforts": efforts, "defaultReasoningEffort": "low", "isDefault": false})
}

fn thread_json(id: &str, params: &Value) -> Value {
    json!({"id": id, "sessionId": id, "preview": "", "ephemeral": false, "modelProvider": "fake",
        "model": params.get("model"), "status": {"type": "idle"}, "cwd": params.get("cwd"),
        "cliVersion": "0.169.0", "source": "vscode", "turns": []})
}

fn turn_json(id: &str, status: &str) -> Value {
    json!({"id": id, "rootTurnId": id, "items": [], "itemsView": "notLoaded", "status": status,
        "error": null, "startedAt": 1, "completedAt": null, "durationMs": null})
}
