//! A stand-in for `claude` for the adapter's tests: print mode with
//! stream-json input and output, with the line shapes of Claude Code 2.1
//! (`system/init`, `assistant`/`user` messages with content blocks,
//! `result`, `control_request`/`control_response`).
//!
//! It insists on the flags the adapter must pass (`-p`, both stream-json
//! formats, `--verbose`, `--permission-prompt-tool stdio`, exactly one of
//! `--session-id`/`--resume`) and keeps transcripts where Claude Code does
//! (`$CLAUDE_CONFIG_DIR/projects/<cwd with non-alphanumerics as ->/<id>.jsonl`):
//! `--resume` of an unknown session fails like the real one ("No conversation
//! found"), `--session-id` of a known one too ("already in use").
//!
//! A user message is a script, one step per line:
//!
//! | line | what the fake does |
//! |---|---|
//! | `say TEXT` | an assistant `text` block |
//! | `think TEXT` | an assistant `thinking` block |
//! | `bash CMD` | a `Bash` `tool_use`, a `can_use_tool` permission prompt, then its `tool_result` (`ran: CMD`, or the denial) |
//! | `all-tools` | every tool kind with results, thinking, text, a compaction, noise |
//! | `wait` | waits for a steering message in this turn (each is folded in) or an interrupt |
//! | `stall` | says `stalling`, then ignores everything |
//! | `crash` | says something, then exits 3 |
//! | `fail TEXT` | ends with a `result` that `is_error` (subtype success), text TEXT |
//! | `error-exec` | ends with an `error_during_execution` result |
//! | `name TEXT` | appends a `custom-title` entry with TEXT to the transcript (as `/rename` does), says `named` |
//! | `instructions` | an assistant text with the `--append-system-prompt` value (`(no instructions)` when absent) |
//! | `mcp` | an assistant text describing the `--mcp-config` file: `strict` when `--strict-mcp-config` was given too, the file's mode (`0600`), then per server `NAME stdio COMMAND ARGS env K=V…` or `NAME http URL header K=V…`; `(no mcp config)` without the flag. A `--mcp-config` without `--strict-mcp-config`, or a file that is not valid JSON, fails the start |
//! | `env NAME` | an assistant text with the value of the variable NAME (`(unset)` when absent) |
//! | `cat PATH` | an assistant text with the file's text, or `cannot read PATH: ERROR` (a relative PATH is under `$CLAUDE_CONFIG_DIR`) |
//! | `write PATH TEXT` | writes TEXT to the file (made with its parents), says `wrote PATH` or `cannot write PATH: ERROR` (relative as for `cat`) |
//! | `hooks` | the hook commands of `$CLAUDE_CONFIG_DIR/settings.json`, as the real CLI would run them, joined with `; ` (`(no hooks)` without any) |
//! | anything else | an assistant text `echo: LINE` |
//!
//! Every result carries usage 100 in (+10 cache read) / 20 out and the
//! uuids it answered, unless `FAKE_CLAUDE_NO_UUIDS` is set: then, as the
//! real Claude Code 2.1.197 does, none (a steering message written while a
//! turn runs is answered by that turn's one result). The fake appends
//! `pid N`, `args …`, `user TEXT` and `interrupt` lines to
//! `$CLAUDE_CONFIG_DIR/fake.log`.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;

use sdk_process::fake::{FakeLog, out, raw, read_stdin};
use serde_json::{Value, json};

/// The `mcp` step's text for `--mcp-config FILE` (see the module docs).
fn mcp_description(file: Option<String>, strict: bool) -> String {
    use std::os::unix::fs::PermissionsExt;
    let Some(file) = file else {
        return "(no mcp config)".into();
    };
    if !strict {
        fail_start("fake-claude: --mcp-config without --strict-mcp-config");
    }
    let mode = std::fs::metadata(&file)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0);
    let doc: Value = match std::fs::read(&file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
    {
        Some(doc) => doc,
        None => fail_start(&format!("fake-claude: cannot read --mcp-config {file}")),
    };
    let mut entries = vec![format!("strict mode {mode:04o}")];
    if let Some(servers) = doc["mcpServers"].as_object() {
        for (name, t) in servers {
            let pairs = |v: &Value| {
                v.as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!(" {k}={}", v.as_str().unwrap_or("")))
                            .collect::<String>()
                    })
                    .unwrap_or_default()
            };
            if t["type"] == "http" {
                entries.push(format!(
                    "{name} http {} header{}",
                    t["url"].as_str().unwrap_or(""),
                    pairs(&t["headers"])
                ));
            } else {
                let args: Vec<&str> = t["args"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                entries.push(format!(
                    "{name} stdio {} {} env{}",
                    t["command"].as_str().unwrap_or(""),
                    args.join(" "),
                    pairs(&t["env"])
                ));
            }
        }
    }
    entries.join("; ")
}

/// The `hooks` step's text: every `command` of a hook in `settings.json`
/// of the config dir `config_dir`.
fn hook_commands(config_dir: &std::path::Path) -> String {
    let settings: Value = std::fs::read(config_dir.join("settings.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let mut commands = Vec::new();
    if let Some(events) = settings["hooks"].as_object() {
        for matchers in events.values() {
            for matcher in matchers.as_array().into_iter().flatten() {
                for hook in matcher["hooks"].as_array().into_iter().flatten() {
                    if let Some(command) = hook["command"].as_str() {
                        commands.push(command.to_owned());
                    }
                }
            }
        }
    }
    if commands.is_empty() {
        return "(no hooks)".into();
    }
    commands.join("; ")
}

/// The `cat` and `write` steps: file work as an agent's tool would do it.
fn file_step(config_dir: &std::path::Path, word: &str, rest: &str) -> String {
    let (path, text) = match word {
        "write" => rest.split_once(' ').unwrap_or((rest, "")),
        _ => (rest, ""),
    };
    let full = config_dir.join(path);
    if word == "cat" {
        return match std::fs::read_to_string(&full) {
            Ok(text) => text,
            Err(e) => format!("cannot read {path}: {e}"),
        };
    }
    let written = full
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&full, text));
    match written {
        Ok(()) => format!("wrote {path}"),
        Err(e) => format!("cannot write {path}: {e}"),
    }
}

struct Fake {
    input: mpsc::Receiver<Value>,
    /// `$CLAUDE_CONFIG_DIR`.
    config_dir: PathBuf,
    /// `$CLAUDE_CONFIG_DIR/fake.log`.
    log: FakeLog,
    transcript: PathBuf,
    session: String,
    model: String,
    /// `--append-system-prompt`, if given.
    instructions: Option<String>,
    /// What the `mcp` step says (read from `--mcp-config` at start).
    mcp: String,
    init_sent: bool,
    /// User lines not yet started: (uuid, text).
    queued: VecDeque<(String, String)>,
    /// Uuids consumed by the running turn.
    consumed: Vec<String>,
    interrupted: bool,
    /// A steering message was folded into the running turn.
    steered: bool,
    counter: u64,
}

fn fail_start(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if !flag("-p") || !flag("--verbose") {
        fail_start("Error: stream-json output needs -p and --verbose");
    }
    if value("--input-format").as_deref() != Some("stream-json")
        || value("--output-format").as_deref() != Some("stream-json")
    {
        fail_start("Error: the fake only speaks stream-json");
    }
    if value("--permission-prompt-tool").as_deref() != Some("stdio") {
        fail_start("Error: --permission-prompt-tool stdio is required");
    }
    let config_dir = std::env::var_os("CLAUDE_CONFIG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| fail_start("Error: CLAUDE_CONFIG_DIR is not set"));
    let cwd = std::env::current_dir().unwrap_or_default();
    let project: String = cwd
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let (session, resume) = match (value("--session-id"), value("--resume")) {
        (Some(id), None) => (id, false),
        (None, Some(id)) => (id, true),
        _ => fail_start("Error: exactly one of --session-id and --resume"),
    };
    let transcript = config_dir
        .join("projects")
        .join(project)
        .join(format!("{session}.jsonl"));
    let mut fake = Fake {
        input: read_stdin("fake-claude"),
        log: FakeLog::new(config_dir.join("fake.log")),
        config_dir: config_dir.clone(),
        transcript,
        session,
        model: value("--model").unwrap_or_else(|| "default".into()),
        instructions: value("--append-system-prompt"),
        mcp: mcp_description(
            value("--mcp-config"),
            args.iter().any(|a| a == "--strict-mcp-config"),
        ),
        init_sent: false,
        queued: VecDeque::new(),
        consumed: Vec::new(),
        interrupted: false,
        steered: false,
        counter: 0,
    };
    fake.log.append_pid();
    fake.log.append(&format!("args {}", args.join(" ")));
    if resume && !fake.transcript.exists() {
        // Like the real CLI: it reads the first message, then gives up.
        let _ = fake.input.recv();
        out(
            &json!({"type": "result", "subtype": "error_during_execution", "is_error": true,
            "num_turns": 0, "session_id": fake.session, "usage": usage(), "errors": []}),
        );
        fail_start(&format!(
            "No conversation found with session ID: {}",
            fake.session
        ));
    }
    if !resume && fake.transcript.exists() {
        fail_start(&format!(
            "Error: Session ID {} is already in use.",
            fake.session
        ));
    }
    loop {
        if fake.queued.is_empty() {
            let Ok(message) = fake.input.recv() else {
                return;
            };
            fake.take(message);
            continue;
        }
        fake.turn();
    }
}

fn usage() -> Value {
    json!({"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 10,
        "output_tokens": 20, "server_tool_use": {"web_search_requests": 0}, "service_tier": "standard"})
}

impl Fake {
    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}_{}_{}", std::process::id(), self.counter)
    }

    /// Handle one input line; returns a control response for our own
    /// requests.
    fn take(&mut self, message: Value) -> Option<Value> {
        match message.get("type").and_then(Value::as_str) {
            Some("user") => {
                let uuid = message["uuid"].as_str().unwrap_or("").to_owned();
                let text = message["message"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                self.log.append(&format!("user {text}"));
                self.queued.push_back((uuid, text));
            }
            Some("control_request") => {
                let id = message["request_id"].clone();
                match message["request"]["subtype"].as_str() {
                    Some("interrupt") => {
                        self.log.append("interrupt");
                        self.interrupted = true;
                        if message["request"]["cancel_queued"] == json!(true) {
                            self.queued.clear();
                        }
                        out(&json!({"type": "control_response", "response": {
                            "subtype": "success", "request_id": id, "response": {"still_queued": []}}}));
                    }
                    other => out(&json!({"type": "control_response", "response": {
                        "subtype": "error", "request_id": id, "error": format!("unsupported {other:?}")}})),
                }
            }
            Some("control_response") => return Some(message),
            _ => {}
        }
        None
    }

    /// Take everything that arrived, without waiting.
    fn poll(&mut self) {
        while let Ok(message) = self.input.try_recv() {
            let _ = self.take(message);
        }
    }

    /// Fold queued steering messages into the running turn.
    fn fold(&mut self) {
        while let Some((uuid, text)) = self.queued.pop_front() {
            self.consumed.push(uuid);
            self.steered = true;
            self.say(&format!("steered: {text}"));
        }
    }

    fn turn(&mut self) {
        let Some((uuid, text)) = self.queued.pop_front() else {
            return;
        };
        if let Some(parent) = self.transcript.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.transcript)
        {
            let _ = writeln!(file, "{}", json!({"type": "user", "text": text}));
        }
        if !self.init_sent {
            self.init_sent = true;
            out(
                &json!({"type": "system", "subtype": "init", "cwd": std::env::current_dir().unwrap_or_default(),
                "session_id": self.session, "tools": ["Bash", "Edit", "Read"], "mcp_servers": [],
                "model": self.model, "permissionMode": "default", "apiKeySource": "none",
                "claude_code_version": "2.1.197", "uuid": "init-uuid"}),
            );
        }
        self.consumed = vec![uuid];
        self.interrupted = false;
        self.steered = false;
        let mut ending: Option<Value> = None;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            self.poll();
            if self.interrupted {
                break;
            }
            self.fold();
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                "say" => self.say(rest),
                "name" => {
                    if let Ok(mut file) = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&self.transcript)
                    {
                        let entry = json!({"type": "custom-title", "customTitle": rest, "sessionId": self.session});
                        let _ = writeln!(file, "{entry}");
                    }
                    self.say("named");
                }
                "mcp" => {
                    let text = self.mcp.clone();
                    self.say(&text);
                }
                "instructions" => {
                    let text = self
                        .instructions
                        .clone()
                        .unwrap_or_else(|| "(no instructions)".into());
                    self.say(&text);
                }
                "env" => {
                    let value = std::env::var(rest).unwrap_or_else(|_| "(unset)".into());
                    self.say(&value);
                }
                "cat" | "write" => {
                    let text = file_step(&self.config_dir, word, rest);
                    self.say(&text);
                }
                "hooks" => {
                    let text = hook_commands(&self.config_dir);
                    self.say(&text);
                }
                "think" => self
                    .assistant(json!([{"type": "thinking", "thinking": rest, "signature": "sig"}])),
                "bash" => self.bash(rest),
                "all-tools" => self.all_tools(),
                "wait" => {
                    while !self.steered && self.queued.is_empty() && !self.interrupted {
                        let Ok(message) = self.input.recv() else {
                            std::process::exit(0);
                        };
                        let _ = self.take(message);
                    }
                    if !self.interrupted {
                        self.fold();
                    }
                }
                "stall" => {
                    self.say("stalling");
                    loop {
                        std::thread::park();
                    }
                }
                "crash" => {
                    self.say("about to crash");
                    eprintln!("fake-claude: crashing on purpose");
                    std::process::exit(3);
                }
                "fail" => {
                    ending = Some(json!({"subtype": "success", "is_error": true, "result": rest}));
                    break;
                }
                "error-exec" => {
                    ending = Some(
                        json!({"subtype": "error_during_execution", "is_error": true,
                        "errors": ["boom in execution"]}),
                    );
                    break;
                }
                _ => self.say(&format!("echo: {line}")),
            }
        }
        self.poll();
        if self.interrupted {
            self.user(json!([{"type": "text", "text": "[Request interrupted by user]"}]));
            ending =
                Some(json!({"subtype": "error_during_execution", "is_error": true, "errors": []}));
        } else if ending.is_none() {
            self.fold();
        }
        let mut result = ending
            .unwrap_or_else(|| json!({"subtype": "success", "is_error": false, "result": "done"}));
        result["type"] = json!("result");
        result["session_id"] = json!(self.session);
        result["num_turns"] = json!(1);
        result["usage"] = usage();
        result["modelUsage"] = json!({ self.model.clone(): {"inputTokens": 100, "outputTokens": 20, "contextWindow": 200000} });
        if std::env::var_os("FAKE_CLAUDE_NO_UUIDS").is_none() {
            result["user_message_uuid"] = json!(self.consumed.last());
            result["user_message_uuids"] = json!(self.consumed);
        }
        out(&result);
    }

    fn assistant(&mut self, content: Value) {
        let id = self.fresh("msg");
        out(
            &json!({"type": "assistant", "message": {"id": id, "type": "message", "role": "assistant",
            "model": self.model, "content": content, "stop_reason": null, "usage": {"input_tokens": 1, "output_tokens": 1}},
            "parent_tool_use_id": null, "session_id": self.session, "uuid": self.fresh("uuid")}),
        );
    }

    fn user(&mut self, content: Value) {
        out(
            &json!({"type": "user", "message": {"role": "user", "content": content},
            "parent_tool_use_id": null, "session_id": self.session, "uuid": self.fresh("uuid")}),
        );
    }

    fn say(&mut self, text: &str) {
        self.assistant(json!([{"type": "text", "text": text}]));
    }

    fn tool(&mut self, name: &str, input: Value, result: Value) {
        let id = self.fresh("toolu");
        self.assistant(json!([{"type": "tool_use", "id": id, "name": name, "input": input}]));
        self.user(json!([{"tool_use_id": id, "type": "tool_result", "content": result, "is_error": false}]));
    }

    fn bash(&mut self, command: &str) {
        let id = self.fresh("toolu");
        let input = json!({"command": command, "description": "run it"});
        self.assistant(json!([{"type": "tool_use", "id": id, "name": "Bash", "input": input}]));
        let request_id = self.fresh("req");
        out(
            &json!({"type": "control_request", "request_id": request_id, "request": {
            "subtype": "can_use_tool", "tool_name": "Bash", "display_name": "Bash", "input": input,
            "permission_suggestions": [], "tool_use_id": id}}),
        );
        let response = loop {
            let Ok(message) = self.input.recv() else {
                std::process::exit(0);
            };
            if let Some(response) = self.take(message)
                && response["response"]["request_id"] == json!(request_id)
            {
                break response;
            }
        };
        let answer = &response["response"]["response"];
        let (content, is_error) = if answer["behavior"] == "allow" {
            (
                format!(
                    "ran: {}",
                    answer["updatedInput"]["command"].as_str().unwrap_or("")
                ),
                false,
            )
        } else {
            (
                answer["message"].as_str().unwrap_or("denied").to_owned(),
                true,
            )
        };
        self.user(json!([{"tool_use_id": id, "type": "tool_result", "content": content, "is_error": is_error}]));
    }

    fn all_tools(&mut self) {
        raw("this is not json");
        out(&json!({"type": "stream_event", "event": {"type": "message_start"}}));
        out(&json!({"type": "system", "subtype": "thinking_tokens", "estimated_tokens": 4}));
        out(&json!({"type": "rate_limit_event", "rate_limit_info": {}}));
        out(
            &json!({"type": "system", "subtype": "compact_boundary", "compact_metadata": {"trigger": "auto"}}),
        );
        self.assistant(
            json!([{"type": "thinking", "thinking": "pondering", "signature": "sig"},
            {"type": "hologram", "shape": "cube"}]),
        );
        self.tool(
            "Edit",
            json!({"file_path": "a.rs", "old_string": "x", "new_string": "y"}),
            json!("The file a.rs has been updated."),
        );
        self.tool(
            "Write",
            json!({"file_path": "b.rs", "content": "fn main() {}"}),
            json!("File created"),
        );
        self.tool(
            "MultiEdit",
            json!({"file_path": "c.rs", "edits": [{"old_string": "1", "new_string": "2"}]}),
            json!("ok"),
        );
        self.tool(
            "WebSearch",
            json!({"query": "rust tokio"}),
            json!("results"),
        );
        self.tool(
            "Task",
            json!({"subagent_type": "Explore", "description": "look around", "prompt": "go"}),
            json!([{"type": "text", "text": "found things"}]),
        );
        self.tool("TodoWrite", json!({"todos": [{"content": "fix it", "status": "in_progress", "activeForm": "fixing"}]}), json!("ok"));
        self.tool(
            "mcp__docs__search",
            json!({"q": "x"}),
            json!([{"type": "text", "text": "doc hit"}]),
        );
        self.tool("Read", json!({"file_path": "a.rs"}), json!("fn a() {}"));
        self.user(json!([{"tool_use_id": "toolu_unknown", "type": "tool_result", "content": "orphan", "is_error": false}]));
        self.say("all done");
    }
}
